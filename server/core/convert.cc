#include "server/core/convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

absl::StatusOr<Labels> LabelsFromProto(const ProtoLabels& labels) {
  if (labels.size() > protocol::kMaxLabels) {
    return absl::InvalidArgumentError(absl::StrCat(labels.size(), " labels (at most ",
                                                   protocol::kMaxLabels, ")"));
  }
  Labels out;
  out.reserve(labels.size());
  for (const auto& [key, value] : labels) {
    if (absl::Status s = protocol::ValidateLabelKey(key); !s.ok()) return s;
    if (absl::Status s = protocol::ValidateLabelValue(key, value); !s.ok()) return s;
    out.emplace_back(key, value);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<Labels> MergeLabels(const Labels& identity, const Labels& own) {
  Labels out;
  out.reserve(identity.size() + own.size());
  auto a = identity.begin(), b = own.begin();
  while (a != identity.end() || b != own.end()) {
    if (b == own.end() || (a != identity.end() && a->first < b->first)) {
      out.push_back(*a++);
    } else if (a == identity.end() || b->first < a->first) {
      out.push_back(*b++);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "label \"", a->first, "\" is set both by the client identity (\"",
          protocol::Quote(a->second), "\") and by the stat or event (\"",
          protocol::Quote(b->second), "\")"));
    }
  }
  if (out.size() > protocol::kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(identity.size(), " identity labels and ", own.size(),
                     " of its own make ", out.size(), " labels (at most ", protocol::kMaxLabels, ")"));
  }
  return out;
}

absl::StatusOr<StatSpec> SpecFromProto(const v1::StatSpec& spec) {
  if (absl::Status s = protocol::ValidateSpec(spec); !s.ok()) return s;
  StatSpec out;
  for (int a : spec.aggregations()) {
    out.aggregations |= AggregationBit(protocol::AggregationAs<Aggregation>(a));
  }
  std::vector<double> quantiles;
  for (double q : spec.quantiles()) quantiles.push_back(*protocol::CanonicalQuantile(q));
  std::sort(quantiles.begin(), quantiles.end());
  quantiles.erase(std::unique(quantiles.begin(), quantiles.end()), quantiles.end());
  out.quantiles = std::move(quantiles);
  out.window_ms = spec.window_size_ms();
  out.requested_window_ms = spec.requested_window_size_ms();
  out.max_samples = spec.max_samples();
  // A series with quantiles has a histogram whatever this says: the
  // aggregator makes it so (Aggregator::Define), for every caller.
  out.histogram = spec.histogram();
  return out;
}

void SpecToProto(const StatSpec& spec, v1::StatSpec* out) {
  for (Aggregation a : kAllAggregations) {
    if (Contains(spec.aggregations, a)) out->add_aggregations(protocol::AggregationAs<v1::Aggregation>(a));
  }
  for (double q : spec.quantiles) out->add_quantiles(q);
  out->set_window_size_ms(spec.window_ms);
  out->set_requested_window_size_ms(spec.requested_window_ms);
  out->set_max_samples(spec.max_samples);
  out->set_histogram(spec.histogram);
}

namespace {
template <typename ProtoSelector>
Selector SelectorFrom(const std::string& name, const ProtoSelector& selector) {
  Selector out;
  out.name = name;
  for (const v1::LabelMatcher& m : selector.labels()) {
    LabelMatcher matcher;
    matcher.key = m.key();
    matcher.value = m.value();
    switch (m.op()) {
      case v1::NOT_EQUAL: matcher.op = LabelMatcher::Op::kNotEqual; break;
      case v1::GLOB: matcher.op = LabelMatcher::Op::kGlob; break;
      default: matcher.op = LabelMatcher::Op::kEqual; break;
    }
    out.labels.push_back(std::move(matcher));
  }
  return out;
}
}  // namespace

Selector SelectorFromProto(const v1::Selector& selector) {
  return SelectorFrom(selector.stat(), selector);
}
Selector SelectorFromProto(const v1::EventSelector& selector) {
  return SelectorFrom(selector.name(), selector);
}

void KeyToProto(const SeriesKey& key, v1::SeriesKey* out) {
  out->set_stat(key.stat);
  for (const auto& [k, v] : key.labels) (*out->mutable_labels())[k] = v;
}

void WindowToProto(const ClosedWindow& window, v1::WindowSummary* out) {
  KeyToProto(*window.series, out->mutable_series());
  out->set_start_ms(window.start_ms);
  out->set_end_ms(window.end_ms);
  ForEachAggregate(window, [out](const AggregateRef& ref, double value) {
    v1::AggregateValue* aggregate = out->add_aggregates();
    aggregate->set_aggregation(protocol::AggregationAs<v1::Aggregation>(ref.aggregation));
    aggregate->set_quantile(ref.quantile);
    aggregate->set_value(value);
  });
  out->set_accepted(window.stats.accepted);
  out->set_capped(window.stats.capped);
  out->set_partial(window.partial);
  out->set_definition(window.definition);
}

void SeriesToProto(const SeriesSnapshot& series, v1::SeriesInfo* out) {
  KeyToProto(*series.key, out->mutable_series());
  SpecToProto(series.spec, out->mutable_spec());
  v1::SeriesCounters* c = out->mutable_counters();
  c->set_accepted(series.counters.accepted);
  c->set_capped(series.counters.capped);
  c->set_late(series.counters.late);
  c->set_skewed(series.counters.skewed);
  c->set_client_dropped(series.counters.client_dropped);
  if (series.has_last_window) WindowToProto(series.last_window, out->mutable_last_window());
  out->set_last_update_ms(series.last_update_ms);
  out->set_definition(series.definition);
  out->set_defined_ms(series.defined_ms);
}

void EventToProto(const EventRecord& event, v1::Event* out) {
  out->set_name(event.name);
  out->set_timestamp_us(event.timestamp_us);
  out->set_sequence(event.sequence);
  for (const auto& [k, v] : event.labels) (*out->mutable_labels())[k] = v;
  for (const auto& [field, value] : event.data) {
    v1::EventValue& ev = (*out->mutable_data())[field];
    if (const auto* s = std::get_if<std::string>(&value)) ev.set_string_value(*s);
    if (const auto* d = std::get_if<double>(&value)) ev.set_double_value(*d);
    if (const auto* i = std::get_if<int64_t>(&value)) ev.set_int_value(*i);
    if (const auto* b = std::get_if<bool>(&value)) ev.set_bool_value(*b);
  }
}

}  // namespace torchmon::server
