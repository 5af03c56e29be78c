// Fuzzes the ways a user's text or a query's selector becomes a Selector,
// and the matching itself. The first byte of the input picks the mode:
//
//   0  torchmonctl's command line (arguments split at NUL bytes), parsed by
//      cli::ParseCommandLine; what it accepts must be valid, and its
//      selector (built as torchmonctl builds it) is matched as in mode 1.
//   1  a serialized torchmon.v1.Selector, converted by SelectorFromProto and
//      matched against a fixed set of series and events: Selector::Matches,
//      Aggregator::ListSeries and EventLog::Get must all agree with the
//      reference matcher below.
//   2  a glob pattern and a text (split at the first NUL): GlobMatch against
//      the reference.
//   3  the text forms of the protocol (label lists, durations, aggregation
//      lists, sample and event values): what parses must be valid and, for
//      durations, print back to the same value.
//
// The reference matcher is written from the documentation (selector.h and
// torchmon.proto), as differently from server/core/selector.cc as possible:
// globs by dynamic programming, labels by linear search.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/command_line.h"
#include "google/protobuf/stubs/logging.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/core/selector.h"
#include "server/core/convert.h"
#include "tests/fuzz/fuzz_support.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::fuzz {
namespace {

using server::Labels;
using server::SeriesKey;

// pattern[0, i) matches text[0, j), row by row; O(|pattern| * |text|).
bool ReferenceGlob(absl::string_view pattern, absl::string_view text) {
  std::vector<char> row(text.size() + 1, 0), next(text.size() + 1, 0);
  row[0] = 1;  // the empty pattern matches the empty text
  for (char p : pattern) {
    next[0] = p == '*' && row[0];
    for (size_t j = 1; j <= text.size(); ++j) {
      if (p == '*') {
        next[j] = row[j] || next[j - 1];  // '*' matches nothing, or one more byte
      } else {
        next[j] = row[j - 1] && (p == '?' || p == text[j - 1]);
      }
    }
    row.swap(next);
  }
  return row[text.size()];
}

// Whether the reference can afford this pair.
bool SmallEnough(absl::string_view pattern, absl::string_view text) {
  return pattern.size() * (text.size() + 1) <= (1u << 20);
}

bool ReferenceNameMatches(absl::string_view selector, absl::string_view name) {
  if (selector.empty()) return true;
  if (selector.find_first_of("*?") == absl::string_view::npos) return selector == name;
  return ReferenceGlob(selector, name);
}

absl::string_view ReferenceLabel(const Labels& labels, absl::string_view key) {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return "";  // a missing label reads as ""
}

bool ReferenceMatches(const v1::Selector& selector, absl::string_view name, const Labels& labels) {
  if (!ReferenceNameMatches(selector.stat(), name)) return false;
  for (const v1::LabelMatcher& m : selector.labels()) {
    const absl::string_view actual = ReferenceLabel(labels, m.key());
    switch (m.op()) {
      case v1::NOT_EQUAL:
        if (actual == m.value()) return false;
        break;
      case v1::GLOB:
        if (!ReferenceGlob(m.value(), actual)) return false;
        break;
      default:  // EQUAL, and values no enum names, read as EQUAL
        if (actual != m.value()) return false;
        break;
    }
  }
  return true;
}

bool Affordable(const v1::Selector& selector) {
  if (!SmallEnough(selector.stat(), std::string(64, 'x'))) return false;
  for (const v1::LabelMatcher& m : selector.labels()) {
    if (!SmallEnough(m.value(), std::string(64, 'x'))) return false;
  }
  return true;
}

// A daemon holding a few series and events whose names and labels have
// what selectors trip over: glob characters, empty values, missing labels,
// prefixes of each other, multi-byte UTF-8.
struct World {
  std::vector<SeriesKey> keys;
  server::ManualClock clock{1'700'000'000'000};
  server::Aggregator aggregator{server::AggregatorOptions{}, clock};
  server::EventLog events{64, 60'000, clock};

  World() {
    const std::vector<std::string> names = {
        "train.loss", "train.loss_scale", "eval.loss", "a*b", "a?b", "", "ü.step", "train.",
        "*", "loss"};
    const std::vector<Labels> label_sets = {
        {},
        {{"rank", "0"}},
        {{"host", "node1"}, {"rank", "1"}},
        {{"job", ""}, {"rank", "10"}},
        {{"host", "n*"}, {"job", "j?"}, {"local_rank", "ä"}},
    };
    server::StatSpec spec;
    spec.aggregations = server::AggregationBit(server::Aggregation::kMean);
    spec.window_ms = 1000;
    for (size_t i = 0; i < names.size(); ++i) {
      for (size_t j = 0; j < label_sets.size(); ++j) {
        if ((i + j) % 3 == 0) continue;  // not every combination exists
        SeriesKey key{names[i], label_sets[j]};
        if (!key.stat.empty()) (void)aggregator.Define(key, spec);
        server::EventRecord event;
        event.name = key.stat;
        event.labels = label_sets[j];
        events.Append(event);
        keys.push_back(std::move(key));
      }
    }
  }
};

const World& TheWorld() {
  static const World* const world = new World();
  return *world;
}

void CheckSelector(const v1::Selector& proto) {
  if (!Affordable(proto)) return;
  const World& world = TheWorld();
  const server::Selector selector = server::SelectorFromProto(proto);
  size_t series_expected = 0, events_expected = 0;
  for (const SeriesKey& key : world.keys) {
    const bool expected = ReferenceMatches(proto, key.stat, key.labels.get());
    FUZZ_CHECK(selector.Matches(key) == expected, "Selector::Matches(", key.ToString(), ") is ",
               !expected, "; the reference says ", expected, " for ", proto.ShortDebugString());
    if (expected && !key.stat.empty()) ++series_expected;
    if (expected) ++events_expected;
  }
  // The queries use the same matcher; they must not lose or add anything.
  const auto listed = world.aggregator.ListSeries(selector);
  FUZZ_CHECK(listed.size() == series_expected, "ListSeries found ", listed.size(), ", expected ",
             series_expected);
  for (const auto& s : listed) {
    FUZZ_CHECK(ReferenceMatches(proto, s.key->stat, s.key->labels.get()), "ListSeries returned ",
               s.key->ToString());
  }
  const auto events = world.events.Get(selector, 0, 0);
  FUZZ_CHECK(events.size() == events_expected, "EventLog::Get found ", events.size(),
             ", expected ", events_expected);

  // Internal consistency: NOT_EQUAL is the negation of EQUAL; a GLOB without
  // wildcards is EQUAL.
  for (const v1::LabelMatcher& m : proto.labels()) {
    server::LabelMatcher eq{m.key(), m.value(), server::LabelMatcher::Op::kEqual};
    server::LabelMatcher ne{m.key(), m.value(), server::LabelMatcher::Op::kNotEqual};
    server::LabelMatcher glob{m.key(), m.value(), server::LabelMatcher::Op::kGlob};
    const bool literal = m.value().find_first_of("*?") == std::string::npos;
    for (const SeriesKey& key : world.keys) {
      FUZZ_CHECK(eq.Matches(key.labels.get()) != ne.Matches(key.labels.get()),
                 "EQUAL and NOT_EQUAL agree on ", key.ToString());
      if (literal) {
        FUZZ_CHECK(glob.Matches(key.labels.get()) == eq.Matches(key.labels.get()),
                   "a literal GLOB differs from EQUAL on ", key.ToString());
      }
    }
  }
}

void CheckLabels(const protocol::LabelList& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    FUZZ_CHECK(protocol::ValidateLabelKey(labels[i].first).ok(), "invalid key accepted: ",
               labels[i].first);
    FUZZ_CHECK(protocol::IsValidUtf8(labels[i].second), "invalid UTF-8 value accepted");
    for (size_t j = 0; j < i; ++j) {
      FUZZ_CHECK(labels[i].first != labels[j].first, "label ", labels[i].first, " twice");
    }
  }
}

// torchmonctl's selectors: the stat (exact or glob) and EQUAL matchers.
v1::Selector CliSelector(const std::string& stat, const protocol::LabelList& labels) {
  v1::Selector selector;
  selector.set_stat(stat);
  for (const auto& [key, value] : labels) {
    v1::LabelMatcher* m = selector.add_labels();
    m->set_key(key);
    m->set_value(value);
    m->set_op(v1::EQUAL);
  }
  return selector;
}

void FuzzCommandLine(absl::string_view input) {
  std::vector<std::string> args = absl::StrSplit(input, '\0');
  auto parsed = cli::ParseCommandLine(args, "unix:///tmp/fuzz.sock");
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty(), "usage error without a message");
    return;
  }
  // --help stops parsing where it stands: nothing else is filled in.
  if (std::holds_alternative<cli::HelpRequest>(parsed->command)) return;
  const cli::GlobalOptions& global = parsed->global;
  FUZZ_CHECK(!global.target.empty() && global.target[0] != '/', "target ", global.target);
  FUZZ_CHECK(global.timeout_ms > 0, "timeout ", global.timeout_ms);
  std::visit(
      [](const auto& command) {
        using T = std::decay_t<decltype(command)>;
        if constexpr (std::is_same_v<T, cli::SeriesCommand>) {
          FUZZ_CHECK(protocol::IsValidUtf8(command.stat_glob), "--stat not UTF-8");
          CheckLabels(command.labels);
          CheckSelector(CliSelector(command.stat_glob, command.labels));
        } else if constexpr (std::is_same_v<T, cli::WindowsCommand>) {
          FUZZ_CHECK(protocol::ValidateName("STAT", command.stat).ok(), "bad STAT accepted");
          FUZZ_CHECK(command.last >= 0, "--last ", command.last);
          FUZZ_CHECK(!command.since_ms.has_value() || *command.since_ms >= 0, "--since");
          CheckLabels(command.labels);
          CheckSelector(CliSelector(command.stat, command.labels));
        } else if constexpr (std::is_same_v<T, cli::EventsCommand> ||
                             std::is_same_v<T, cli::WatchCommand>) {
          CheckLabels(command.labels);
          if constexpr (std::is_same_v<T, cli::EventsCommand>) {
            CheckSelector(CliSelector(command.name, command.labels));
          } else {
            CheckSelector(CliSelector(command.stat, command.labels));
          }
        } else if constexpr (std::is_same_v<T, cli::PushCommand>) {
          FUZZ_CHECK(protocol::ValidateName("STAT", command.stat).ok(), "bad STAT accepted");
          FUZZ_CHECK(!command.values.empty(), "push without values");
          FUZZ_CHECK(protocol::ValidateSpec(command.spec).ok(), "invalid spec accepted: ",
                     command.spec.ShortDebugString());
          CheckLabels(command.labels);
        } else if constexpr (std::is_same_v<T, cli::EventCommand>) {
          FUZZ_CHECK(protocol::ValidateName("NAME", command.name).ok(), "bad NAME accepted");
          for (const auto& [key, value] : command.data) {
            FUZZ_CHECK(!key.empty() && protocol::IsValidUtf8(key), "bad data key accepted");
          }
          CheckLabels(command.labels);
        }
      },
      parsed->command);
}

void FuzzSelectorProto(absl::string_view input) {
  v1::Selector selector;
  if (!selector.ParseFromArray(input.data(), static_cast<int>(input.size()))) return;
  CheckSelector(selector);
}

void FuzzGlob(absl::string_view input) {
  const size_t nul = input.find('\0');
  const absl::string_view pattern = input.substr(0, nul);
  const absl::string_view text = nul == absl::string_view::npos ? "" : input.substr(nul + 1);
  const bool matched = server::GlobMatch(pattern, text);
  if (SmallEnough(pattern, text)) {
    FUZZ_CHECK(matched == ReferenceGlob(pattern, text), "GlobMatch(\"", pattern, "\", \"", text,
               "\") is ", matched);
  }
}

void FuzzTextForms(absl::string_view input) {
  if (auto labels = protocol::ParseLabelList(input); labels.ok()) CheckLabels(*labels);
  if (auto ms = protocol::ParseDurationMs(input); ms.ok()) {
    FUZZ_CHECK(*ms >= 0, "negative duration ", *ms);
    auto again = protocol::ParseDurationMs(protocol::FormatDurationMs(*ms));
    FUZZ_CHECK(again.ok() && *again == *ms, "duration ", *ms, " prints as ",
               protocol::FormatDurationMs(*ms), " which does not read back");
  }
  if (auto aggregations = protocol::ParseAggregationList(input); aggregations.ok()) {
    FUZZ_CHECK(!aggregations->empty(), "empty aggregation list accepted");
    for (const protocol::NamedAggregation& a : *aggregations) {
      if (a.aggregation == v1::QUANTILE) {
        FUZZ_CHECK(a.quantile > 0 && a.quantile < 1, "quantile ", a.quantile);
        // The name a quantile is shown by parses back to the same quantile.
        auto again = protocol::ParseAggregation(protocol::QuantileName(a.quantile));
        FUZZ_CHECK(again.ok() && *again == a, "quantile name round trip ", a.quantile);
      } else {
        FUZZ_CHECK(a.aggregation >= v1::VALUE && a.aggregation <= v1::MIN, "aggregation ",
                   a.aggregation);
      }
    }
  }
  if (auto value = cli::ParseSampleValue(input); value.ok()) {
    FUZZ_CHECK(!std::isinf(*value) || input.find_first_of("iI") != absl::string_view::npos,
               "\"", input, "\" overflowed to infinity");
  }
  const EventValue value = cli::InferEventValue(input);
  if (const auto* s = std::get_if<std::string>(&value)) {
    FUZZ_CHECK(*s == input, "a string event value changed");
  }
}

}  // namespace
}  // namespace torchmon::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace torchmon::fuzz;
  // Protobuf logs every string field that is not UTF-8 as it refuses the
  // message; at thousands of inputs a second that is just noise.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (size == 0) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: FuzzCommandLine(input); break;
    case 1: FuzzSelectorProto(input); break;
    case 2: FuzzGlob(input); break;
    case 3: FuzzTextForms(input); break;
  }
  return 0;
}
