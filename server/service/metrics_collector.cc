#include "server/service/metrics_collector.h"

#include <utility>

namespace torchmon::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

std::vector<ClientMetric::Label> PromLabels(const SeriesKey& key, const char* name_label) {
  std::vector<ClientMetric::Label> out;
  out.reserve(key.labels.size() + 2);
  out.push_back({name_label, key.stat});
  for (const auto& [k, v] : key.labels) out.push_back({k, v});
  return out;
}

void AddGauge(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

void AddCounter(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

template <typename T>
double Load(const T& atomic) {
  return static_cast<double>(atomic.load(std::memory_order_relaxed));
}

}  // namespace

MetricsCollector::MetricsCollector(const Aggregator& aggregator, const EventLog& events,
                                   const DaemonStats& stats, std::string version)
    : aggregator_(aggregator), events_(events), stats_(stats), version_(std::move(version)) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  auto stat = Family("torchmon_stat",
                     "Aggregations of the last closed window of each series; agg names the "
                     "aggregation.",
                     MetricType::Gauge);
  auto window_accepted = Family("torchmon_window_accepted_samples",
                                "Samples accepted in the last closed window.", MetricType::Gauge);
  auto window_capped = Family("torchmon_window_capped_samples",
                              "Samples refused by max_samples in the last closed window.",
                              MetricType::Gauge);
  auto window_end = Family("torchmon_window_end_timestamp_seconds",
                           "End of the last closed window, Unix seconds.", MetricType::Gauge);
  auto window_size = Family("torchmon_window_size_seconds",
                            "Window length of the series.", MetricType::Gauge);
  auto accepted_total = Family("torchmon_samples_accepted_total",
                               "Samples aggregated into a window since the series was created.",
                               MetricType::Counter);
  auto dropped_total = Family("torchmon_samples_dropped_total",
                              "Samples not aggregated, by reason: capped (max_samples), late "
                              "(window already closed), skewed (too far in the future), client "
                              "(dropped by the client before sending).",
                              MetricType::Counter);

  aggregator_.ForEachSeries([&](const Aggregator::SeriesView& s) {
    const auto base = PromLabels(s.key, "stat");
    AddGauge(window_size, base, static_cast<double>(s.spec.window_ms) / 1000.0);
    AddCounter(accepted_total, base, static_cast<double>(s.counters.accepted));
    const std::pair<const char*, uint64_t> reasons[] = {{"capped", s.counters.capped},
                                                        {"late", s.counters.late},
                                                        {"skewed", s.counters.skewed},
                                                        {"client", s.counters.client_dropped}};
    for (const auto& [reason, count] : reasons) {
      auto labels = base;
      labels.push_back({"reason", reason});
      AddCounter(dropped_total, std::move(labels), static_cast<double>(count));
    }
    if (s.last_window == nullptr) return;
    for (Aggregation a : kAllAggregations) {
      if (!Contains(s.spec.aggregations, a)) continue;
      auto labels = base;
      labels.insert(labels.begin() + 1, {"agg", AggregationName(a)});
      AddGauge(stat, std::move(labels), s.last_window->stats.Get(a));
    }
    AddGauge(window_accepted, base, static_cast<double>(s.last_window->stats.accepted));
    AddGauge(window_capped, base, static_cast<double>(s.last_window->stats.capped));
    AddGauge(window_end, base,
             static_cast<double>(s.last_window->start_ms + s.spec.window_ms) / 1000.0);
  });

  auto events_total = Family("torchmon_events_total", "Events received, by event name.",
                             MetricType::Counter);
  auto event_value = Family("torchmon_event_value",
                            "Last value of each numeric (or boolean) field of an event.",
                            MetricType::Gauge);
  events_.ForEachTotals([&](const SeriesKey& key, const EventLog::Totals& totals) {
    const auto base = PromLabels(key, "event");
    AddCounter(events_total, base, static_cast<double>(totals.count));
    for (const auto& [field, value] : totals.last_numeric) {
      auto labels = base;
      labels.insert(labels.begin() + 1, {"field", field});
      AddGauge(event_value, std::move(labels), value);
    }
  });

  std::vector<MetricFamily> out;
  for (auto* f : {&stat, &window_accepted, &window_capped, &window_end, &window_size,
                  &accepted_total, &dropped_total, &events_total, &event_value}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }

  auto gauge = [&](const char* name, const char* help, double value) {
    auto f = Family(name, help, MetricType::Gauge);
    AddGauge(f, {}, value);
    out.push_back(std::move(f));
  };
  auto counter = [&](const char* name, const char* help, double value) {
    auto f = Family(name, help, MetricType::Counter);
    AddCounter(f, {}, value);
    out.push_back(std::move(f));
  };
  gauge("torchmon_daemon_build_info", "Always 1; the version label names the build.", 1);
  out.back().metric.back().label.push_back({"version", version_});
  gauge("torchmon_daemon_start_time_seconds", "When the daemon started, Unix seconds.",
        Load(stats_.start_time_ms) / 1000.0);
  gauge("torchmon_daemon_series", "Series held in memory.",
        static_cast<double>(aggregator_.series_count()));
  gauge("torchmon_daemon_clients", "Open ingest streams.", Load(stats_.ingest_streams_active));
  gauge("torchmon_daemon_watchers", "Open WatchWindows/WatchEvents streams.",
        Load(stats_.watchers_active));
  gauge("torchmon_daemon_events_retained", "Events held in the event log.",
        static_cast<double>(events_.size()));
  counter("torchmon_daemon_streams_total", "Ingest streams opened.",
          Load(stats_.ingest_streams_total));
  counter("torchmon_daemon_batches_total", "Ingest batches received.",
          Load(stats_.batches_received));
  counter("torchmon_daemon_batches_with_errors_total",
          "Ingest batches of which some part was refused.", Load(stats_.batches_with_errors));
  counter("torchmon_daemon_samples_received_total", "Samples received in ingest batches.",
          Load(stats_.samples_received));
  counter("torchmon_daemon_samples_refused_total",
          "Samples refused with their batch part (unknown or refused stat, malformed block); not "
          "counted in any series.",
          Load(stats_.samples_refused));
  counter("torchmon_daemon_definitions_refused_total",
          "Stat definitions refused (invalid or conflicting).", Load(stats_.definitions_refused));
  counter("torchmon_daemon_events_received_total", "Events received.",
          Load(stats_.events_received));
  counter("torchmon_daemon_events_refused_total", "Events refused as invalid.",
          Load(stats_.events_refused));
  counter("torchmon_daemon_windows_closed_total", "Windows closed.",
          Load(stats_.windows_closed));
  counter("torchmon_daemon_series_expired_total", "Series forgotten after the idle TTL.",
          Load(stats_.series_expired));
  counter("torchmon_daemon_watch_dropped_total",
          "Windows and events a slow watcher missed because its queue was full.",
          Load(stats_.watch_items_dropped));
  counter("torchmon_daemon_queries_total", "Query RPCs served.", Load(stats_.queries));
  return out;
}

}  // namespace torchmon::server
