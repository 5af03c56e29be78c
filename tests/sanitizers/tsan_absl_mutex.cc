// ThreadSanitizer annotations for Debian's uninstrumented absl::Mutex.
//
// Why: absl::Mutex and absl::CondVar are implemented in
// libabsl_synchronization.so with their own atomics and futex calls. Built
// without -fsanitize=thread, that library never tells TSan that a Lock
// acquires or an Unlock releases, so TSan sees no happens-before edge
// between two critical sections and reports every ABSL_GUARDED_BY member as
// a race. Abseil built with TSan brackets each of these calls with the
// __tsan_mutex_* annotations; Debian's is not built that way.
//
// What: this file defines the public entry points that our code and gRPC
// call (checked by the tsan_absl_interposition test: `nm` on the binaries,
// and each exercised by tsan_canary),
// adds exactly the annotations Abseil's own TSan build adds around them, and
// calls the real implementation found with dlsym. Linked into every
// executable of the TSan build and exported from it (cmake/Sanitizers.cmake),
// these definitions come first in the dynamic linker's search order, so calls
// from our code, from gRPC and from Abseil's other libraries all land here.
//
// Each annotation is placed so that TSan's view is never ahead of reality:
// a release is annotated before the real unlock, an acquire after the real
// lock returns. A call that releases the mutex and takes it again inside
// (CondVar's waits, Mutex::Await) is bracketed as Abseil brackets it: the
// release is annotated first, and TSan ignores the thread until the real
// call returns and the acquire is annotated. So the absl::Condition
// predicates Abseil evaluates inside (the thread's own, and those of Await
// waiters it may hand the mutex to), which read data guarded by the mutex
// while it is really held, are not reported; Unlock ignores the ones it
// evaluates the same way. Not modelled: synchronization inside such a
// predicate (Abseil's own build lets TSan see it; ours hold none), and
// Mutex::LockWhen and its kin, which nothing calls: the interposition test
// fails if something starts to.
#include <pthread.h>
#include <sanitizer/tsan_interface.h>

#include <csignal>
#include <cstdio>
#include <cstring>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/sanitizers/tsan_real_function.h"

#if !defined(__has_feature) || !__has_feature(thread_sanitizer)
#error "tsan_absl_mutex.cc belongs in TORCHMON_SANITIZE=thread builds only"
#endif
static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1,
              "the mangled names below assume absl::<inline namespace>::Mutex");

namespace {

#define TORCHMON_STRINGIFY_INNER(x) #x
#define TORCHMON_STRINGIFY(x) TORCHMON_STRINGIFY_INNER(x)

// The real absl::<inline namespace>::<suffix> (a mangled name's tail).
template <typename Fn>
class Real {
 public:
  explicit Real(const char* suffix) {
    const char* ns = TORCHMON_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
    std::snprintf(symbol_, sizeof(symbol_), "_ZN4absl%zu%s%s", std::strlen(ns), ns, suffix);
  }
  Fn get() { return real_.get(); }

 private:
  char symbol_[128];  // filled in before real_ first reads it
  torchmon::tsan::RealFunction<Fn> real_{symbol_, TORCHMON_ABSL_SYNCHRONIZATION_SONAME};
};

using absl::CondVar;
using absl::Mutex;

Real<void (*)(Mutex*)> real_lock("5Mutex4LockEv");
Real<void (*)(Mutex*)> real_unlock("5Mutex6UnlockEv");
Real<bool (*)(Mutex*)> real_try_lock("5Mutex7TryLockEv");
Real<void (*)(Mutex*)> real_reader_lock("5Mutex10ReaderLockEv");
Real<void (*)(Mutex*)> real_reader_unlock("5Mutex12ReaderUnlockEv");
Real<bool (*)(Mutex*)> real_reader_try_lock("5Mutex13ReaderTryLockEv");
Real<void (*)(Mutex*)> real_destroy("5MutexD1Ev");
Real<void (*)(CondVar*, Mutex*)> real_wait("7CondVar4WaitEPNS0_5MutexE");
Real<bool (*)(CondVar*, Mutex*, absl::Duration)> real_wait_with_timeout(
    "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
Real<bool (*)(CondVar*, Mutex*, absl::Time)> real_wait_with_deadline(
    "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
Real<void (*)(Mutex*, const absl::Condition&)> real_await("5Mutex5AwaitERKNS0_9ConditionE");
Real<bool (*)(Mutex*, const absl::Condition&, absl::Duration)> real_await_with_timeout(
    "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
Real<bool (*)(Mutex*, const absl::Condition&, absl::Time)> real_await_with_deadline(
    "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");

// A CondVar wait or an Await releases and re-takes the mutex in the mode it
// is held in.
// Abseil reads that from the mutex word; this file keeps its hands off the
// layout and remembers the reader locks this thread holds instead (few are
// ever nested; past kMaxReaders a reader wait would be annotated as a
// writer's, which TSan reports as a bad unlock rather than missing a race).
constexpr int kMaxReaders = 16;
thread_local const Mutex* reader_locks[kMaxReaders];
thread_local int reader_lock_count = 0;

void RememberReader(const Mutex* mu) {
  if (reader_lock_count < kMaxReaders) reader_locks[reader_lock_count] = mu;
  ++reader_lock_count;
}

void ForgetReader(const Mutex* mu) {
  const int n = reader_lock_count < kMaxReaders ? reader_lock_count : kMaxReaders;
  for (int i = n - 1; i >= 0; --i) {
    if (reader_locks[i] == mu) {
      reader_locks[i] = reader_locks[n - 1];
      break;
    }
  }
  if (reader_lock_count > 0) --reader_lock_count;
}

unsigned HeldMode(const Mutex* mu) {
  const int n = reader_lock_count < kMaxReaders ? reader_lock_count : kMaxReaders;
  for (int i = 0; i < n; ++i) {
    if (reader_locks[i] == mu) return __tsan_mutex_read_lock;
  }
  return 0;
}

// Abseil's own entry points call each other through the PLT (the real
// WaitWithTimeout calls WaitWithDeadline), so they land here again; only
// the outermost call of a thread is annotated.
thread_local int depth = 0;

class Outermost {
 public:
  Outermost() : outermost_(depth++ == 0) {}
  ~Outermost() { --depth; }
  Outermost(const Outermost&) = delete;
  Outermost& operator=(const Outermost&) = delete;
  explicit operator bool() const { return outermost_; }

 private:
  const bool outermost_;
};

// TSan runs the handler of an asynchronous signal on the thread the kernel
// gave it to only once that thread is in, or leaves, a call TSan intercepts
// (LLVM 14; llvm/llvm-project#83844). A thread waiting in Abseil sits in
// Abseil's own futex syscall, which TSan does not intercept: a SIGTERM the
// kernel gave to an idle gRPC thread waiting there was never handled, and
// torchmond did not shut down. So a thread here waits with asynchronous
// signals blocked, and the kernel gives them to a thread that can take them
// (or keeps them pending until one unblocks them). A signal sent to this
// very thread waits until the wait ends, as TSan would make it wait anyway.
// A thread leaving a wait may take a signal still pending for the process,
// so handlers run on other threads than the main one more often here: what
// a handler shares must be atomic, as it must be in any build.
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked() { pthread_sigmask(SIG_BLOCK, &Set(), &saved_); }
  ~AsyncSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  static const sigset_t& Set() {
    static const sigset_t set = [] {
      sigset_t s;
      sigfillset(&s);
      // A fault's signal goes to the faulting thread and cannot wait.
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) {
        sigdelset(&s, sig);
      }
      return s;
    }();
    return set;
  }

  sigset_t saved_;
};

// The waits: released before the real wait, re-acquired after it, and the
// thread ignored in between (pre_unlock begins ignoring, post_lock ends it).
void BeforeWait(Mutex* mu, unsigned mode) { __tsan_mutex_pre_unlock(mu, mode); }

void AfterWait(Mutex* mu, unsigned mode) {
  __tsan_mutex_post_unlock(mu, mode);
  __tsan_mutex_pre_lock(mu, mode);
  __tsan_mutex_post_lock(mu, mode, 0);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  const Outermost outermost;
  if (!outermost) return real_lock.get()(this);
  __tsan_mutex_pre_lock(this, 0);
  real_lock.get()(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  const Outermost outermost;
  if (!outermost) return real_unlock.get()(this);
  __tsan_mutex_pre_unlock(this, 0);
  real_unlock.get()(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  const Outermost outermost;
  if (!outermost) return real_try_lock.get()(this);
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real_try_lock.get()(this);
  __tsan_mutex_post_lock(
      this, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::ReaderLock() {
  const Outermost outermost;
  if (!outermost) return real_reader_lock.get()(this);
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real_reader_lock.get()(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
  RememberReader(this);
}

void Mutex::ReaderUnlock() {
  const Outermost outermost;
  if (!outermost) return real_reader_unlock.get()(this);
  ForgetReader(this);
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real_reader_unlock.get()(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

bool Mutex::ReaderTryLock() {
  const Outermost outermost;
  if (!outermost) return real_reader_try_lock.get()(this);
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool locked = real_reader_try_lock.get()(this);
  __tsan_mutex_post_lock(this, locked ? __tsan_mutex_try_read_lock
                                      : __tsan_mutex_try_read_lock_failed, 0);
  if (locked) RememberReader(this);
  return locked;
}

Mutex::~Mutex() {
  const Outermost outermost;
  real_destroy.get()(this);
  if (outermost) __tsan_mutex_destroy(this, __tsan_mutex_not_static);
}

void CondVar::Wait(Mutex* mu) {
  const Outermost outermost;
  if (!outermost) return real_wait.get()(this, mu);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(mu);
  BeforeWait(mu, mode);
  real_wait.get()(this, mu);
  AfterWait(mu, mode);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  const Outermost outermost;
  if (!outermost) return real_wait_with_timeout.get()(this, mu, timeout);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(mu);
  BeforeWait(mu, mode);
  const bool timed_out = real_wait_with_timeout.get()(this, mu, timeout);
  AfterWait(mu, mode);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  const Outermost outermost;
  if (!outermost) return real_wait_with_deadline.get()(this, mu, deadline);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(mu);
  BeforeWait(mu, mode);
  const bool timed_out = real_wait_with_deadline.get()(this, mu, deadline);
  AfterWait(mu, mode);
  return timed_out;
}

void Mutex::Await(const Condition& cond) {
  const Outermost outermost;
  if (!outermost) return real_await.get()(this, cond);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(this);
  BeforeWait(this, mode);
  real_await.get()(this, cond);
  AfterWait(this, mode);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  const Outermost outermost;
  if (!outermost) return real_await_with_timeout.get()(this, cond, timeout);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(this);
  BeforeWait(this, mode);
  const bool met = real_await_with_timeout.get()(this, cond, timeout);
  AfterWait(this, mode);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  const Outermost outermost;
  if (!outermost) return real_await_with_deadline.get()(this, cond, deadline);
  const AsyncSignalsBlocked signals_blocked;
  const unsigned mode = HeldMode(this);
  BeforeWait(this, mode);
  const bool met = real_await_with_deadline.get()(this, cond, deadline);
  AfterWait(this, mode);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
