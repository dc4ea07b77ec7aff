/* The rare turns of the storage books: memory freed behind our back and
 * reused (a declared storage overlapped by a new one), twins on one memory
 * (a copy-on-write clone, one buffer wrapped twice), a storage on new
 * memory (resize_), a tensor moved to another storage (set_, a sweep that
 * finds it elsewhere). storages.c declares, closes and ends storages; the
 * rules here decide which of those a turn takes. */
#include "trackfast.h"

/* The key of ``ptr`` in BOOK_AT_PTR, and the record there (borrowed, NULL
 * when none or on error: *key NULL then). */
static PyObject *declared_at(Dispatcher *d, uint64_t ptr, PyObject **key)
{
    *key = PyLong_FromUnsignedLongLong(ptr);
    return *key ? PyDict_GetItemWithError(d->containers[BOOK_AT_PTR], *key) : NULL;
}

/* ``srec`` leaves its twins (at least one: a storage left alone has no
 * twins), which keep the memory; the declaration passes to one of them if
 * it held it. Nothing to record. 0, or -1 with an error set. */
int leave_twins(Dispatcher *d, PyObject *srec)
{
    StorageRec *s = SREC(srec);
    PyObject *twins = s->twins;   /* its reference passes to this function */
    s->twins = Py_NewRef(Py_None);
    if (!PySet_Check(twins) || PySet_Discard(twins, srec) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a storage's twins are no set");
        Py_DECREF(twins);
        return -1;
    }
    PyObject *it = PyObject_GetIter(twins), *heir = it ? PyIter_Next(it) : NULL;
    Py_XDECREF(it);
    int rc = -1;
    if (heir == NULL || !is_storage_rec(heir)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a storage's twins hold no storage");
        goto out;
    }
    if (PySet_GET_SIZE(twins) == 1)
        Py_SETREF(SREC(heir)->twins, Py_NewRef(Py_None));
    rc = 0;
    if (s->declared) {
        SREC(heir)->declared = 1;
        s->declared = 0;
        PyObject *key, *there = declared_at(d, s->ptr, &key);
        if (key == NULL || (there == NULL && PyErr_Occurred()))
            rc = -1;
        else if (there == srec)
            rc = PyDict_SetItem(d->containers[BOOK_AT_PTR], key, heir);
        Py_XDECREF(key);
    }
out:
    Py_XDECREF(heir);
    Py_DECREF(twins);
    return rc;
}

/* Before ``srec``'s memory is declared (declare(), which found a declared
 * storage overlapping it): every storage known at an overlapping address
 * is checked as one that may be gone (its memory was freed behind our back
 * and the allocator reused it: a new storage) -- unless that storage is
 * alive on this very memory: then ``srec`` is its twin, the memory, open
 * already, stays open while either lives, and this says 1 (nothing to
 * declare). 0: declare it; -1: error. */
int overlapped(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    StorageRec *s = SREC(srec);
    PyObject *starts = d->containers[BOOK_STARTS];
    Py_ssize_t i = declared_bisect(starts, s->ptr + s->nbytes) - 1;
    if (PyErr_Occurred())
        return -1;
    while (i >= 0) {
        PyObject *old = PyDict_GetItemWithError(d->containers[BOOK_AT_PTR],
                                                PyList_GET_ITEM(starts, i));
        if (old == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (!is_storage_rec(old)) {
            PyErr_SetString(PyExc_TypeError, "the declared storages' books hold a stranger");
            return -1;
        }
        Py_INCREF(old);
        if (SREC(old)->ptr + SREC(old)->nbytes <= s->ptr) {
            Py_DECREF(old);
            return 0;
        }
        PyObject *key = NULL, *there = NULL;
        int rc = check_storage(d, old, stack_obj, 1);
        if (rc == 0) {
            there = declared_at(d, SREC(old)->ptr, &key);
            rc = there == NULL && PyErr_Occurred() ? -1 : 0;
        }
        Py_XDECREF(key);
        if (rc == 0 && s->weak && there == old && SREC(old)->declared &&
            SREC(old)->ptr == s->ptr && SREC(old)->nbytes == s->nbytes) {
            StorageRec *o = SREC(old);
            if (o->twins == NULL || o->twins == Py_None) {
                PyObject *set = PySet_New(NULL);
                if (set == NULL || PySet_Add(set, old) < 0) {
                    Py_XDECREF(set);
                    Py_DECREF(old);
                    return -1;
                }
                Py_XSETREF(o->twins, set);
            }
            rc = PySet_Add(o->twins, srec) < 0 ? -1 : 1;
            if (rc == 1)
                Py_XSETREF(s->twins, Py_NewRef(o->twins));
        }
        Py_DECREF(old);
        if (rc != 0)
            return rc;
        /* the check may have ended it (out of the starts) */
        i = (i < PyList_GET_SIZE(starts) ? i : PyList_GET_SIZE(starts)) - 1;
    }
    return 0;
}

/* Tensor record ``rec``'s tensor lives on other memory now: the record
 * ends and the tensor is recorded anew (same name) on the memory it has
 * now, with ``stack_obj`` (None: captured here). Its storage is left as it
 * is (migrate() checks it). 0, or -1 with an error set. */
int move_tensor(Dispatcher *d, PyObject *rec, PyObject *stack_obj)
{
    TensorRec *r = TREC(rec);
    PyObject *t = r->ref != NULL && PyWeakref_Check(r->ref) ? PyWeakref_GetObject(r->ref) : Py_None;
    if (t == NULL)
        return -1;
    Py_INCREF(t);   /* borrowed until now; forget() drops the weak reference */
    PyObject *name = Py_NewRef(r->name), *stack = NULL, *got = NULL;
    int rc = -1;
    if (forget(d, rec) < 0)   /* the tensor out of the index too */
        goto out;
    rc = 0;
    if (t == Py_None)
        goto out;
    rc = -1;
    stack = stack_obj != Py_None ? Py_NewRef(stack_obj) : PyLong_FromUnsignedLong(capture(d));
    got = stack ? track(d, t, NULL, name, stack, Py_None, 0, NULL) : NULL;
    rc = got == NULL ? -1 : 0;
out:
    Py_DECREF(t);
    Py_DECREF(name);
    Py_XDECREF(stack);
    Py_XDECREF(got);
    return rc;
}

/* Every tensor the books hold on storage ``srec`` lives on other memory:
 * each is recorded anew where it is now (move_tensor()). */
int move_tensors(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    if (PySet_GET_SIZE(SREC(srec)->tids) == 0)
        return 0;
    PyObject *moved = PySequence_List(SREC(srec)->tids);
    if (moved == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(moved); i++)
        rc = move_tensor(d, PyList_GET_ITEM(moved, i), stack_obj);
    Py_DECREF(moved);
    return rc;
}

/* What the books hold of storage ``srec`` compared with the storage
 * itself, read through its weak handle: gone, it ends; on new memory
 * (resize_, resize_(0)), the old memory's life ends here, the new memory is
 * a new storage in the trace and its tensors are recorded anew on it. A
 * storage without a handle cannot be asked: ``force`` (its address was
 * reused) ends it. ``stack_obj``: the stack of what ends (None: captured
 * here). 0, or -1 with an error set. */
int check_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj, int force)
{
    StorageRec *s = SREC(srec);
    if (s->weak == 0 || d->life_now == NULL)   /* no handle to ask */
        return force ? end_storage(d, srec, stack_obj) : 0;
    uint64_t now[2];
    int alive = storage_read(d, s, now);
    if (alive < 0)
        return -1;
    if (alive == 0)
        return end_storage(d, srec, stack_obj);
    if (now[0] == s->ptr && now[1] == s->nbytes)
        return 0;
    if (s->external && undeclare(d, srec, stack_obj) < 0)
        return -1;
    s->ptr = now[0];
    s->nbytes = now[1];
    if (s->nbytes > 0 && s->ptr != 0 && s->external && declare(d, srec, stack_obj) < 0)
        return -1;
    return move_tensors(d, srec, stack_obj);
}
