#include "server/exposition/metrics_exposition.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "server/exposition/self_metrics.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// A range of the scrape's label arena.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

// One series as this scrape shows it, copied under the aggregator's lock;
// the label text is rendered after the walk, outside it.
struct SeriesRow {
  std::shared_ptr<const SeriesKey> key;
  TextRange stat;    // stat="..."
  TextRange labels;  // ,k="v" for each series label (shared by a rank's series)
  StatSpec spec;
  SeriesCounters counters;
  bool has_window = false;
  WindowRecord window;
  std::vector<double> quantiles;  // window's, in the order of spec.quantiles
};

struct EventRow {
  TextRange event;   // event="..."
  TextRange labels;  // ,k="v"...
  uint64_t count = 0;
  uint64_t client_dropped = 0;
  std::vector<std::pair<TextRange, double>> fields;  // ,field="..." and its last value
};

// Everything one scrape shows, copied out of the daemon's state. The label
// text of every series and event is escaped once, into `arena`; series
// sharing a label set (every series of a rank) share its text too.
struct Snapshot {
  std::string arena;
  std::vector<SeriesRow> series;
  std::vector<EventRow> events;
  size_t series_count = 0;
  size_t events_retained = 0;

  absl::string_view Text(TextRange r) const {
    return absl::string_view(arena).substr(r.begin, r.end - r.begin);
  }
  TextRange Label(absl::string_view key, absl::string_view value, bool leading_comma) {
    TextRange r{arena.size(), 0};
    if (leading_comma) arena.push_back(',');
    AppendPrometheusLabel(arena, key, value);
    r.end = arena.size();
    return r;
  }
};

// Renders each distinct stored label set once per scrape. The caller keeps
// every LabelSet it passes alive until the cache is gone: the cache knows a
// set by its address.
class LabelTextCache {
 public:
  explicit LabelTextCache(Snapshot& snapshot) : snapshot_(snapshot) {}

  TextRange Get(const LabelSet& labels) {
    auto [it, inserted] = cache_.try_emplace(&labels.get());
    if (inserted) {
      it->second.begin = snapshot_.arena.size();
      for (const auto& [key, value] : labels) snapshot_.Label(key, value, /*leading_comma=*/true);
      it->second.end = snapshot_.arena.size();
    }
    return it->second;
  }

 private:
  Snapshot& snapshot_;
  // Interned label sets are one object per distinct set, so the address
  // identifies the set (a rank's series share one).
  absl::flat_hash_map<const Labels*, TextRange> cache_;
};

constexpr absl::string_view kAggregationParts[] = {
    "",  // Aggregation numbering starts at 1
    ",agg=\"value\"", ",agg=\"mean\"", ",agg=\"count\"",
    ",agg=\"sum\"",   ",agg=\"max\"",  ",agg=\"min\"",
};

template <typename T>
double Load(const T& atomic) {
  return static_cast<double>(atomic.load(std::memory_order_relaxed));
}

}  // namespace

MetricsExposition::MetricsExposition(const Aggregator& aggregator, const EventLog& events,
                                     const DaemonStats& stats, std::string version)
    : aggregator_(aggregator), events_(events), stats_(stats), version_(std::move(version)) {}

std::string MetricsExposition::RenderToString() const {
  std::string out;
  Render([&out](absl::string_view piece) {
    out.append(piece.data(), piece.size());
    return true;
  });
  return out;
}

size_t MetricsExposition::Render(const PrometheusTextWriter::Sink& sink) const {
  Snapshot snap;
  // Under the aggregator's lock: copies and a reference count, nothing else
  // (ingestion may wait for the whole walk; see Aggregator::ForEachSeries).
  // The rows are constructed here, outside the lock, so that their pages
  // are faulted in before the walk rather than during it.
  snap.series.resize(aggregator_.series_count() + Aggregator::kWalkChunk);
  size_t rows = 0;
  aggregator_.ForEachSeries([&](const Aggregator::SeriesView& s) {
    SeriesRow& row = rows < snap.series.size() ? snap.series[rows] : snap.series.emplace_back();
    ++rows;
    row.key = s.key;
    row.spec = s.spec;
    row.counters = s.counters;
    if (s.last_window != nullptr) {
      row.has_window = true;
      row.window = *s.last_window;
      row.quantiles.assign(s.last_quantiles.begin(), s.last_quantiles.end());
    }
  });
  snap.series.resize(rows);
  snap.series_count = rows;
  {
    // The rows keep their keys, and so their label sets, alive.
    LabelTextCache labels(snap);
    for (SeriesRow& row : snap.series) {
      row.stat = snap.Label("stat", row.key->stat, /*leading_comma=*/false);
      row.labels = labels.Get(row.key->labels);
    }
  }
  {
    LabelTextCache labels(snap);
    events_.ForEachTotals([&](const SeriesKey& key, const EventLog::Totals& totals) {
      EventRow& row = snap.events.emplace_back();
      row.event = snap.Label("event", key.stat, /*leading_comma=*/false);
      row.labels = labels.Get(key.labels);
      row.count = totals.count;
      row.client_dropped = totals.client_dropped;
      for (const auto& [field, value] : totals.last_numeric) {
        row.fields.emplace_back(snap.Label("field", field, /*leading_comma=*/true), value);
      }
    });
  }
  snap.events_retained = events_.size();

  PrometheusTextWriter out(sink);
  auto stat_text = [&](const SeriesRow& r) { return snap.Text(r.stat); };
  auto label_text = [&](const SeriesRow& r) { return snap.Text(r.labels); };
  // One family per pass over the rows: the format wants each family's
  // samples together.
  auto per_series = [&](absl::string_view name, absl::string_view help, absl::string_view type,
                        bool needs_window, auto&& emit) {
    bool any = false;
    for (const SeriesRow& r : snap.series) {
      if (needs_window && !r.has_window) continue;
      if (!any) out.Family(name, help, type);
      any = true;
      emit(r);
    }
  };

  per_series("torchmon_stat",
             "Aggregations of the last closed window of each series; agg names the aggregation.",
             "gauge", true, [&](const SeriesRow& r) {
               for (Aggregation a : kAllAggregations) {
                 if (!Contains(r.spec.aggregations, a)) continue;
                 out.Sample("torchmon_stat",
                            {stat_text(r), kAggregationParts[static_cast<int>(a)], label_text(r)},
                            r.window.stats.Get(a));
               }
               for (size_t i = 0; i < r.quantiles.size(); ++i) {
                 // A quantile's name is "p" and digits: nothing to escape.
                 const std::string agg =
                     absl::StrCat(",agg=\"", protocol::QuantileName(r.spec.quantiles[i]), "\"");
                 out.Sample("torchmon_stat", {stat_text(r), agg, label_text(r)}, r.quantiles[i]);
               }
             });
  per_series("torchmon_window_accepted_samples", "Samples accepted in the last closed window.",
             "gauge", true, [&](const SeriesRow& r) {
               out.Sample("torchmon_window_accepted_samples", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.stats.accepted));
             });
  per_series("torchmon_window_capped_samples",
             "Samples refused by max_samples in the last closed window.", "gauge", true,
             [&](const SeriesRow& r) {
               out.Sample("torchmon_window_capped_samples", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.stats.capped));
             });
  per_series("torchmon_window_end_timestamp_seconds",
             "End of the last closed window, Unix seconds.", "gauge", true,
             [&](const SeriesRow& r) {
               out.Sample("torchmon_window_end_timestamp_seconds", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.start_ms + r.spec.window_ms) / 1000.0);
             });
  per_series("torchmon_window_size_seconds", "Window length of the series.", "gauge", false,
             [&](const SeriesRow& r) {
               out.Sample("torchmon_window_size_seconds", {stat_text(r), label_text(r)},
                          static_cast<double>(r.spec.window_ms) / 1000.0);
             });
  per_series("torchmon_samples_accepted_total",
             "Samples aggregated into a window since the series was created.", "counter", false,
             [&](const SeriesRow& r) {
               out.Sample("torchmon_samples_accepted_total", {stat_text(r), label_text(r)},
                          static_cast<double>(r.counters.accepted));
             });
  per_series("torchmon_samples_dropped_total",
             "Samples not aggregated, by reason: capped (max_samples), late (window already "
             "closed), skewed (too far in the future), client (dropped by the client before "
             "sending).",
             "counter", false, [&](const SeriesRow& r) {
               const std::pair<absl::string_view, uint64_t> reasons[] = {
                   {",reason=\"capped\"", r.counters.capped},
                   {",reason=\"late\"", r.counters.late},
                   {",reason=\"skewed\"", r.counters.skewed},
                   {",reason=\"client\"", r.counters.client_dropped}};
               for (const auto& [reason, count] : reasons) {
                 out.Sample("torchmon_samples_dropped_total",
                            {stat_text(r), label_text(r), reason}, static_cast<double>(count));
               }
             });

  if (!snap.events.empty()) {
    out.Family("torchmon_events_total", "Events received, by event name.", "counter");
    for (const EventRow& e : snap.events) {
      out.Sample("torchmon_events_total", {snap.Text(e.event), snap.Text(e.labels)},
                 static_cast<double>(e.count));
    }
    out.Family("torchmon_events_dropped_total",
               "Events the clients dropped before sending (queue full, invalid), by event name.",
               "counter");
    for (const EventRow& e : snap.events) {
      out.Sample("torchmon_events_dropped_total", {snap.Text(e.event), snap.Text(e.labels)},
                 static_cast<double>(e.client_dropped));
    }
    bool any_field = false;
    for (const EventRow& e : snap.events) {
      for (const auto& [field, value] : e.fields) {
        if (!any_field) {
          out.Family("torchmon_event_value",
                     "Last value of each numeric (or boolean) field of an event.", "gauge");
          any_field = true;
        }
        out.Sample("torchmon_event_value",
                   {snap.Text(e.event), snap.Text(field), snap.Text(e.labels)}, value);
      }
    }
  }

  const SelfMetricInputs inputs{stats_, snap.series_count, snap.events_retained, version_};
  for (const SelfMetric& m : SelfMetrics()) {
    bool family_written = false;
    m.samples(inputs, [&](absl::string_view label_value, double value) {
      if (!std::exchange(family_written, true)) out.Family(m.name, m.help, m.type);
      std::string label;
      if (*m.label != '\0') AppendPrometheusLabel(label, m.label, label_value);
      out.Sample(m.name, {label}, value);
    });
  }
  out.Finish();
  return out.bytes_written();
}

}  // namespace torchmon::server
