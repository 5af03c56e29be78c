// Checks that the TSan build sees absl::Mutex: run as
//   tsan_canary guarded     two threads share data under an absl::Mutex and
//                           hand it over with an absl::CondVar: no report
//                           (without tsan_absl_mutex.cc TSan reports races)
//   tsan_canary await       the same, handed over by Mutex::Await (and
//   tsan_canary await_with_timeout      its two bounded forms): no report
//   tsan_canary await_with_deadline     (without their annotation TSan
//                           believes the waiter holds the mutex throughout
//                           and reports a double lock)
//   tsan_canary await_beside_condvar    an Await's predicate evaluated by
//                           a thread entering a CondVar wait on the same
//                           mutex: no report
//   tsan_canary signal_while_waiting    a signal sent to the process
//                           while its one thread able to take it waits on a
//                           CondVar is handled (TSan held it back, for as
//                           long as the wait lasted, on that thread)
//   tsan_canary unguarded   the same writes without the lock: TSan must
//                           report a data race (the annotations hide nothing)
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

struct Shared {
  absl::Mutex mu;
  absl::CondVar handed_over;
  bool ready = false;
  long counter = 0;

  // An instrumented predicate reading guarded data, as ours are.
  bool Ready() const { return ready; }
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

// The waiter holds the lock when the producer starts, so the producer's
// first Lock returns only once the Await has released it.
int Awaited(const std::string& how) {
  auto owned = std::make_unique<Shared>();
  Shared& s = *owned;
  std::thread producer;
  {
    absl::MutexLock lock(&s.mu);
    producer = std::thread([&] {
      for (int i = 0; i < 1000; ++i) {
        absl::MutexLock lock(&s.mu);
        ++s.counter;
      }
      absl::MutexLock lock(&s.mu);
      s.ready = true;
    });
    const absl::Condition ready(&s, &Shared::Ready);
    if (how == "await") {
      s.mu.Await(ready);
    } else if (how == "await_with_timeout") {
      if (!s.mu.AwaitWithTimeout(ready, absl::Seconds(60))) return 1;
    } else if (!s.mu.AwaitWithDeadline(ready, absl::Now() + absl::Seconds(60))) {
      return 1;
    }
    if (s.counter != 1000) return 1;
    s.ready = false;  // a write after the producer's last one, lock held
  }
  producer.join();
  return 0;
}

// Abseil evaluates the predicate of an Await on whichever thread releases the
// mutex, to decide whom to hand it to: here a thread that enters a CondVar
// wait. That read happens while the mutex is really held, and must not be
// taken for one after the release.
int AwaitBesideCondVar() {
  auto owned = std::make_unique<Shared>();
  Shared& s = *owned;
  std::thread other;
  {
    absl::MutexLock lock(&s.mu);
    other = std::thread([&] {
      absl::MutexLock lock(&s.mu);  // once the Await below has released it
      s.ready = true;
      // Releases the mutex: Abseil evaluates Ready() for the Await here.
      s.handed_over.WaitWithTimeout(&s.mu, absl::Milliseconds(100));
    });
    s.mu.Await(absl::Condition(&s, &Shared::Ready));
    s.ready = false;  // a write after the other thread's read of it
  }
  other.join();
  return 0;
}

std::atomic<bool> handled{false};  // atomic: the handler may run on another thread

// Whether thread `tid` of this process is blocked in a futex wait.
bool InFutexWait(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return in >> number && number == SYS_futex;
}

// The process gets SIGUSR1 while the only thread not blocking it waits on a
// CondVar, as torchmond got SIGTERM while all but idle gRPC threads were
// busy. The main thread then unblocks it, and must see it handled.
int SignalWhileWaiting() {
  struct sigaction action = {};
  action.sa_handler = [](int) { handled.store(true); };
  sigaction(SIGUSR1, &action, nullptr);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);

  auto owned = std::make_unique<Shared>();
  Shared& s = *owned;
  std::atomic<pid_t> waiter_tid{0};
  std::thread waiter([&] {
    pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
    absl::MutexLock lock(&s.mu);
    waiter_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    while (!s.ready) s.handed_over.Wait(&s.mu);
  });
  while (waiter_tid.load() == 0) std::this_thread::yield();
  // Once the waiter sleeps in Abseil's futex wait (as gRPC's idle threads do).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!InFutexWait(waiter_tid.load())) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "the waiter never blocked in a futex wait\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(getpid(), SIGUSR1);
  // Until the kernel has handed it to a thread that does not block it, if
  // one does within 200 ms; else it stays pending for this one.
  const auto taken_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (;;) {
    sigset_t pending;
    sigpending(&pending);
    if (!sigismember(&pending, SIGUSR1) || std::chrono::steady_clock::now() > taken_by) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);  // no sooner
  while (!handled.load() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool in_time = handled.load();
  {
    absl::MutexLock lock(&s.mu);
    s.ready = true;
    s.handed_over.Signal();
  }
  waiter.join();
  if (!in_time) std::fprintf(stderr, "SIGUSR1 not handled within 5 s\n");
  return in_time ? 0 : 1;
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
  if (argc == 2 && std::strcmp(argv[1], "await_beside_condvar") == 0) return AwaitBesideCondVar();
  if (argc == 2 && std::strcmp(argv[1], "signal_while_waiting") == 0) return SignalWhileWaiting();
  if (argc == 2 && (std::strcmp(argv[1], "await") == 0 ||
                    std::strcmp(argv[1], "await_with_timeout") == 0 ||
                    std::strcmp(argv[1], "await_with_deadline") == 0)) {
    return Awaited(argv[1]);
  }
  std::fprintf(stderr,
               "usage: %s guarded|await|await_with_timeout|await_with_deadline|"
               "await_beside_condvar|signal_while_waiting|unguarded\n",
               argv[0]);
  return 2;
}
