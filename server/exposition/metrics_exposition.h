// The Prometheus exposition of torchmond (metric names and labels:
// docs/metrics.md). Nothing exists per series between scrapes: a scrape
// copies what it shows out of the aggregator, the event log and the daemon's
// self-metrics, then writes the format the scraper asked for
// (content_negotiation.h) outside every lock.
#ifndef TORCHMON_SERVER_EXPOSITION_METRICS_EXPOSITION_H_
#define TORCHMON_SERVER_EXPOSITION_METRICS_EXPOSITION_H_

#include <cstddef>
#include <string>

#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/exposition/content_negotiation.h"
#include "server/exposition/prometheus_text.h"
#include "server/core/daemon_stats.h"

namespace torchmon::server {

// Thread-safe: Render may run concurrently with ingestion and other Renders.
// Ingestion waits at most for one chunk of the aggregator walk (see
// Aggregator::ForEachSeries), never for the text.
class MetricsExposition {
 public:
  MetricsExposition(const Aggregator& aggregator, const EventLog& events,
                    const DaemonStats& stats, std::string version);

  // Writes one scrape in `format` to `sink` in pieces (see
  // ExpositionWriter). Returns the bytes the sink accepted; fewer than
  // written if it refused one (the reader went away), in which case the
  // rest was skipped.
  size_t Render(ExpositionFormat format, const ExpositionWriter::Sink& sink) const;

  // The whole scrape as one string (tests, benchmarks).
  std::string RenderToString(ExpositionFormat format = ExpositionFormat::kText) const;

 private:
  const Aggregator& aggregator_;
  const EventLog& events_;
  const DaemonStats& stats_;
  const std::string version_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_METRICS_EXPOSITION_H_
