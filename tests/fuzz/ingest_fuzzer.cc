// Fuzzes the ingest path: serialized IngestBatch messages, as a client would
// send them, decoded and applied by IngestSession to a real Aggregator and
// EventLog on a fake clock, interleaved with the daemon's timer work
// (closing windows, expiring idle series), scrapes and queries. The input is
// a script of such steps (ingest_script.h).
//
// Besides crashes, leaks and undefined behaviour (the fuzz build runs ASan
// and UBSan), every step checks what must hold whatever a client sends:
//   - exact accounting: every sample received is refused (and counted as
//     such in the ack and the daemon's stats) or lands in exactly one series
//     counter, which never decreases while the series lives;
//   - acks: the sequence never goes back; errors name the batch;
//   - a stat id defined on a stream is never "unknown" on that stream;
//   - closed windows: non-empty, aligned, closed on time, once, in order,
//     within max_samples, and adding up to the series' counters;
//   - the scrape parses (exposition_parser.h) and shows every series with
//     its exact labels and counters; queries come back sorted and bounded.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/core/selector.h"
#include "server/core/broadcaster.h"
#include "server/core/convert.h"
#include "server/core/daemon_stats.h"
#include "server/ingest/ingest_session.h"
#include "server/exposition/metrics_exposition.h"
#include "tests/fuzz/exposition_parser.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/ingest_script.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::fuzz {
namespace {

using server::Aggregation;
using server::ClosedWindow;
using server::SeriesKey;
using server::SeriesSnapshot;

// Everything the checks remember about one series since it was created.
struct SeriesModel {
  server::StatSpec spec;
  uint32_t definition = 0;          // of spec, as last observed
  // Every definition observed (a window of one never observed, made and
  // replaced between two looks, is checked without its spec).
  absl::flat_hash_map<uint32_t, server::StatSpec> specs;
  server::SeriesCounters counters;  // as last observed
  uint64_t window_accepted = 0;     // summed over its closed windows
  uint64_t window_capped = 0;
  // The last window closed, by (definition, start): a series' windows come
  // in that order.
  std::pair<uint32_t, int64_t> last_window{0, std::numeric_limits<int64_t>::min()};
};

uint64_t Counted(const server::SeriesCounters& c) {
  return c.accepted + c.capped + c.late + c.skewed;
}

int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t m = a % b;
  return m < 0 ? m + b : m;
}

class IngestHarness {
 public:
  IngestHarness()
      : clock_(kIngestStartMs),
        aggregator_(Options(), clock_),
        events_(kIngestMaxEvents, kIngestSeriesTtlMs, clock_),
        exposition_(aggregator_, events_, stats_, "fuzz") {
    watcher_ = events_out_.Subscribe([](const server::EventRecord&) { return true; }, [] {},
                                     /*capacity=*/4);
    for (int i = 0; i < 2; ++i) Reconnect(i);
  }

  void Run(const Step& step) {
    switch (step.op % kIngestOpCount) {
      case kBatchOnStream0:
      case kBatchOnStream1: {
        v1::IngestBatch batch;
        // The daemon never sees a message gRPC could not parse.
        if (!batch.ParseFromArray(step.argument.data(), static_cast<int>(step.argument.size()))) {
          return;
        }
        ApplyBatch(step.op % kIngestOpCount == kBatchOnStream0 ? 0 : 1, batch);
        Observe(/*removals_allowed=*/false);
        break;
      }
      case kTick:
        clock_.Advance(ReadU32(step.argument));
        CloseDue();
        Observe(false);
        break;
      case kExpire:
        clock_.Advance(ReadU32(step.argument));
        CloseDue();
        aggregator_.ExpireIdleSeries();
        events_.ExpireIdle();
        Observe(/*removals_allowed=*/true);
        break;
      case kScrape:
        Scrape(step.argument);
        break;
      case kCloseAll:
        CloseAll();
        break;
      case kReconnect:
        // The stream's end releases its definitions: what waited is settled.
        Reconnect(step.argument.empty() ? 0 : step.argument[0] & 1);
        Observe(false);
        break;
      case kManyStats: {
        const absl::string_view arg = step.argument;
        const int stream = arg.empty() ? 0 : arg[0] & 1;
        const int shift = arg.empty() ? 0 : (arg[0] >> 1) & 15;
        const uint32_t count = std::min(
            kMaxManyStats, (ReadU32(arg.substr(std::min<size_t>(1, arg.size()))) & 0xffff) >> shift);
        const uint32_t first_id = ReadU32(arg.substr(std::min<size_t>(3, arg.size())));
        ApplyBatch(stream, ManyStatsBatch(count, first_id, streams_[stream].acked + 1));
        Observe(false);
        break;
      }
    }
    CheckConservation();
  }

 private:
  static server::AggregatorOptions Options() {
    server::AggregatorOptions o;
    o.grace_ms = kIngestGraceMs;
    o.series_ttl_ms = kIngestSeriesTtlMs;
    o.history_windows = kIngestHistoryWindows;
    o.max_future_skew_ms = kIngestMaxSkewMs;
    return o;
  }

  static v1::IngestBatch ManyStatsBatch(uint32_t count, uint32_t first_id, uint64_t sequence) {
    v1::IngestBatch batch;
    batch.set_sequence(sequence);
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t id = first_id + i;
      v1::StatDefinition* def = batch.add_definitions();
      def->set_id(id);
      def->set_name(absl::StrCat("s.", id));
      def->mutable_spec()->add_aggregations(v1::MEAN);
      def->mutable_spec()->set_window_size_ms(1000);
      v1::SampleBlock* block = batch.add_samples();
      block->set_stat_id(id);
      block->set_base_time_us(kIngestStartMs * 1000);
      block->add_values(i);
    }
    return batch;
  }

  struct Stream {
    std::unique_ptr<server::IngestSession> session;
    uint64_t acked = 0;  // the sequence of the last ack sent
    absl::flat_hash_set<uint32_t> defined_ids;
  };

  void Reconnect(int i) {
    streams_[i].session =
        std::make_unique<server::IngestSession>(aggregator_, events_, stats_, &events_out_);
    streams_[i].acked = 0;
    streams_[i].defined_ids.clear();
  }

  void ApplyBatch(int i, const v1::IngestBatch& batch) {
    Stream& stream = streams_[i];
    const uint64_t received = stats_.samples_received.load();
    const uint64_t refused = stats_.samples_refused.load();
    const uint64_t events_received = stats_.events_received.load();
    const uint64_t events_refused = stats_.events_refused.load();
    const uint64_t events_appended = events_.total_appended();
    const uint64_t batches_with_errors = stats_.batches_with_errors.load();
    // Held samples of a definition that waited may be refused with this batch.
    const uint64_t waiting_before = stream.session->samples_waiting();

    // As IngestReactor does: the pending ack carries the last sequence on.
    v1::IngestAck ack;
    ack.set_sequence(stream.acked);
    stream.session->Apply(batch, &ack);

    FUZZ_CHECK(ack.sequence() == std::max(stream.acked, batch.sequence()), "ack ",
               ack.sequence(), " after ", stream.acked, " for batch ", batch.sequence());
    stream.acked = ack.sequence();
    for (const v1::StatDefinition& def : batch.definitions()) stream.defined_ids.insert(def.id());

    uint64_t values = 0;
    for (const v1::SampleBlock& block : batch.samples()) values += block.values_size();
    if (batch.has_columns()) {
      // Every entry of the columns is a sample received, whichever array is
      // short (IngestSession::QueueColumns).
      values += static_cast<uint64_t>(
          std::max(batch.columns().values_size(), batch.columns().stat_ids_size()));
    }
    uint64_t refused_in_ack = 0;
    for (const v1::IngestError& e : ack.errors()) {
      FUZZ_CHECK(e.sequence() == batch.sequence(), "error names batch ", e.sequence(),
                 " in batch ", batch.sequence(), ": ", e.message());
      FUZZ_CHECK(!e.message().empty(), "error without a message");
      FUZZ_CHECK(!(absl::StrContains(e.message(), "is not defined on this stream") &&
                   stream.defined_ids.contains(e.stat_id())),
                 "stat id ", e.stat_id(), " was defined on this stream, yet: ", e.message());
      refused_in_ack += e.samples_refused();
    }
    FUZZ_CHECK(stats_.samples_received.load() - received == values, "samples received");
    FUZZ_CHECK(stats_.samples_refused.load() - refused == refused_in_ack, "samples refused ",
               stats_.samples_refused.load() - refused, " but the ack says ", refused_in_ack);
    FUZZ_CHECK(refused_in_ack <= values + waiting_before, "more samples refused than sent");
    // Released last: their later samples are an unknown id's.
    for (const uint32_t id : batch.released()) stream.defined_ids.erase(id);
    FUZZ_CHECK(stats_.batches_with_errors.load() - batches_with_errors ==
                   (ack.errors_size() > 0 ? 1u : 0u),
               "batches_with_errors");
    const uint64_t events_accepted = (stats_.events_received.load() - events_received) -
                                     (stats_.events_refused.load() - events_refused);
    FUZZ_CHECK(stats_.events_received.load() - events_received ==
                   static_cast<uint64_t>(batch.events_size()),
               "events received");
    FUZZ_CHECK(events_.total_appended() - events_appended == events_accepted,
               "events appended ", events_.total_appended() - events_appended, ", accepted ",
               events_accepted);
    FUZZ_CHECK(events_.size() <= kIngestMaxEvents, "event log over capacity");
  }

  // Compares the aggregator's series with what was seen before.
  void Observe(bool removals_allowed) {
    absl::flat_hash_set<SeriesKey> listed;
    aggregator_.ForEachSeries([&](const server::Aggregator::SeriesView& s) {
      FUZZ_CHECK(listed.insert(*s.key).second, "series ", s.key->ToString(), " visited twice");
      auto [it, created] = series_.try_emplace(*s.key);
      SeriesModel& m = it->second;
      if (!created && s.definition == m.definition) {
        FUZZ_CHECK(m.spec == s.spec, "spec of ", s.key->ToString(), " changed from ",
                   m.spec.ToString(), " to ", s.spec.ToString(), " without a redefinition");
      } else {
        FUZZ_CHECK(created || s.definition > m.definition, "definition of ", s.key->ToString(),
                   " went back from ", m.definition, " to ", s.definition);
        m.spec = s.spec;
        m.definition = s.definition;
        m.specs[s.definition] = s.spec;
      }
      const server::SeriesCounters& c = s.counters;
      FUZZ_CHECK(c.accepted >= m.counters.accepted && c.capped >= m.counters.capped &&
                     c.late >= m.counters.late && c.skewed >= m.counters.skewed &&
                     c.client_dropped >= m.counters.client_dropped,
                 "a counter of ", s.key->ToString(), " went back: accepted ", m.counters.accepted,
                 "->", c.accepted, " capped ", m.counters.capped, "->", c.capped, " late ",
                 m.counters.late, "->", c.late, " skewed ", m.counters.skewed, "->", c.skewed,
                 " client_dropped ", m.counters.client_dropped, "->", c.client_dropped);
      m.counters = c;
      // (A redefinition closes windows at once; they are handed out, and
      // checked, at the next close.)
      if (s.last_window != nullptr && s.definition == 0) {
        FUZZ_CHECK(s.last_window->start_ms == m.last_window.second, "last window of ",
                   s.key->ToString(), " is not the last one closed");
      }
    });
    FUZZ_CHECK(listed.size() == aggregator_.series_count(), "series_count is ",
               aggregator_.series_count(), ", the walk found ", listed.size());
    for (auto it = series_.begin(); it != series_.end();) {
      if (listed.contains(it->first)) {
        ++it;
        continue;
      }
      FUZZ_CHECK(removals_allowed, "series ", it->first.ToString(), " vanished");
      gone_counted_ += Counted(it->second.counters);
      series_.erase(it++);
    }
  }

  // Every sample received is refused or counted in exactly one series.
  void CheckConservation() {
    uint64_t counted = gone_counted_;
    for (const auto& [key, m] : series_) counted += Counted(m.counters);
    uint64_t waiting = 0;
    for (const Stream& stream : streams_) waiting += stream.session->samples_waiting();
    const uint64_t kept =
        stats_.samples_received.load() - stats_.samples_refused.load() - waiting;
    FUZZ_CHECK(counted == kept, "series count ", counted, " samples, but ", kept,
               " were received and neither refused nor waiting");
  }

  void CheckWindow(const ClosedWindow& w, bool partial) {
    auto it = series_.find(*w.series);
    FUZZ_CHECK(it != series_.end(), "window of unknown series ", w.series->ToString());
    SeriesModel& m = it->second;
    const std::string name = absl::StrCat(w.series->ToString(), " [", w.start_ms, ", ", w.end_ms,
                                          ") of definition ", w.definition);
    FUZZ_CHECK(w.definition <= m.definition, "window ", name, " of a definition not yet seen");
    // A redefinition closes the old definition's windows at once: partial
    // unless they had ended.
    const bool redefined = w.definition < m.definition;
    if (redefined) {
      FUZZ_CHECK(w.partial || w.end_ms <= clock_.NowMs(), "window ", name,
                 " closed by a redefinition before its end, not partial");
    } else {
      FUZZ_CHECK(w.partial == partial, "window ", name, " partial=", w.partial);
    }
    const int64_t length = w.end_ms - w.start_ms;
    FUZZ_CHECK(length > 0 && FloorMod(w.start_ms, length) == 0, "window ", name, " not aligned");
    FUZZ_CHECK(w.stats.accepted >= 1, "empty window ", name, " reported");
    if (auto spec = m.specs.find(w.definition); spec != m.specs.end()) {
      const server::StatSpec& s = spec->second;
      FUZZ_CHECK(w.aggregations == s.aggregations, "window ", name, " aggregations");
      FUZZ_CHECK(length == s.window_ms, "window ", name, " is not ", s.window_ms, " ms long");
      if (s.max_samples > 0) {
        const auto cap = static_cast<uint64_t>(s.max_samples);
        FUZZ_CHECK(w.stats.accepted <= cap, "window ", name, " over max_samples");
        FUZZ_CHECK(w.stats.capped == 0 || w.stats.accepted == cap, "window ", name,
                   " capped before max_samples");
      } else {
        FUZZ_CHECK(w.stats.capped == 0, "window ", name, " capped without max_samples");
      }
    }
    if (!partial && !redefined) {
      FUZZ_CHECK(w.end_ms + kIngestGraceMs <= clock_.NowMs(), "window ", name,
                 " closed before its end + grace");
    }
    const std::pair<uint32_t, int64_t> at{w.definition, w.start_ms};
    FUZZ_CHECK(at > m.last_window, "window ", name, " closed out of order or twice (last: ",
               m.last_window.first, ", ", m.last_window.second, ")");
    m.last_window = at;
    if (!w.stats.saw_nan) {
      FUZZ_CHECK(w.stats.Get(Aggregation::kMin) <= w.stats.Get(Aggregation::kMax), "window ",
                 name, " min > max");
    }
    FUZZ_CHECK(w.stats.Get(Aggregation::kCount) == static_cast<double>(w.stats.accepted),
               "window ", name, " count");
    m.window_accepted += w.stats.accepted;
    m.window_capped += w.stats.capped;
  }

  void CloseDue() {
    std::vector<ClosedWindow> closed;
    const size_t n = aggregator_.CloseDueWindows([&](const ClosedWindow& w) { closed.push_back(w); });
    FUZZ_CHECK(n == closed.size(), "CloseDueWindows count");
    // Those a redefinition closed come first, in no order of end; then the
    // windows that were due, in order of end.
    const ClosedWindow* previous_due = nullptr;
    for (const ClosedWindow& w : closed) {
      auto it = series_.find(*w.series);
      const bool redefined = it != series_.end() && w.definition < it->second.definition;
      if (!redefined) {
        FUZZ_CHECK(previous_due == nullptr || previous_due->end_ms <= w.end_ms,
                   "windows not closed in order of end");
        previous_due = &w;
      }
      CheckWindow(w, /*partial=*/false);
    }
  }

  void CloseAll() {
    // Everything open now closes: afterwards each series' windows account
    // for all of its accepted and capped samples.
    for (const ClosedWindow& w : aggregator_.CloseAllWindows()) CheckWindow(w, /*partial=*/true);
    Observe(false);
    for (const auto& [key, m] : series_) {
      FUZZ_CHECK(m.window_accepted == m.counters.accepted && m.window_capped == m.counters.capped,
                 "windows of ", key.ToString(), " hold ", m.window_accepted, " accepted and ",
                 m.window_capped, " capped; its counters say ", m.counters.accepted, " and ",
                 m.counters.capped);
    }
  }

  void Scrape(absl::string_view argument) {
    const std::string text = exposition_.RenderToString();
    const std::vector<SeriesSnapshot> all = aggregator_.ListSeries(server::Selector{});
    for (size_t i = 1; i < all.size(); ++i) {
      FUZZ_CHECK(*all[i - 1].key < *all[i].key, "ListSeries not sorted or repeats ",
                 all[i].key->ToString());
    }

    // Every series appears once in torchmon_samples_accepted_total, with its
    // exact name and labels (the escaping round-trips) and its counter.
    absl::flat_hash_map<SeriesKey, double> accepted;
    size_t stat_lines = 0;
    const absl::Status parsed = ParseExposition(text, [&](const ExpositionSample& s) {
      if (s.name == "torchmon_stat") ++stat_lines;
      if (s.name != "torchmon_samples_accepted_total") return;
      FUZZ_CHECK(!s.labels.empty() && s.labels[0].first == "stat", "no stat label first");
      SeriesKey key;
      key.stat = s.labels[0].second;
      key.labels = server::Labels(s.labels.begin() + 1, s.labels.end());
      FUZZ_CHECK(accepted.emplace(std::move(key), s.value).second, "series shown twice");
    });
    FUZZ_CHECK(parsed.ok(), parsed.ToString());
    size_t expected_stat_lines = 0;
    FUZZ_CHECK(accepted.size() == all.size(), "scrape shows ", accepted.size(), " series, ",
               all.size(), " exist");
    for (const SeriesSnapshot& s : all) {
      auto it = accepted.find(*s.key);
      FUZZ_CHECK(it != accepted.end(), "series ", s.key->ToString(), " missing from the scrape");
      FUZZ_CHECK(it->second == static_cast<double>(s.counters.accepted), "scrape shows ",
                 it->second, " accepted for ", s.key->ToString());
      if (s.has_last_window) {
        // As the window was aggregated: its definition's aggregations.
        for (Aggregation a : server::kAllAggregations) {
          if (server::Contains(s.last_window.aggregations, a)) ++expected_stat_lines;
        }
      }
    }
    FUZZ_CHECK(stat_lines == expected_stat_lines, "torchmon_stat lines");

    v1::Selector proto;
    if (!proto.ParseFromArray(argument.data(), static_cast<int>(argument.size()))) proto.Clear();
    const server::Selector selector = server::SelectorFromProto(proto);
    std::vector<SeriesSnapshot> selected = aggregator_.ListSeries(selector);
    size_t expected = 0;
    for (const SeriesSnapshot& s : all) expected += selector.Matches(*s.key) ? 1 : 0;
    FUZZ_CHECK(selected.size() == expected, "ListSeries(selector) size");

    const std::vector<ClosedWindow> windows = aggregator_.GetWindows(selector, 0, 0, 0);
    size_t run = 0;
    for (size_t i = 0; i < windows.size(); ++i) {
      const ClosedWindow& w = windows[i];
      FUZZ_CHECK(selector.Matches(*w.series), "GetWindows returned an unselected series");
      const bool same = i > 0 && *windows[i - 1].series == *w.series;
      run = same ? run + 1 : 1;
      FUZZ_CHECK(run <= kIngestHistoryWindows, "more windows kept than history_windows");
      if (same) {
        FUZZ_CHECK(std::make_pair(windows[i - 1].definition, windows[i - 1].start_ms) <
                       std::make_pair(w.definition, w.start_ms),
                   "windows of a series not in order of definition, then start");
      } else if (i > 0) {
        FUZZ_CHECK(*windows[i - 1].series < *w.series, "GetWindows groups not sorted");
      }
    }

    uint64_t previous = 0;
    for (const server::EventRecord& e : events_.Get(selector, 0, 0)) {
      FUZZ_CHECK(e.sequence > previous, "events not in sequence order");
      FUZZ_CHECK(selector.Matches(e.name, e.labels), "Get returned an unselected event");
      previous = e.sequence;
    }
    while (watcher_->Pop().has_value()) {
    }
  }

  server::ManualClock clock_;
  server::DaemonStats stats_;
  server::Aggregator aggregator_;
  server::EventLog events_;
  server::Broadcaster<server::EventRecord> events_out_;
  std::shared_ptr<server::Broadcaster<server::EventRecord>::Subscription> watcher_;
  server::MetricsExposition exposition_;
  Stream streams_[2];

  absl::flat_hash_map<SeriesKey, SeriesModel> series_;
  // Samples counted by series that have since expired.
  uint64_t gone_counted_ = 0;
};

}  // namespace
}  // namespace torchmon::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace torchmon::fuzz;
  // Protobuf logs every string field that is not UTF-8 as it refuses the
  // message; at thousands of inputs a second that is just noise.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  IngestHarness harness;
  for (const Step& step :
       SplitScript(absl::string_view(reinterpret_cast<const char*>(data), size))) {
    harness.Run(step);
  }
  return 0;
}
