#include "loadgen/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace torchmon::loadgen {
namespace {

double Seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
}

absl::StatusOr<std::string> ReadProcFile(pid_t pid, const char* name) {
  const std::string path = absl::StrCat("/proc/", pid, "/", name);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return Seconds(usage.ru_utime) + Seconds(usage.ru_stime);
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  absl::StatusOr<std::string> stat = ReadProcFile(pid, "stat");
  if (!stat.ok()) return stat.status();
  // The command name (field 2) is parenthesised and may hold spaces; the
  // fields after its closing parenthesis start with field 3 (state).
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("unparseable /proc/", pid, "/stat"));
  }
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::NotFoundError(absl::StrCat("unparseable /proc/", pid, "/stat"));
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid) {
  absl::StatusOr<std::string> status = ReadProcFile(pid, "status");
  if (!status.ok()) return status.status();
  ProcessMemory memory;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    uint64_t* field = nullptr;
    if (absl::ConsumePrefix(&line, "VmHWM:")) {
      field = &memory.peak_rss_bytes;
    } else if (absl::ConsumePrefix(&line, "VmRSS:")) {
      field = &memory.current_rss_bytes;
    } else {
      continue;
    }
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    uint64_t kib = 0;
    if (absl::SimpleAtoi(line, &kib)) *field = kib * 1024;
  }
  return memory;
}

}  // namespace torchmon::loadgen
