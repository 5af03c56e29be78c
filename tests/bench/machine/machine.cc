#include "machine/machine.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "torchmon/protocol/json.h"

namespace torchmon::bench {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

// "1024K" / "32M" as sysfs writes cache sizes.
uint64_t ParseCacheSize(absl::string_view text) {
  if (text.empty()) return 0;
  uint64_t scale = 1;
  if (text.back() == 'K') scale = 1024;
  if (text.back() == 'M') scale = 1024 * 1024;
  if (scale != 1) text.remove_suffix(1);
  uint64_t n = 0;
  return absl::SimpleAtoi(text, &n) ? n * scale : 0;
}

std::string Bytes(uint64_t n) {
  if (n >= (uint64_t{1} << 20) && n % (uint64_t{1} << 20) == 0) {
    return absl::StrCat(n >> 20, " MiB");
  }
  return absl::StrCat(n >> 10, " KiB");
}

}  // namespace

Machine DescribeMachine() {
  Machine m;
  m.cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (key == "model name" && m.cpu_model == "unknown") m.cpu_model = std::string(value);
    if (key == "flags") {
      for (absl::string_view flag : absl::StrSplit(value, ' ')) {
        if (flag == "hypervisor") m.hypervisor = true;
      }
      break;  // the first processor's lines say it all
    }
  }
  m.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (int index = 0; index < 8; ++index) {
    const std::string dir = absl::StrCat("/sys/devices/system/cpu/cpu0/cache/index", index);
    const std::string level = ReadFirstLine(dir + "/level");
    if (level.empty()) continue;
    const uint64_t size = ParseCacheSize(ReadFirstLine(dir + "/size"));
    if (level == "2") m.l2_bytes = size;
    if (level == "3") m.l3_bytes = size;
  }
  m.clocksource =
      ReadFirstLine("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  if (m.clocksource.empty()) m.clocksource = "unknown";
  return m;
}

std::string MachineLine(const Machine& m) {
  std::string out = absl::StrCat(m.cpu_model, ", ", m.cpus, " CPUs");
  if (m.l2_bytes != 0) absl::StrAppend(&out, ", L2 ", Bytes(m.l2_bytes));
  if (m.l3_bytes != 0) absl::StrAppend(&out, ", L3 ", Bytes(m.l3_bytes));
  absl::StrAppend(&out, ", clocksource ", m.clocksource);
  if (m.hypervisor) absl::StrAppend(&out, ", VM");
  return out;
}

std::string MachineJson(const Machine& m) {
  return absl::StrCat("{\"cpu_model\":", protocol::JsonString(m.cpu_model), ",\"cpus\":", m.cpus,
                      ",\"l2_bytes\":", m.l2_bytes, ",\"l3_bytes\":", m.l3_bytes,
                      ",\"clocksource\":", protocol::JsonString(m.clocksource),
                      ",\"vm\":", m.hypervisor ? "true" : "false", "}");
}

}  // namespace torchmon::bench
