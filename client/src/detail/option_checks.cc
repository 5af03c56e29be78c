#include "detail/option_checks.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "detail/chunk_pool.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::detail {

// torchmon::Aggregation is the wire's, number for number (protocol::AggregationAs).
static_assert(static_cast<int>(Aggregation::VALUE) == v1::VALUE);
static_assert(static_cast<int>(Aggregation::MEAN) == v1::MEAN);
static_assert(static_cast<int>(Aggregation::COUNT) == v1::COUNT);
static_assert(static_cast<int>(Aggregation::SUM) == v1::SUM);
static_assert(static_cast<int>(Aggregation::MAX) == v1::MAX);
static_assert(static_cast<int>(Aggregation::MIN) == v1::MIN);
static_assert(static_cast<int>(Aggregation::QUANTILE) == v1::QUANTILE);
static_assert(ClientOptions::kMinBufferBytes == ChunkPool::MinBudgetBytes(),
              "client.h documents the pool's minimum");

namespace {

void SetLabel(Labels& labels, const std::string& key, const std::string& value) {
  for (auto& [k, v] : labels) {
    if (k == key) {
      v = value;
      return;
    }
  }
  labels.emplace_back(key, value);
}

absl::Status ValidateStatLabels(const Labels& stat_labels, const Labels& identity) {
  if (stat_labels.size() + identity.size() > protocol::kMaxLabels) {
    return absl::InvalidArgumentError(absl::StrCat(
        identity.size(), " identity labels and ", stat_labels.size(), " of its own make ",
        identity.size() + stat_labels.size(), " labels (at most ", protocol::kMaxLabels, ")"));
  }
  for (const auto& [key, value] : stat_labels) {
    if (absl::Status s = protocol::ValidateLabelKey(key); !s.ok()) return s;
    if (absl::Status s = protocol::ValidateLabelValue(key, value); !s.ok()) return s;
    for (const auto& [identity_key, identity_value] : identity) {
      if (key == identity_key) {
        return absl::InvalidArgumentError(
            absl::StrCat("label \"", key, "\" is also an identity label of the client (", key,
                         "=\"", identity_value, "\"); a series cannot carry it twice"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

ClientOptions NormalizeOptions(ClientOptions options) {
  using std::chrono::milliseconds;
  constexpr milliseconds kOneMs{1};
  options.send_interval = std::max(options.send_interval, kOneMs);
  options.initial_backoff = std::max(options.initial_backoff, kOneMs);
  options.max_backoff = std::max(options.max_backoff, options.initial_backoff);
  options.destructor_flush_timeout =
      std::max(options.destructor_flush_timeout, milliseconds::zero());
  if (options.target.empty()) options.target = protocol::DefaultTarget();
  return options;
}

size_t CheckedBufferBudget(const ClientOptions& options) {
  if (options.buffer_bytes < ClientOptions::kMinBufferBytes ||
      options.buffer_bytes > ChunkPool::MaxBudgetBytes()) {
    throw std::invalid_argument(absl::StrCat(
        "torchmon: ClientOptions::buffer_bytes is ", options.buffer_bytes, "; it must be at least ",
        ClientOptions::kMinBufferBytes, " (2 MiB: one batch of samples) and at most ",
        ChunkPool::MaxBudgetBytes()));
  }
  return options.buffer_bytes;
}

Labels ResolveClientLabels(const ClientOptions& options, std::vector<std::string>* errors) {
  Labels labels = options.labels_from_environment ? IdentityLabelsFromEnvironment() : Labels{};
  for (const auto& [key, value] : options.labels) {
    absl::Status status = protocol::ValidateLabelKey(key);
    if (status.ok()) status = protocol::ValidateLabelValue(key, value);
    if (!status.ok()) {
      errors->push_back(absl::StrCat("INVALID_ARGUMENT: client label ignored: ", status.message()));
      continue;
    }
    SetLabel(labels, key, value);
  }
  return labels;
}

grpc::ChannelArguments ChannelArgumentsFor(const ClientOptions& options) {
  // gRPC's own reconnect backoff defaults to 1 s growing to 120 s.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(options.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(options.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::min<int64_t>(options.max_backoff.count(), INT32_MAX)));
  return args;
}

uint64_t DrawClientInstance() {
  std::random_device device;
  std::seed_seq seed{
      device(), device(), static_cast<uint32_t>(getpid()),
      static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  std::mt19937_64 rng(seed);
  uint64_t instance = 0;
  while (instance == 0) instance = rng();
  return instance;
}

CheckedDefinition CheckStatDefinition(const std::string& name,
                                      const std::vector<StatAggregation>& aggregations,
                                      std::chrono::milliseconds window_size,
                                      const StatOptions& options, const Labels& identity) {
  CheckedDefinition checked;
  v1::StatDefinition& def = checked.definition;
  def.set_name(name);
  v1::StatSpec* spec = def.mutable_spec();
  for (const StatAggregation& a : aggregations) {
    if (a.aggregation == Aggregation::QUANTILE) {
      spec->add_quantiles(a.quantile);
    } else {
      spec->add_aggregations(protocol::AggregationAs<v1::Aggregation>(a.aggregation));
    }
  }
  spec->set_window_size_ms(window_size.count());
  if (options.requested_window.count() != window_size.count()) {
    spec->set_requested_window_size_ms(options.requested_window.count());
  }
  spec->set_max_samples(options.max_samples);
  spec->set_histogram(options.histogram);
  for (const auto& [key, value] : options.labels) (*def.mutable_labels())[key] = value;

  checked.status = protocol::ValidateName("stat name", name);
  if (checked.status.ok()) checked.status = protocol::ValidateSpec(*spec);
  if (checked.status.ok()) checked.status = ValidateStatLabels(options.labels, identity);

  // Name and labels, hashed: a collision only makes a conflict wait before
  // it is reported.
  std::string key = name;
  for (const auto& [k, v] : options.labels) {
    absl::StrAppend(&key, ",", k.size(), ":", k, v.size(), ":", v);
  }
  checked.key_hash = absl::HashOf(key);
  checked.spec_hash = absl::HashOf(
      absl::MakeConstSpan(spec->aggregations().data(), spec->aggregations_size()),
      absl::MakeConstSpan(spec->quantiles().data(), spec->quantiles_size()), spec->window_size_ms(),
      spec->requested_window_size_ms(), spec->max_samples(), spec->histogram());
  return checked;
}

}  // namespace torchmon::detail
