#include "wait_counters.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client_type.h"
#include "torchmon/wait_counter.h"

namespace torchmon::python {
namespace {

constexpr char kWaitCounterCapsule[] = "torchmon.WaitCounter";

// ---------------------------------------------------------------------------
// torchmon::WaitCounter for Python

WaitCounter* CounterOf(PyObject* capsule) {
  return static_cast<WaitCounter*>(PyCapsule_GetPointer(capsule, kWaitCounterCapsule));
}

void DeleteCounter(PyObject* capsule) {
  delete static_cast<WaitCounter*>(PyCapsule_GetPointer(capsule, kWaitCounterCapsule));
}

// ---------------------------------------------------------------------------
// The backend of c10's wait counters

// c10::monitor::detail::WaitCounterDynamicBackend (c10/util/
// WaitCounterDynamicBackend.h, torch 2.6), by layout: the ABI the
// versioned init function's name stands for.
struct DynamicBackend {
  void* self;
  intptr_t (*start)(void* self, int64_t now_us);
  void (*stop)(void* self, int64_t now_us, intptr_t ctx);
  void (*destroy)(void* self);
};

// What start() returns for a wait it did not count (no client yet), so
// that stop() leaves it out too. c10's steady-clock microseconds are never
// this.
constexpr intptr_t kUncounted = std::numeric_limits<intptr_t>::min();

// One key torch made a counter of. Made once per key and never freed: c10
// keeps its counters for the life of the process, and so does the backend.
struct BackendKey {
  explicit BackendKey(std::string_view k) : key(k) {}
  const std::string key;
  // Set once, at the first wait after a client is known; read on every
  // start and stop without a lock.
  std::atomic<WaitCounter*> counter{nullptr};
};

// The keys and the client they record on. Thread-safe: c10 calls Init
// under its own lock, start and stop from any thread.
class Backend {
 public:
  static Backend& Instance() {
    static Backend* backend = new Backend;  // outlives every thread torch has
    return *backend;
  }

  void SetClient(const std::shared_ptr<Client>& client) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    client_ = client;
    has_client_.store(true, std::memory_order_release);
  }

  // The key's state, made at its first call (c10 calls once per key).
  BackendKey* Key(std::string_view key) ABSL_LOCKS_EXCLUDED(mu_) {
    inits_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    auto [it, made] = keys_.try_emplace(absl::string_view(key.data(), key.size()), nullptr);
    if (made) it->second = new BackendKey(key);
    return it->second;
  }

  // The key's counter, made on the client at the key's first counted wait;
  // null while no client is known (or the one known is gone).
  WaitCounter* CounterFor(BackendKey& key) ABSL_LOCKS_EXCLUDED(mu_) {
    if (WaitCounter* counter = key.counter.load(std::memory_order_acquire)) return counter;
    if (!has_client_.load(std::memory_order_acquire)) return nullptr;
    absl::MutexLock lock(&mu_);
    if (WaitCounter* counter = key.counter.load(std::memory_order_acquire)) return counter;
    std::shared_ptr<Client> client = client_.lock();
    if (client == nullptr) return nullptr;
    auto* counter = new WaitCounter(*client, key.key);
    key.counter.store(counter, std::memory_order_release);
    return counter;
  }

  void NoteProbe() { probed_.store(true, std::memory_order_relaxed); }

  uint64_t inits() const { return inits_.load(std::memory_order_relaxed); }
  bool probed() const { return probed_.load(std::memory_order_relaxed); }
  bool enabled() const { return has_client_.load(std::memory_order_relaxed); }

 private:
  Backend() = default;

  absl::Mutex mu_;
  std::weak_ptr<Client> client_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, BackendKey*> keys_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_client_{false};
  std::atomic<uint64_t> inits_{0};
  std::atomic<bool> probed_{false};
};

intptr_t BackendStart(void* self, int64_t now_us) {
  WaitCounter* counter = Backend::Instance().CounterFor(*static_cast<BackendKey*>(self));
  if (counter == nullptr) return kUncounted;
  counter->Begin();
  return static_cast<intptr_t>(now_us);
}

void BackendStop(void* self, int64_t now_us, intptr_t ctx) {
  if (ctx == kUncounted) return;
  // Counted at start, so the counter exists.
  WaitCounter* counter = static_cast<BackendKey*>(self)->counter.load(std::memory_order_acquire);
  counter->End(std::chrono::microseconds(now_us - static_cast<int64_t>(ctx)));
}

void BackendDestroy(void*) {}  // keys live as long as the process

}  // namespace

PyObject* NewWaitCounter(PyObject*, PyObject* args) {
  PyObject* client = nullptr;
  const char* key = nullptr;
  Py_ssize_t key_size = 0;
  if (!PyArg_ParseTuple(args, "O!s#", client_type, &client, &key, &key_size)) return nullptr;
  WaitCounter* counter = nullptr;
  if (!Guarded([&] {
        counter = new WaitCounter(*ClientPtrOf(client),
                                  std::string_view(key, static_cast<size_t>(key_size)));
      })) {
    return nullptr;
  }
  PyObject* capsule = PyCapsule_New(counter, kWaitCounterCapsule, DeleteCounter);
  if (capsule == nullptr) delete counter;
  return capsule;
}

PyObject* WaitCounterBegin(PyObject*, PyObject* capsule) {
  WaitCounter* counter = CounterOf(capsule);
  if (counter == nullptr) return nullptr;
  counter->Begin();
  Py_RETURN_NONE;
}

PyObject* WaitCounterEnd(PyObject*, PyObject* args) {
  PyObject* capsule = nullptr;
  long long waited_ns = 0;
  if (!PyArg_ParseTuple(args, "OL", &capsule, &waited_ns)) return nullptr;
  WaitCounter* counter = CounterOf(capsule);
  if (counter == nullptr) return nullptr;
  counter->End(std::chrono::nanoseconds(waited_ns));
  Py_RETURN_NONE;
}

PyObject* EnableTorchWaitCounters(PyObject*, PyObject* client) {
  if (!PyObject_TypeCheck(client, client_type)) {
    PyErr_Format(PyExc_TypeError, "enable_torch_wait_counters(): expected a Client, not %s",
                 TypeName(client).c_str());
    return nullptr;
  }
  Backend::Instance().SetClient(ClientPtrOf(client));
  Py_RETURN_NONE;
}

PyObject* TorchWaitCounterBackend(PyObject*, PyObject*) {
  const Backend& backend = Backend::Instance();
  Ref state(PyDict_New());
  if (!state ||
      !SetItem(state.get(), "inits", PyLong_FromUnsignedLongLong(backend.inits())) ||
      !SetItem(state.get(), "probed", PyBool_FromLong(backend.probed())) ||
      !SetItem(state.get(), "enabled", PyBool_FromLong(backend.enabled()))) {
    return nullptr;
  }
  return state.release();
}

}  // namespace torchmon::python

// c10's entry point (see wait_counters.h). Leaves backend->self null, which
// c10 takes as "not counted", for the probe key and when out of memory.
extern "C" __attribute__((visibility("default"))) void
c10_monitor_wait_counter_dynamic_backend_init_v1(void* out, const char* key,
                                                  std::size_t key_size) noexcept {
  using torchmon::python::Backend;
  auto* backend = static_cast<torchmon::python::DynamicBackend*>(out);
  const std::string_view name(key, key_size);
  backend->self = nullptr;
  if (name == torchmon::python::kProbeKey) {
    Backend::Instance().NoteProbe();
    return;
  }
  try {
    backend->self = Backend::Instance().Key(name);
  } catch (...) {
    return;
  }
  backend->start = torchmon::python::BackendStart;
  backend->stop = torchmon::python::BackendStop;
  backend->destroy = torchmon::python::BackendDestroy;
}
