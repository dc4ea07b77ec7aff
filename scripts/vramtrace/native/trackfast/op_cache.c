/* What the books say of an op, kept in C in front of their dicts.
 *
 * on_op asks two things of every op it records: the op's meta (the books'
 * op_meta, Tracker._meta_of: which argument its outputs view, its OP_*
 * flags: whether it may give a tensor other memory, whether it writes an
 * `out=` argument) and each new output's name (the books'
 * names, Tracker._out_name, by op, output and stack). Asked of the dicts,
 * each answer costs its key's objects (a PyLong for the op; three and a
 * tuple for a name) and a lookup, paid by the program on every op. Here
 * they are slots by the op's identity
 * (direct-mapped: a slot taken by another key is replaced), holding the
 * op and the name, so that an identity is never reused while cached. The
 * dicts stay the truth: a miss asks them, and what they answer is the
 * same for the same key for the whole run (a name depends only on its key).
 */
#include "trackfast.h"

enum { META_SLOTS = 64, NAME_SLOTS = 1024 };

typedef struct {
    PyObject *func;   /* NULL: empty */
    long view_arg;
    int flags;        /* OP_* */
} MetaSlot;

typedef struct {
    PyObject *func;   /* NULL: empty */
    PyObject *name;
    Py_ssize_t kidx;  /* the books' index: i forward, -1 - i backward */
    uint32_t stack;
} NameSlot;

struct OpCache {
    MetaSlot meta[META_SLOTS];
    NameSlot names[NAME_SLOTS];
};

static size_t slot_of(uint64_t h, size_t slots)
{
    h *= 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (slots - 1);
}

OpCache *op_cache_new(void)
{
    OpCache *c = PyMem_Calloc(1, sizeof *c);
    if (c == NULL)
        PyErr_NoMemory();
    return c;
}

void op_cache_clear(OpCache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < META_SLOTS; i++)
        Py_CLEAR(c->meta[i].func);
    for (size_t i = 0; i < NAME_SLOTS; i++) {
        Py_CLEAR(c->names[i].func);
        Py_CLEAR(c->names[i].name);
    }
}

int op_cache_traverse(OpCache *c, visitproc visit, void *arg)
{
    if (c == NULL)
        return 0;
    for (size_t i = 0; i < META_SLOTS; i++)
        Py_VISIT(c->meta[i].func);
    for (size_t i = 0; i < NAME_SLOTS; i++) {
        Py_VISIT(c->names[i].func);
        Py_VISIT(c->names[i].name);
    }
    return 0;
}

/* ``func``'s meta into *view_arg and *flags (OP_*): from its slot, else from
 * the books' op_meta (Tracker._meta_of where it has none yet). 0, or -1
 * with an exception set. */
int op_meta(Dispatcher *d, PyObject *func, long *view_arg, int *flags)
{
    MetaSlot *s = d->op_cache ? &d->op_cache->meta[slot_of((uintptr_t)func, META_SLOTS)] : NULL;
    if (s != NULL && s->func == func) {
        *view_arg = s->view_arg;
        *flags = s->flags;
        return 0;
    }
    PyObject *books = book(d, BOOK_OP_META);
    if (books == NULL)
        return -1;
    PyObject *fkey = PyLong_FromVoidPtr(func);
    PyObject *meta = fkey ? PyDict_GetItemWithError(books, fkey) : NULL;
    Py_XINCREF(meta);
    Py_XDECREF(fkey);
    Py_DECREF(books);
    if (meta == NULL) {
        if (PyErr_Occurred())
            return -1;
        meta = call_method(d->tracker, s_meta_of, &func, 1);
        if (meta == NULL)
            return -1;
    }
    if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) < 2) {
        Py_DECREF(meta);
        PyErr_SetString(PyExc_TypeError, "Tracker._op_meta entry is not (view arg, flags, op)");
        return -1;
    }
    long vi = PyLong_AsLong(PyTuple_GET_ITEM(meta, 0));
    long r = vi == -1 && PyErr_Occurred() ? -1 : PyLong_AsLong(PyTuple_GET_ITEM(meta, 1));
    Py_DECREF(meta);
    if (r == -1 && PyErr_Occurred())
        return -1;
    *view_arg = vi;
    *flags = (int)r;
    if (s != NULL) {
        Py_XSETREF(s->func, Py_NewRef(func));
        s->view_arg = vi;
        s->flags = (int)r;
    }
    return 0;
}

/* The name of output ``i`` of ``func`` recorded with ``stack`` (a forward
 * op's, else a backward op's; ``stack_obj`` the same stack id as the books
 * key it): from its slot, else from the books' names (Tracker._out_name
 * where they have none yet). A new reference, or NULL with an exception set. */
PyObject *out_name(Dispatcher *d, PyObject *func, Py_ssize_t i, uint32_t stack,
                   PyObject *stack_obj, int forward)
{
    Py_ssize_t kidx = forward ? i : -1 - i;
    uint64_t h = (uintptr_t)func ^ ((uint64_t)stack << 20) ^ (uint64_t)(kidx + 64);
    NameSlot *s = d->op_cache ? &d->op_cache->names[slot_of(h, NAME_SLOTS)] : NULL;
    if (s != NULL && s->func == func && s->kidx == kidx && s->stack == stack)
        return Py_NewRef(s->name);

    PyObject *names = book(d, BOOK_NAMES);
    if (names == NULL)
        return NULL;
    PyObject *fid = PyLong_FromVoidPtr(func);
    PyObject *idx = PyLong_FromSsize_t(i);
    PyObject *kobj = forward ? Py_XNewRef(idx) : PyLong_FromSsize_t(kidx);
    PyObject *key = fid && idx && kobj ? PyTuple_Pack(3, fid, kobj, stack_obj) : NULL;
    PyObject *name = key ? PyDict_GetItemWithError(names, key) : NULL;
    Py_XINCREF(name);
    if (name == NULL && !PyErr_Occurred() && key != NULL) {
        PyObject *a[4] = {func, idx, stack_obj, forward ? Py_True : Py_False};
        name = call_method(d->tracker, s_out_name, a, 4);
    }
    Py_DECREF(names);
    Py_XDECREF(fid);
    Py_XDECREF(idx);
    Py_XDECREF(kobj);
    Py_XDECREF(key);
    if (name != NULL && s != NULL) {
        Py_XSETREF(s->func, Py_NewRef(func));
        Py_XSETREF(s->name, Py_NewRef(name));
        s->kidx = kidx;
        s->stack = stack;
    }
    return name;
}
