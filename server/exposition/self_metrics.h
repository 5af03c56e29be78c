// The daemon's self-metrics (torchmon_daemon_*), listed once: /metrics
// writes them from this list (MetricsExposition) and docs/metrics.md's
// table is this list rendered (SelfMetricsMarkdown; a unit test keeps the
// two equal).
#ifndef TORCHMON_SERVER_EXPOSITION_SELF_METRICS_H_
#define TORCHMON_SERVER_EXPOSITION_SELF_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/core/daemon_stats.h"

namespace torchmon::server {

// What a scrape knows beyond the counters.
struct SelfMetricInputs {
  const DaemonStats& stats;
  uint64_t series = 0;
  uint64_t events_retained = 0;
  absl::string_view version;
};

// Each sample of a metric: its label's value ("" for a metric without a
// label) and its value.
using SelfMetricSampleFn = absl::FunctionRef<void(absl::string_view label_value, double value)>;

struct SelfMetric {
  const char* name;
  const char* type;  // "gauge" or "counter"
  // The one label of its samples, "" for none.
  const char* label;
  // # HELP text.
  const char* help;
  // docs/metrics.md's "meaning" (Markdown).
  const char* meaning;
  // Calls `sample` for each sample; none means the family is not written.
  void (*samples)(const SelfMetricInputs& in, SelfMetricSampleFn sample);
};

// In the order /metrics writes them.
absl::Span<const SelfMetric> SelfMetrics();

// docs/metrics.md's table of self-metrics.
std::string SelfMetricsMarkdown();

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_SELF_METRICS_H_
