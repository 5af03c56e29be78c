// consumer TARGET STAT_NAME: records 1..100 into a stat and one event, then
// flushes. Built out of tree against an installed torchmon
// (tests/install/test_install.py), once with find_package and once with
// pkg-config.
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "torchmon/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer TARGET STAT_NAME\n");
    return 2;
  }
  torchmon::ClientOptions options;
  options.target = argv[1];
  options.labels = {{"built_with", "installed"}};
  options.labels_from_environment = false;
  torchmon::Client client(options);
  torchmon::Stat stat(client, argv[2],
                      {torchmon::Aggregation::SUM, torchmon::Aggregation::COUNT,
                       torchmon::Aggregation::MAX, torchmon::Quantile(0.5)},
                      std::chrono::seconds(60));
  for (int i = 1; i <= 100; ++i) stat.add(static_cast<double>(i));
  client.LogEvent(torchmon::Event("consumer_done", {{"samples", int64_t{100}}}));
  const absl::Status status = client.Flush(std::chrono::seconds(10));
  if (!status.ok()) {
    std::fprintf(stderr, "flush: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::printf("added=%llu dropped=%llu\n", static_cast<unsigned long long>(stat.added()),
              static_cast<unsigned long long>(stat.dropped()));
  return 0;
}
