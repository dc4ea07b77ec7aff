/* owned.c - the Python references a type of ours owns, listed once.
 *
 * Each of the extension's GC types (Dispatcher, TensorRec, StorageRec,
 * DeathCall) names the PyObject fields it owns in one table of offsets: its
 * tp_traverse visits that table and its tp_clear drops it, so a field added
 * to the type cannot be visited and never cleared, or the reverse (a leak or
 * a cycle the collector cannot see).
 */
#include "trackfast.h"

static PyObject **field(PyObject *o, Py_ssize_t at)
{
    return (PyObject **)((char *)o + at);
}

int visit_owned(PyObject *o, const Py_ssize_t *at, size_t n, visitproc visit, void *arg)
{
    for (size_t i = 0; i < n; i++)
        Py_VISIT(*field(o, at[i]));
    return 0;
}

void clear_owned(PyObject *o, const Py_ssize_t *at, size_t n)
{
    for (size_t i = 0; i < n; i++)
        Py_CLEAR(*field(o, at[i]));
}

/* tp_dealloc of a GC type that holds nothing but its owned references:
 * out of the collector's lists first, so tp_clear runs on no tracked object. */
void dealloc_owned(PyObject *o)
{
    PyObject_GC_UnTrack(o);
    Py_TYPE(o)->tp_clear(o);
    Py_TYPE(o)->tp_free(o);
}
