/* Tensors seen for the first time, and their deaths. */
#include "trackfast.h"

/* The callback of a tracked tensor's weak reference: what died (the
 * dispatcher, the record, the tensor's id as the books key it), called as
 * callback(weakref). One object per tensor (a tuple bound to a C function
 * was three). */
typedef struct {
    PyObject_HEAD
    Dispatcher *d;
    PyObject *rec;
    PyObject *key;
    vectorcallfunc vectorcall;
} DeathCall;

static PyObject *death_call(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames);

static const Py_ssize_t death_call_owned[] = {
    offsetof(DeathCall, d), offsetof(DeathCall, rec), offsetof(DeathCall, key),
};

OWNED_GC_SLOTS(death_call, death_call_owned)

PyTypeObject DeathCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vramtrace._trackfast.DeathCall",
    .tp_basicsize = sizeof(DeathCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "weakref callback: a tracked tensor died",
    .tp_vectorcall_offset = offsetof(DeathCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = dealloc_owned,
    .tp_traverse = death_call_traverse,
    .tp_clear = death_call_clear,
};

static PyObject *new_death_call(Dispatcher *d, PyObject *rec, PyObject *key)
{
    DeathCall *c = PyObject_GC_New(DeathCall, &DeathCallType);
    if (c == NULL)
        return NULL;
    c->d = (Dispatcher *)Py_NewRef((PyObject *)d);
    c->rec = Py_NewRef(rec);
    c->key = Py_NewRef(key);
    c->vectorcall = death_call;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

/* A tensor's storage as track() needs it, asked of Python: the storage
 * object (*st, a new reference), its data pointer and size, and its key
 * (_cdata, the StorageImpl's address; else the data pointer). The data
 * pointer comes from torch._C._data_address(t) where there is one: the
 * storage's data_ptr() would materialize a copy-on-write storage. 1: found,
 * 0: none to track (no storage: sparse, meta, functional wrappers...; or no
 * memory), -1: error. */
static int storage_of(PyObject *t, PyObject **st, unsigned long long *ptr,
                      unsigned long long *nbytes, PyObject **skey)
{
    long made = gc_held_count();   /* PyTorch keeps the storage's object: the program's */
    *st = call0(t, s_untyped_storage);
    gc_count_as_program(gc_held_count() - made);
    if (*st == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *v = call0(*st, s_nbytes);
    long long n = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    v = n < 0 ? NULL
        : data_address_fn != NULL ? PyObject_CallOneArg(data_address_fn, t) : call0(*st, s_data_ptr);
    *ptr = v ? PyLong_AsUnsignedLongLong(v) : 0;
    Py_XDECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (n <= 0 || *ptr == 0)
        return 0;
    *nbytes = (unsigned long long)n;
    *skey = PyObject_GetAttr(*st, s_cdata);
    if (*skey == NULL) {
        PyErr_Clear();
        *skey = PyLong_FromUnsignedLongLong(*ptr);
    } else if (!PyObject_IsTrue(*skey)) {
        Py_DECREF(*skey);
        *skey = PyLong_FromUnsignedLongLong(*ptr);
    }
    return *skey == NULL ? -1 : 1;
}

/* t.data_ptr() into *tptr, without materializing a copy-on-write storage
 * where torch._C._data_address gives the storage's address ``storage_ptr``
 * without it: that plus storage_offset() x element_size(). 0, or -1 with
 * a Python error set. */
static int tensor_address(PyObject *t, unsigned long long storage_ptr, unsigned long long *tptr)
{
    if (data_address_fn == NULL) {
        PyObject *v = call0(t, s_data_ptr);
        *tptr = v ? PyLong_AsUnsignedLongLong(v) : 0;
        Py_XDECREF(v);
        return v == NULL || PyErr_Occurred() ? -1 : 0;
    }
    PyObject *off = call0(t, s_storage_offset), *size = off ? call0(t, s_element_size) : NULL;
    long long o = off ? PyLong_AsLongLong(off) : -1, e = size ? PyLong_AsLongLong(size) : -1;
    Py_XDECREF(off);
    Py_XDECREF(size);
    if (off == NULL || size == NULL || PyErr_Occurred())
        return -1;
    *tptr = storage_ptr + (unsigned long long)(o * e);
    return 0;
}

/* The same from the op observer's facts, without Python. */
static int storage_of_facts(const vt__tensor_facts *f, unsigned long long *ptr,
                            unsigned long long *nbytes, PyObject **skey)
{
    *ptr = f->storage_ptr;
    *nbytes = f->storage_nbytes;
    if (*nbytes == 0 || *ptr == 0)
        return 0;
    *skey = PyLong_FromUnsignedLongLong(f->storage);
    return *skey == NULL ? -1 : 1;
}

/* ``rec``'s tensor lives on another storage now (move_tensor(): the old
 * record ends, the tensor is recorded anew on its memory now, with
 * ``stack_obj``); the storage it left, if no tensor is left on it, may have
 * gone with the move: its release is this op's, not the next mark's
 * (check_storage()). */
int migrate(Dispatcher *d, PyObject *rec, PyObject *stack_obj)
{
    PyObject *storages = book(d, BOOK_STORAGES);
    PyObject *srec = storages ? PyDict_GetItemWithError(storages, TREC(rec)->skey) : NULL;
    Py_XINCREF(srec);
    Py_XDECREF(storages);
    if (storages == NULL || (srec == NULL && PyErr_Occurred()) ||
        (srec != NULL && !is_storage_rec(srec))) {
        Py_XDECREF(srec);
        return -1;
    }
    int rc = move_tensor(d, rec, stack_obj);
    if (rc == 0 && srec != NULL && PySet_GET_SIZE(SREC(srec)->tids) == 0)
        rc = check_storage(d, srec, stack_obj, 0);
    Py_XDECREF(srec);
    return rc;
}

/* An output of an op that may give a tensor other memory (set_, resize_)
 * whose record is ``rec``: when its storage is not what the books hold,
 * they follow it (check_storage(): the same storage on new memory;
 * migrate(): another storage). A new reference to the tensor's
 * record after that, None when it is no longer tracked; NULL on error. */
PyObject *reshaped(Dispatcher *d, PyObject *t, PyObject *rec, PyObject *stack_obj)
{
    PyObject *st = NULL, *skey = NULL, *storages = NULL, *srec = NULL, *by_obj = NULL,
        *key = NULL, *got = NULL;
    unsigned long long ptr = 0, nbytes = 0;
    int found = storage_of(t, &st, &ptr, &nbytes, &skey);
    Py_CLEAR(st);
    if (found < 0)
        return NULL;
    storages = book(d, BOOK_STORAGES);
    if (storages == NULL)
        goto out;
    srec = PyDict_GetItemWithError(storages, TREC(rec)->skey);
    Py_XINCREF(srec);
    if ((srec == NULL && PyErr_Occurred()) || (srec != NULL && !is_storage_rec(srec)))
        goto out;
    int same_key = found > 0 ? PyObject_RichCompareBool(skey, TREC(rec)->skey, Py_EQ) : 0;
    if (same_key < 0)
        goto out;
    if (srec != NULL && same_key && ptr == SREC(srec)->ptr && nbytes == SREC(srec)->nbytes) {
        got = Py_NewRef(rec);
        goto out;
    }
    if (srec != NULL && same_key) {   /* the same storage on other memory */
        if (check_storage(d, srec, stack_obj, 0) < 0)
            goto out;
    } else if (migrate(d, rec, stack_obj) < 0) {
        goto out;
    }
    by_obj = book(d, BOOK_BY_OBJ);
    key = by_obj ? PyLong_FromVoidPtr(t) : NULL;
    got = key ? PyDict_GetItemWithError(by_obj, key) : NULL;
    if (got != NULL)
        Py_INCREF(got);
    else if (key != NULL && !PyErr_Occurred())
        got = Py_NewRef(Py_None);
out:
    Py_XDECREF(skey);
    Py_XDECREF(storages);
    Py_XDECREF(srec);
    Py_XDECREF(by_obj);
    Py_XDECREF(key);
    return got;
}

/* Tensor ``t`` into the books under ``name``, first seen at ``stack_obj``
 * (its view base first; its storage too, if new; recorded now, the trace
 * told ``said_base`` for its base where not NULL (record_as()), or with the
 * op's other outputs when ``defer``). ``f``: what the op observer read of
 * the tensor (NULL, or no storage in it: asked here of Python). Returns a new
 * reference to the tensor's record, or None for a tensor without storage. */
PyObject *track(Dispatcher *d, PyObject *t, const vt__tensor_facts *f, PyObject *name,
                PyObject *stack_obj, PyObject *view_of, int defer, const uint64_t *said_base)
{
    PyObject *by_obj = NULL, *storages = NULL, *st = NULL, *srec = NULL, *rec = NULL,
        *key = NULL, *base = NULL, *user = NULL, *cb = NULL, *ref = NULL, *got = NULL;
    by_obj = book(d, BOOK_BY_OBJ);
    key = PyLong_FromVoidPtr(t);
    if (by_obj == NULL || key == NULL)
        goto out;
    rec = PyDict_GetItemWithError(by_obj, key);
    if (rec != NULL) {
        Py_INCREF(rec);
        got = rec;
        rec = NULL;
        goto out;
    }
    if (PyErr_Occurred())
        goto out;
    if (f != NULL && (f->storage == 0 || d->make_weak == NULL))
        f = NULL;

    /* (data_ptr, nbytes, identity) of its storage; none: not tracked */
    unsigned long long ptr, nbytes;
    PyObject *skey;
    int found = f != NULL ? storage_of_facts(f, &ptr, &nbytes, &skey)
                          : storage_of(t, &st, &ptr, &nbytes, &skey);
    if (found <= 0) {
        if (found == 0)
            got = Py_NewRef(Py_None);
        goto out;
    }
    d->from_facts += f != NULL;
    storages = book(d, BOOK_STORAGES);
    srec = storages ? PyDict_GetItemWithError(storages, skey) : NULL;
    Py_XINCREF(srec);
    uint64_t sptr = 0, snbytes = 0;
    if (srec != NULL && !is_storage_rec(srec)) {
        Py_DECREF(skey);
        goto out;
    }
    if (srec != NULL) {
        sptr = SREC(srec)->ptr;
        snbytes = SREC(srec)->nbytes;
    } else if (!PyErr_Occurred()) {
        srec = new_storage(d, t, st, f, ptr, (uint64_t)nbytes, skey, stack_obj);
        if (srec == NULL) {
            Py_DECREF(skey);
            goto out;
        }
        sptr = ptr;
        snbytes = (uint64_t)nbytes;
    }
    if (srec != NULL && (sptr != ptr || snbytes != (uint64_t)nbytes)) {
        /* its memory moved (resize_): check_storage() compares the
         * storage with what it is now (same storage on new memory, or a
         * new one), then the tensor goes on the storage the books hold */
        int checked = check_storage(d, srec, stack_obj, 0);
        Py_CLEAR(srec);
        if (checked < 0) {
            Py_DECREF(skey);
            goto out;
        }
        srec = PyDict_GetItemWithError(storages, skey);
        Py_XINCREF(srec);
        if (srec != NULL && !is_storage_rec(srec)) {
            Py_DECREF(skey);
            goto out;
        }
        if (srec == NULL && !PyErr_Occurred())
            srec = new_storage(d, t, st, f, ptr, (uint64_t)nbytes, skey, stack_obj);
    }
    if (srec == NULL) {
        Py_DECREF(skey);
        goto out;
    }
    Py_CLEAR(st);

    /* its view base, tracked first (its id is the view's base) */
    uint64_t base_id = 0;
    if (f != NULL && !f->is_view) {
        base = Py_NewRef(Py_None);
    } else {
        long made = gc_held_count();   /* a base's object, kept by PyTorch: the program's */
        base = PyObject_GetAttr(t, s_base_attr);
        gc_count_as_program(gc_held_count() - made);
    }
    if (base == NULL) {
        PyErr_Clear();
        base = Py_NewRef(Py_None);
    }
    if (base == Py_None) {
        Py_DECREF(base);
        base = Py_NewRef(view_of);
    }
    if (base != Py_None) {
        PyObject *brec = track(d, base, NULL, s_view_base, stack_obj, Py_None, 0, NULL);
        if (brec == NULL) {
            Py_DECREF(skey);
            goto out;
        }
        if (brec != Py_None) {
            int bad = !is_tensor_rec(brec) ||
                      ((base_id = TREC(brec)->base) == 0 && record(d, brec, &base_id) < 0);
            if (bad) {
                Py_DECREF(brec);
                Py_DECREF(skey);
                goto out;
            }
        }
        Py_DECREF(brec);
    }
    if (PyDict_GET_SIZE(pending_names) > 0) {   /* vtt.name() before we saw it */
        user = call_python(take_pending_name_fn, &t, 1);
        if (user == NULL) {
            Py_DECREF(skey);
            goto out;
        }
        if (user != Py_None)
            name = user;
    }
    unsigned long long tptr = ptr, tnbytes;
    if (f != NULL) {
        tptr = f->tensor_ptr;
        tnbytes = f->tensor_nbytes;
    } else {
        if (tensor_address(t, ptr, &tptr) < 0) {
            PyErr_Clear();
            tptr = ptr;
        }
        PyObject *v = PyObject_GetAttr(t, s_nbytes);
        tnbytes = v ? PyLong_AsUnsignedLongLong(v) : 0;
        Py_XDECREF(v);
        if (PyErr_Occurred()) {
            Py_DECREF(skey);
            goto out;
        }
    }
    rec = new_tensor_rec(skey, name, base_id, tptr, tnbytes, stack_obj);
    Py_DECREF(skey);
    if (rec == NULL)
        goto out;
    /* CPython drops its last reference to the callback after the callback
     * returns, outside the tracker's hold on the collector's count: the
     * callback hands itself to gc_free_later() (gc_schedule.c). */
    cb = new_death_call(d, rec, key);
    ref = cb ? PyWeakref_NewRef(t, cb) : NULL;
    if (ref == NULL)
        goto out;
    Py_XSETREF(TREC(rec)->ref, Py_NewRef(ref));
    if (PyDict_SetItem(by_obj, key, rec) < 0 || PySet_Add(SREC(srec)->tids, rec) < 0)
        goto out;
    if (SREC(srec)->made_stack == 0 && PyLong_CheckExact(stack_obj)) {
        /* where the first op that showed a tensor on it ran: a tensor
         * found on it later, which no op showed, is named by that line */
        unsigned long made = PyLong_AsUnsignedLong(stack_obj);
        if (made == (unsigned long)-1 && PyErr_Occurred())
            PyErr_Clear();
        else
            SREC(srec)->made_stack = (uint32_t)made;
    }
    if (defer) {
        PyObject *pending = book(d, BOOK_PENDING);
        int bad = pending == NULL || PyList_Append(pending, rec) < 0;
        Py_XDECREF(pending);
        if (bad)
            goto out;
    } else {
        uint64_t tid;
        if (record_as(d, rec, said_base, &tid) < 0)
            goto out;
    }
    got = rec;
    rec = NULL;
out:
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    Py_XDECREF(st);
    Py_XDECREF(srec);
    Py_XDECREF(rec);
    Py_XDECREF(key);
    Py_XDECREF(base);
    Py_XDECREF(user);
    Py_XDECREF(cb);
    Py_XDECREF(ref);
    return got;
}

/* The index of live tensors (BOOK_BY_OBJ) lets go of ``key`` (a tensor's
 * id) where it names ``rec`` (another record there is a newer tensor's at
 * a reused id). 0, or -1 with an error set. */
static int unindex(Dispatcher *d, PyObject *key, PyObject *rec)
{
    PyObject *by_obj = d->containers[BOOK_BY_OBJ];
    PyObject *cur = PyDict_GetItemWithError(by_obj, key);
    if (cur == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return cur == rec ? PyDict_DelItem(by_obj, key) : 0;
}

/* The books forget tensor record ``rec``, recorded or pending (it died, or
 * lives on other memory now, or only views hold it): out of the index of
 * live tensors (where its tensor lives on), its storage's tensors, the
 * recorded ones, the holders' targets; its life ends in the trace. Its
 * storage is left as it is (drop() and migrate() decide). 1: it was in the
 * books, 0: it was not (dropped already), -1: error. */
int forget(Dispatcher *d, PyObject *rec)
{
    TensorRec *r = TREC(rec);
    int rc = -1;
    PyObject *storages = NULL, *by_tid = NULL, *tidkey = NULL;
    PyObject *t = r->ref != NULL && PyWeakref_Check(r->ref) ? PyWeakref_GetObject(r->ref) : Py_None;
    if (t != NULL && t != Py_None) {   /* borrowed: alive while its weak reference is */
        PyObject *key = PyLong_FromVoidPtr(t);
        int bad = key == NULL || unindex(d, key, rec) < 0;
        Py_XDECREF(key);
        if (bad)
            return -1;
    } else if (t == NULL) {
        return -1;
    }
    Py_XSETREF(r->ref, Py_NewRef(Py_None));   /* its death callback is moot */
    storages = book(d, BOOK_STORAGES);
    if (storages == NULL)
        goto out;
    PyObject *srec = PyDict_GetItemWithError(storages, r->skey);   /* borrowed */
    if (srec == NULL && PyErr_Occurred())
        goto out;
    if (srec != NULL && (!is_storage_rec(srec) || PySet_Discard(SREC(srec)->tids, rec) < 0))
        goto out;
    if (r->tid == 0) {   /* an output not recorded yet */
        PyObject *pending = book(d, BOOK_PENDING);
        if (pending == NULL || !PyList_Check(pending)) {
            Py_XDECREF(pending);
            goto out;
        }
        int in = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pending); i++) {
            if (PyList_GET_ITEM(pending, i) == rec) {
                in = PyList_SetSlice(pending, i, i + 1, NULL) < 0 ? -1 : 1;
                break;
            }
        }
        Py_DECREF(pending);
        clear_pending(r);
        rc = in;
        goto out;
    }
    by_tid = book(d, BOOK_BY_TID);
    tidkey = PyLong_FromUnsignedLongLong(r->tid);
    if (by_tid == NULL || tidkey == NULL)
        goto out;
    PyObject *had = PyDict_GetItemWithError(by_tid, tidkey);
    if (had == NULL) {
        rc = PyErr_Occurred() ? -1 : 0;   /* dropped already */
        goto out;
    }
    if (PyDict_DelItem(by_tid, tidkey) < 0)
        goto out;
    d->drop(r->tid);
    if (d->targeted == NULL) {   /* its HolderBook's, kept: a death each asks it */
        PyObject *holders = PyObject_GetAttr(d->tracker, s_book);
        PyObject *targeted = holders ? PyObject_GetAttr(holders, s_targeted) : NULL;
        if (targeted == NULL) {
            Py_XDECREF(holders);
            goto out;
        }
        Py_XSETREF(d->holders, holders);
        Py_XSETREF(d->targeted, targeted);
    }
    int is_target = PySet_Check(d->targeted) ? PySet_Contains(d->targeted, tidkey) : 1;
    if (is_target < 0)
        goto out;
    if (is_target) {
        PyObject *res = PyObject_CallMethodOneArg(d->holders, s_forget_target, tidkey);
        if (res == NULL)
            goto out;
        Py_DECREF(res);
    }
    rc = 1;
out:
    Py_XDECREF(storages);
    Py_XDECREF(by_tid);
    Py_XDECREF(tidkey);
    return rc;
}

/* Tensor record ``rec`` ends: its death, with ``stack_obj`` for its
 * storage's release (None: captured there if needed); a storage left
 * without tensors is orphaned (released now, or once nothing else holds
 * it). */
int drop(Dispatcher *d, PyObject *rec, PyObject *stack_obj)
{
    if (!is_tensor_rec(rec))
        return -1;
    PyObject *skey = Py_NewRef(TREC(rec)->skey);
    int in = forget(d, rec);
    int rc = in < 0 ? -1 : 0;
    if (in > 0) {
        PyObject *storages = book(d, BOOK_STORAGES);
        PyObject *srec = storages ? PyDict_GetItemWithError(storages, skey) : NULL;
        Py_XINCREF(srec);
        if (storages == NULL || (srec == NULL && PyErr_Occurred()))
            rc = -1;
        else if (srec != NULL && is_storage_rec(srec) && PySet_GET_SIZE(SREC(srec)->tids) == 0)
            rc = orphaned(d, srec, stack_obj);
        Py_XDECREF(srec);
        Py_XDECREF(storages);
    }
    Py_DECREF(skey);
    return rc;
}

/* A tracked tensor died (``key``: its id, the books' key for it). Inside
 * the tracker's own collection its death waits until the holders are
 * recorded (Tracker._gc_dead); inside another collection the collection's
 * holder refers to it first (Tracker._collected). */
static int died(Dispatcher *d, PyObject *rec, PyObject *key)
{
    PyObject *tracker = d->tracker;
    if (!is_tensor_rec(rec))
        return -1;
    if (TREC(rec)->ref == NULL || TREC(rec)->ref == Py_None)
        return 0;   /* renamed, or the tracker was closed */
    /* a collection frees what dies on its own thread only */
    unsigned long me = PyThread_get_thread_ident();
    int manual = d->manual_gc == me, in_gc = d->in_gc == me;
    double began = now_s();
    int rc = -1;
    PyObject *tidobj = NULL, *dead = NULL, *pair = NULL;
    if (unindex(d, key, rec) < 0)
        goto out;
    if (!manual && settle(d, 0) < 0)
        goto out;
    uint64_t tid;
    if (record(d, rec, &tid) < 0)
        goto out;
    tidobj = PyLong_FromUnsignedLongLong(tid);
    if (tidobj == NULL)
        goto out;
    if (manual) {
        dead = book(d, BOOK_GC_DEAD);
        pair = PyTuple_Pack(2, tidobj, key);
        rc = dead == NULL || pair == NULL || PyList_Append(dead, pair) < 0 ? -1 : 0;
        goto out;
    }
    if (in_gc) {
        PyObject *r = call_method(tracker, s_collected, &tidobj, 1);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    rc = drop(d, rec, Py_None);
out:
    Py_XDECREF(tidobj);
    Py_XDECREF(dead);
    Py_XDECREF(pair);
    add_busy(d, began);
    return rc;
}

/* DeathCall(weak): a tensor tracked here died. Never raises into the
 * program: a failure is counted in Tracker.errors. */
static PyObject *death_call(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    DeathCall *c = (DeathCall *)self;
    Dispatcher *d = c->d;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "DeathCall(weakref)");
        return NULL;
    }
    PyObject *weak = args[0];
    if (d == NULL || d->tracker == NULL || c->rec == NULL)
        Py_RETURN_NONE;
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    long held = gc_hold();   /* the books' changes are not the program's allocations */
    /* the weak reference and this callback: their last references go
     * after this returns (the callback is alive: CPython holds it now) */
    gc_free_later(weak);
    gc_free_later(self);
    if (died(d, c->rec, c->key) < 0) {
        PyErr_Clear();
        d->errors++;
    }
    gc_release(held);
    PyErr_Restore(exc_type, exc, tb);
    Py_RETURN_NONE;
}

/* Tracker._sweep's tensor half, as a filter: the recorded tensors, alive,
 * whose storage may not be the one their record names (set_ or .data =
 * outside any op the mode sees). torch._C._storage_id tells without making
 * a storage object; without it every live tensor is a candidate. The
 * Python rule decides for each. A new list. */
static int may_have_moved(Dispatcher *d, PyObject *rec)
{
    PyObject *ref = TREC(rec)->ref ? TREC(rec)->ref : Py_None;
    PyObject *t = PyWeakref_Check(ref) ? PyWeakref_GetObject(ref) : NULL;   /* borrowed */
    int candidate = 0;
    uint64_t key;
    if (ref == Py_None || t == Py_None) {
        candidate = 0;   /* renamed, or dead: nothing to compare */
    } else if (t == NULL) {
        PyErr_Clear();
        candidate = 1;
    } else if (d->storage_key != NULL && d->storage_key(tensor_impl_of(t), &key) == 1) {
        /* the observer's read, no Python call: the same key */
        unsigned long long was = PyLong_AsUnsignedLongLong(TREC(rec)->skey);
        candidate = (was == (unsigned long long)-1 && PyErr_Occurred()) || was != key;
        PyErr_Clear();
    } else if (storage_id_fn == NULL) {
        candidate = 1;
    } else {
        Py_INCREF(t);
        PyObject *id = PyObject_CallOneArg(storage_id_fn, t);
        Py_DECREF(t);
        candidate = id ? PyObject_RichCompareBool(id, TREC(rec)->skey, Py_NE) : 1;
        if (candidate < 0)
            candidate = 1;
        PyErr_Clear();
        Py_XDECREF(id);
    }
    return candidate;
}

PyObject *tensors_to_check(Dispatcher *d)
{
    return book_filter(d, BOOK_BY_TID, is_tensor_rec, may_have_moved);
}
