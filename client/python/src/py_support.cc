#include "py_support.h"

#include <algorithm>

namespace torchmon::python {

// The name of o's type, for messages (the limited API hides tp_name).
std::string TypeName(PyObject* o) {
  Ref name(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__"));
  const char* utf8 = name ? PyUnicode_AsUTF8AndSize(name.get(), nullptr) : nullptr;
  if (utf8 == nullptr) {
    PyErr_Clear();
    return "?";
  }
  return utf8;
}

// str -> std::string. Sets TypeError naming `what` otherwise.
bool ToString(PyObject* o, const char* what, std::string* out) {
  if (!PyUnicode_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be str, not %s", what, TypeName(o).c_str());
    return false;
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(o, &size);
  if (data == nullptr) return false;
  out->assign(data, static_cast<size_t>(size));
  return true;
}

// None or str -> std::string ("" for None).
bool ToOptionalString(PyObject* o, const char* what, std::string* out) {
  out->clear();
  if (o == nullptr || o == Py_None) return true;
  return ToString(o, what, out);
}

// None or a mapping of str to str -> Labels, sorted by name.
bool ToLabels(PyObject* o, Labels* out) {
  out->clear();
  if (o == nullptr || o == Py_None) return true;
  if (!PyDict_Check(o)) {
    PyErr_Format(PyExc_TypeError, "labels must be a dict of str to str, not %s",
                 TypeName(o).c_str());
    return false;
  }
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(o, &pos, &key, &value)) {
    std::string k, v;
    if (!ToString(key, "a label name", &k) || !ToString(value, "a label value", &v)) return false;
    out->emplace_back(std::move(k), std::move(v));
  }
  std::sort(out->begin(), out->end());
  return true;
}

PyObject* FromString(const std::string& s) {
  return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

// Sets d[key] = value and drops the reference to value.
bool SetItem(PyObject* d, const char* key, PyObject* value) {
  if (value == nullptr) return false;
  const int rc = PyDict_SetItemString(d, key, value);
  Py_DECREF(value);
  return rc == 0;
}

// tp_free of a heap type, then the type's own reference: what every heap
// type's dealloc ends with.
void FreeObject(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  auto free_fn = reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free));
  free_fn(self);
  Py_DECREF(type);
}

}  // namespace torchmon::python
