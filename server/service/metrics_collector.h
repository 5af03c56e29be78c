// The Prometheus exposition: one Collectable that snapshots the aggregator,
// the event log and the daemon's self-metrics at scrape time, so no metric
// object exists per series. Metric names and labels: docs/metrics.md.
#ifndef TORCHMON_SERVER_SERVICE_METRICS_COLLECTOR_H_
#define TORCHMON_SERVER_SERVICE_METRICS_COLLECTOR_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/service/daemon_stats.h"

namespace torchmon::server {

// Thread-safe: Collect may run concurrently with ingestion and other scrapes.
class MetricsCollector final : public prometheus::Collectable {
 public:
  MetricsCollector(const Aggregator& aggregator, const EventLog& events, const DaemonStats& stats,
                   std::string version);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Aggregator& aggregator_;
  const EventLog& events_;
  const DaemonStats& stats_;
  const std::string version_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SERVICE_METRICS_COLLECTOR_H_
