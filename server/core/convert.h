// Conversions between torchmon.v1 messages and the core's types, with the
// validation that belongs at the protocol edge.
#ifndef TORCHMON_SERVER_CORE_CONVERT_H_
#define TORCHMON_SERVER_CORE_CONVERT_H_

#include "absl/status/statusor.h"
#include "google/protobuf/map.h"
#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/core/selector.h"
#include "server/core/types.h"
#include "torchmon/v1/torchmon.pb.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

// server::Aggregation is the wire's, number for number (protocol::AggregationAs).
static_assert(static_cast<int>(Aggregation::kValue) == v1::VALUE);
static_assert(static_cast<int>(Aggregation::kMean) == v1::MEAN);
static_assert(static_cast<int>(Aggregation::kCount) == v1::COUNT);
static_assert(static_cast<int>(Aggregation::kSum) == v1::SUM);
static_assert(static_cast<int>(Aggregation::kMax) == v1::MAX);
static_assert(static_cast<int>(Aggregation::kMin) == v1::MIN);
static_assert(static_cast<int>(Aggregation::kQuantile) == v1::QUANTILE);

using ProtoLabels = google::protobuf::Map<std::string, std::string>;

// Validates keys and values of `labels` ("label key \"x\" ..." errors).
absl::StatusOr<Labels> LabelsFromProto(const ProtoLabels& labels);

// Merges `own` over `identity` (both valid, sorted). A key in both is an
// InvalidArgument naming it: a stat must not silently relabel a rank.
absl::StatusOr<Labels> MergeLabels(const Labels& identity, const Labels& own);

absl::StatusOr<StatSpec> SpecFromProto(const v1::StatSpec& spec);
void SpecToProto(const StatSpec& spec, v1::StatSpec* out);

Selector SelectorFromProto(const v1::Selector& selector);
Selector SelectorFromProto(const v1::EventSelector& selector);

void KeyToProto(const SeriesKey& key, v1::SeriesKey* out);
void WindowToProto(const ClosedWindow& window, v1::WindowSummary* out);
void SeriesToProto(const SeriesSnapshot& series, v1::SeriesInfo* out);
void EventToProto(const EventRecord& event, v1::Event* out);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_CONVERT_H_
