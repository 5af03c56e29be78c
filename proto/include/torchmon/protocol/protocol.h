// Conventions of the torchmon.v1 protocol that every client and the daemon
// share: naming rules, window bounds, the default daemon address, and the
// text forms of durations, label lists and aggregations used on command
// lines and in environment variables.
//
// Everything here is a pure function of its arguments (DefaultTarget() also
// reads the environment) and is safe to call from any thread.
#ifndef TORCHMON_PROTOCOL_PROTOCOL_H_
#define TORCHMON_PROTOCOL_PROTOCOL_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::protocol {

// The windows the daemon aggregates: a spec outside [kMinWindowMs,
// kMaxWindowMs] is refused. torch.monitor takes any window; its shapes in
// torchmon (the Python Stat, torchmon/monitor.h) keep it in process and send
// the daemon DaemonWindowMs of it.
inline constexpr int64_t kMinWindowMs = 10;
// 31 days: a month-long window of a long run.
inline constexpr int64_t kMaxWindowMs = int64_t{31} * 24 * 3600 * 1000;
// The window the daemon aggregates for a torch.monitor window of
// `requested_ms` (torch takes any): the nearest of [kMinWindowMs,
// kMaxWindowMs]. The clients send this, so that no Stat torch.monitor
// accepts is refused (docs/semantics.md, "Windows the daemon cannot hold").
inline constexpr int64_t DaemonWindowMs(int64_t requested_ms) {
  return requested_ms < kMinWindowMs ? kMinWindowMs
         : requested_ms > kMaxWindowMs ? kMaxWindowMs
                                       : requested_ms;
}

// Label keys a user cannot set: the exposition uses them itself.
inline constexpr absl::string_view kReservedLabelKeys[] = {
    "stat", "agg", "reason", "event", "field"};
// Label keys a user cannot set because Prometheus or its operator sets them
// on the scrape target and identify the node: with the shipped
// `honor_labels: true`, a series carrying one would override the target's
// and pass for another node or pod. `le` and `quantile` are the labels of
// Prometheus's classic histograms and summaries. (`job` is not here: it is
// the training job, which honor_labels keeps on purpose.)
inline constexpr absl::string_view kTargetLabelKeys[] = {
    "instance", "node", "namespace", "pod", "container", "endpoint", "service", "le",
    "quantile"};

// Size limits every daemon enforces and every client checks before sending,
// so that one process cannot make the daemon hold arbitrarily large keys.
// Stat and event names:
inline constexpr size_t kMaxNameBytes = 1024;
// Label keys and event data keys:
inline constexpr size_t kMaxKeyBytes = 128;
// Label values:
inline constexpr size_t kMaxLabelValueBytes = 1024;
// Labels of one series or event, the client's identity labels included:
inline constexpr size_t kMaxLabels = 32;
// Entries in one event's data map, and bytes of one string value there:
inline constexpr size_t kMaxEventFields = 64;
inline constexpr size_t kMaxEventStringBytes = 4096;

using LabelList = std::vector<std::pair<std::string, std::string>>;

// OK if `key` matches [a-zA-Z_][a-zA-Z0-9_]*, is not reserved and does not
// start with "__" and has at most kMaxKeyBytes; otherwise InvalidArgument
// naming the key.
absl::Status ValidateLabelKey(absl::string_view key);

// OK if `value` is valid UTF-8 of at most kMaxLabelValueBytes; otherwise
// InvalidArgument naming the label `key`.
absl::Status ValidateLabelValue(absl::string_view key, absl::string_view value);

// True if `s` is well-formed UTF-8.
bool IsValidUtf8(absl::string_view s);

// OK if `name` is a usable stat or event name: non-empty, valid UTF-8, at
// most `max_bytes`. `what` names the field in the error ("stat name").
absl::Status ValidateName(absl::string_view what, absl::string_view name,
                          size_t max_bytes = kMaxNameBytes);

// Shortens `text` for quoting in an error message: at most `max_bytes`, cut
// on a UTF-8 boundary, "..." appended when cut, invalid UTF-8 shown as
// "<invalid UTF-8>". Error messages must stay small whatever a client sends.
std::string Quote(absl::string_view text, size_t max_bytes = 64);

// Quantiles per stat, at most.
inline constexpr size_t kMaxQuantiles = 16;

// Validates a StatSpec: known aggregations (QUANTILE only through
// `quantiles`), at least one aggregation or quantile, valid quantiles (see
// CanonicalQuantile), at most kMaxQuantiles distinct, window size within
// bounds, max_samples ≥ 0.
absl::Status ValidateSpec(const v1::StatSpec& spec);

// A quantile as torchmon names it: 0 < q < 1 with at most four decimals as
// a percentage, so that its name ("p99.99") is exact and two spellings of
// one quantile (0.999 and "p99.9") are the same number. Returns q rounded
// to that grid (within 1e-9 of it) or InvalidArgument naming the value.
absl::StatusOr<double> CanonicalQuantile(double q);

// "p50", "p99", "p99.9" for 0.5, 0.99, 0.999. `q` must be canonical.
std::string QuantileName(double q);

// The one conversion between torchmon's four Aggregation enums: the wire's
// v1::Aggregation, the daemon's server::Aggregation, the client's
// torchmon::Aggregation and torch::monitor's shape, torchmon::monitor::
// Aggregation. All number VALUE..MIN 1..6 as the wire does (QUANTILE 7 where
// they have it; monitor's NONE is 0); each enum's values are checked
// against the wire's with static_asserts where it meets it
// (server/core/convert.h, client/src/detail/option_checks.cc,
// torchmon/monitor_windows.h), so a renumbering does not compile.
template <typename To, typename From>
constexpr To AggregationAs(From aggregation) {
  return static_cast<To>(static_cast<int>(aggregation));
}

// One aggregation as named on command lines, in the exposition and in the
// sinks: one of the six, or QUANTILE with its quantile.
struct NamedAggregation {
  v1::Aggregation aggregation = v1::AGGREGATION_UNSPECIFIED;
  double quantile = 0;  // QUANTILE only

  friend bool operator==(const NamedAggregation& a, const NamedAggregation& b) {
    return a.aggregation == b.aggregation && a.quantile == b.quantile;
  }
};

// "mean", "p99".
std::string AggregationName(const NamedAggregation& aggregation);

// Parses one name, case-insensitively: value, mean, count, sum, max, min,
// or pNN (p50, p99, p99.9: a percentage strictly between 0 and 100 with at
// most four decimals).
absl::StatusOr<NamedAggregation> ParseAggregation(absl::string_view name);

// Adds `aggregation` to `spec`: to aggregations, or its quantile to quantiles.
void AddToSpec(const NamedAggregation& aggregation, v1::StatSpec* spec);

// Parses "k=v,k=v" (TORCHMON_LABELS, --label). Keys are validated; an empty
// string gives an empty list. Later duplicates override earlier ones.
absl::StatusOr<LabelList> ParseLabelList(absl::string_view text);

// Parses one "k=v".
absl::StatusOr<std::pair<std::string, std::string>> ParseLabel(absl::string_view text);

// Parses "500ms", "2s", "1.5s", "1m", "1h" into milliseconds. A bare number
// is refused (the unit is mandatory) so that "60" is never ambiguous.
absl::StatusOr<int64_t> ParseDurationMs(absl::string_view text);

// Formats milliseconds the shortest exact way: "500ms", "2s", "1m", "1h".
std::string FormatDurationMs(int64_t ms);

// Lower-case name of an aggregation ("mean"); "unspecified" for 0.
absl::string_view AggregationName(v1::Aggregation aggregation);

// Parses "mean,max,p99" (case-insensitive, see ParseAggregation) into
// aggregations, in the given order.
absl::StatusOr<std::vector<NamedAggregation>> ParseAggregationList(absl::string_view text);

// The daemon's default Unix socket path:
//   $XDG_RUNTIME_DIR/torchmon/torchmond.sock   if XDG_RUNTIME_DIR is set,
//   /run/torchmon/torchmond.sock               for root,
//   /tmp/torchmon-<uid>/torchmond.sock         otherwise.
std::string DefaultSocketPath();

// The address clients use when none is given: $TORCHMON_TARGET if set,
// else "unix://" + DefaultSocketPath().
std::string DefaultTarget();

// True for a host only this machine can reach: 127.0.0.0/8, ::1 (also as
// ::ffff:127.x.y.z) and "localhost". `host` has no brackets. Both ends use
// it to decide what may travel without TLS.
bool IsLoopbackHost(absl::string_view host);

}  // namespace torchmon::protocol

#endif  // TORCHMON_PROTOCOL_PROTOCOL_H_
