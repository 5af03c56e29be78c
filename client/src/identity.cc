#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "torchmon/client.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon {
namespace {

void Set(Labels& labels, std::string_view key, std::string_view value) {
  for (auto& [k, v] : labels) {
    if (k == key) {
      v = std::string(value);
      return;
    }
  }
  labels.emplace_back(std::string(key), std::string(value));
}

}  // namespace

Labels IdentityLabelsFromEnvironment() {
  Labels labels;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' && protocol::IsValidUtf8(host)) {
    Set(labels, "host", host);
  }

  // Later entries override earlier ones: torchrun's view of the job is more
  // specific than the SLURM allocation it runs in.
  struct EnvLabel {
    const char* variable;
    const char* key;
  };
  static constexpr EnvLabel kEnvLabels[] = {
      {"SLURM_JOB_ID", "job"},        {"SLURM_PROCID", "rank"}, {"SLURM_LOCALID", "local_rank"},
      {"TORCHELASTIC_RUN_ID", "job"}, {"RANK", "rank"},         {"LOCAL_RANK", "local_rank"},
  };
  for (const EnvLabel& env : kEnvLabels) {
    const char* value = std::getenv(env.variable);
    if (value == nullptr || *value == '\0' || !protocol::IsValidUtf8(value)) continue;
    // torchrun without --rdzv_id sets the run id to the literal "none",
    // which must not hide SLURM's job id.
    if (std::string_view(env.variable) == "TORCHELASTIC_RUN_ID" &&
        std::string_view(value) == "none") {
      continue;
    }
    Set(labels, env.key, value);
  }

  // Entry by entry, so one typo does not throw away the other labels.
  if (const char* text = std::getenv("TORCHMON_LABELS"); text != nullptr) {
    std::vector<std::string> errors;
    for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
      auto label = protocol::ParseLabel(entry);
      if (label.ok()) {
        Set(labels, label->first, label->second);
      } else {
        errors.emplace_back(label.status().message());
      }
    }
    static std::atomic<bool> reported{false};
    if (!errors.empty() && !reported.exchange(true)) {
      std::fprintf(stderr, "torchmon: ignoring invalid TORCHMON_LABELS entries: %s\n",
                   absl::StrJoin(errors, "; ").c_str());
    }
  }
  return labels;
}

}  // namespace torchmon
