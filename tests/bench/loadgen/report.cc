#include "loadgen/report.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "torchmon/protocol/json.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::loadgen {
namespace {

constexpr size_t kMaxClientErrors = 5;

using protocol::JsonString;
using SeriesId = std::pair<std::string, std::string>;  // rank label, stat name

std::string LabelOr(const v1::SeriesKey& key, const std::string& name) {
  const auto it = key.labels().find(name);
  return it == key.labels().end() ? "" : it->second;
}

void AddProblem(Report& report, std::string problem) {
  if (report.problems.size() < kMaxProblems) {
    report.problems.push_back(std::move(problem));
  } else {
    ++report.problems_omitted;
  }
}

double PerSecond(uint64_t n, double seconds) {
  return seconds > 0 ? static_cast<double>(n) / seconds : 0;
}

// CPU seconds per million samples; negative when unknown.
double CpuPerMillion(double cpu_seconds, uint64_t samples) {
  if (cpu_seconds < 0 || samples == 0) return -1;
  return cpu_seconds / (static_cast<double>(samples) / 1e6);
}

// 12,345,678
std::string Grouped(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Rate(double per_second) { return Grouped(static_cast<uint64_t>(per_second + 0.5)); }

std::string JsonNumber(double v) { return v < 0 ? "null" : absl::StrFormat("%.6g", v); }

std::string AggregationNames(const LoadgenOptions& options) {
  std::vector<std::string> names;
  for (const StatAggregation& a : options.aggregations) {
    names.push_back(protocol::AggregationName(protocol::NamedAggregation{
        protocol::AggregationAs<v1::Aggregation>(a.aggregation), a.quantile}));
  }
  return absl::StrJoin(names, ",");
}

}  // namespace

Report BuildReport(const std::string& job, const std::vector<RankResult>& ranks,
                   const v1::ListSeriesResponse& series, const Measurements& measurements) {
  Report report;
  report.job = job;
  report.measurements = measurements;

  std::map<SeriesId, uint64_t> sent_by_series;
  for (const RankResult& rank : ranks) {
    for (const auto& [stat, added] : rank.added) {
      sent_by_series[{absl::StrCat(rank.rank), stat}] += added;
      report.sent += added;
    }
    report.client_dropped += rank.client_dropped;
    report.produce_seconds = std::max(report.produce_seconds, rank.produce_seconds);
    report.total_seconds = std::max(report.total_seconds, rank.total_seconds);
    if (!rank.flush_error.empty()) {
      AddProblem(report,
                 absl::StrCat("rank ", rank.rank, ": final flush incomplete: ", rank.flush_error));
    }
    report.client_error_count += rank.errors.size();
    for (const std::string& error : rank.errors) {
      if (report.client_errors.size() < kMaxClientErrors) {
        report.client_errors.push_back(absl::StrCat("rank ", rank.rank, ": ", error));
      }
    }
  }
  report.series_expected = sent_by_series.size();

  for (const v1::SeriesInfo& info : series.series()) {
    const v1::SeriesCounters& c = info.counters();
    report.accepted += c.accepted();
    report.capped += c.capped();
    report.late += c.late();
    report.skewed += c.skewed();
    report.daemon_client_dropped += c.client_dropped();
    const uint64_t counted = c.accepted() + c.capped() + c.late() + c.skewed() + c.client_dropped();
    const std::string rank = LabelOr(info.series(), "rank");
    const std::string& stat = info.series().stat();
    const auto it = sent_by_series.find({rank, stat});
    if (it == sent_by_series.end()) {
      ++report.mismatched_series;
      AddProblem(report, absl::StrCat("unexpected series ", stat, "{rank=", rank,
                                      "} at the daemon, counting ", counted, " samples"));
      continue;
    }
    ++report.series_found;
    const uint64_t sent = it->second;
    sent_by_series.erase(it);
    if (sent != counted) {
      ++report.mismatched_series;
      AddProblem(
          report,
          absl::StrCat(stat, "{rank=", rank, "}: sent ", sent, " != counted ", counted,
                       " (accepted ", c.accepted(), " capped ", c.capped(), " late ", c.late(),
                       " skewed ", c.skewed(), " client_dropped ", c.client_dropped(), "); ",
                       sent > counted ? absl::StrCat(sent - counted, " lost uncounted")
                                      : absl::StrCat(counted - sent, " counted twice")));
    }
  }
  for (const auto& [id, sent] : sent_by_series) {
    ++report.mismatched_series;
    AddProblem(report, absl::StrCat(id.second, "{rank=", id.first, "}: sent ", sent,
                                    " but the daemon has no such series"));
  }
  return report;
}

std::string FormatText(const LoadgenOptions& options, const Report& r) {
  const Measurements& m = r.measurements;
  const uint64_t dropped = r.capped + r.late + r.skewed + r.daemon_client_dropped;
  std::string out = absl::StrCat("torchmon-loadgen  job=", r.job, "  target=", m.target, "\n");
  if (options.sync_job) {
    absl::StrAppend(
        &out, "  load         a synchronous job: ranks ", options.first_rank, " to ",
        options.first_rank + options.ranks - 1, " of ", options.world, ", a step every ",
        protocol::FormatDurationMs(options.step_ms), " (compute ",
        protocol::FormatDurationMs(options.compute_ms), ", noise ", options.noise,
        ", rank spread ", options.rank_spread, "; comm ", protocol::FormatDurationMs(options.comm_ms),
        "), seed ", options.seed, "; window ", protocol::FormatDurationMs(options.window_ms), "\n");
    absl::StrAppend(&out, "  offered      2 samples a rank a step for ",
                    protocol::FormatDurationMs(options.duration_ms), "; straggler ",
                    options.straggler
                        ? absl::StrCat("rank ", options.straggler->rank, " x",
                                       options.straggler->factor, " from step ",
                                       options.straggler->from_step)
                        : !options.straggler_file.empty()
                              ? absl::StrCat("from ", options.straggler_file)
                              : std::string("none"),
                    "\n");
  } else {
    absl::StrAppend(
        &out, "  load         ", options.ranks, " ranks (",
        options.processes ? "processes" : "threads", ") x ", options.threads_per_rank,
        " threads x ", options.stats / options.threads_per_rank,
        options.stats % options.threads_per_rank != 0 ? "+" : "", " stats = ",
        options.ranks * options.stats, " series; window ",
        protocol::FormatDurationMs(options.window_ms), ", aggs ", AggregationNames(options),
        ", buffer ", options.buffer_bytes, " bytes\n");
    absl::StrAppend(&out, "  offered      ",
                    options.rate > 0 ? absl::StrCat(Rate(options.rate), " samples/s")
                                     : std::string("flat out"),
                    " for ", protocol::FormatDurationMs(options.duration_ms), "\n");
  }
  absl::StrAppendFormat(&out, "  sent         %s samples/s  (%s samples in %.3f s)\n",
                        Rate(PerSecond(r.sent, r.produce_seconds)), Grouped(r.sent),
                        r.produce_seconds);
  absl::StrAppendFormat(
      &out, "  accepted     %s samples/s  (%s samples in %.3f s incl. final flush)\n",
      Rate(PerSecond(r.accepted, r.total_seconds)), Grouped(r.accepted), r.total_seconds);
  absl::StrAppend(&out, "  not accepted ", Grouped(dropped), ": capped ", Grouped(r.capped),
                  ", late ", Grouped(r.late), ", skewed ", Grouped(r.skewed), ", client_dropped ",
                  Grouped(r.daemon_client_dropped), " (clients counted ", Grouped(r.client_dropped),
                  ")\n");
  auto cpu_line = [&](const char* who, double seconds, const std::string& note) {
    if (seconds < 0) return absl::StrCat("  ", who, "n/a", note, "\n");
    return absl::StrFormat("  %s%.3f s/M samples  (%.2f CPU s over %.3f s = %.2f cores)%s\n", who,
                           CpuPerMillion(seconds, r.sent), seconds, r.total_seconds,
                           r.total_seconds > 0 ? seconds / r.total_seconds : 0.0, note);
  };
  absl::StrAppend(&out, "  machine      ", m.machine_line, "\n");
  absl::StrAppend(&out, cpu_line("client CPU   ", m.client_cpu_seconds, ""));
  absl::StrAppend(&out, cpu_line("daemon CPU   ", m.daemon_cpu_seconds,
                                 m.daemon_pid > 0 ? absl::StrCat("  pid ", m.daemon_pid)
                                                  : std::string(" (give --daemon-pid)")));
  if (m.daemon_peak_rss_bytes > 0) {
    absl::StrAppendFormat(&out, "  daemon RSS   peak %.1f MiB (now %.1f MiB)\n",
                          static_cast<double>(m.daemon_peak_rss_bytes) / (1 << 20),
                          static_cast<double>(m.daemon_rss_bytes) / (1 << 20));
  } else {
    absl::StrAppend(&out, "  daemon RSS   n/a\n");
  }
  if (r.exact()) {
    absl::StrAppend(&out, "  accounting   EXACT: ", r.series_found, "/", r.series_expected,
                    " series, sent = accepted + capped + late + skewed + client_dropped\n");
  } else {
    absl::StrAppend(&out, "  accounting   MISMATCH: ", r.mismatched_series, " of ",
                    r.series_expected, " series; total sent ", r.sent, ", counted ",
                    r.accepted + dropped, "\n");
    for (const std::string& p : r.problems) absl::StrAppend(&out, "    ", p, "\n");
    if (r.problems_omitted > 0) {
      absl::StrAppend(&out, "    ... and ", r.problems_omitted, " more\n");
    }
  }
  if (r.client_error_count > 0) {
    absl::StrAppend(&out, "  refusals     ", r.client_error_count, " from the daemon, e.g.:\n");
    for (const std::string& e : r.client_errors) absl::StrAppend(&out, "    ", e, "\n");
  }
  return out;
}

std::string FormatJson(const LoadgenOptions& options, const Report& r) {
  const Measurements& m = r.measurements;
  std::vector<std::string> problems;
  for (const std::string& p : r.problems) problems.push_back(JsonString(p));
  std::vector<std::string> errors;
  for (const std::string& e : r.client_errors) errors.push_back(JsonString(e));
  std::string out = absl::StrCat(
      "{\"job\":", JsonString(r.job), ",\"target\":", JsonString(m.target),
      ",\"config\":{\"ranks\":", options.ranks,
      ",\"mode\":", options.sync_job ? "\"sync_job\"" : options.processes ? "\"processes\"" : "\"threads\"",
      ",\"stats_per_rank\":", options.stats, ",\"threads_per_rank\":", options.threads_per_rank,
      ",\"rate\":", JsonNumber(options.rate), ",\"duration_ms\":", options.duration_ms,
      ",\"window_ms\":", options.window_ms, ",\"aggs\":", JsonString(AggregationNames(options)),
      ",\"max_samples\":", options.max_samples, ",\"buffer_bytes\":", options.buffer_bytes,
      "},\"machine\":", m.machine_json);
  absl::StrAppend(&out, ",\"sent\":", r.sent, ",\"accepted\":", r.accepted,
                  ",\"capped\":", r.capped, ",\"late\":", r.late, ",\"skewed\":", r.skewed,
                  ",\"client_dropped\":", r.daemon_client_dropped,
                  ",\"client_dropped_by_clients\":", r.client_dropped,
                  ",\"produce_seconds\":", JsonNumber(r.produce_seconds),
                  ",\"total_seconds\":", JsonNumber(r.total_seconds),
                  ",\"sent_per_second\":", JsonNumber(PerSecond(r.sent, r.produce_seconds)),
                  ",\"accepted_per_second\":", JsonNumber(PerSecond(r.accepted, r.total_seconds)));
  absl::StrAppend(
      &out, ",\"client_cpu_seconds\":", JsonNumber(m.client_cpu_seconds),
      ",\"client_cpu_seconds_per_million\":",
      JsonNumber(CpuPerMillion(m.client_cpu_seconds, r.sent)),
      ",\"daemon_pid\":", m.daemon_pid > 0 ? absl::StrCat(m.daemon_pid) : "null",
      ",\"daemon_cpu_seconds\":", JsonNumber(m.daemon_cpu_seconds),
      ",\"daemon_cpu_seconds_per_million\":",
      JsonNumber(CpuPerMillion(m.daemon_cpu_seconds, r.sent)), ",\"daemon_peak_rss_bytes\":",
      m.daemon_peak_rss_bytes > 0 ? absl::StrCat(m.daemon_peak_rss_bytes) : "null",
      ",\"daemon_rss_bytes\":", m.daemon_rss_bytes > 0 ? absl::StrCat(m.daemon_rss_bytes) : "null");
  absl::StrAppend(&out, ",\"series_expected\":", r.series_expected,
                  ",\"series_found\":", r.series_found,
                  ",\"mismatched_series\":", r.mismatched_series,
                  ",\"exact\":", r.exact() ? "true" : "false", ",\"problems\":[",
                  absl::StrJoin(problems, ","), "],\"problems_omitted\":", r.problems_omitted,
                  ",\"client_error_count\":", r.client_error_count, ",\"client_errors\":[",
                  absl::StrJoin(errors, ","), "]}\n");
  return out;
}

}  // namespace torchmon::loadgen
