// Closed windows as push requests: Prometheus remote-write 1.0
// (prompb.WriteRequest, snappy-compressed) and OTLP/HTTP
// (ExportMetricsServiceRequest). The mapping of each series to each
// protocol is docs/push.md's. Pure: no I/O.
#ifndef TORCHMON_SERVER_PUSH_ENCODE_H_
#define TORCHMON_SERVER_PUSH_ENCODE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/core/types.h"

namespace torchmon::server {

// One request's body, and how many series windows it carries.
struct EncodedRequest {
  std::string body;
  size_t windows = 0;
};

// The windows as remote-write requests of at most `windows_per_request`
// windows each: per window, its aggregates (torchmon_stat{agg}) and its
// accepted and capped samples, stamped with the window's end; its series'
// accounting counters and (when the window carries it) its histogram as a
// native histogram, stamped when they were read (ClosedWindow::counters_ms:
// as the window closed, its end + grace). Bodies are snappy-compressed (block
// format, as remote-write 1.0 has it).
std::vector<EncodedRequest> EncodeRemoteWrite(absl::Span<const ClosedWindow> windows,
                                              size_t windows_per_request);

// The same windows as OTLP requests: aggregates and window counts as
// gauges, the accounting counters as cumulative monotonic sums from the
// series' creation, the histogram as a cumulative exponential histogram
// of the same scale and buckets. The identity labels OpenTelemetry has a
// convention for become resource attributes (host -> host.name, pod_uid ->
// k8s.pod.uid, container_id -> container.id, user -> process.owner); the
// rest are data point attributes. `version` is the instrumentation
// scope's. Bodies are gzipped (Content-Encoding: gzip).
std::vector<EncodedRequest> EncodeOtlp(absl::Span<const ClosedWindow> windows,
                                       size_t windows_per_request, absl::string_view version);

// Resource attribute of an identity label, or null where it stays a data
// point attribute.
const char* OtlpResourceAttribute(absl::string_view label);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_ENCODE_H_
