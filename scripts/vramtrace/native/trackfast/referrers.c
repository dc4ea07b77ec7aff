/* The referrers of many objects in one pass over the heap.
 *
 * gc.get_referrers(*objs) compares every reference of every object the
 * collector tracks with each of objs in turn: its cost is the heap's
 * references times their number (tests/bench/bench_referrers.py). The
 * holder walks look up the referrers of a whole level at once, and a
 * snapshot's walk starts from every stale tensor: thousands where a kept
 * loss holds its graph's activations. Here each reference is looked up in
 * a hash set of the objects' addresses: one pass whatever their number,
 * the same answer as
 * gc.get_referrers (the objects the collector tracks that refer to any of
 * them, each once, as their tp_traverse shows them; the container the
 * objects came in left out, as gc.get_referrers leaves out its argument
 * tuple). No Python code runs during the pass. */
#include "trackfast.h"

typedef struct {
    PyObject **slots;   /* open addressing, NULL for empty */
    size_t mask;
} ptr_set;

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int ptr_set_init(ptr_set *s, Py_ssize_t n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap <<= 1;
    s->slots = PyMem_Calloc(cap, sizeof *s->slots);
    s->mask = cap - 1;
    return s->slots ? 0 : -1;
}

static void ptr_set_add(ptr_set *s, PyObject *o)
{
    size_t i = ptr_hash(o) & s->mask;
    while (s->slots[i] != NULL && s->slots[i] != o)
        i = (i + 1) & s->mask;
    s->slots[i] = o;
}

/* tp_traverse's visitor: nonzero (which ends the traversal) at the first
 * reference to one of the objects. */
static int refers_to_one(PyObject *o, void *arg)
{
    const ptr_set *s = arg;
    size_t i = ptr_hash(o) & s->mask;
    for (PyObject *at; (at = s->slots[i]) != NULL; i = (i + 1) & s->mask)
        if (at == o)
            return 1;
    return 0;
}

/* referrers_of(objects: list | tuple) -> list */
PyObject *py_referrers_of(PyObject *self, PyObject *objects)
{
    (void)self;
    if (!PyList_Check(objects) && !PyTuple_Check(objects)) {
        PyErr_SetString(PyExc_TypeError, "referrers_of(objects: list | tuple)");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(objects);
    PyObject *out = PyList_New(0);
    if (out == NULL || n == 0)
        return out;
    ptr_set want;
    if (ptr_set_init(&want, n) < 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    /* its items are owned by `objects`, which the caller holds meanwhile */
    PyObject **items = PySequence_Fast_ITEMS(objects);
    for (Py_ssize_t i = 0; i < n; i++)
        ptr_set_add(&want, items[i]);
    PyObject *all = NULL, *gc = PyImport_ImportModule("gc");
    if (gc != NULL) {
        all = PyObject_CallMethod(gc, "get_objects", NULL);
        Py_DECREF(gc);
    }
    if (all == NULL || !PyList_Check(all)) {
        if (all != NULL)
            PyErr_SetString(PyExc_TypeError, "gc.get_objects() gave no list");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *o = PyList_GET_ITEM(all, i);
        traverseproc traverse = Py_TYPE(o)->tp_traverse;
        if (o == objects || o == out || traverse == NULL)
            continue;
        if (traverse(o, refers_to_one, &want) && PyList_Append(out, o) < 0)
            goto fail;
    }
    Py_DECREF(all);
    PyMem_Free(want.slots);
    return out;
fail:
    Py_XDECREF(all);
    PyMem_Free(want.slots);
    Py_DECREF(out);
    return NULL;
}
