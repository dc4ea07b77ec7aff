/* Storages: new ones into the books (host ones declared as external: the
 * CPU allocator is not ours), and their end. */
#include "trackfast.h"

/* Index of the first start >= ptr in the sorted list of ints ``starts``
 * (BOOK_STARTS); -1 with an error set. */
Py_ssize_t declared_bisect(PyObject *starts, uint64_t ptr)
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

/* A stack id from ``stack_obj``: an int, or None to capture the Python
 * stack here. */
static uint32_t stack_of(Dispatcher *d, PyObject *stack_obj)
{
    if (stack_obj == NULL || stack_obj == Py_None)
        return capture(d);
    unsigned long v = PyLong_AsUnsignedLong(stack_obj);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return (uint32_t)v;
}

/* The declared host storages, by address: the sorted list of their
 * starts (BOOK_STARTS) and address -> StorageRec (BOOK_AT_PTR). The books'
 * containers live as long as the Dispatcher: borrowed here. */

/* The declared storage that starts last before ``end``, or NULL (also with
 * an error set). */
static PyObject *declared_before(Dispatcher *d, uint64_t end)
{
    PyObject *starts = d->containers[BOOK_STARTS], *at_ptr = d->containers[BOOK_AT_PTR];
    Py_ssize_t i = declared_bisect(starts, end);
    if (i <= 0)
        return NULL;
    PyObject *prev = PyDict_GetItemWithError(at_ptr, PyList_GET_ITEM(starts, i - 1));
    if (prev != NULL && !is_storage_rec(prev)) {
        PyErr_SetString(PyExc_TypeError, "the declared storages' books hold a stranger");
        return NULL;
    }
    return prev;
}

/* ``srec`` into the index at its address (0), or out of it if it is the
 * one there (removing: 1); -1 on error. */
static int declared_index(Dispatcher *d, PyObject *srec, int removing)
{
    PyObject *starts = d->containers[BOOK_STARTS], *at_ptr = d->containers[BOOK_AT_PTR];
    uint64_t ptr = SREC(srec)->ptr;
    PyObject *key = PyLong_FromUnsignedLongLong(ptr);
    if (key == NULL)
        return -1;
    int rc = -1;
    Py_ssize_t i = declared_bisect(starts, ptr);
    if (i < 0)
        goto out;
    if (!removing) {
        rc = PyList_Insert(starts, i, key) < 0 || PyDict_SetItem(at_ptr, key, srec) < 0 ? -1 : 0;
        goto out;
    }
    PyObject *there = PyDict_GetItemWithError(at_ptr, key);
    if (there != srec) {
        rc = there == NULL && PyErr_Occurred() ? -1 : 0;
        goto out;
    }
    if (PyDict_DelItem(at_ptr, key) < 0)
        goto out;
    rc = 0;
    if (i < PyList_GET_SIZE(starts)) {
        uint64_t v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(starts, i));
        if (v == ptr && PyList_SetSlice(starts, i, i + 1, NULL) < 0)
            rc = -1;
    }
out:
    Py_DECREF(key);
    return rc;
}

/* Open host storage ``srec``'s memory as an external storage in the trace
 * (the CPU allocator is not ours). A declared storage overlapping it first
 * goes to overlapped() (storage_turns.c: its memory was freed behind our back and
 * reused, or ``srec`` is its twin on the very same memory: then there is
 * nothing to declare). */
int declare(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    uint64_t ptr = SREC(srec)->ptr, nbytes = SREC(srec)->nbytes;
    PyObject *prev = declared_before(d, ptr + nbytes);
    if (prev == NULL && PyErr_Occurred())
        return -1;
    if (prev != NULL && SREC(prev)->ptr + SREC(prev)->nbytes > ptr) {
        int twin = overlapped(d, srec, stack_obj);
        if (twin != 0)
            return twin < 0 ? -1 : 0;
    }
    int err = d->external((const void *)(uintptr_t)ptr, (size_t)nbytes,
                          (int)SREC(srec)->device, stack_of(d, stack_obj));
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "vt_storage_external_stack(%#llx, %llu) failed (%d)",
                     (unsigned long long)ptr, (unsigned long long)nbytes, err);
        return -1;
    }
    SREC(srec)->declared = 1;
    return declared_index(d, srec, 0);
}

/* Close host storage ``srec``'s memory in the trace, its release recorded
 * with ``stack_obj`` (None: captured here). A storage with twins (another
 * StorageImpl on its very memory: copy-on-write, one buffer wrapped twice)
 * leaves them instead: the memory lives on with
 * them (leave_twins()). */
int undeclare(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    StorageRec *s = SREC(srec);
    if (s->twins != NULL && s->twins != Py_None)
        return leave_twins(d, srec);
    if (!s->declared)
        return 0;
    s->declared = 0;
    if (declared_index(d, srec, 1) < 0)
        return -1;
    int err = d->external_free((const void *)(uintptr_t)s->ptr, stack_of(d, stack_obj));
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "vt_storage_external_free_stack(%#llx) failed (%d)",
                     (unsigned long long)s->ptr, err);
        return -1;
    }
    return 0;
}

/* The storage is gone: its release is recorded with ``stack_obj`` (None:
 * captured here) and it leaves the books; tensors that were on it and
 * still live have moved to another storage (move_tensor() each). */
int end_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    StorageRec *s = SREC(srec);
    int rc = -1;
    PyObject *storages = book(d, BOOK_STORAGES);
    PyObject *weak = NULL;
    if (storages == NULL)
        goto out;
    PyObject *cur = PyDict_GetItemWithError(storages, s->skey);
    if (cur == NULL && PyErr_Occurred())
        goto out;
    if (cur == srec && PyDict_DelItem(storages, s->skey) < 0)
        goto out;
    if (s->external && undeclare(d, srec, stack_obj) < 0)
        goto out;
    /* StorageLife.release: the weak handle goes */
    if (s->weak != 0 && d->free_weak_ref != NULL) {
        weak = PyLong_FromUnsignedLongLong(s->weak);
        PyObject *r = weak ? PyObject_CallOneArg(d->free_weak_ref, weak) : NULL;
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    s->weak = 0;
    rc = move_tensors(d, srec, stack_obj);
out:
    Py_XDECREF(storages);
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
    uint64_t weak = 0;
    if (d->life_available && f != NULL) {
        weak = d->make_weak(f->storage);
    } else if (d->life_available) {
        PyObject *w = call0(st, s_weak_ref);
        weak = w ? PyLong_AsUnsignedLongLong(w) : 0;
        Py_XDECREF(w);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            weak = 0;
        }
    }
    PyObject *srec = new_storage_rec(ptr, nbytes, device, d->epoch, skey, weak);
    if (srec == NULL)
        return NULL;
    d->device_seen |= device >= 0;
    SREC(srec)->bare = f != NULL;
    PyObject *storages = book(d, BOOK_STORAGES);
    int bad = storages == NULL || PyDict_SetItem(storages, skey, srec) < 0;
    Py_XDECREF(storages);
    /* Device memory that is no block of the observed allocator (a CUDA IPC
     * handle's mapping: a tensor torch.multiprocessing handed over) has no
     * ALLOC in this process's trace: declared like a host storage, so that
     * `check` judges it on its device (it took it for a host one). */
    if (!bad && device >= 0 && d->pool_block_at != NULL && d->pool_block_at(ptr) == 0)
        SREC(srec)->external = 1;
    if (!bad && (device < 0 || SREC(srec)->external))
        bad = declare(d, srec, stack_obj) < 0;
    if (bad)
        Py_CLEAR(srec);
    return srec;
}

/* The last tracked tensor on ``srec`` died or moved away (``stack_obj``:
 * where, None to capture it here for a host storage, whose release the
 * trace records with it). */
int orphaned(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    if (!is_storage_rec(srec))
        return -1;
    PyObject *stack;
    if (stack_obj != Py_None || !SREC(srec)->external)
        stack = Py_NewRef(stack_obj);
    else if ((stack = PyLong_FromUnsignedLong(capture(d))) == NULL)
        return -1;
    int rc = -1;
    /* The storage may outlive its last Python tensor (a view of it held as
     * a storage): then it is asked once it can tell (settle() below). */
    int later = 0;
    if (SREC(srec)->weak) {
        later = 1;
        /* PyTorch keeps a storage's Python object while the storage lives:
         * one use more than a storage the observer's facts brought (no
         * Python object: unless the program made one, a count read more
         * than that sends it the slower way, asked later) */
        long long sole = SREC(srec)->bare ? d->sole_bare : d->sole;
        if (d->use_count_now != NULL && sole >= 0) {
            /* the observer's reader: the same count, no Python call */
            later = d->use_count_now(SREC(srec)->weak) > (uint64_t)sole;
        } else if (d->use_count != NULL && sole >= 0) {
            PyObject *n = PyObject_CallOneArg(d->use_count, SREC(srec)->skey);
            long long count = n ? PyLong_AsLongLong(n) : -1;
            Py_XDECREF(n);
            if (PyErr_Occurred())
                PyErr_Clear();   /* StorageLife.sole_owner: not known, ask later */
            else
                later = count > sole;
        }
    }
    if (later) {
        /* waiting once (a tensor seen on it again and dead again while it
         * waits: the newer death's stack) */
        StorageRec *s = SREC(srec);
        Py_XSETREF(s->gone_stack, Py_NewRef(stack));
        if (!s->waiting) {
            PyObject *maybe = book(d, BOOK_MAYBE_GONE);
            int bad = maybe == NULL || PyList_Append(maybe, srec) < 0;
            Py_XDECREF(maybe);
            if (bad)
                goto out;
            s->waiting = 1;
        }
    } else if (end_storage(d, srec, stack) < 0) {
        goto out;
    }
    rc = 0;
out:
    Py_DECREF(stack);
    return rc;
}

/* Where the storage behind ``s``'s weak handle is now: read by the op
 * observer's storage reader where it can, else by StorageLife.now
 * (_storage_life.py; neither materializes a copy-on-write storage, as
 * UntypedStorage.data_ptr() would). 1 alive, now = {data, nbytes}; 0 gone;
 * -1 not read (an exception set). Only with d->life_now set (a storage
 * with a weak handle: the tracker has its StorageLife). A storage whose
 * memory PyTorch refuses to hand out (StorageLife.now's True: an output of
 * cudagraph trees a later replay overwrote) is alive where the books say:
 * Python cannot read its address, and its memory stays where it was. */
int storage_read(Dispatcher *d, const StorageRec *s, uint64_t now[2])
{
    if (d->storage_now != NULL) {
        int alive = d->storage_now(s->weak, now);
        if (alive >= 0)
            return alive;
    }
    PyObject *weak = PyLong_FromUnsignedLongLong(s->weak);
    PyObject *got = weak ? PyObject_CallOneArg(d->life_now, weak) : NULL;
    Py_XDECREF(weak);
    if (got == NULL)
        return -1;
    int rc = 0;
    if (got == Py_True) {
        now[0] = s->ptr;
        now[1] = s->nbytes;
        rc = 1;
    } else if (got != Py_None) {
        if (PyTuple_Check(got) && PyTuple_GET_SIZE(got) == 2) {
            now[0] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(got, 0));
            now[1] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(got, 1));
            rc = PyErr_Occurred() ? -1 : 1;
        } else {
            PyErr_SetString(PyExc_TypeError, "StorageLife.now: not (address, nbytes), True or None");
            rc = -1;
        }
    }
    Py_DECREF(got);
    return rc;
}

/* Is the storage behind ``srec``'s weak handle gone, or on other memory
 * than ``srec`` says? 1 yes (or cannot tell), 0 no. The decision stays
 * check_storage()'s (storage_turns.c), which reads it again. */
static int storage_changed(Dispatcher *d, PyObject *srec)
{
    StorageRec *s = SREC(srec);
    uint64_t now[2];
    int alive = storage_read(d, s, now);
    if (alive < 0) {
        PyErr_Clear();
        return 1;
    }
    return !alive || now[0] != s->ptr || now[1] != s->nbytes;
}

/* Tracker._sweep's storage half, as a filter: the storages with a weak
 * handle that are gone or on other memory than the books say (resize_ or
 * set_ through a storage object: no op the mode sees). check_storage()
 * acts on each; the others, nearly all, need nothing. A new list. */
static int storage_to_check(Dispatcher *d, PyObject *srec)
{
    return SREC(srec)->weak ? (d->life_now ? storage_changed(d, srec) : 1) : 0;
}

PyObject *storages_to_check(Dispatcher *d)
{
    return book_filter(d, BOOK_STORAGES, is_storage_rec, storage_to_check);
}

/* The next of the books' storages (PyDict_Next over them, nothing else
 * running meanwhile): 1 with *srec (borrowed), 0 past the last, -1 with an
 * error set. */
static int next_storage(PyObject *storages, Py_ssize_t *pos, PyObject **srec)
{
    PyObject *key;
    if (!PyDict_Next(storages, pos, &key, srec))
        return 0;
    if (is_storage_rec(*srec))
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "the storages' book holds a stranger");
    return -1;
}

/* ``s``'s epochs brought up to date (a use since the last look: the marks
 * it rested before it, the most it ever did, in ``rest``); its rest. */
long long storage_rest(StorageRec *s)
{
    if (s->last_epoch != s->seen_epoch) {
        if (s->last_epoch - s->seen_epoch - 1 > s->rest)
            s->rest = s->last_epoch - s->seen_epoch - 1;
        s->seen_epoch = s->last_epoch;
    }
    return s->rest;
}

/* A mark's pass over every storage for its walk (Walks._stale_starts,
 * which decides about the few this returns): each storage's epochs brought
 * up to date (a use since the previous mark: the marks it rested before
 * it, the most it ever did, in ``rest``), and of those not used since mark
 * ``threshold``, in the books' order:
 *   looked: the ones a walk may start from;
 *   resting: (not ``final``) one that went unused this long before and was
 *     used again (a batch reused every k steps) rests, and is left out of
 *     the walk until it stays unused longer than it ever did: the checker
 *     flags none of those, and a walk would only find the same holder
 *     again (the tracker still asks whether C++ alone keeps it);
 *   host: with ``host_later``, the host storages left to the snapshot's walk
 *     (counted, not returned);
 *   regrown: of those used since, the ones rebuilt larger from a value of
 *     their own line (StorageRec.regrown): what such a line grows in is used
 *     every step, so a growth finding's holder is found only by walking them;
 *   carried: how many of those used since were made before mark
 *     ``threshold`` (the state a loop carries from step to step: its
 *     weights, their optimizer state, reused batches); growing mark after
 *     mark, the loop keeps more each step of what it still uses (hooks
 *     piling up on a module, each reading its own batch), which
 *     no stale walk reaches (Walks._stale_starts walks its lines then).
 * (looked, resting, host, regrown, carried): two new lists, a count, a new
 * list and a count. */
PyObject *stale_storages(Dispatcher *d, long long threshold, int final, int host_later)
{
    PyObject *storages = book(d, BOOK_STORAGES);
    PyObject *looked = storages ? PyList_New(0) : NULL;
    PyObject *resting = looked ? PyList_New(0) : NULL, *srec, *out = NULL;
    PyObject *regrown = resting ? PyList_New(0) : NULL;
    long long host = 0, carried = 0;
    Py_ssize_t pos = 0;
    int more;
    while (regrown != NULL && (more = next_storage(storages, &pos, &srec)) != 0) {
        if (more < 0)
            goto out;
        StorageRec *s = SREC(srec);
        long long rest = storage_rest(s);
        if (s->last_epoch >= threshold) {
            carried += s->made_epoch < threshold;
            if (s->regrown && PyList_Append(regrown, srec) < 0)
                goto out;
            continue;
        }
        if (host_later && s->device < 0) {
            host++;
            continue;
        }
        int rests = !final && threshold - s->last_epoch <= rest;
        if (PyList_Append(rests ? resting : looked, srec) < 0)
            goto out;
    }
    if (regrown != NULL)
        out = Py_BuildValue("(OOLOL)", looked, resting, host, regrown, carried);
out:
    Py_XDECREF(looked);
    Py_XDECREF(resting);
    Py_XDECREF(regrown);
    Py_XDECREF(storages);
    return out;
}

/* The storages more than one tracked tensor is on (a base and its views,
 * most often), in the books' order: _drop_bases_only_views_hold looks at
 * those only. A new list. */
PyObject *shared_storages(Dispatcher *d)
{
    PyObject *storages = book(d, BOOK_STORAGES);
    PyObject *out = storages ? PyList_New(0) : NULL, *srec;
    Py_ssize_t pos = 0;
    int more;
    while (out != NULL && (more = next_storage(storages, &pos, &srec)) != 0) {
        if (more < 0 || (PySet_GET_SIZE(SREC(srec)->tids) > 1 && PyList_Append(out, srec) < 0))
            Py_CLEAR(out);
    }
    Py_XDECREF(storages);
    return out;
}

/* Whether the storage behind ``s``'s weak handle is gone: 1 gone, 0 alive
 * or no handle to ask, -1 error. */
static int storage_gone(Dispatcher *d, const StorageRec *s)
{
    if (s->weak == 0 || d->life_now == NULL)
        return 0;
    uint64_t now[2];
    int alive = storage_read(d, s, now);
    return alive < 0 ? -1 : !alive;
}

/* Storages whose last tensor died while something else still held them
 * (autograd's saved copy of an op's result, a storage object the program
 * keeps) wait in held_elsewhere, and each op and death asks a few of them
 * again, in turn (those still held go to the back): a saved activation is
 * then released within a few ops after the backward that freed it, not at
 * the next mark's sweep, at a bounded cost per op (asking them all at
 * every op grows with the square of their number: a backward's hand-over
 * leaves one per layer of a deep model).
 * A read each through the op observer's storage reader; a Python call each
 * without it, so fewer then. Dispatcher.settle() asks them all. */
enum { HELD_ASKED_EACH_TIME = 4, HELD_ASKED_EACH_TIME_IN_PYTHON = 1 };

/* The storages whose last tensor died while something else may still hold
 * them (orphaned() put them in maybe_gone), and those found held by an
 * earlier ask (held_elsewhere: every one if ``all``, else the first few):
 * each released now if it is gone, else put at the back of held_elsewhere.
 * Before an op or a death is recorded, so that a release comes first; and
 * by the tracker (Dispatcher.settle: all) before it reads the books. A
 * storage that has a tensor again, or that left the books meanwhile,
 * leaves the lists. */
int settle(Dispatcher *d, int all)
{
    /* references of its own: end_storage's Python may clear the tracker */
    PyObject *maybe = book(d, BOOK_MAYBE_GONE), *held = book(d, BOOK_HELD);
    PyObject *storages = book(d, BOOK_STORAGES), *now = NULL;
    int rc = -1;
    if (!PyList_Check(maybe) || !PyList_Check(held) || !PyDict_Check(storages)) {
        PyErr_SetString(PyExc_RuntimeError, "the tracker's books are not as expected");
        goto out;
    }
    Py_ssize_t each = d->storage_now != NULL ? HELD_ASKED_EACH_TIME
                                             : HELD_ASKED_EACH_TIME_IN_PYTHON;
    Py_ssize_t ask = all || PyList_GET_SIZE(held) < each ? PyList_GET_SIZE(held) : each;
    if (ask > 0) {   /* the first ``ask`` of them join maybe_gone */
        now = PyList_GetSlice(held, 0, ask);
        if (now == NULL || PyList_SetSlice(maybe, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, now) < 0 ||
            PyList_SetSlice(held, 0, ask, NULL) < 0)
            goto out;
    }
    while (PyList_GET_SIZE(maybe) > 0) {   /* end_storage's migrations may add more */
        Py_XSETREF(now, PyList_GetSlice(maybe, 0, PY_SSIZE_T_MAX));
        if (now == NULL || PyList_SetSlice(maybe, 0, PY_SSIZE_T_MAX, NULL) < 0)
            goto out;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(now); i++) {
            PyObject *srec = PyList_GET_ITEM(now, i);
            if (!is_storage_rec(srec)) {
                PyErr_SetString(PyExc_RuntimeError, "maybe_gone holds no storage record");
                goto out;
            }
            StorageRec *s = SREC(srec);
            /* a tensor of it seen again, or out of the books (the mark's sweep
             * found it gone): it waits no more */
            PyObject *cur = PySet_GET_SIZE(s->tids) > 0   /* borrowed */
                                ? NULL : PyDict_GetItemWithError(storages, s->skey);
            if (cur == NULL && PyErr_Occurred())
                goto out;
            int gone = cur == srec ? storage_gone(d, s) : 0;
            if (gone < 0)
                goto out;
            if (cur == srec && !gone && s->weak != 0 && d->life_now != NULL) {
                if (PyList_Append(held, srec) < 0)   /* still held: asked again later */
                    goto out;
                continue;
            }
            PyObject *stack = s->gone_stack != NULL ? s->gone_stack : Py_NewRef(Py_None);
            s->gone_stack = NULL;   /* its reference is ``stack``'s now */
            s->waiting = 0;
            int bad = gone && end_storage(d, srec, stack) < 0;
            Py_DECREF(stack);
            if (bad)
                goto out;
        }
    }
    rc = 0;
out:
    Py_XDECREF(now);
    Py_DECREF(maybe);
    Py_DECREF(held);
    Py_DECREF(storages);
    return rc;
}
