#include "server/exposition/metrics_exposition.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "server/core/native_histogram.h"
#include "server/exposition/prometheus_protobuf.h"
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
// A series' native histogram, copied: the dense counts of each sign are a
// range of the snapshot's bucket arena (copied only for the format that
// shows buckets).
struct HistogramRow {
  uint64_t count = 0;
  double sum = 0;
  int32_t schema = 0;
  uint64_t zero_count = 0;
  struct Sign {
    int32_t offset = 0;
    size_t begin = 0, end = 0;
    uint64_t infinities = 0;
  };
  Sign positive, negative;
};

struct SeriesRow {
  std::shared_ptr<const SeriesKey> key;
  TextRange stat;    // stat="..."
  TextRange labels;  // ,k="v" for each series label (shared by a rank's series)
  StatSpec spec;
  SeriesCounters counters;
  bool has_window = false;
  WindowRecord window;
  // The spec `window` was aggregated under when the series was redefined
  // after it closed; null when it is `spec` (WindowSpec).
  std::unique_ptr<StatSpec> redefined_since;
  std::vector<double> quantiles;  // window's, in the order of WindowSpec's quantiles
  double created_s = 0;           // when the series was created, Unix seconds
  // Its histogram's index in Snapshot::histograms, -1 without: apart, so
  // that the rows every family walks stay small.
  int64_t histogram = -1;
};

const StatSpec& WindowSpec(const SeriesRow& r) {
  return r.redefined_since != nullptr ? *r.redefined_since : r.spec;
}

struct EventRow {
  TextRange event;   // event="..."
  TextRange labels;  // ,k="v"...
  uint64_t count = 0;
  uint64_t client_dropped = 0;
  std::vector<std::pair<TextRange, double>> fields;  // ,field="..." and its last value
};

// Everything one scrape shows, copied out of the daemon's state. The labels
// of every series and event are encoded once (in the scrape's format), into
// `arena`; series sharing a label set (every series of a rank) share them.
struct Snapshot {
  explicit Snapshot(const ExpositionWriter& writer) : writer(writer) {}
  const ExpositionWriter& writer;
  std::string arena;
  std::vector<HistogramRow> histograms;
  std::vector<uint64_t> buckets;  // the histograms' bucket counts
  std::vector<SeriesRow> series;
  std::vector<EventRow> events;
  size_t series_count = 0;
  size_t events_retained = 0;

  absl::string_view Text(TextRange r) const {
    return absl::string_view(arena).substr(r.begin, r.end - r.begin);
  }
  TextRange Label(absl::string_view key, absl::string_view value, bool leading_comma) {
    TextRange r{arena.size(), 0};
    writer.AppendLabel(arena, key, value, leading_comma);
    r.end = arena.size();
    return r;
  }
  HistogramSample::Sign Sign(const HistogramRow::Sign& s) const {
    return HistogramSample::Sign{
        s.offset, absl::MakeConstSpan(buckets).subspan(s.begin, s.end - s.begin), s.infinities};
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

template <typename T>
double Load(const T& atomic) {
  return static_cast<double>(atomic.load(std::memory_order_relaxed));
}

}  // namespace

MetricsExposition::MetricsExposition(const Aggregator& aggregator, const EventLog& events,
                                     const DaemonStats& stats, std::string version)
    : aggregator_(aggregator), events_(events), stats_(stats), version_(std::move(version)) {}

std::string MetricsExposition::RenderToString(ExpositionFormat format) const {
  std::string out;
  Render(format, [&out](absl::string_view piece) {
    out.append(piece.data(), piece.size());
    return true;
  });
  return out;
}


namespace {

// One scrape into `out`, a PrometheusTextWriter or PrometheusProtobufWriter.

// The push exporters' families (docs/push.md), one sample per enabled
// endpoint, labelled by its protocol (`exporter`) and URL (`endpoint`).
void RenderExporters(const DaemonStats& stats, int64_t now_ms, ExpositionWriter& out) {
  std::vector<std::pair<const DaemonStats::Exporter*, std::string>> exporters;
  for (const DaemonStats::Exporter& e : stats.exporters) {
    if (!e.enabled.load(std::memory_order_acquire)) continue;
    std::string labels;
    out.AppendLabel(labels, "exporter", e.protocol.load(), false);
    out.AppendLabel(labels, "endpoint", e.endpoint, true);
    exporters.emplace_back(&e, std::move(labels));
  }
  if (exporters.empty()) return;
  const double started_s =
      static_cast<double>(stats.start_time_ms.load(std::memory_order_relaxed)) / 1000.0;
  auto counter = [&](const char* name, const char* help, auto value) {
    out.Family(name, help, MetricKind::kCounter, [&] {
      for (const auto& [e, labels] : exporters) {
        out.Sample(name, {labels}, static_cast<double>(value(*e)), started_s);
      }
    });
  };
  counter("torchmon_export_sent_total", "Series windows the endpoint accepted.",
          [](const DaemonStats::Exporter& e) { return e.sent_windows.load(std::memory_order_relaxed); });
  counter("torchmon_export_requests_sent_total", "Requests the endpoint accepted.",
          [](const DaemonStats::Exporter& e) { return e.sent_requests.load(std::memory_order_relaxed); });
  counter("torchmon_export_sent_bytes_total", "Bytes of the request bodies the endpoint accepted.",
          [](const DaemonStats::Exporter& e) { return e.sent_bytes.load(std::memory_order_relaxed); });
  counter("torchmon_export_retried_total",
          "Requests sent again after no answer, a 429 or a 5xx.",
          [](const DaemonStats::Exporter& e) { return e.retried.load(std::memory_order_relaxed); });
  counter("torchmon_export_connections_total",
          "Connections opened to the endpoint (for https, each a TLS handshake); kept between "
          "requests while it keeps them open.",
          [](const DaemonStats::Exporter& e) {
            return e.connections.load(std::memory_order_relaxed);
          });
  const char* const kReasons[DaemonStats::kExportDropReasons] = {"queue_full", "rejected", "shutdown"};
  std::string reason_parts[DaemonStats::kExportDropReasons];
  for (int r = 0; r < DaemonStats::kExportDropReasons; ++r) {
    out.AppendLabel(reason_parts[r], "reason", kReasons[r], true);
  }
  out.Family("torchmon_export_dropped_total",
             "Series windows never sent, by reason: queue_full (the endpoint was down longer than "
             "its queue holds), rejected (it answered a 4xx other than 429), shutdown (still "
             "queued when the daemon stopped).",
             MetricKind::kCounter, [&] {
               for (const auto& [e, labels] : exporters) {
                 for (int r = 0; r < DaemonStats::kExportDropReasons; ++r) {
                   out.Sample("torchmon_export_dropped_total", {labels, reason_parts[r]},
                              static_cast<double>(e->dropped[r].load(std::memory_order_relaxed)),
                              started_s);
                 }
               }
             });
  out.Family("torchmon_export_queue_length", "Window ends queued for the endpoint, the one being sent included.",
             MetricKind::kGauge, [&] {
               for (const auto& [e, labels] : exporters) {
                 out.Sample("torchmon_export_queue_length", {labels},
                            static_cast<double>(e->queued.load(std::memory_order_relaxed)));
               }
             });
  out.Family("torchmon_export_queue_oldest_age_seconds",
             "How long the oldest window end queued for the endpoint has waited; 0 when none is.",
             MetricKind::kGauge, [&] {
               for (const auto& [e, labels] : exporters) {
                 const int64_t since = e->oldest_queued_ms.load(std::memory_order_relaxed);
                 out.Sample("torchmon_export_queue_oldest_age_seconds", {labels},
                            since == 0 ? 0.0 : static_cast<double>(std::max<int64_t>(0, now_ms - since)) / 1000.0);
               }
             });
}

template <typename Writer>
size_t RenderScrape(const Aggregator& aggregator, const EventLog& events,
                    const DaemonStats& stats, const std::string& version,
                    ExpositionFormat format, Writer& out) {
  Snapshot snap(out);
  // Under the aggregator's lock: copies and a reference count, nothing else
  // (ingestion may wait for the whole walk; see Aggregator::ForEachSeries).
  // The rows are constructed here, outside the lock, so that their pages
  // are faulted in before the walk rather than during it.
  snap.series.resize(aggregator.series_count() + Aggregator::kWalkChunk);
  // Only the protobuf format shows a histogram's buckets.
  const bool copy_buckets = format == ExpositionFormat::kProtobuf;
  size_t rows = 0;
  aggregator.ForEachSeries([&](const Aggregator::SeriesView& s) {
    SeriesRow& row = rows < snap.series.size() ? snap.series[rows] : snap.series.emplace_back();
    ++rows;
    row.key = s.key;
    row.spec = s.spec;
    row.counters = s.counters;
    row.created_s = static_cast<double>(s.created_ms) / 1000.0;
    row.redefined_since = nullptr;
    if (s.last_window != nullptr) {
      row.has_window = true;
      row.window = *s.last_window;
      if (&s.last_window_spec != &s.spec) {
        row.redefined_since = std::make_unique<StatSpec>(s.last_window_spec);
      }
      row.quantiles.assign(s.last_quantiles.begin(), s.last_quantiles.end());
    }
    row.histogram = -1;
    if (s.histogram != nullptr) {
      const NativeHistogram& h = *s.histogram;
      row.histogram = static_cast<int64_t>(snap.histograms.size());
      HistogramRow& hr = snap.histograms.emplace_back();
      hr.count = h.count();
      hr.sum = h.sum();
      hr.schema = h.schema();
      hr.zero_count = h.zero_count();
      hr.positive.infinities = h.positive_infinities();
      hr.negative.infinities = h.negative_infinities();
      auto copy = [&](const NativeHistogram::Buckets& from, HistogramRow::Sign& to) {
        to.offset = from.offset;
        to.begin = snap.buckets.size();
        snap.buckets.insert(snap.buckets.end(), from.counts.begin(), from.counts.end());
        to.end = snap.buckets.size();
      };
      if (copy_buckets) {
        copy(h.positive(), hr.positive);
        copy(h.negative(), hr.negative);
      }
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
    events.ForEachTotals([&](const SeriesKey& key, const EventLog::Totals& totals) {
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
  snap.events_retained = events.size();

  // The agg label of each aggregation, and of each quantile met.
  std::string aggregation_parts[8];
  for (Aggregation a : kAllAggregations) {
    out.AppendLabel(aggregation_parts[static_cast<int>(a)], "agg", AggregationName(a), true);
  }
  // Node-based: a returned view stays valid while other quantiles are added.
  absl::node_hash_map<double, std::string> quantile_parts;
  auto quantile_part = [&](double q) -> absl::string_view {
    auto [it, inserted] = quantile_parts.try_emplace(q);
    if (inserted) out.AppendLabel(it->second, "agg", protocol::QuantileName(q), true);
    return it->second;
  };

  auto stat_text = [&](const SeriesRow& r) { return snap.Text(r.stat); };
  auto label_text = [&](const SeriesRow& r) { return snap.Text(r.labels); };
  // One family per pass over the rows: the formats want each family's
  // samples together.
  auto per_series = [&](absl::string_view name, absl::string_view help, MetricKind kind,
                        bool needs_window, auto&& emit) {
    out.Family(name, help, kind, [&] {
      for (const SeriesRow& r : snap.series) {
        if (needs_window && !r.has_window) continue;
        emit(r);
      }
    });
  };

  per_series("torchmon_stat",
             "Aggregations of the last closed window of each series; agg names the aggregation.",
             MetricKind::kGauge, true, [&](const SeriesRow& r) {
               for (Aggregation a : kAllAggregations) {
                 if (!Contains(WindowSpec(r).aggregations, a)) continue;
                 out.Sample("torchmon_stat",
                            {stat_text(r), aggregation_parts[static_cast<int>(a)], label_text(r)},
                            r.window.stats.Get(a));
               }
               for (size_t i = 0; i < r.quantiles.size(); ++i) {
                 out.Sample("torchmon_stat",
                            {stat_text(r), quantile_part(WindowSpec(r).quantiles[i]),
                             label_text(r)},
                            r.quantiles[i]);
               }
             });
  out.Family(
      "torchmon_stat_distribution",
      "Every sample each series accepted since it was created, as a native histogram "
      "(exponential buckets; the text formats show only its count and sum).",
      MetricKind::kHistogram, [&] {
        for (const SeriesRow& r : snap.series) {
          if (r.histogram < 0) continue;
          const HistogramRow& h = snap.histograms[static_cast<size_t>(r.histogram)];
          HistogramSample sample;
          sample.count = h.count;
          sample.sum = h.sum;
          sample.schema = h.schema;
          sample.zero_threshold = NativeHistogram::kZeroThreshold;
          sample.zero_count = h.zero_count;
          sample.positive = snap.Sign(h.positive);
          sample.negative = snap.Sign(h.negative);
          out.Histogram("torchmon_stat_distribution", {stat_text(r), label_text(r)}, sample,
                        r.created_s);
        }
      });
  per_series("torchmon_window_accepted_samples", "Samples accepted in the last closed window.",
             MetricKind::kGauge, true, [&](const SeriesRow& r) {
               out.Sample("torchmon_window_accepted_samples", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.stats.accepted));
             });
  per_series("torchmon_window_capped_samples",
             "Samples refused by max_samples in the last closed window.", MetricKind::kGauge,
             true, [&](const SeriesRow& r) {
               out.Sample("torchmon_window_capped_samples", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.stats.capped));
             });
  per_series("torchmon_window_end_timestamp_seconds",
             "End of the last closed window, Unix seconds.", MetricKind::kGauge, true,
             [&](const SeriesRow& r) {
               out.Sample("torchmon_window_end_timestamp_seconds", {stat_text(r), label_text(r)},
                          static_cast<double>(r.window.start_ms + WindowSpec(r).window_ms) /
                              1000.0);
             });
  per_series("torchmon_window_size_seconds", "Window length of the series.", MetricKind::kGauge,
             false, [&](const SeriesRow& r) {
               out.Sample("torchmon_window_size_seconds", {stat_text(r), label_text(r)},
                          static_cast<double>(r.spec.window_ms) / 1000.0);
             });
  out.Family("torchmon_window_requested_size_seconds",
             "Window length the series was asked for where the daemon holds another (below 10 ms "
             "or above 31 days; torchmon_window_size_seconds is the one it holds).",
             MetricKind::kGauge, [&] {
               for (const SeriesRow& r : snap.series) {
                 const int64_t asked = r.spec.requested_window_ms;
                 if (asked == 0 || asked == r.spec.window_ms) continue;
                 out.Sample("torchmon_window_requested_size_seconds",
                            {stat_text(r), label_text(r)}, static_cast<double>(asked) / 1000.0);
               }
             });
  per_series("torchmon_samples_accepted_total",
             "Samples aggregated into a window since the series was created.",
             MetricKind::kCounter, false, [&](const SeriesRow& r) {
               out.Sample("torchmon_samples_accepted_total", {stat_text(r), label_text(r)},
                          static_cast<double>(r.counters.accepted), r.created_s);
             });
  std::string reason_parts[4];
  const char* const kReasons[] = {"capped", "late", "skewed", "client"};
  for (size_t i = 0; i < 4; ++i) out.AppendLabel(reason_parts[i], "reason", kReasons[i], true);
  per_series("torchmon_samples_dropped_total",
             "Samples not aggregated, by reason: capped (max_samples), late (window already "
             "closed), skewed (too far in the future), client (dropped by the client before "
             "sending).",
             MetricKind::kCounter, false, [&](const SeriesRow& r) {
               const uint64_t counts[] = {r.counters.capped, r.counters.late, r.counters.skewed,
                                          r.counters.client_dropped};
               // No _created: they start with the series, which its
               // accepted counter's _created tells once (Prometheus 2.x
               // stores every _created as a series of its own).
               for (size_t i = 0; i < 4; ++i) {
                 out.Sample("torchmon_samples_dropped_total",
                            {stat_text(r), label_text(r), reason_parts[i]},
                            static_cast<double>(counts[i]));
               }
             });

  out.Family("torchmon_events_total", "Events received, by event name.", MetricKind::kCounter,
             [&] {
               for (const EventRow& e : snap.events) {
                 out.Sample("torchmon_events_total", {snap.Text(e.event), snap.Text(e.labels)},
                            static_cast<double>(e.count));
               }
             });
  out.Family("torchmon_events_dropped_total",
             "Events the clients dropped before sending (queue full, invalid), by event name.",
             MetricKind::kCounter, [&] {
               for (const EventRow& e : snap.events) {
                 out.Sample("torchmon_events_dropped_total",
                            {snap.Text(e.event), snap.Text(e.labels)},
                            static_cast<double>(e.client_dropped));
               }
             });
  out.Family("torchmon_event_value", "Last value of each numeric (or boolean) field of an event.",
             MetricKind::kGauge, [&] {
               for (const EventRow& e : snap.events) {
                 for (const auto& [field, value] : e.fields) {
                   out.Sample("torchmon_event_value",
                              {snap.Text(e.event), snap.Text(field), snap.Text(e.labels)}, value);
                 }
               }
             });

  const SelfMetricInputs inputs{stats, snap.series_count, snap.events_retained, version};
  const double started_s =
      static_cast<double>(stats.start_time_ms.load(std::memory_order_relaxed)) / 1000.0;
  for (const SelfMetric& m : SelfMetrics()) {
    const bool counter = std::strcmp(m.type, "counter") == 0;
    out.Family(m.name, m.help, counter ? MetricKind::kCounter : MetricKind::kGauge, [&] {
      m.samples(inputs, [&](absl::string_view label_value, double value) {
        std::string label;
        if (*m.label != '\0') out.AppendLabel(label, m.label, label_value, false);
        out.Sample(m.name, {label}, value, counter ? started_s : kNoCreated);
      });
    });
  }
  RenderExporters(stats, aggregator.clock().NowMs(), out);
  out.Finish();
  return out.bytes_written();
}

}  // namespace

size_t MetricsExposition::Render(ExpositionFormat format,
                                 const ExpositionWriter::Sink& sink) const {
  // Each writer by its own (final) type: the calls per sample are direct.
  if (format == ExpositionFormat::kProtobuf) {
    PrometheusProtobufWriter out(sink);
    return RenderScrape(aggregator_, events_, stats_, version_, format, out);
  }
  PrometheusTextWriter out(sink, format);
  return RenderScrape(aggregator_, events_, stats_, version_, format, out);
}

}  // namespace torchmon::server
