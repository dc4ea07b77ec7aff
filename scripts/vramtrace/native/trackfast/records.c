/* The tracker's record objects, TensorRec and StorageRec (trackfast.h):
 * the books' entries, one per tracked tensor and per storage, with native
 * fields. This file makes them (from C, and from Python with the same
 * arguments as the Python classes of vramtrace.torch._records, which stand
 * in where this module is not loaded) and records a tensor's TENSOR_NEW.
 *
 * Why C objects: the per-op path reads and writes these fields for every
 * tensor of every op. As Python objects each read was a lookup and each
 * number a Python int made and freed (a pending TENSOR_NEW was a tuple of
 * three); here they are a load and a store. Python reads them as
 * attributes, as it did the __slots__ classes. */
#include "trackfast.h"

/* -- TensorRec ----------------------------------------------------------------- */

static void tensor_rec_set_pend(TensorRec *r, uint64_t ptr, uint64_t nbytes, PyObject *stack)
{
    r->pending = 1;
    r->pend_ptr = ptr;
    r->pend_nbytes = nbytes;
    Py_XSETREF(r->pend_stack, Py_NewRef(stack));
}

/* ``r`` has no TENSOR_NEW to make: recorded, or it left the books before. */
void clear_pending(TensorRec *r)
{
    r->pending = 0;
    Py_CLEAR(r->pend_stack);
}

/* pend: (data_ptr, nbytes, stack) until recorded, then None. */
static PyObject *tensor_rec_get_pend(TensorRec *r, void *unused)
{
    if (!r->pending)
        Py_RETURN_NONE;
    return Py_BuildValue("(KKO)", (unsigned long long)r->pend_ptr,
                         (unsigned long long)r->pend_nbytes, r->pend_stack);
}

static int tensor_rec_set_pend_attr(TensorRec *r, PyObject *v, void *unused)
{
    if (v == NULL || v == Py_None) {
        clear_pending(r);
        return 0;
    }
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 3) {
        PyErr_SetString(PyExc_TypeError, "TensorRec.pend: None or (ptr, nbytes, stack)");
        return -1;
    }
    uint64_t ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 0));
    uint64_t nbytes = PyErr_Occurred() ? 0 : PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 1));
    if (PyErr_Occurred())
        return -1;
    tensor_rec_set_pend(r, ptr, nbytes, PyTuple_GET_ITEM(v, 2));
    return 0;
}

/* TensorRec(skey, name, base, pend): tid 0, no weak reference yet. */
static int tensor_rec_init(TensorRec *r, PyObject *args, PyObject *kwds)
{
    PyObject *skey, *name, *pend;
    unsigned long long base;
    if (!PyArg_ParseTuple(args, "OOKO", &skey, &name, &base, &pend))
        return -1;
    r->tid = 0;
    r->base = base;
    Py_XSETREF(r->skey, Py_NewRef(skey));
    Py_XSETREF(r->name, Py_NewRef(name));
    Py_XSETREF(r->ref, Py_NewRef(Py_None));
    return tensor_rec_set_pend_attr(r, pend, NULL);
}

static const Py_ssize_t tensor_rec_owned[] = {
    offsetof(TensorRec, skey), offsetof(TensorRec, ref), offsetof(TensorRec, name),
    offsetof(TensorRec, pend_stack),
};

OWNED_GC_SLOTS(tensor_rec, tensor_rec_owned)

static PyMemberDef tensor_rec_members[] = {
    {"tid", T_ULONGLONG, offsetof(TensorRec, tid), 0, "recorder tensor id, 0 until recorded"},
    {"base", T_ULONGLONG, offsetof(TensorRec, base), 0, "root base tensor id if a view, else 0"},
    {"skey", T_OBJECT_EX, offsetof(TensorRec, skey), 0, "key of its storage's record"},
    {"ref", T_OBJECT, offsetof(TensorRec, ref), 0,
     "weak reference to the tensor, its callback records the death; None: renamed or closed"},
    {"name", T_OBJECT_EX, offsetof(TensorRec, name), 0, "its name"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef tensor_rec_getset[] = {
    {"pend", (getter)tensor_rec_get_pend, (setter)tensor_rec_set_pend_attr,
     "(data_ptr, nbytes, stack) until its TENSOR_NEW is recorded, then None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TensorRecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vramtrace._trackfast.TensorRec",
    .tp_basicsize = sizeof(TensorRec),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TensorRec(skey, name, base, pend): the books' record of a tracked tensor",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tensor_rec_init,
    .tp_dealloc = dealloc_owned,
    .tp_traverse = tensor_rec_traverse,
    .tp_clear = tensor_rec_clear,
    .tp_members = tensor_rec_members,
    .tp_getset = tensor_rec_getset,
};

/* A new record: tid 0, its TENSOR_NEW pending at (ptr, nbytes, stack_obj). */
PyObject *new_tensor_rec(PyObject *skey, PyObject *name, uint64_t base, uint64_t ptr,
                         uint64_t nbytes, PyObject *stack_obj)
{
    TensorRec *r = (TensorRec *)TensorRecType.tp_alloc(&TensorRecType, 0);
    if (r == NULL)
        return NULL;
    r->base = base;
    r->skey = Py_NewRef(skey);
    r->name = Py_NewRef(name);
    r->ref = Py_NewRef(Py_None);
    tensor_rec_set_pend(r, ptr, nbytes, stack_obj);
    return (PyObject *)r;
}

/* Book ``which``'s records, each checked by ``is_rec``, those ``keep`` says
 * yes to (it may run Python: a snapshot of the values is walked, as deaths
 * may change the dict meanwhile). A new list, NULL with an error set. */
PyObject *book_filter(Dispatcher *d, int which, int (*is_rec)(PyObject *),
                      int (*keep)(Dispatcher *, PyObject *))
{
    PyObject *dict = book(d, which);
    PyObject *all = dict ? PyDict_Values(dict) : NULL;
    Py_XDECREF(dict);
    PyObject *out = all ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; out != NULL && i < PyList_GET_SIZE(all); i++) {
        PyObject *rec = PyList_GET_ITEM(all, i);
        if (!is_rec(rec)) {
            PyErr_SetString(PyExc_RuntimeError, "the books hold a stranger");
            Py_CLEAR(out);
        } else if (keep(d, rec) && PyList_Append(out, rec) < 0) {
            Py_CLEAR(out);
        }
    }
    Py_XDECREF(all);
    return out;
}

int is_tensor_rec(PyObject *o)
{
    if (Py_IS_TYPE(o, &TensorRecType))
        return 1;
    PyErr_Format(PyExc_TypeError, "a tensor's record is a TensorRec, not %.100s",
                 Py_TYPE(o)->tp_name);
    return 0;
}

/* -- StorageRec ---------------------------------------------------------------- */

static void storage_rec_fill(StorageRec *s, uint64_t ptr, uint64_t nbytes, long long device,
                             int external, long long epoch, uint64_t weak)
{
    s->ptr = ptr;
    s->nbytes = nbytes;
    s->device = device;
    s->external = (char)(external != 0);
    s->declared = 0;
    s->weak = weak;
    s->last_epoch = s->seen_epoch = s->made_epoch = epoch;
    s->rest = 0;
    s->made_stack = 0;
    s->regrown = 0;
}

/* StorageRec(ptr, nbytes, device, external, epoch, skey, weak): no tensors
 * yet, not declared, no twins, last used and seen at ``epoch``. */
static int storage_rec_init(StorageRec *s, PyObject *args, PyObject *kwds)
{
    unsigned long long ptr, nbytes, weak;
    long long device, epoch;
    int external;
    PyObject *skey;
    if (!PyArg_ParseTuple(args, "KKLpLOK", &ptr, &nbytes, &device, &external, &epoch, &skey,
                          &weak))
        return -1;
    PyObject *tids = PySet_New(NULL);
    if (tids == NULL)
        return -1;
    storage_rec_fill(s, ptr, nbytes, device, external, epoch, weak);
    Py_XSETREF(s->tids, tids);
    Py_XSETREF(s->skey, Py_NewRef(skey));
    Py_XSETREF(s->twins, Py_NewRef(Py_None));
    return 0;
}

static const Py_ssize_t storage_rec_owned[] = {
    offsetof(StorageRec, tids), offsetof(StorageRec, skey), offsetof(StorageRec, twins),
    offsetof(StorageRec, gone_stack),
};

OWNED_GC_SLOTS(storage_rec, storage_rec_owned)

static PyMemberDef storage_rec_members[] = {
    {"ptr", T_ULONGLONG, offsetof(StorageRec, ptr), 0, "its memory's address"},
    {"nbytes", T_ULONGLONG, offsetof(StorageRec, nbytes), 0, "its memory's size"},
    {"device", T_LONGLONG, offsetof(StorageRec, device), 0, "its device, -1: host"},
    {"external", T_BOOL, offsetof(StorageRec, external), 0,
     "declared with vt_storage_external (host memory: the CPU allocator is not ours)"},
    {"declared", T_BOOL, offsetof(StorageRec, declared), 0,
     "an external storage open at ptr in the trace"},
    {"bare", T_BOOL, offsetof(StorageRec, bare), READONLY,
     "tracked from the op observer's facts, no Python storage object made for it"},
    {"tids", T_OBJECT_EX, offsetof(StorageRec, tids), 0, "its tensors' records"},
    {"skey", T_OBJECT_EX, offsetof(StorageRec, skey), 0, "identity of the StorageImpl"},
    {"weak", T_ULONGLONG, offsetof(StorageRec, weak), 0, "StorageLife handle, 0: none"},
    {"last_epoch", T_LONGLONG, offsetof(StorageRec, last_epoch), 0,
     "marks seen before its last use"},
    {"seen_epoch", T_LONGLONG, offsetof(StorageRec, seen_epoch), 0,
     "last_epoch as the previous mark saw it"},
    {"rest", T_LONGLONG, offsetof(StorageRec, rest), 0,
     "most marks it stayed unused before a use"},
    {"made_stack", T_UINT, offsetof(StorageRec, made_stack), READONLY,
     "the stack id of the first op that showed a tensor on it, 0: none"},
    {"regrown", T_BOOL, offsetof(StorageRec, regrown), READONLY,
     "made by an op that read a smaller storage made at the same stack in an earlier step "
     "(a value rebuilt larger from itself)"},
    {"twins", T_OBJECT, offsetof(StorageRec, twins), 0,
     "the storages on its very memory, itself included (a copy-on-write clone and its "
     "source; one buffer wrapped twice), shared by all of them; None: its own memory"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject StorageRecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vramtrace._trackfast.StorageRec",
    .tp_basicsize = sizeof(StorageRec),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "StorageRec(ptr, nbytes, device, external, epoch, skey, weak): "
              "the books' record of a storage",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)storage_rec_init,
    .tp_dealloc = dealloc_owned,
    .tp_traverse = storage_rec_traverse,
    .tp_clear = storage_rec_clear,
    .tp_members = storage_rec_members,
};

PyObject *new_storage_rec(uint64_t ptr, uint64_t nbytes, long device, long long epoch,
                          PyObject *skey, uint64_t weak)
{
    PyObject *tids = PySet_New(NULL);
    if (tids == NULL)
        return NULL;
    StorageRec *s = (StorageRec *)StorageRecType.tp_alloc(&StorageRecType, 0);
    if (s == NULL) {
        Py_DECREF(tids);
        return NULL;
    }
    storage_rec_fill(s, ptr, nbytes, device, device < 0, epoch, weak);
    s->tids = tids;
    s->skey = Py_NewRef(skey);
    s->twins = Py_NewRef(Py_None);
    return (PyObject *)s;
}

int is_storage_rec(PyObject *o)
{
    if (Py_IS_TYPE(o, &StorageRecType))
        return 1;
    PyErr_Format(PyExc_TypeError, "a storage's record is a StorageRec, not %.100s",
                 Py_TYPE(o)->tp_name);
    return 0;
}

int records_ready(void)
{
    return PyType_Ready(&TensorRecType) < 0 || PyType_Ready(&StorageRecType) < 0 ? -1 : 0;
}

/* -- recording ----------------------------------------------------------------- */

/* ``name``'s UTF-8 bytes (a new reference), from the books' cache: the
 * same few names come back op after op. */
static PyObject *encoded_name(Dispatcher *d, PyObject *name)
{
    PyObject *enc_cache = book(d, BOOK_ENCODED);
    if (enc_cache == NULL)
        return NULL;
    PyObject *encoded = PyDict_GetItemWithError(enc_cache, name);   /* borrowed */
    if (encoded != NULL) {
        Py_INCREF(encoded);
    } else if (!PyErr_Occurred() &&
               (encoded = PyUnicode_AsEncodedString(name, "utf-8", "replace")) != NULL) {
        if (PyDict_GET_SIZE(enc_cache) >= (1 << 16))
            PyDict_Clear(enc_cache);
        if (PyDict_SetItem(enc_cache, name, encoded) < 0)
            Py_CLEAR(encoded);
    }
    Py_DECREF(enc_cache);
    return encoded;
}

/* record(), with the trace told ``base`` instead of the record's own (NULL:
 * its own): VT_TENSOR_SAVED_ONLY for a tensor a walk found (a saved one's
 * stand-in, a tensor no op showed), whose making is no use of the storage.
 * The books keep the record's base; record() keeps the one said as
 * said_base, which a declaration again repeats. */
int record_as(Dispatcher *d, PyObject *obj, const uint64_t *base, uint64_t *tid)
{
    if (base == NULL)
        return record(d, obj, tid);
    if (!is_tensor_rec(obj))
        return -1;
    TensorRec *r = TREC(obj);
    uint64_t had = r->base;
    r->base = *base;
    int rc = record(d, obj, tid);
    r->base = had;
    return rc;
}

/* The record that stands for a tensor an autograd node saved and no Python
 * object holds (a walk's stand-in for storage ``srec``, named ``name``,
 * made at ``stack_obj``): on the storage, not a view in the books, recorded
 * with the trace told ``said_base`` (VT_TENSOR_SAVED_ONLY: its making is no
 * use of the storage). It ends with the storage. A new reference, NULL on
 * error. */
PyObject *saved_stand_in(Dispatcher *d, PyObject *srec, PyObject *name, PyObject *stack_obj,
                         uint64_t said_base)
{
    StorageRec *s = SREC(srec);
    PyObject *rec = new_tensor_rec(s->skey, name, 0, s->ptr, s->nbytes, stack_obj);
    uint64_t tid;
    if (rec != NULL && (record_as(d, rec, &said_base, &tid) < 0 || PySet_Add(s->tids, rec) < 0))
        Py_CLEAR(rec);
    return rec;
}

/* The TENSOR_NEW of ``rec`` if not made yet; its id. */
int record(Dispatcher *d, PyObject *obj, uint64_t *tid)
{
    if (!is_tensor_rec(obj))
        return -1;
    TensorRec *rec = TREC(obj);
    if (!rec->pending) {
        *tid = rec->tid;
        return 0;
    }
    uint32_t stack;
    if (rec->pend_stack == NULL || rec->pend_stack == Py_None) {
        stack = capture(d);
    } else {
        stack = (uint32_t)PyLong_AsUnsignedLong(rec->pend_stack);
        if (PyErr_Occurred())
            return -1;
    }
    int rc = -1;
    PyObject *by_tid = NULL, *key = NULL;
    PyObject *name = Py_NewRef(rec->name);
    clear_pending(rec);
    PyObject *encoded = encoded_name(d, name);
    if (encoded == NULL)
        goto out;
    *tid = d->tensor_new((const void *)(uintptr_t)rec->pend_ptr, (size_t)rec->pend_nbytes,
                         rec->base, PyBytes_AS_STRING(encoded), stack);
    rec->tid = *tid;
    rec->stack = stack;
    rec->said_base = rec->base;
    by_tid = book(d, BOOK_BY_TID);
    key = PyLong_FromUnsignedLongLong(*tid);
    if (by_tid == NULL || key == NULL || PyDict_SetItem(by_tid, key, obj) < 0)
        goto out;
    rc = 0;
out:
    Py_DECREF(name);
    Py_XDECREF(encoded);
    Py_XDECREF(by_tid);
    Py_XDECREF(key);
    return rc;
}

/* Every recorded tensor still in the books declared again
 * (vt_tensor_again), the oldest first, at most ``limit`` of them: a run
 * longer than the ring overwrites the TENSOR_NEW of what the program still
 * holds, and a snapshot would show its storage without the tensor, its
 * name, or a holder's reference to it (_Marks._declare_tensors_again says when).
 * Each with its storage's rest (storage_rest): the most marks it stayed
 * unused before a use, its usual gap, which `check` cannot see in a window
 * shorter than it, times ``scale`` (1: in marks; a tick's ns where the
 * program ticks instead of marking). The number declared, -1 with an error
 * set. */
Py_ssize_t declare_again(Dispatcher *d, Py_ssize_t limit, uint64_t scale)
{
    if (d->again == NULL)
        return 0;
    PyObject *by_tid = book(d, BOOK_BY_TID), *storages = book(d, BOOK_STORAGES);
    /* a copy: nothing runs meanwhile that changes the books, but a
     * declaration must not meet a dict that changed under it */
    PyObject *all = by_tid && storages ? PyDict_Values(by_tid) : NULL;
    Py_XDECREF(by_tid);
    if (all == NULL) {
        Py_XDECREF(storages);
        return -1;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all) && n < limit; i++) {
        PyObject *obj = PyList_GET_ITEM(all, i);
        if (!is_tensor_rec(obj)) {
            n = -1;
            break;
        }
        TensorRec *rec = TREC(obj);
        if (rec->tid == 0 || rec->pending)
            continue;
        StorageRec *s;
        PyObject *encoded = storage_rec_of(storages, obj, &s) < 0 ? NULL
                                                                  : encoded_name(d, rec->name);
        if (encoded == NULL) {
            n = -1;
            break;
        }
        long long rest = s != NULL ? storage_rest(s) : 0;
        uint64_t r = rest > 0 ? (uint64_t)rest : 0;
        d->again(rec->tid, (const void *)(uintptr_t)rec->pend_ptr, (size_t)rec->pend_nbytes,
                 rec->said_base, PyBytes_AS_STRING(encoded), rec->stack,
                 scale && r > UINT64_MAX / scale ? UINT64_MAX : r * scale);
        Py_DECREF(encoded);
        n++;
    }
    Py_DECREF(all);
    Py_DECREF(storages);
    return n;
}

/* Record the outputs held back, in creation order. */
int flush(Dispatcher *d)
{
    PyObject *pending = book(d, BOOK_PENDING);
    if (pending == NULL)
        return -1;
    int rc = 0;
    if (PyList_Check(pending) && PyList_GET_SIZE(pending) > 0) {
        /* Take the list's items first: recording runs no Python that adds. */
        PyObject *taken = PyList_GetSlice(pending, 0, PyList_GET_SIZE(pending));
        if (taken == NULL || PyList_SetSlice(pending, 0, PyList_GET_SIZE(pending), NULL) < 0) {
            Py_XDECREF(taken);
            Py_DECREF(pending);
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(taken) && rc == 0; i++) {
            uint64_t tid;
            rc = record(d, PyList_GET_ITEM(taken, i), &tid);
        }
        Py_DECREF(taken);
    }
    Py_DECREF(pending);
    return rc;
}

/* The record of tensor ``t`` in ``by_obj`` (the books' id(tensor) -> TensorRec)
 * if tracked (a new reference); NULL if not, or with an exception (the
 * books hold something else for it). */
PyObject *record_of(PyObject *by_obj, PyObject *t)
{
    PyObject *key = PyLong_FromVoidPtr(t);
    PyObject *rec = key ? PyDict_GetItemWithError(by_obj, key) : NULL;
    Py_XDECREF(key);
    if (rec != NULL && !is_tensor_rec(rec)) {
        PyErr_SetString(PyExc_RuntimeError, "a tensor's books hold no tensor record");
        return NULL;
    }
    Py_XINCREF(rec);
    return rec;
}

/* The storage record of tensor record ``rec`` in ``storages`` (the books'
 * storage key -> StorageRec): 0 with *out (borrowed; NULL when the books
 * have none for it), -1 with an error set when ``rec`` is no tensor record
 * or the books hold something else there. */
int storage_rec_of(PyObject *storages, PyObject *rec, StorageRec **out)
{
    *out = NULL;
    if (!is_tensor_rec(rec)) {
        PyErr_SetString(PyExc_RuntimeError, "a tensor's books hold no tensor record");
        return -1;
    }
    PyObject *srec = PyDict_GetItemWithError(storages, TREC(rec)->skey);   /* borrowed */
    if (srec == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!is_storage_rec(srec)) {
        PyErr_SetString(PyExc_RuntimeError, "the storages' book holds a stranger");
        return -1;
    }
    *out = SREC(srec);
    return 0;
}

/* Tracker._set_name: the library renames recorded tensor ``tid``; where it
 * refuses, the tracker's Python asks again through ctypes, which says why. */
int set_name(Dispatcher *d, uint64_t tid, PyObject *label)
{
    const char *s = PyUnicode_AsUTF8(label);
    if (s == NULL)
        return -1;
    if (d->rename != NULL && d->rename(tid, s) == 0)
        return 0;
    PyObject *id = PyLong_FromUnsignedLongLong(tid);
    if (id == NULL)
        return -1;
    PyObject *a[2] = {id, label};
    PyObject *r = call_method(d->tracker, s_set_name, a, 2);
    Py_DECREF(id);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Record ``rec`` goes by ``label`` from now on: a recorded one has the
 * library record the rename (same id), one not recorded yet is recorded
 * under it. 0, or -1 with an error set. */
int name_record(Dispatcher *d, PyObject *rec, PyObject *label)
{
    TensorRec *r = TREC(rec);
    int same = PyUnicode_Compare(r->name, label);
    if (same == -1 && PyErr_Occurred())
        return -1;
    if (same == 0)
        return 0;
    if (!r->pending && set_name(d, r->tid, label) < 0)
        return -1;
    Py_INCREF(label);
    Py_SETREF(r->name, label);
    return 0;
}
