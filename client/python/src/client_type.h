// torchmon._torchmon.Client: a torchmon::Client for Python, shared with the
// Stats made on it. Call with the GIL held; calls that wait (flush, the
// client's destruction) let it go meanwhile.
#ifndef TORCHMON_PYTHON_CLIENT_TYPE_H_
#define TORCHMON_PYTHON_CLIENT_TYPE_H_

#include <memory>

#include "py_support.h"

namespace torchmon::python {

// The client is shared by the Python Client object and every Stat made on
// it; the last owner to go destroys it, with the GIL released (destruction
// flushes, bounded by ClientOptions::destructor_flush_timeout, and joins the
// sender thread).
using ClientPtr = std::shared_ptr<Client>;

struct ClientObject {
  PyObject_HEAD
  ClientPtr* client;  // never null once tp_new returned
};

// The Client type, made from ClientSpec() at the module's import.
extern PyTypeObject* client_type;

// The spec the Client type is made from.
PyType_Spec* ClientSpec();

// The client a Client object holds (never null).
inline const ClientPtr& ClientPtrOf(PyObject* self) {
  return *reinterpret_cast<ClientObject*>(self)->client;
}

}  // namespace torchmon::python

#endif  // TORCHMON_PYTHON_CLIENT_TYPE_H_
