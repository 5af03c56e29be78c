// consumer TARGET STAT_NAME [WINDOW_MS]: records 1..100 into a stat (windows
// of WINDOW_MS, default 60000) and one event, then flushes. Built out of tree
// against an installed torchmon (tests/install/test_install.py), once with
// find_package and once with pkg-config; the test reads back what the
// daemon aggregated with the installed torchmonctl.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "torchmon/client.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: consumer TARGET STAT_NAME [WINDOW_MS]\n");
    return 2;
  }
  const std::chrono::milliseconds window(argc == 4 ? std::atoll(argv[3]) : 60000);
  torchmon::ClientOptions options;
  options.target = argv[1];
  options.labels = {{"built_with", "installed"}};
  options.labels_from_environment = false;
  torchmon::Client client(options);
  torchmon::Stat stat(client, argv[2],
                      {torchmon::Aggregation::SUM, torchmon::Aggregation::COUNT,
                       torchmon::Aggregation::MAX, torchmon::Quantile(0.5),
                       torchmon::Quantile(0.99)},
                      window);
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
