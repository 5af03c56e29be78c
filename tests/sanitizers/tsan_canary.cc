// Checks that the TSan build sees absl::Mutex: run as
//   tsan_canary guarded     two threads share data under an absl::Mutex and
//                           hand it over with an absl::CondVar: no report
//                           (without tsan_absl_mutex.cc TSan reports races)
//   tsan_canary unguarded   the same writes without the lock: TSan must
//                           report a data race (the annotations hide nothing)
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

struct Shared {
  absl::Mutex mu;
  absl::CondVar handed_over;
  bool ready = false;
  long counter = 0;
};

// On the heap: the compiler keeps a local whose address does not escape
// in ways it can see out of TSan's instrumentation altogether.
int Guarded() {
  auto owned = std::make_unique<Shared>();
  Shared& s = *owned;
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) {
      absl::MutexLock lock(&s.mu);
      ++s.counter;
    }
    absl::MutexLock lock(&s.mu);
    s.ready = true;
    s.handed_over.Signal();
  });
  {
    absl::MutexLock lock(&s.mu);
    while (!s.ready) s.handed_over.WaitWithTimeout(&s.mu, absl::Seconds(1));
  }
  // Read without the lock, after the hand-over: ordered by the CondVar wait.
  const long seen = s.counter;
  {
    absl::ReaderMutexLock lock(&s.mu);
    if (s.counter != seen) return 1;
  }
  producer.join();
  return seen == 1000 ? 0 : 1;
}

int Unguarded() {
  auto owned = std::make_unique<Shared>();
  Shared& s = *owned;
  // A relaxed flag orders the two writes in time without ordering them for
  // TSan (relaxed atomics synchronize nothing), so the race is reported
  // every run, not only when the threads happen to interleave.
  std::atomic<bool> written{false};
  std::thread other([&] {
    ++s.counter;
    written.store(true, std::memory_order_relaxed);
  });
  while (!written.load(std::memory_order_relaxed)) std::this_thread::yield();
  ++s.counter;
  other.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "guarded") == 0) return Guarded();
  if (argc == 2 && std::strcmp(argv[1], "unguarded") == 0) return Unguarded();
  std::fprintf(stderr, "usage: %s guarded|unguarded\n", argv[0]);
  return 2;
}
