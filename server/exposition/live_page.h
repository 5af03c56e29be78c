// The live page on the metrics port (docs/live-page.md): GET / is one
// self-contained HTML page (inline script and styles, no network fetches
// but its own) that polls three JSON endpoints of the same server:
//
//   /api/series                  every series: definition, counters, last window
//   /api/windows?stat=S&last=N   the N most recent closed windows of stat S
//   /api/events?last=N           the N most recent events
//
// Windows and events are the objects of the JSON-lines sink
// (server/core/json_lines.h). Thread-safe: reads copies from the aggregator and
// the event log.
#ifndef TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_
#define TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "server/core/aggregator.h"
#include "server/core/event_log.h"

namespace torchmon::server {

class LivePage {
 public:
  LivePage(const Aggregator& aggregator, const EventLog& events)
      : aggregator_(aggregator), events_(events) {}

  static absl::string_view Html();
  // {"series":[{"stat","labels","aggregations":[...],"window_ms","counters":{...},
  //  "last_window":<window or null>}]}
  std::string SeriesJson() const;
  // {"windows":[<window>...]}: series by series, oldest first.
  std::string WindowsJson(const std::string& stat, size_t last) const;
  // {"events":[<event>...]}, oldest first.
  std::string EventsJson(size_t last) const;

 private:
  const Aggregator& aggregator_;
  const EventLog& events_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_
