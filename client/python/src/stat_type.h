// torchmon._torchmon.Stat: a torchmon::Stat and, beside it, the windows
// torch.monitor keeps in process (count, get, window events), the base of
// the package's Stat. Call with the GIL held.
#ifndef TORCHMON_PYTHON_STAT_TYPE_H_
#define TORCHMON_PYTHON_STAT_TYPE_H_

#include "py_support.h"

namespace torchmon::python {

// The spec the Stat type is made from (a base type).
PyType_Spec* StatSpec();

// report_open_windows(): report_open_window() on every live Stat.
PyObject* ReportOpenWindows(PyObject* module, PyObject* unused);

}  // namespace torchmon::python

#endif  // TORCHMON_PYTHON_STAT_TYPE_H_
