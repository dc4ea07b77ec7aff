/* Storages: new ones into the books (host ones declared as external: the
 * CPU allocator is not ours), and their end. */
#include "trackfast.h"

/* Index of the first start >= ptr in the sorted list of ints ``starts``. */
static Py_ssize_t bisect_left(PyObject *starts, uint64_t ptr)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        uint64_t v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(starts, mid));
        if (v == (uint64_t)-1 && PyErr_Occurred())
            return -1;
        if (v < ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Tracker._declare, when no declared storage overlaps ``srec``'s memory
 * (the Python one ends those first: their memory was freed behind our
 * back and reused). */
static int declare(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    PyObject *tracker = d->tracker;
    uint64_t ptr, nbytes;
    if (get_u64(srec, s_ptr, &ptr) < 0 || get_u64(srec, s_nbytes, &nbytes) < 0)
        return -1;
    int rc = -1;
    PyObject *starts = tracker_attr(d, s_starts);
    PyObject *at_ptr = tracker_attr(d, s_at_ptr);
    PyObject *key = NULL;
    if (starts == NULL || at_ptr == NULL || !PyList_Check(starts))
        goto out;
    /* the declared storage starting last before our end, if any, must end
     * at or before our start */
    Py_ssize_t i = bisect_left(starts, ptr + nbytes);
    if (i < 0)
        goto out;
    if (i > 0) {
        PyObject *prev = PyDict_GetItemWithError(at_ptr, PyList_GET_ITEM(starts, i - 1));
        uint64_t pptr, pn;
        if (prev == NULL && PyErr_Occurred())
            goto out;
        if (prev != NULL && (get_u64(prev, s_ptr, &pptr) < 0 || get_u64(prev, s_nbytes, &pn) < 0))
            goto out;
        if (prev != NULL && pptr + pn > ptr) {
            PyObject *a[2] = {srec, stack_obj};
            PyObject *r = call_method(tracker, s_declare, a, 2);
            Py_XDECREF(r);
            rc = r == NULL ? -1 : 0;
            goto out;
        }
    }
    int err = d->external((const void *)(uintptr_t)ptr, (size_t)nbytes, -1,
                          (uint32_t)PyLong_AsUnsignedLong(stack_obj));
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "vt_storage_external_stack(%#llx, %llu) failed (%d)",
                     (unsigned long long)ptr, (unsigned long long)nbytes, err);
        goto out;
    }
    if (set_attr(srec, s_declared, Py_True) < 0)
        goto out;
    key = PyLong_FromUnsignedLongLong(ptr);
    i = key ? bisect_left(starts, ptr) : -1;
    if (i < 0 || PyList_Insert(starts, i, key) < 0 || PyDict_SetItem(at_ptr, key, srec) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(starts);
    Py_XDECREF(at_ptr);
    Py_XDECREF(key);
    return rc;
}

/* Tracker._end_storage + _undeclare for a storage whose last tracked
 * tensor died and that nothing else holds: its release is recorded with
 * ``stack_obj`` and it leaves the books. A storage with twins (another
 * StorageImpl on its very memory: copy-on-write, one buffer wrapped twice)
 * is Tracker._end_storage's: the memory lives on with them. */
static int end_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    PyObject *twins = get_attr(srec, s_twins);
    if (twins == NULL)
        return -1;
    if (twins != Py_None) {
        Py_DECREF(twins);
        PyObject *a[2] = {srec, stack_obj};
        PyObject *r = call_method(d->tracker, s_end_storage, a, 2);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    Py_DECREF(twins);
    int rc = -1;
    PyObject *storages = tracker_attr(d, s_storages);
    PyObject *skey = get_attr(srec, s_skey);
    PyObject *starts = NULL, *at_ptr = NULL, *key = NULL, *weak = NULL;
    if (storages == NULL || skey == NULL)
        goto out;
    PyObject *cur = PyDict_GetItemWithError(storages, skey);
    if (cur == NULL && PyErr_Occurred())
        goto out;
    if (cur == srec && PyDict_DelItem(storages, skey) < 0)
        goto out;
    int declared = attr_true(srec, s_declared);
    if (declared < 0)
        goto out;
    if (declared) {
        uint64_t ptr;
        if (set_attr(srec, s_declared, Py_False) < 0 || get_u64(srec, s_ptr, &ptr) < 0)
            goto out;
        starts = tracker_attr(d, s_starts);
        at_ptr = tracker_attr(d, s_at_ptr);
        key = PyLong_FromUnsignedLongLong(ptr);
        if (starts == NULL || at_ptr == NULL || key == NULL || !PyList_Check(starts))
            goto out;
        PyObject *there = PyDict_GetItemWithError(at_ptr, key);
        if (there == NULL && PyErr_Occurred())
            goto out;
        if (there == srec) {
            if (PyDict_DelItem(at_ptr, key) < 0)
                goto out;
            Py_ssize_t i = bisect_left(starts, ptr);
            if (i < 0)
                goto out;
            if (i < PyList_GET_SIZE(starts)) {
                uint64_t v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(starts, i));
                if (v == ptr && PyList_SetSlice(starts, i, i + 1, NULL) < 0)
                    goto out;
            }
        }
        uint32_t stack = stack_obj == Py_None ? capture(d) : (uint32_t)PyLong_AsUnsignedLong(stack_obj);
        int err = d->external_free((const void *)(uintptr_t)ptr, stack);
        if (err != 0) {
            PyErr_Format(PyExc_RuntimeError, "vt_storage_external_free_stack(%#llx) failed (%d)",
                         (unsigned long long)ptr, err);
            goto out;
        }
    }
    /* StorageLife.release: the weak handle goes */
    weak = get_attr(srec, s_weak);
    if (weak == NULL)
        goto out;
    int have = PyObject_IsTrue(weak);
    if (have < 0)
        goto out;
    if (have && d->free_weak_ref != NULL) {
        PyObject *r = PyObject_CallOneArg(d->free_weak_ref, weak);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL || set_attr(srec, s_weak, zero) < 0) {
        Py_XDECREF(zero);
        goto out;
    }
    Py_DECREF(zero);
    rc = 0;
out:
    Py_XDECREF(storages);
    Py_XDECREF(skey);
    Py_XDECREF(starts);
    Py_XDECREF(at_ptr);
    Py_XDECREF(key);
    Py_XDECREF(weak);
    return rc;
}

/* A storage seen for the first time: its _StorageRec, in the books (a
 * host storage declared as external: the CPU allocator is not ours). Its
 * device and weak handle from the op observer's facts ``f`` if given, else
 * asked of the tensor ``t`` and its storage object ``st``. A new
 * reference, NULL on error. */
PyObject *new_storage(Dispatcher *d, PyObject *t, PyObject *st, const vt__tensor_facts *f,
                      uint64_t ptr, uint64_t nbytes, PyObject *skey, PyObject *stack_obj)
{
    PyObject *tracker = d->tracker;
    long device = -1;
    if (f != NULL) {
        device = (long)f->device;
    } else {
        int cuda = attr_true(t, s_is_cuda);
        if (cuda < 0)
            return NULL;
        if (cuda) {
            PyObject *v = call0(t, s_get_device);
            device = v ? PyLong_AsLong(v) : -1;
            Py_XDECREF(v);
            if (PyErr_Occurred())
                return NULL;
        }
    }
    /* a weak handle on the StorageImpl (StorageLife.weak), 0 without */
    PyObject *weak = NULL;
    if (d->life_available && f != NULL) {
        weak = PyLong_FromUnsignedLongLong(d->make_weak(f->storage));
    } else if (d->life_available) {
        weak = call0(st, s_weak_ref);
        if (weak == NULL)
            PyErr_Clear();
    }
    if (weak == NULL)
        weak = PyLong_FromLong(0);
    PyObject *epoch = PyObject_GetAttr(tracker, s_epoch);
    PyObject *srec = NULL;
    if (epoch != NULL && weak != NULL)
        srec = new_storage_rec(ptr, nbytes, device, epoch, skey, weak);
    Py_XDECREF(epoch);
    Py_XDECREF(weak);
    if (srec == NULL)
        return NULL;
    PyObject *storages = tracker_attr(d, s_storages);
    int bad = storages == NULL || PyDict_SetItem(storages, skey, srec) < 0;
    Py_XDECREF(storages);
    if (!bad && device < 0)
        bad = declare(d, srec, stack_obj) < 0;
    if (bad)
        Py_CLEAR(srec);
    return srec;
}

/* Tracker._orphaned: the last tracked tensor on ``srec`` died here. */
int orphaned(Dispatcher *d, PyObject *srec)
{
    int external = attr_true(srec, s_external);
    if (external < 0)
        return -1;
    PyObject *stack = PyLong_FromUnsignedLong(external ? capture(d) : 0);
    if (stack == NULL)
        return -1;
    if (!external) {
        Py_DECREF(stack);
        stack = Py_NewRef(Py_None);   /* as the Python way: captured if needed */
    }
    int rc = -1;
    /* The storage may outlive its last Python tensor (a view of it held as
     * a storage): then it is asked once it can tell (Tracker._settle). */
    uint64_t weak;
    int later = 0;
    if (get_u64(srec, s_weak, &weak) < 0)
        goto out;
    if (weak) {
        later = 1;
        if (d->use_count != NULL && d->sole >= 0) {
            PyObject *skey = get_attr(srec, s_skey);
            PyObject *n = skey ? PyObject_CallOneArg(d->use_count, skey) : NULL;
            Py_XDECREF(skey);
            long long count = n ? PyLong_AsLongLong(n) : -1;
            Py_XDECREF(n);
            if (PyErr_Occurred())
                PyErr_Clear();   /* StorageLife.sole_owner: not known, ask later */
            else
                later = count > d->sole;
        }
    }
    if (later) {
        PyObject *maybe = tracker_attr(d, s_maybe_gone);
        PyObject *pair = PyTuple_Pack(2, srec, stack);
        int bad = maybe == NULL || pair == NULL || PyList_Append(maybe, pair) < 0;
        Py_XDECREF(maybe);
        Py_XDECREF(pair);
        if (bad)
            goto out;
    } else if (end_storage(d, srec, stack) < 0) {
        goto out;
    }
    rc = 0;
out:
    Py_DECREF(stack);
    return rc;
}

/* Is the storage behind weak handle ``weak`` gone, or on other memory than
 * ``srec`` says? 1 yes (or cannot tell), 0 no. The reading is
 * StorageLife.now's (_storage_life.py) without its Python frames; the
 * decision stays Tracker._check_storage's, which reads it again. */
static int storage_changed(Dispatcher *d, PyObject *srec, PyObject *weak)
{
    if (d->storage_now != NULL) {
        uint64_t handle = PyLong_AsUnsignedLongLong(weak), now[2], sptr, snbytes;
        if (PyErr_Occurred())
            goto unsure;
        int alive = d->storage_now(handle, now);
        if (alive == 0)
            return 1;
        if (alive > 0) {
            if (get_u64(srec, s_ptr, &sptr) < 0 || get_u64(srec, s_nbytes, &snbytes) < 0)
                goto unsure;
            return now[0] != sptr || now[1] != snbytes;
        }
    }
    /* StorageLife.now: (address, nbytes), None once gone; read without
     * materializing a copy-on-write storage, as storage_now does */
    PyObject *now = PyObject_CallOneArg(d->life_now, weak);
    if (now == NULL || !PyTuple_Check(now) || PyTuple_GET_SIZE(now) != 2) {
        Py_XDECREF(now);
        goto unsure;
    }
    uint64_t ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(now, 0)),
             nbytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(now, 1));
    Py_DECREF(now);
    uint64_t sptr, snbytes;
    if (PyErr_Occurred() || get_u64(srec, s_ptr, &sptr) < 0 || get_u64(srec, s_nbytes, &snbytes) < 0)
        goto unsure;
    return ptr != sptr || nbytes != snbytes;
unsure:
    PyErr_Clear();
    return 1;
}

/* Tracker._sweep's storage half, as a filter: the storages with a weak
 * handle that are gone or on other memory than the books say (resize_ or
 * set_ through a storage object: no op the mode sees). Tracker._check_storage
 * acts on each; the others, nearly all, need nothing. A new list. */
PyObject *storages_to_check(Dispatcher *d)
{
    PyObject *storages = tracker_attr(d, s_storages);
    PyObject *all = storages ? PyDict_Values(storages) : NULL;   /* deaths may change the dict */
    Py_XDECREF(storages);
    PyObject *out = all ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; out != NULL && i < PyList_GET_SIZE(all); i++) {
        PyObject *srec = PyList_GET_ITEM(all, i);
        PyObject *weak = get_attr(srec, s_weak);
        int have = weak ? PyObject_IsTrue(weak) : -1;
        int changed = have > 0 ? (d->life_now ? storage_changed(d, srec, weak) : 1)
                               : 0;
        Py_XDECREF(weak);
        if (have < 0 || (changed && PyList_Append(out, srec) < 0))
            Py_CLEAR(out);
    }
    Py_XDECREF(all);
    return out;
}

/* Tracker._settle, if a storage may have gone since the last time (its last
 * tensor died while something else still held it): before an op or a death
 * is recorded, so that its release comes first. */
int settle(Dispatcher *d)
{
    PyObject *maybe_gone = tracker_attr(d, s_maybe_gone);
    int gone = maybe_gone ? PyObject_IsTrue(maybe_gone) : -1;
    Py_XDECREF(maybe_gone);
    if (gone <= 0)
        return gone;
    PyObject *r = call_method(d->tracker, s_settle, NULL, 0);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}
