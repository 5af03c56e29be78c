// torchmon-demo: a stand-in for one rank of a training job. It records the
// stats a real loop would (loss, step time, learning rate, throughput,
// gradient norm) through the C++ client, and logs an epoch_end event every
// `--steps-per-epoch` steps. Run one per rank with RANK set.
//
//   RANK=0 torchmon-demo --target unix:///tmp/torchmon-demo/torchmond.sock
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "torchmon/client.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct DemoOptions {
  std::string target;
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
  int steps_per_second = 50;
  int steps_per_epoch = 500;
  int window_ms = 1000;
};

bool Parse(int argc, char** argv, DemoOptions& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--target" && (v = value())) {
      o.target = v;
    } else if (arg == "--duration" && (v = value())) {
      o.duration_s = std::atof(v);
    } else if (arg == "--steps-per-second" && (v = value())) {
      o.steps_per_second = std::max(1, std::atoi(v));
    } else if (arg == "--steps-per-epoch" && (v = value())) {
      o.steps_per_epoch = std::max(1, std::atoi(v));
    } else if (arg == "--window-ms" && (v = value())) {
      o.window_ms = std::atoi(v);
    } else {
      std::cerr << "usage: torchmon-demo [--target ADDR] [--duration SECONDS] "
                   "[--steps-per-second N] [--steps-per-epoch N] [--window-ms MS]\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  DemoOptions opts;
  if (!Parse(argc, argv, opts)) return 2;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  torchmon::ClientOptions client_options;
  client_options.target = opts.target;
  client_options.client_name = "torchmon-demo";
  torchmon::Client client(client_options);

  using torchmon::Aggregation;
  const std::chrono::milliseconds window(opts.window_ms);
  torchmon::Stat loss(client, "train.loss", {Aggregation::MEAN, Aggregation::MIN, Aggregation::MAX},
                      window);
  torchmon::Stat step_time(client, "train.step_time_ms",
                           {Aggregation::MEAN, Aggregation::MAX, Aggregation::COUNT,
                            torchmon::Quantile(0.5), torchmon::Quantile(0.99)},
                           window);
  torchmon::Stat lr(client, "train.lr", {Aggregation::VALUE}, window);
  torchmon::Stat throughput(client, "train.samples_per_second", {Aggregation::MEAN}, window);
  torchmon::Stat grad_norm(client, "train.grad_norm", {Aggregation::MEAN, Aggregation::MAX},
                           window, /*max_samples=*/1000);

  const char* rank_env = std::getenv("RANK");
  const int rank = rank_env != nullptr ? std::atoi(rank_env) : 0;
  std::mt19937 rng(static_cast<unsigned>(rank) * 7919u + 1u);
  std::normal_distribution<double> noise(0.0, 1.0);
  const auto step_period = std::chrono::microseconds(1000000 / opts.steps_per_second);
  const auto start = std::chrono::steady_clock::now();
  constexpr int kBatchSize = 64;

  std::cerr << "torchmon-demo rank " << rank << ": sending to " << client.target() << "\n";
  for (int64_t step = 0; !g_stop; ++step) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (opts.duration_s > 0 && elapsed >= std::chrono::duration<double>(opts.duration_s)) break;
    // A slowly decaying loss, a slightly slower rank 3, a cosine schedule.
    const double t = static_cast<double>(step);
    const double step_ms = 20.0 + (rank == 3 ? 4.0 : 0.0) + std::abs(noise(rng)) * 2.0;
    loss.add(2.5 * std::exp(-t / 3000.0) + 0.1 + 0.05 * noise(rng));
    step_time.add(step_ms);
    lr.add(1e-3 * 0.5 * (1 + std::cos(M_PI * std::fmod(t, 10000.0) / 10000.0)));
    throughput.add(kBatchSize * 1000.0 / step_ms);
    grad_norm.add(1.0 + 0.2 * std::abs(noise(rng)));
    if (step > 0 && step % opts.steps_per_epoch == 0) {
      client.LogEvent(torchmon::Event(
          "epoch_end", {{"epoch", int64_t{step / opts.steps_per_epoch}},
                        {"loss", 2.5 * std::exp(-t / 3000.0) + 0.1},
                        {"checkpoint", std::string("ckpt-") + std::to_string(step)}}));
    }
    std::this_thread::sleep_until(start + (step + 1) * step_period);
  }
  if (absl::Status s = client.Flush(std::chrono::seconds(5)); !s.ok()) {
    std::cerr << "torchmon-demo: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
