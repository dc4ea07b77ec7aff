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

/* tp_traverse's visitor: nonzero (which ends the traversal) at the first
 * reference to one of the objects. */
static int refers_to_one(PyObject *o, void *arg)
{
    return ptr_set_has(arg, o);
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
    ptr_set_free(&want);
    return out;
fail:
    Py_XDECREF(all);
    ptr_set_free(&want);
    Py_DECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------------
 * ReferrerIndex: every level of a walk from one pass over the heap.
 *
 * A holder walk asks for the referrers of each level in turn; through
 * referrers_of each level is a pass over the heap (14-20 ms with torch
 * loaded), so a walk to a depth of eight paid eight, and a short program's
 * credit paid one such walk (a kept evaluation output in a function's
 * list, found at none of 29 marks). The index reads every reference
 * between objects the collector tracks once, and answers each level from
 * that: about the price of two passes whatever the depth
 * (tests/bench/bench_referrers.py's "indexed" rows).
 *
 * Its answer is referrers_of's at the time it was built: the objects of
 * gc.get_objects() then that refer to any of the objects asked about, in
 * gc.get_objects()'s order (the order gc.get_referrers reports them in,
 * which the walk's breadth bound keeps the first of). It holds that list,
 * and with it every referrer it may return, until close(). A reference
 * made since is not in it, one removed since still is: the walk reads each
 * referrer's referents again (gc.get_referents) and keeps only what is
 * there now. An object it never saw (made since, or in the permanent
 * generation of gc.freeze()) is not answered for: referrers_of returns
 * None, and the caller makes the pass itself. */

/* An object of `all`, by its address: and the first edge into it
 * (UINT32_MAX: none), in one slot, so that recording an edge touches one
 * place at random, not two. */
typedef struct {
    PyObject *key;
    uint32_t head;
} index_slot;

typedef struct {
    PyObject_HEAD
    PyObject *all;        /* gc.get_objects() at the build; NULL once closed */
    index_slot *slots;    /* open addressing on the objects' addresses */
    size_t mask;
    uint32_t *edge_from;  /* per edge: the referrer's index in `all` */
    uint32_t *edge_next;  /* per edge: the next edge into the same object */
    size_t nedges, edge_cap;
    uint32_t *stamp;      /* per object: the lookup that last took it */
    uint32_t lookups;
} ReferrerIndex;

static void index_free_tables(ReferrerIndex *ix)
{
    PyMem_Free(ix->slots);
    PyMem_Free(ix->edge_from);
    PyMem_Free(ix->edge_next);
    PyMem_Free(ix->stamp);
    ix->slots = NULL;
    ix->edge_from = ix->edge_next = ix->stamp = NULL;
    ix->nedges = ix->edge_cap = 0;
    Py_CLEAR(ix->all);
}

/* Object o's slot, or NULL where it is not in `all`. */
static index_slot *slot_of(const ReferrerIndex *ix, const PyObject *o)
{
    size_t i = ptr_hash(o) & ix->mask;
    for (PyObject *at; (at = ix->slots[i].key) != NULL; i = (i + 1) & ix->mask)
        if (at == o)
            return &ix->slots[i];
    return NULL;
}

typedef struct {
    ReferrerIndex *ix;
    uint32_t from;
    int failed;
} index_visit;

/* tp_traverse's visitor: an edge from the object being traversed to each
 * referent the index holds (the collector's objects: a str or an int is
 * nobody's holder, and never a walk's start). */
static int index_edge(PyObject *o, void *arg)
{
    index_visit *v = arg;
    ReferrerIndex *ix = v->ix;
    index_slot *to = slot_of(ix, o);
    if (to == NULL)
        return 0;
    if (ix->nedges == ix->edge_cap) {
        size_t cap = ix->edge_cap ? ix->edge_cap * 2 : 1 << 16;
        if (cap > UINT32_MAX) {
            v->failed = 1;
            return 1;
        }
        uint32_t *from = PyMem_Realloc(ix->edge_from, cap * sizeof *from);
        if (from != NULL)
            ix->edge_from = from;
        uint32_t *next = from ? PyMem_Realloc(ix->edge_next, cap * sizeof *next) : NULL;
        if (next == NULL) {
            v->failed = 1;
            return 1;
        }
        ix->edge_next = next;
        ix->edge_cap = cap;
    }
    ix->edge_from[ix->nedges] = v->from;
    ix->edge_next[ix->nedges] = to->head;
    to->head = (uint32_t)ix->nedges++;
    return 0;
}

static PyObject *index_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"limit", NULL};
    Py_ssize_t limit = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$n:ReferrerIndex", kwlist, &limit))
        return NULL;
    /* the heap's list first: the index itself is not in it */
    PyObject *all = NULL, *gc = PyImport_ImportModule("gc");
    if (gc != NULL) {
        all = PyObject_CallMethod(gc, "get_objects", NULL);
        Py_DECREF(gc);
    }
    if (all == NULL)
        return NULL;
    if (!PyList_Check(all)) {
        Py_DECREF(all);
        PyErr_SetString(PyExc_TypeError, "gc.get_objects() gave no list");
        return NULL;
    }
    /* its tables take about 100 bytes an object: a heap past the caller's
     * limit (or what 32-bit indices hold) is not indexed */
    if (PyList_GET_SIZE(all) > limit || PyList_GET_SIZE(all) >= (Py_ssize_t)UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "the heap has %zd objects, more than the index's "
                     "limit of %zd", PyList_GET_SIZE(all), limit);
        Py_DECREF(all);
        return NULL;
    }
    ReferrerIndex *ix = (ReferrerIndex *)type->tp_alloc(type, 0);
    if (ix == NULL) {
        Py_DECREF(all);
        return NULL;
    }
    ix->all = all;
    size_t n = (size_t)PyList_GET_SIZE(all), cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    ix->mask = cap - 1;
    ix->slots = PyMem_Calloc(cap, sizeof *ix->slots);
    ix->stamp = PyMem_Calloc(n ? n : 1, sizeof *ix->stamp);
    if (!ix->slots || !ix->stamp)
        goto nomem;
    PyObject **items = PySequence_Fast_ITEMS(all);
    for (size_t k = 0; k < n; k++) {
        size_t i = ptr_hash(items[k]) & ix->mask;
        while (ix->slots[i].key != NULL)
            i = (i + 1) & ix->mask;
        ix->slots[i].key = items[k];
        ix->slots[i].head = UINT32_MAX;
    }
    /* No Python code runs from here to the end: the list cannot change. */
    index_visit v = {ix, 0, 0};
    for (size_t k = 0; k < n && !v.failed; k++) {
        traverseproc traverse = Py_TYPE(items[k])->tp_traverse;
        if (traverse == NULL)
            continue;
        v.from = (uint32_t)k;
        traverse(items[k], index_edge, &v);
    }
    if (v.failed)
        goto nomem;
    return (PyObject *)ix;
nomem:
    Py_DECREF(ix);
    return PyErr_NoMemory();
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* referrers_of(objects: list | tuple) -> list | None */
static PyObject *index_referrers_of(ReferrerIndex *ix, PyObject *objects)
{
    if (!PyList_Check(objects) && !PyTuple_Check(objects)) {
        PyErr_SetString(PyExc_TypeError, "referrers_of(objects: list | tuple)");
        return NULL;
    }
    if (ix->all == NULL) {
        PyErr_SetString(PyExc_ValueError, "the referrer index is closed");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(objects);
    PyObject **items = PySequence_Fast_ITEMS(objects);
    if (++ix->lookups == 0) {   /* the stamps wrapped: none is this lookup's */
        memset(ix->stamp, 0, (size_t)PyList_GET_SIZE(ix->all) * sizeof *ix->stamp);
        ix->lookups = 1;
    }
    size_t nfound = 0, cap = 0;
    uint32_t *found = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const index_slot *to = slot_of(ix, items[i]);
        if (to == NULL) {   /* not in the index: the caller makes a pass */
            PyMem_Free(found);
            Py_RETURN_NONE;
        }
        for (uint32_t e = to->head; e != UINT32_MAX; e = ix->edge_next[e]) {
            uint32_t from = ix->edge_from[e];
            if (ix->stamp[from] == ix->lookups)
                continue;
            ix->stamp[from] = ix->lookups;
            if (nfound == cap) {
                cap = cap ? cap * 2 : 64;
                uint32_t *more = PyMem_Realloc(found, cap * sizeof *found);
                if (more == NULL) {
                    PyMem_Free(found);
                    return PyErr_NoMemory();
                }
                found = more;
            }
            found[nfound++] = from;
        }
    }
    qsort(found, nfound, sizeof *found, cmp_u32);   /* as gc.get_referrers orders them */
    PyObject *out = PyList_New((Py_ssize_t)nfound);
    for (size_t k = 0; out != NULL && k < nfound; k++)
        PyList_SET_ITEM(out, (Py_ssize_t)k, Py_NewRef(PyList_GET_ITEM(ix->all, found[k])));
    PyMem_Free(found);
    return out;
}

static PyObject *index_close(ReferrerIndex *ix, PyObject *unused)
{
    (void)unused;
    index_free_tables(ix);
    Py_RETURN_NONE;
}

static PyObject *index_edges(ReferrerIndex *ix, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(ix->nedges);
}

static void index_dealloc(ReferrerIndex *ix)
{
    index_free_tables(ix);
    Py_TYPE(ix)->tp_free((PyObject *)ix);
}

static PyMethodDef index_methods[] = {
    {"referrers_of", (PyCFunction)index_referrers_of, METH_O,
     "referrers_of(objects: list | tuple) -> list | None: the indexed objects that "
     "referred to any of them when the index was built, in gc.get_objects() order; None "
     "if one of them is not in the index"},
    {"close", (PyCFunction)index_close, METH_NOARGS,
     "close(): the heap's list and the tables let go"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef index_getset[] = {
    {"edges", (getter)index_edges, NULL, "references indexed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Not a collector's object: it holds the heap's list, which never holds it
 * (made after the list), and close() lets that go. */
PyTypeObject ReferrerIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vramtrace._trackfast.ReferrerIndex",
    .tp_basicsize = sizeof(ReferrerIndex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ReferrerIndex(*, limit=None): every reference between the collector's "
              "objects, read in one pass over the heap, for a walk's levels (referrers.c); "
              "OverflowError if the heap has more than limit objects",
    .tp_new = index_new,
    .tp_dealloc = (destructor)index_dealloc,
    .tp_methods = index_methods,
    .tp_getset = index_getset,
};
