/* gc_schedule.c - track()'s own objects kept out of the collector's schedule.
 *
 * CPython's cyclic collector runs generation 0 when the count of container
 * objects allocated minus those freed since its last run passes a threshold
 * (700 by default). The tracker makes such objects (records, weak
 * references, lists, a walk's frames) while the program runs. Counted, they
 * would bring every automatic collection forward, and a reference cycle the
 * program dropped would be freed at another step than without vramtrace:
 * memory_allocated() would read differently.
 *
 * So each entry from the program into the tracker (an op the observer hands
 * over, a tensor's death, a mark, a collection's callback, track() itself)
 * holds the count: on the way in it is
 * saved and set far below the threshold, so that no collection starts
 * inside the tracker's work and none of its frees is subtracted; on the way
 * out it is put back. Holds nest, and two threads' interleave (depth,
 * below). The count is interpreter state with no
 * API to set it: it is reached through CPython's internal headers, those of
 * the Python this extension is built for (meson checks that they compile:
 * VT_GC_INTERNALS). Without them, or on a free-threaded build (per-thread
 * counts), holding does nothing: a declared limit (docs/limitations.md).
 *
 * The container types' free lists are part of the count too: a list,
 * tuple or dict taken from its type's free list is not counted, and one put
 * back is not subtracted. The tracker's work leaves them fuller or emptier,
 * so the program's next allocations would count otherwise than untracked:
 * the outermost hold notes their levels, and its release puts them back
 * (objects freed or made while the count is held; VT_GC_FREELISTS, the
 * layout of CPython 3.11 and 3.12).
 *
 * A Python object the tracker has CPython or PyTorch make for the
 * program's things is not the tracker's: a tensor's (the observer wraps
 * each op's tensors), a view's base read through ``_base``, a storage's
 * through ``untyped_storage()``, a running frame's (reading a stack seen
 * for the first time: stacks.c; a stack seen before is keyed by the
 * library's reader, which makes none).
 * It lives as long as its tensor, storage or function call and is freed
 * outside any hold, when the program lets that go. Such a call is counted
 * as the program's (gc_count_as_program() with how far the call moved the
 * held count), or each of those frees would be subtracted from a count
 * that never had it. (Untracked, none of them would exist: the count
 * stands higher by those alive, a few frames and an op's tensors, not
 * more each step.) The autograd node whose backward runs is read in C++
 * for the same reason: its Python object would live as long as the graph.
 *
 * A holder walk (at a mark, a tick, a snapshot) reads the program's
 * frames, tensors' gradients and autograd graphs among thousands of its
 * own objects, so no count taken around one call tells those apart: the
 * walk says when it begins (gc_program_read()), and the hold's end settles
 * what it left (gc_reads.c: the frame objects counted as the program's; the
 * autograd nodes' and storages' objects, which live as long as their C++
 * objects, kept off the count when made and when freed).
 *
 * An object the tracker made inside a hold must also be freed inside one
 * (its free would otherwise be subtracted from the program's count): a
 * tensor's weak reference, whose last reference CPython drops after the
 * death callback returns, is handed to gc_free_later() and freed at the
 * next hold.
 *
 * What holding cannot hide: another thread of the program that runs while
 * the tracker's Python code has let the GIL go sees no collection start and
 * its own allocations of that moment are forgotten (so the library's
 * recording calls the tracker makes in a hold keep the GIL: _lib._GIL_HELD,
 * and a mark's work raises the switch interval to a second:
 * _marks._MARK_SWITCH_S; a thread already waiting for the GIL when a mark
 * begins may still get it once); the tracker's objects
 * that survive collections count toward the oldest generation's
 * "long-lived" ratio, which paces full collections; and where the count
 * and the free lists stand when the program starts differs with what the
 * process imported (vramtrace.torch and its dependencies). Through the
 * dispatch mode, the Python storage objects it reads storages through and
 * the tensors it is given for ops the program never sees.
 * Tests: test_the_trackers_own_objects_are_kept_out_of_the_collectors_count
 * and the differential suite's the_collectors_count_moves_per_step_as_untracked.
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

/* The count (gc_reads.c gives back the frees it hides). */
int *gc_young_count(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
#if PY_VERSION_HEX >= 0x030E0000
    return &interp->gc.young.count;
#else
    return &interp->gc.generations[0].count;
#endif
}

/* A count saved by the outermost hold (a nested one saves a held count). */
#define OUTERMOST(saved) ((saved) > HELD_COUNT / 2)

#ifdef VT_GC_FREELISTS
typedef struct {
    int lists, dicts;
    int tuples[PyTuple_NFREELISTS];   /* by size - 1 */
} FreeLevels;

/* The levels the outermost hold found. */
static FreeLevels held_levels;

static void note_levels(PyInterpreterState *interp, FreeLevels *out)
{
    out->lists = interp->list.numfree;
    out->dicts = interp->dict_state.numfree;
    for (int k = 0; k < PyTuple_NFREELISTS; k++)
        out->tuples[k] = interp->tuple.numfree[k];
}

/* Each free list back to its level in *want: the extra objects freed, the
 * missing ones made (untracked, as the free lists keep them), the count held. */
static void restore_levels(PyInterpreterState *interp, const FreeLevels *want)
{
    struct _Py_list_state *lists = &interp->list;
    while (lists->numfree > want->lists)
        PyObject_GC_Del(lists->free_list[--lists->numfree]);
    while (lists->numfree < want->lists) {
        PyListObject *op = PyObject_GC_New(PyListObject, &PyList_Type);
        if (op == NULL)
            break;
        op->ob_item = NULL;
        Py_SET_SIZE(op, 0);
        op->allocated = 0;
        lists->free_list[lists->numfree++] = op;
    }
    struct _Py_dict_state *dicts = &interp->dict_state;
    while (dicts->numfree > want->dicts)
        PyObject_GC_Del(dicts->free_list[--dicts->numfree]);
    while (dicts->numfree < want->dicts) {
        PyDictObject *op = PyObject_GC_New(PyDictObject, &PyDict_Type);
        if (op == NULL)
            break;
        dicts->free_list[dicts->numfree++] = op;
    }
    struct _Py_tuple_state *tuples = &interp->tuple;
    for (int k = 0; k < PyTuple_NFREELISTS; k++) {
        /* a free list of tuples of size k + 1 links through ob_item[0] */
        while (tuples->numfree[k] > want->tuples[k] && tuples->free_list[k] != NULL) {
            PyTupleObject *op = tuples->free_list[k];
            tuples->free_list[k] = (PyTupleObject *)op->ob_item[0];
            tuples->numfree[k]--;
            PyObject_GC_Del(op);
        }
        while (tuples->numfree[k] < want->tuples[k]) {
            PyTupleObject *op = PyObject_GC_NewVar(PyTupleObject, &PyTuple_Type, k + 1);
            if (op == NULL)
                break;
            op->ob_item[0] = (PyObject *)tuples->free_list[k];
            tuples->free_list[k] = op;
            tuples->numfree[k]++;
        }
    }
    PyErr_Clear();   /* out of memory making one: the level stays lower */
}
#endif

/* What gc_free_later() was given, freed at the next hold (a list made
 * inside a hold, never freed). */
static PyObject *later;

/* Objects counted as the program's since the outermost hold. */
static long credit;

/* Holds open, on any thread (each under the GIL), and the count the first
 * of them found. One thread's holds nest; two threads' interleave (a
 * thread the tracker follows records an op while another's hold has let
 * the GIL go), so the count is put back when the last hold ends, not when
 * the first one's does. */
static int depth;
static long outer_saved;

long gc_held_count(void)
{
    return *gc_young_count();
}

int gc_hold_depth(void)
{
    return depth;
}

void gc_count_as_program(long n)
{
    if (n > 0 && *gc_young_count() < HELD_COUNT / 2)   /* inside a hold only */
        credit += n;
}

long gc_hold(void)
{
    int *count = gc_young_count();
    long saved = *count;
    *count = HELD_COUNT;
    if (depth++ == 0) {
        outer_saved = saved;
#ifdef VT_GC_FREELISTS
        note_levels(PyInterpreterState_Get(), &held_levels);
#endif
    }
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
    if (depth <= 0)   /* not held: an unbalanced release changes nothing */
        return;
    /* still held: what settling a walk's reads frees is the tracker's */
    long read = depth == 1 ? gc_reads_settle() : 0;
    if (--depth == 0) {
#ifdef VT_GC_FREELISTS
        PyObject *exc_type, *exc, *tb;
        PyErr_Fetch(&exc_type, &exc, &tb);
        restore_levels(PyInterpreterState_Get(), &held_levels);
        PyErr_Restore(exc_type, exc, tb);
#endif
        saved = outer_saved + credit + read;
        credit = 0;
    } else if (OUTERMOST(saved)) {
        saved = HELD_COUNT;   /* another thread's hold is open: held until it ends */
    }
    *gc_young_count() = (int)saved;
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

long gc_held_count(void)
{
    return 0;
}

int gc_hold_depth(void)
{
    return 0;
}

void gc_count_as_program(long n)
{
    (void)n;
}

int gc_can_hold(void)
{
    return 0;
}
#endif

/* The same for the tracker's Python code (vramtrace/_gc_hold.py): gc_hold() ->
 * token, gc_release(token), gc_held_count(), gc_count_as_program(n). */
PyObject *py_gc_hold(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(gc_hold());
}

PyObject *py_gc_held_count(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(gc_held_count());
}

PyObject *py_gc_count_as_program(PyObject *self, PyObject *n)
{
    (void)self;
    long v = PyLong_AsLong(n);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    gc_count_as_program(v);
    Py_RETURN_NONE;
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
