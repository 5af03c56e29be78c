// What the binding's types share: an owning reference, the C++-exception
// guard, conversions between Python objects and the client's types, and
// the end of a heap type's dealloc. Call with the GIL held.
#ifndef TORCHMON_PYTHON_PY_SUPPORT_H_
#define TORCHMON_PYTHON_PY_SUPPORT_H_

#ifndef Py_LIMITED_API
#error "_torchmon is built against the limited C API: define Py_LIMITED_API"
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "torchmon/client.h"

namespace torchmon::python {

// Small owning reference, so early returns cannot leak.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* o) : o_(o) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& other) noexcept : o_(other.release()) {}
  Ref& operator=(Ref&& other) noexcept {
    Py_XDECREF(std::exchange(o_, other.release()));
    return *this;
  }
  ~Ref() { Py_XDECREF(o_); }
  PyObject* get() const { return o_; }
  PyObject* release() { return std::exchange(o_, nullptr); }
  explicit operator bool() const { return o_ != nullptr; }

 private:
  PyObject* o_ = nullptr;
};

// Runs `fn` and turns a C++ exception into a Python one. Returns false if
// an exception is set.
template <typename Fn>
bool Guarded(Fn&& fn) {
  try {
    fn();
    return !PyErr_Occurred();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return false;
}

// The name of o's type, for messages (the limited API hides tp_name).
std::string TypeName(PyObject* o);

// str -> std::string. Sets TypeError naming `what` otherwise.
bool ToString(PyObject* o, const char* what, std::string* out);

// None or str -> std::string ("" for None).
bool ToOptionalString(PyObject* o, const char* what, std::string* out);

// None or a mapping of str to str -> Labels, sorted by name.
bool ToLabels(PyObject* o, Labels* out);

// A str of `s` (UTF-8), or null with an exception set.
PyObject* FromString(const std::string& s);

// Sets d[key] = value and drops the reference to value.
bool SetItem(PyObject* d, const char* key, PyObject* value);

// tp_free of a heap type, then the type's own reference: what every heap
// type's dealloc ends with.
void FreeObject(PyObject* self);

}  // namespace torchmon::python

#endif  // TORCHMON_PYTHON_PY_SUPPORT_H_
