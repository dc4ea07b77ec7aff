/* gc_schedule.c - track()'s own objects kept out of the collector's schedule.
 *
 * CPython's cyclic collector runs generation 0 when the count of container
 * objects allocated minus those freed since its last run passes a threshold
 * (700 by default). The tracker makes such objects (records, weak
 * references, lists, a walk's frames) while the program runs. Counted, they
 * would bring every automatic collection forward, and a reference cycle the
 * program dropped would be freed at another step than without vramtrace:
 * memory_allocated() would read differently (the differential suite's
 * cycles_freed_by_the_automatic_gc).
 *
 * So each entry from the program into the tracker (an op, a tensor's death,
 * a mark, a collection's callback) holds the count: on the way in it is
 * saved and set far below the threshold, so that no collection starts
 * inside the tracker's work and none of its frees is subtracted; on the way
 * out it is put back. Holds nest. The count is interpreter state with no
 * API to set it: it is reached through CPython's internal headers, those of
 * the Python this extension is built for (meson checks that they compile:
 * VT_GC_INTERNALS). Without them, or on a free-threaded build (per-thread
 * counts), holding does nothing: a declared limit (docs/limitations.md).
 *
 * An object the tracker made inside a hold must also be freed inside one
 * (its free would otherwise be subtracted from the program's count): a
 * tensor's weak reference, whose last reference CPython drops after the
 * death callback returns, is handed to gc_free_later() and freed at the
 * next hold.
 *
 * What holding cannot hide: another thread of the program that runs while
 * the tracker's Python code has let the GIL go sees no collection start and
 * its own allocations of that moment are forgotten; and the tracker's
 * objects that survive collections count toward the oldest generation's
 * "long-lived" ratio, which paces full collections.
 */
#if defined(VT_GC_INTERNALS) && !defined(Py_GIL_DISABLED)
#define Py_BUILD_CORE_MODULE 1
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>

#include "trackfast.h"

#if defined(VT_GC_INTERNALS) && !defined(Py_GIL_DISABLED)
#include "internal/pycore_interp.h"

/* Far below any threshold, and far from overflowing however much the
 * tracker allocates inside one hold. */
#define HELD_COUNT (INT_MIN / 2)

static int *young_count(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
#if PY_VERSION_HEX >= 0x030E0000
    return &interp->gc.young.count;
#else
    return &interp->gc.generations[0].count;
#endif
}

/* What gc_free_later() was given, freed at the next hold (a list made
 * inside a hold, never freed). */
static PyObject *later;

long gc_hold(void)
{
    int *count = young_count();
    long saved = *count;
    *count = HELD_COUNT;
    if (later != NULL && PyList_GET_SIZE(later) > 0) {
        PyObject *exc_type, *exc, *tb;
        PyErr_Fetch(&exc_type, &exc, &tb);
        if (PyList_SetSlice(later, 0, PY_SSIZE_T_MAX, NULL) < 0)
            PyErr_Clear();
        PyErr_Restore(exc_type, exc, tb);
    }
    return saved;
}

void gc_free_later(PyObject *obj)
{
    if (later == NULL && (later = PyList_New(0)) == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyList_Append(later, obj) < 0)
        PyErr_Clear();
}

void gc_release(long saved)
{
    *young_count() = (int)saved;
}

int gc_can_hold(void)
{
    return 1;
}
#else
long gc_hold(void)
{
    return 0;
}

void gc_release(long saved)
{
    (void)saved;
}

void gc_free_later(PyObject *obj)
{
    (void)obj;   /* freed when its last holder lets it go, as untracked */
}

int gc_can_hold(void)
{
    return 0;
}
#endif

/* The same for the tracker's Python code: gc_hold() -> token, gc_release(token). */
PyObject *py_gc_hold(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(gc_hold());
}

PyObject *py_gc_release(PyObject *self, PyObject *token)
{
    (void)self;
    long saved = PyLong_AsLong(token);
    if (saved == -1 && PyErr_Occurred())
        return NULL;
    gc_release(saved);
    Py_RETURN_NONE;
}
