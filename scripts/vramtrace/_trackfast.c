/* _trackfast: the per-op path of vramtrace.torch.track(), in C.
 *
 * Every op of a tracked program runs through the tracker's dispatch mode.
 * Written in Python, its recording (find the op's tensors, look them up,
 * record each use with the Python stack, record the outputs held back from
 * the previous op) cost about 35 us per op: a clean training loop of 50 us
 * ops ran at 2.3x. This module is that path, for the case that repeats
 * every step: tensors already known, a stack already interned, outputs
 * recorded through the library's C entry points (no ctypes marshalling).
 * Everything else - a tensor seen for the first time, a storage that moved,
 * deaths, walks - stays in vramtrace/torch.py: this calls back into the
 * Tracker for it, so that there is one copy of each rule.
 *
 * The state is the Tracker's own (its dicts and record objects); this
 * module keeps only caches: the raw-stack -> stack id table, and the
 * library's function pointers.
 *
 * A Dispatcher is made per Tracker; `dispatch` is installed, bound to the
 * mode, as the mode's __torch_dispatch__ (an instance attribute: PyTorch
 * looks it up on the mode object). Being C, it has no Python frame for
 * torch._dynamo to compile, so it needs none of the disable wrapper
 * TorchDispatchMode puts around a Python __torch_dispatch__ (2 us per op);
 * the Python it calls back into runs with the frame evaluator reset, as
 * that wrapper would do.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "_trackfast needs CPython 3.11 or newer (PyFrame_GetLasti); the tracker runs in Python without it"
#endif

typedef void (*use_fn)(uint64_t id, uint32_t stack);
typedef void (*drop_fn)(uint64_t id);
typedef int (*external_fn)(const void *ptr, size_t nbytes, int device, uint32_t stack);
typedef int (*external_free_fn)(const void *ptr, uint32_t stack);
typedef uint64_t (*new_fn)(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                           const char *name, uint32_t stack);

enum { MAX_RAW_FRAMES = 192,      /* frames looked at per stack (as _stacks.py) */
       MAX_CACHED = 1 << 16 };    /* distinct raw stacks before the cache starts over */

/* One raw stack seen before: (code identity, instruction offset) pairs,
 * innermost first, and the stack id the library gave its frames. */
typedef struct {
    uint64_t hash;
    uint32_t sid;
    uint32_t n;              /* pairs */
    uintptr_t pairs[];       /* 2 * n words */
} StackEntry;

typedef struct {
    PyObject_HEAD
    PyObject *tracker;       /* the Tracker (strong: it owns us, a cycle gc breaks) */
    PyObject *intern_frame;  /* its StackInterner's intern_frame(frame), for a miss */
    use_fn use;              /* vt_tensor_use_stack */
    new_fn tensor_new;       /* vt_tensor_new_stack */
    drop_fn drop;            /* vt_tensor_drop */
    external_fn external;    /* vt_storage_external_stack */
    external_free_fn external_free;   /* vt_storage_external_free_stack */
    PyObject *codes;         /* id -> code object of every code in a cached key */
    StackEntry **table;      /* open addressing, capacity 2 * MAX_CACHED */
    size_t cached;
    int stacks_enabled;
    int life_available;      /* StorageLife has weak handles (torch >= 2.0) */
    PyObject *use_count;     /* torch._C._storage_Use_Count, or NULL */
    PyObject *free_weak_ref; /* UntypedStorage._free_weak_ref, or NULL */
    /* The Tracker's containers that are never rebound (see Tracker.__init__),
     * held here to skip an attribute lookup each: */
    PyObject *containers[11];
    uint64_t ops;            /* ops recorded here (Tracker.ops adds the Python path's) */
    double busy;             /* seconds spent recording here (Tracker._busy() adds) */
    long long sole;          /* its count for a storage only a dying tensor holds, -1: unknown */
} Dispatcher;

/* Interned attribute names and objects looked up once. */
static PyObject *s_recording, *s_maybe_gone, *s_pending, *s_by_obj, *s_by_tid, *s_storages,
    *s_epoch, *s_owner, *s_tid, *s_skey, *s_last_epoch, *s_pend, *s_name, *s_base,
    *s_encoded, *s_op_meta, *s_node_stacks, *s_settle, *s_track,
    *s_out_name, *s_outs_slow, *s_meta_of, *s_engine_dispatch, *s_recording_failed,
    *s_input, *s_parameter, *s_base_attr, *s_data_ptr, *s_nbytes,
    *s_untyped_storage, *s_cdata, *s_tids, *s_ptr, *s_ref, *s_book, *s_targeted,
    *s_forget_target, *s_on_death, *s_manual_gc, *s_in_gc, *s_view_base, *s_errors, *s_is_cuda, *s_get_device,
    *s_weak_ref, *s_declare, *s_external, *s_weak, *s_life, *s_cls,
    *s_use_count, *s_sole, *s_starts, *s_at_ptr, *s_declared, *s_free_weak_ref, *s_names;
static PyObject *tensor_type, *parameter_type, *sequence_nr_fn, *set_eval_frame_fn,
    *tensor_rec_type, *storage_rec_type, *pending_names, *take_pending_name_fn;

enum { TABLE_CAP = 2 * MAX_CACHED };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- calls back into Python -------------------------------------------------- */

/* Call ``fn(args...)`` with torch._dynamo's frame evaluator off (what its
 * disable wrapper does around a Python __torch_dispatch__): the tracker's
 * Python must never be compiled into a user's graph. */
static PyObject *call_python(PyObject *fn, PyObject *const *args, size_t nargs)
{
    PyObject *prior = NULL;
    if (set_eval_frame_fn != NULL) {
        prior = PyObject_CallOneArg(set_eval_frame_fn, Py_None);
        if (prior == NULL)
            PyErr_Clear();
    }
    PyObject *got = PyObject_Vectorcall(fn, args, nargs, NULL);
    if (prior != NULL) {
        if (prior != Py_None) {
            PyObject *exc_type, *exc, *tb;
            PyErr_Fetch(&exc_type, &exc, &tb);
            PyObject *r = PyObject_CallOneArg(set_eval_frame_fn, prior);
            if (r == NULL)
                PyErr_Clear();
            Py_XDECREF(r);
            PyErr_Restore(exc_type, exc, tb);
        }
        Py_DECREF(prior);
    }
    return got;
}

/* tracker.<name>(args...) */
static PyObject *call_method(PyObject *tracker, PyObject *name, PyObject *const *args,
                             size_t nargs)
{
    PyObject *fn = PyObject_GetAttr(tracker, name);
    if (fn == NULL)
        return NULL;
    PyObject *got = call_python(fn, args, nargs);
    Py_DECREF(fn);
    return got;
}

/* -- stacks ------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static void clear_stacks(Dispatcher *d)
{
    if (d->table != NULL)
        for (size_t i = 0; i < TABLE_CAP; i++) {
            PyMem_Free(d->table[i]);
            d->table[i] = NULL;
        }
    d->cached = 0;
    if (d->codes != NULL)
        PyDict_Clear(d->codes);
}

/* The stack id of the innermost Python frame's stack (0: none, disabled,
 * or the interner failed). The key is every frame's code identity and
 * instruction offset, as in _stacks.py; the codes of a cached key are kept
 * alive so that an identity is not reused while cached. */
static uint32_t capture(Dispatcher *d)
{
    if (!d->stacks_enabled)
        return 0;
    PyFrameObject *top = PyEval_GetFrame();   /* borrowed */
    if (top == NULL)
        return 0;
    uintptr_t pairs[2 * MAX_RAW_FRAMES];
    uint32_t n = 0;
    uint64_t h = 1469598103934665603ull;
    PyFrameObject *f = top;
    Py_INCREF(f);
    while (f != NULL && n < MAX_RAW_FRAMES) {
        PyCodeObject *code = PyFrame_GetCode(f);
        uintptr_t c = (uintptr_t)code;
        Py_DECREF(code);   /* the frame holds it */
        uintptr_t lasti = (uintptr_t)(intptr_t)PyFrame_GetLasti(f);
        pairs[2 * n] = c;
        pairs[2 * n + 1] = lasti;
        h = mix(mix(h, c), lasti);
        n++;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);

    size_t mask = TABLE_CAP - 1;
    size_t i = (size_t)(h ^ (h >> 29)) & mask;
    for (;;) {
        StackEntry *e = d->table[i];
        if (e == NULL)
            break;
        if (e->hash == h && e->n == n && memcmp(e->pairs, pairs, 2 * n * sizeof *pairs) == 0)
            return e->sid;
        i = (i + 1) & mask;
    }

    /* A stack not seen before: the interner reads its frames and lines. */
    PyObject *arg = (PyObject *)top;
    PyObject *got = call_python(d->intern_frame, &arg, 1);
    if (got == NULL) {
        PyErr_Clear();
        return 0;
    }
    unsigned long sid = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (d->cached >= MAX_CACHED) {
        clear_stacks(d);
        i = (size_t)(h ^ (h >> 29)) & mask;
    }
    /* Keep the codes of the key alive (walk again: the frames are live). */
    f = top;
    Py_INCREF(f);
    for (uint32_t k = 0; f != NULL && k < n; k++) {
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *key = PyLong_FromVoidPtr(code);
        if (key == NULL || PyDict_SetItem(d->codes, key, (PyObject *)code) < 0)
            PyErr_Clear();
        Py_XDECREF(key);
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    StackEntry *e = PyMem_Malloc(sizeof *e + 2 * n * sizeof *pairs);
    if (e == NULL)
        return (uint32_t)sid;
    e->hash = h;
    e->sid = (uint32_t)sid;
    e->n = n;
    memcpy(e->pairs, pairs, 2 * n * sizeof *pairs);
    while (d->table[i] != NULL)
        i = (i + 1) & mask;
    d->table[i] = e;
    d->cached++;
    return (uint32_t)sid;
}

/* -- an op's tensors ------------------------------------------------------------ */

/* The tensors of an op's arguments or outputs, in order, each with a
 * reference of its own: the Python the recording calls back into (a
 * collection's callbacks) could change a list the op was given. */
typedef struct {
    PyObject **items;
    Py_ssize_t n, cap;
    PyObject *inline_items[16];
} TensorList;

static void tl_init(TensorList *l)
{
    l->items = l->inline_items;
    l->n = 0;
    l->cap = 16;
}

static void tl_free_items(TensorList *l)
{
    if (l->items != l->inline_items)
        PyMem_Free(l->items);
}

static void tl_free(TensorList *l)
{
    for (Py_ssize_t i = 0; i < l->n; i++)
        Py_DECREF(l->items[i]);
    tl_free_items(l);
}

static int tl_add(TensorList *l, PyObject *t)
{
    if (l->n == l->cap) {
        Py_ssize_t cap = 2 * l->cap;
        PyObject **items = PyMem_Malloc((size_t)cap * sizeof *items);
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(items, l->items, (size_t)l->n * sizeof *items);
        tl_free_items(l);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = Py_NewRef(t);
    return 0;
}

/* Append the tensors of a nested list/tuple/dict (as torch.py's _tensors_in). */
static int tensors_in(PyObject *obj, TensorList *out, int depth)
{
    if (depth > 32)
        return 0;
    if (PyObject_TypeCheck(obj, (PyTypeObject *)tensor_type))
        return tl_add(out, obj);
    if (PyTuple_Check(obj) || PyList_Check(obj)) {
        /* a list is not changed while the op is recorded: nothing else runs */
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        PyObject **items = PySequence_Fast_ITEMS(obj);
        for (Py_ssize_t i = 0; i < n; i++)
            if (tensors_in(items[i], out, depth + 1) < 0)
                return -1;
        return 0;
    }
    if (PyDict_Check(obj)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(obj, &pos, &k, &v))
            if (tensors_in(v, out, depth + 1) < 0)
                return -1;
    }
    return 0;
}

/* -- records ----------------------------------------------------------------- */

static PyObject *get_attr(PyObject *obj, PyObject *name);
static int set_attr(PyObject *obj, PyObject *name, PyObject *v);

static int get_u64(PyObject *obj, PyObject *name, uint64_t *out)
{
    PyObject *v = get_attr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int set_u64(PyObject *obj, PyObject *name, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o == NULL)
        return -1;
    int rc = set_attr(obj, name, o);
    Py_DECREF(o);
    return rc;
}

/* -- attributes, without the generic lookup --------------------------------
 *
 * Half of the C path's time went to attribute lookups (the type's MRO,
 * then the descriptor) before these. The tracker's records are __slots__
 * classes: a slot is a pointer at a fixed offset in the object, which the
 * member descriptor gives once (setup()). The Tracker's containers are
 * fetched once per Dispatcher. */

typedef struct {
    PyObject *name;          /* interned: compared by pointer */
    Py_ssize_t offset;
} SlotOffset;

enum { MAX_SLOTS = 16 };
static SlotOffset rec_slots[MAX_SLOTS], srec_slots[MAX_SLOTS];
static int n_rec_slots, n_srec_slots;

static Py_ssize_t slot_offset(PyObject *obj, PyObject *name)
{
    const SlotOffset *t;
    int n;
    if (Py_IS_TYPE(obj, (PyTypeObject *)tensor_rec_type)) {
        t = rec_slots;
        n = n_rec_slots;
    } else if (Py_IS_TYPE(obj, (PyTypeObject *)storage_rec_type)) {
        t = srec_slots;
        n = n_srec_slots;
    } else {
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (t[i].name == name)
            return t[i].offset;
    return -1;
}

/* obj.name, a new reference (NULL with an exception). */
static PyObject *get_attr(PyObject *obj, PyObject *name)
{
    Py_ssize_t off = slot_offset(obj, name);
    if (off >= 0) {
        PyObject *v = *(PyObject **)((char *)obj + off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);   /* an unset slot raises as usual */
}

/* obj.name = v */
static int set_attr(PyObject *obj, PyObject *name, PyObject *v)
{
    Py_ssize_t off = slot_offset(obj, name);
    if (off < 0)
        return PyObject_SetAttr(obj, name, v);
    PyObject **p = (PyObject **)((char *)obj + off);
    PyObject *old = *p;
    *p = Py_NewRef(v);
    Py_XDECREF(old);
    return 0;
}

/* Record the offsets of ``type``'s object slots named in ``names``. */
static int slot_table(PyObject *type, PyObject *const *names, int n, SlotOffset *out)
{
    int got = 0;
    for (int i = 0; i < n && got < MAX_SLOTS; i++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, names[i]);
        if (descr == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;   /* not a slot of this class: the generic lookup */
        }
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type))
            continue;
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY))
            continue;
        out[got].name = names[i];
        out[got].offset = m->offset;
        got++;
    }
    return got;
}

/* A new reference to the Tracker's attribute ``name``. */
static PyObject *tracker_attr(Dispatcher *d, PyObject *name);

/* Tracker._record: the TENSOR_NEW of ``rec`` if not made yet; its id. */
static int record(Dispatcher *d, PyObject *rec, uint64_t *tid)
{
    PyObject *pend = get_attr(rec, s_pend);
    if (pend == NULL)
        return -1;
    if (pend == Py_None) {
        Py_DECREF(pend);
        return get_u64(rec, s_tid, tid);
    }
    int rc = -1;
    PyObject *name = NULL, *encoded = NULL, *enc_cache = NULL, *by_tid = NULL, *key = NULL;
    if (!PyTuple_Check(pend) || PyTuple_GET_SIZE(pend) != 3) {
        PyErr_SetString(PyExc_TypeError, "_TensorRec.pend is not (ptr, nbytes, stack)");
        goto out;
    }
    uint64_t ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 0));
    uint64_t nbytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 1));
    uint64_t stack = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 2));
    uint64_t base;
    if (PyErr_Occurred() || get_u64(rec, s_base, &base) < 0)
        goto out;
    if (set_attr(rec, s_pend, Py_None) < 0)
        goto out;
    name = get_attr(rec, s_name);
    enc_cache = tracker_attr(d, s_encoded);
    if (name == NULL || enc_cache == NULL)
        goto out;
    encoded = PyDict_GetItemWithError(enc_cache, name);   /* borrowed */
    if (encoded != NULL) {
        Py_INCREF(encoded);
    } else {
        if (PyErr_Occurred())
            goto out;
        encoded = PyUnicode_AsEncodedString(name, "utf-8", "replace");
        if (encoded == NULL)
            goto out;
        if (PyDict_GET_SIZE(enc_cache) >= (1 << 16))
            PyDict_Clear(enc_cache);
        if (PyDict_SetItem(enc_cache, name, encoded) < 0)
            goto out;
    }
    *tid = d->tensor_new((const void *)(uintptr_t)ptr, (size_t)nbytes, base,
                         PyBytes_AS_STRING(encoded), (uint32_t)stack);
    by_tid = tracker_attr(d, s_by_tid);
    key = PyLong_FromUnsignedLongLong(*tid);
    if (by_tid == NULL || key == NULL || set_attr(rec, s_tid, key) < 0 ||
        PyDict_SetItem(by_tid, key, rec) < 0)
        goto out;
    rc = 0;
out:
    Py_DECREF(pend);
    Py_XDECREF(name);
    Py_XDECREF(encoded);
    Py_XDECREF(enc_cache);
    Py_XDECREF(by_tid);
    Py_XDECREF(key);
    return rc;
}

/* Tracker._flush: record the outputs held back, in creation order. */
static int flush(Dispatcher *d)
{
    PyObject *pending = tracker_attr(d, s_pending);
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

/* The record of tensor ``t`` if tracked (a new reference); NULL if not, or
 * with an exception. */
static PyObject *known(PyObject *by_obj, PyObject *t)
{
    PyObject *key = PyLong_FromVoidPtr(t);
    PyObject *rec = key ? PyDict_GetItemWithError(by_obj, key) : NULL;
    Py_XDECREF(key);
    Py_XINCREF(rec);
    return rec;
}

/* storages[rec.skey].last_epoch = epoch */
static int touch_storage(PyObject *storages, PyObject *rec, PyObject *epoch)
{
    PyObject *skey = get_attr(rec, s_skey);
    if (skey == NULL)
        return -1;
    PyObject *srec = PyDict_GetItemWithError(storages, skey);   /* borrowed */
    Py_DECREF(skey);
    if (srec == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return set_attr(srec, s_last_epoch, epoch);
}

/* ``rec``'s tensor was used in this op (None: a tensor without a storage,
 * not tracked). Takes the reference to ``rec``. */
static int used(PyObject *storages, PyObject *rec, PyObject *epoch)
{
    int bad = rec != Py_None && touch_storage(storages, rec, epoch) < 0;
    Py_DECREF(rec);
    return bad ? -1 : 0;
}

/* The time since ``began`` goes to Tracker._busy() (the walk schedule's input). */
static void add_busy(Dispatcher *d, double began)
{
    d->busy += now_s() - began;
}

/* -- tensors seen for the first time, and their deaths ---------------------- */

static PyObject *death_callback(PyObject *self, PyObject *ref);
static PyMethodDef death_def = {"tensor_died", death_callback, METH_O,
                                "weakref callback: a tracked tensor died"};

/* Is ``obj``'s attribute ``name`` true? -1 on error. */
static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = get_attr(obj, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* A new reference to the result of ``obj.name()``. */
static PyObject *call0(PyObject *obj, PyObject *name)
{
    return PyObject_CallMethodNoArgs(obj, name);
}

/* -- external storages: host memory the CPU allocator gave ---------------- */

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
 * ``stack_obj`` and it leaves the books. */
static int end_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
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
 * host storage declared as external: the CPU allocator is not ours). A new
 * reference, NULL on error. */
static PyObject *new_storage(Dispatcher *d, PyObject *t, PyObject *st, uint64_t ptr,
                             uint64_t nbytes, PyObject *skey, PyObject *stack_obj)
{
    PyObject *tracker = d->tracker;
    long device = -1;
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
    /* a weak handle on the StorageImpl (StorageLife.weak), 0 without */
    PyObject *weak = NULL;
    if (d->life_available) {
        weak = call0(st, s_weak_ref);
        if (weak == NULL)
            PyErr_Clear();
    }
    if (weak == NULL)
        weak = PyLong_FromLong(0);
    PyObject *epoch = PyObject_GetAttr(tracker, s_epoch);
    PyObject *a[7] = {PyLong_FromUnsignedLongLong(ptr), PyLong_FromUnsignedLongLong(nbytes),
                      PyLong_FromLong(device), device < 0 ? Py_True : Py_False, epoch, skey,
                      weak};
    PyObject *srec = NULL;
    if (a[0] != NULL && a[1] != NULL && a[2] != NULL && epoch != NULL && weak != NULL)
        srec = PyObject_Vectorcall(storage_rec_type, a, 7, NULL);
    Py_XDECREF(a[0]);
    Py_XDECREF(a[1]);
    Py_XDECREF(a[2]);
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
static int orphaned(Dispatcher *d, PyObject *srec)
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

/* Tracker._track, but for a storage whose memory moved (the Python one
 * compares it with the StorageImpl). Returns a new
 * reference to the tensor's record, or None for a tensor without storage. */
static PyObject *track(Dispatcher *d, PyObject *t, PyObject *name, PyObject *stack_obj,
                       PyObject *view_of, int defer)
{
    PyObject *tracker = d->tracker;
    PyObject *by_obj = NULL, *storages = NULL, *st = NULL, *srec = NULL, *rec = NULL,
        *key = NULL, *base = NULL, *user = NULL, *pend = NULL, *cb = NULL, *cbself = NULL,
        *ref = NULL, *tids = NULL, *got = NULL;
    by_obj = tracker_attr(d, s_by_obj);
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

    /* (data_ptr, nbytes, identity) of its storage; none: not tracked */
    st = call0(t, s_untyped_storage);
    if (st == NULL) {
        PyErr_Clear();   /* sparse, meta, functional wrappers... */
        got = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *v = call0(st, s_nbytes);
    long long nbytes = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    v = nbytes >= 0 ? call0(st, s_data_ptr) : NULL;
    unsigned long long ptr = v ? PyLong_AsUnsignedLongLong(v) : 0;
    Py_XDECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        got = Py_NewRef(Py_None);
        goto out;
    }
    if (nbytes <= 0 || ptr == 0) {
        got = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *skey = PyObject_GetAttr(st, s_cdata);
    if (skey == NULL) {
        PyErr_Clear();
        skey = PyLong_FromUnsignedLongLong(ptr);
    } else if (!PyObject_IsTrue(skey)) {
        Py_DECREF(skey);
        skey = PyLong_FromUnsignedLongLong(ptr);
    }
    if (skey == NULL)
        goto out;
    storages = tracker_attr(d, s_storages);
    srec = storages ? PyDict_GetItemWithError(storages, skey) : NULL;
    Py_XINCREF(srec);
    uint64_t sptr = 0, snbytes = 0;
    if (srec != NULL && (get_u64(srec, s_ptr, &sptr) < 0 || get_u64(srec, s_nbytes, &snbytes) < 0)) {
        Py_DECREF(skey);
        goto out;
    }
    if (srec == NULL && !PyErr_Occurred()) {
        srec = new_storage(d, t, st, ptr, (uint64_t)nbytes, skey, stack_obj);
        if (srec == NULL) {
            Py_DECREF(skey);
            goto out;
        }
        sptr = ptr;
        snbytes = (uint64_t)nbytes;
    }
    if (srec == NULL || sptr != ptr || snbytes != (uint64_t)nbytes) {
        Py_DECREF(skey);
        if (PyErr_Occurred())
            goto out;
        /* its memory moved (resize_): the Python way */
        PyObject *a[5] = {t, name, stack_obj, view_of, defer ? Py_True : Py_False};
        got = call_method(tracker, s_track, a, 5);
        goto out;
    }
    Py_CLEAR(st);

    /* its view base, tracked first (its id is the view's base) */
    uint64_t base_id = 0;
    base = PyObject_GetAttr(t, s_base_attr);
    if (base == NULL) {
        PyErr_Clear();
        base = Py_NewRef(Py_None);
    }
    if (base == Py_None) {
        Py_DECREF(base);
        base = Py_NewRef(view_of);
    }
    if (base != Py_None) {
        PyObject *brec = track(d, base, s_view_base, stack_obj, Py_None, 0);
        if (brec == NULL) {
            Py_DECREF(skey);
            goto out;
        }
        if (brec != Py_None) {
            int bad = get_u64(brec, s_base, &base_id) < 0 ||
                      (base_id == 0 && record(d, brec, &base_id) < 0);
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
    unsigned long long tptr = ptr;
    v = call0(t, s_data_ptr);
    if (v != NULL)
        tptr = PyLong_AsUnsignedLongLong(v);
    Py_XDECREF(v);
    if (v == NULL || PyErr_Occurred()) {
        PyErr_Clear();
        tptr = ptr;
    }
    v = PyObject_GetAttr(t, s_nbytes);
    if (v == NULL) {
        Py_DECREF(skey);
        goto out;
    }
    PyObject *tptr_obj = PyLong_FromUnsignedLongLong(tptr);
    pend = tptr_obj ? PyTuple_Pack(3, tptr_obj, v, stack_obj) : NULL;
    Py_XDECREF(tptr_obj);
    Py_DECREF(v);
    PyObject *base_obj = PyLong_FromUnsignedLongLong(base_id);
    if (pend == NULL || base_obj == NULL) {
        Py_XDECREF(base_obj);
        Py_DECREF(skey);
        goto out;
    }
    PyObject *ra[4] = {skey, name, base_obj, pend};
    rec = PyObject_Vectorcall(tensor_rec_type, ra, 4, NULL);
    Py_DECREF(base_obj);
    Py_DECREF(skey);
    if (rec == NULL)
        goto out;
    cbself = PyTuple_Pack(3, (PyObject *)d, rec, key);
    cb = cbself ? PyCFunction_New(&death_def, cbself) : NULL;
    ref = cb ? PyWeakref_NewRef(t, cb) : NULL;
    if (ref == NULL || set_attr(rec, s_ref, ref) < 0 ||
        PyDict_SetItem(by_obj, key, rec) < 0)
        goto out;
    tids = get_attr(srec, s_tids);
    if (tids == NULL || PySet_Add(tids, rec) < 0)
        goto out;
    if (defer) {
        PyObject *pending = tracker_attr(d, s_pending);
        int bad = pending == NULL || PyList_Append(pending, rec) < 0;
        Py_XDECREF(pending);
        if (bad)
            goto out;
    } else {
        uint64_t tid;
        if (record(d, rec, &tid) < 0)
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
    Py_XDECREF(pend);
    Py_XDECREF(cb);
    Py_XDECREF(cbself);
    Py_XDECREF(ref);
    Py_XDECREF(tids);
    return got;
}

/* Tracker._on_death + _drop, for a death outside any gc collection: the
 * tensor's record leaves the books; a storage left without tensors goes to
 * Tracker._orphaned. Inside a collection the Python way (the collection's
 * holder, our own collection's victims). */
static int died(Dispatcher *d, PyObject *rec, PyObject *key, PyObject *weak)
{
    PyObject *tracker = d->tracker;
    int manual = attr_true(tracker, s_manual_gc), in_gc = attr_true(tracker, s_in_gc);
    if (manual < 0 || in_gc < 0)
        return -1;
    if (manual || in_gc) {
        PyObject *a[3] = {rec, key, weak};
        PyObject *r = call_method(tracker, s_on_death, a, 3);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    PyObject *ref = get_attr(rec, s_ref);
    if (ref == NULL)
        return -1;
    int live = ref != Py_None;   /* None: renamed, or the tracker was closed */
    Py_DECREF(ref);
    if (!live)
        return 0;
    double began = now_s();
    int rc = -1;
    PyObject *by_obj = NULL, *by_tid = NULL, *tidkey = NULL, *book = NULL, *targeted = NULL,
        *storages = NULL, *skey = NULL, *tids = NULL, *srec = NULL;
    by_obj = tracker_attr(d, s_by_obj);
    if (by_obj == NULL)
        goto out;
    PyObject *cur = PyDict_GetItemWithError(by_obj, key);
    if (cur == rec && PyDict_DelItem(by_obj, key) < 0)
        goto out;
    if (cur == NULL && PyErr_Occurred())
        goto out;
    PyObject *mg = tracker_attr(d, s_maybe_gone);
    int gone = mg ? PyObject_IsTrue(mg) : -1;
    Py_XDECREF(mg);
    if (gone < 0)
        goto out;
    if (gone) {
        PyObject *r = call_method(tracker, s_settle, NULL, 0);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    uint64_t tid;
    if (record(d, rec, &tid) < 0)
        goto out;
    by_tid = tracker_attr(d, s_by_tid);
    tidkey = PyLong_FromUnsignedLongLong(tid);
    if (by_tid == NULL || tidkey == NULL)
        goto out;
    PyObject *had = PyDict_GetItemWithError(by_tid, tidkey);
    if (had == NULL) {
        rc = PyErr_Occurred() ? -1 : 0;   /* dropped already */
        goto out;
    }
    if (PyDict_DelItem(by_tid, tidkey) < 0 || set_attr(rec, s_ref, Py_None) < 0)
        goto out;
    d->drop(tid);
    book = PyObject_GetAttr(tracker, s_book);
    targeted = book ? PyObject_GetAttr(book, s_targeted) : NULL;
    if (targeted == NULL)
        goto out;
    int is_target = PySet_Check(targeted) ? PySet_Contains(targeted, tidkey) : 1;
    if (is_target < 0)
        goto out;
    if (is_target) {
        PyObject *r = PyObject_CallMethodOneArg(book, s_forget_target, tidkey);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    storages = tracker_attr(d, s_storages);
    skey = get_attr(rec, s_skey);
    if (storages == NULL || skey == NULL)
        goto out;
    srec = PyDict_GetItemWithError(storages, skey);
    Py_XINCREF(srec);
    if (srec == NULL) {
        rc = PyErr_Occurred() ? -1 : 0;
        goto out;
    }
    tids = get_attr(srec, s_tids);
    if (tids == NULL || PySet_Discard(tids, rec) < 0)
        goto out;
    if (PySet_GET_SIZE(tids) == 0 && orphaned(d, srec) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(by_obj);
    Py_XDECREF(by_tid);
    Py_XDECREF(tidkey);
    Py_XDECREF(book);
    Py_XDECREF(targeted);
    Py_XDECREF(storages);
    Py_XDECREF(skey);
    Py_XDECREF(tids);
    Py_XDECREF(srec);
    add_busy(d, began);
    return rc;
}

/* The weakref callback of a tensor tracked here: self is (dispatcher,
 * record, id of the tensor). Never raises into the program: a failure is
 * counted in Tracker.errors. */
static PyObject *death_callback(PyObject *self, PyObject *weak)
{
    Dispatcher *d = (Dispatcher *)PyTuple_GET_ITEM(self, 0);
    if (d->tracker == NULL)
        Py_RETURN_NONE;
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    if (died(d, PyTuple_GET_ITEM(self, 1), PyTuple_GET_ITEM(self, 2), weak) < 0) {
        PyErr_Clear();
        PyObject *errors = PyObject_GetAttr(d->tracker, s_errors);
        long n = errors ? PyLong_AsLong(errors) : 0;
        Py_XDECREF(errors);
        if (set_u64(d->tracker, s_errors, (uint64_t)n + 1) < 0)
            PyErr_Clear();
    }
    PyErr_Restore(exc_type, exc, tb);
    Py_RETURN_NONE;
}

/* Tracker._out_name(func, i, stack): from its cache (tracker._names,
 * keyed by (id(func), i, stack)), else made by the Python one. */
static PyObject *out_name(Dispatcher *d, PyObject *func, Py_ssize_t i, PyObject *stack_obj)
{
    PyObject *names = tracker_attr(d, s_names);
    if (names == NULL)
        return NULL;
    PyObject *fid = PyLong_FromVoidPtr(func);
    PyObject *idx = PyLong_FromSsize_t(i);
    PyObject *key = fid && idx ? PyTuple_Pack(3, fid, idx, stack_obj) : NULL;
    PyObject *name = key ? PyDict_GetItemWithError(names, key) : NULL;
    Py_XINCREF(name);
    if (name == NULL && !PyErr_Occurred() && idx != NULL) {
        PyObject *a[4] = {func, idx, stack_obj, Py_True};
        name = call_method(d->tracker, s_out_name, a, 4);
    }
    Py_DECREF(names);
    Py_XDECREF(fid);
    Py_XDECREF(idx);
    Py_XDECREF(key);
    return name;
}


static PyObject **container_names[] = {&s_by_obj, &s_by_tid, &s_pending, &s_storages,
                                       &s_maybe_gone, &s_op_meta, &s_node_stacks, &s_names,
                                       &s_encoded, &s_starts, &s_at_ptr};

static PyObject *tracker_attr(Dispatcher *d, PyObject *name)
{
    for (size_t i = 0; i < sizeof container_names / sizeof container_names[0]; i++)
        if (*container_names[i] == name && d->containers[i] != NULL)
            return Py_NewRef(d->containers[i]);
    return PyObject_GetAttr(d->tracker, name);
}

/* -- the op ------------------------------------------------------------------- */

/* Tracker._on_op for the owner thread's forward ops. */
static int on_op(Dispatcher *d, PyObject *func, PyObject *args, PyObject *kwargs, PyObject *out)
{
    PyObject *tracker = d->tracker;
    PyObject *recording = PyObject_GetAttr(tracker, s_recording);
    if (recording == NULL)
        return -1;
    int on = PyObject_IsTrue(recording);
    Py_DECREF(recording);
    if (on <= 0)
        return on;

    /* An op that may give a tensor other memory (set_, resize_) goes the
     * Python way whole: it compares storages with what they are now. */
    PyObject *op_meta = tracker_attr(d, s_op_meta);
    if (op_meta == NULL)
        return -1;
    PyObject *fkey = PyLong_FromVoidPtr(func);
    PyObject *meta = fkey ? PyDict_GetItemWithError(op_meta, fkey) : NULL;
    Py_XINCREF(meta);
    Py_XDECREF(fkey);
    Py_DECREF(op_meta);
    if (meta == NULL) {
        if (PyErr_Occurred())
            return -1;
        meta = call_method(tracker, s_meta_of, &func, 1);
        if (meta == NULL)
            return -1;
    }
    if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) < 2) {
        Py_DECREF(meta);
        PyErr_SetString(PyExc_TypeError, "Tracker._op_meta entry is not (view arg, reshaping, op)");
        return -1;
    }
    long vi = PyLong_AsLong(PyTuple_GET_ITEM(meta, 0));
    int reshaping = PyObject_IsTrue(PyTuple_GET_ITEM(meta, 1));
    Py_DECREF(meta);
    if (reshaping < 0 || (vi == -1 && PyErr_Occurred()))
        return -1;
    if (reshaping) {
        PyObject *a[5] = {func, args, kwargs ? kwargs : Py_None, out, Py_True};
        PyObject *r = call_method(tracker, s_outs_slow, a, 5);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }

    double began = now_s();
    int rc = -1;
    TensorList ins, outs;
    tl_init(&ins);
    tl_init(&outs);
    PyObject *epoch = NULL, *by_obj = NULL, *storages = NULL;

    PyObject *maybe_gone = tracker_attr(d, s_maybe_gone);
    if (maybe_gone == NULL)
        goto out;
    int gone = PyObject_IsTrue(maybe_gone);
    Py_DECREF(maybe_gone);
    if (gone < 0)
        goto out;
    if (gone) {
        PyObject *r = call_method(tracker, s_settle, NULL, 0);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    if (flush(d) < 0)
        goto out;
    d->ops++;

    if (tensors_in(args, &ins, 0) < 0 || (kwargs && tensors_in(kwargs, &ins, 0) < 0) ||
        tensors_in(out, &outs, 0) < 0)
        goto out;
    if (ins.n == 0 && outs.n == 0) {
        rc = 0;
        goto out;
    }
    uint32_t stack = capture(d);
    if (stack) {
        /* The autograd node this op made (below autograd, so before the op
         * ran) holds the sequence number just taken. */
        PyObject *seq = sequence_nr_fn ? PyObject_CallNoArgs(sequence_nr_fn) : NULL;
        if (seq == NULL) {
            PyErr_Clear();
        } else {
            long long s = PyLong_AsLongLong(seq) - 1;
            Py_DECREF(seq);
            PyObject *nodes = tracker_attr(d, s_node_stacks);
            if (nodes == NULL)
                goto out;
            PyObject *skey = s >= 0 ? PyLong_FromLongLong(s) : NULL;
            int have = skey ? PyDict_Contains(nodes, skey) : 1;
            if (have == 0) {
                if (PyDict_GET_SIZE(nodes) >= (1 << 16))
                    PyDict_Clear(nodes);
                PyObject *sv = PyLong_FromUnsignedLong(stack);
                if (sv == NULL || PyDict_SetItem(nodes, skey, sv) < 0)
                    have = -1;
                Py_XDECREF(sv);
            }
            Py_XDECREF(skey);
            Py_DECREF(nodes);
            if (have < 0)
                goto out;
        }
    }
    epoch = PyObject_GetAttr(tracker, s_epoch);
    by_obj = tracker_attr(d, s_by_obj);
    storages = tracker_attr(d, s_storages);
    if (epoch == NULL || by_obj == NULL || storages == NULL)
        goto out;
    PyObject *stack_obj = PyLong_FromUnsignedLong(stack);
    if (stack_obj == NULL)
        goto out;

    /* Inputs: a use each; one seen for the first time is recorded with
     * this op's stack (its TENSOR_NEW is its use here). */
    for (Py_ssize_t i = 0; i < ins.n; i++) {
        PyObject *t = ins.items[i];
        PyObject *rec = known(by_obj, t);
        if (rec != NULL) {
            uint64_t tid;
            if (get_u64(rec, s_tid, &tid) < 0) {
                Py_DECREF(rec);
                goto loop_fail;
            }
            d->use(tid, stack);
        } else if (!PyErr_Occurred()) {
            int is_param = PyObject_TypeCheck(t, (PyTypeObject *)parameter_type);
            rec = track(d, t, is_param ? s_parameter : s_input, stack_obj, Py_None, 0);
        }
        if (rec == NULL || used(storages, rec, epoch) < 0)
            goto loop_fail;
    }

    /* Outputs: an input returned (in-place, out=) is a use; a new one is
     * tracked under its creation name, recorded at the next recording. */
    PyObject *view_of = Py_None;
    if (vi >= 0 && PyTuple_Check(args) && vi < PyTuple_GET_SIZE(args) &&
        PyObject_TypeCheck(PyTuple_GET_ITEM(args, vi), (PyTypeObject *)tensor_type))
        view_of = PyTuple_GET_ITEM(args, vi);
    for (Py_ssize_t i = 0; i < outs.n; i++) {
        PyObject *t = outs.items[i];
        PyObject *rec = known(by_obj, t);
        if (rec != NULL) {
            uint64_t tid;
            if (record(d, rec, &tid) < 0) {
                Py_DECREF(rec);
                goto loop_fail;
            }
            d->use(tid, stack);
        } else if (!PyErr_Occurred()) {
            PyObject *name = out_name(d, func, i, stack_obj);
            if (name == NULL)
                goto loop_fail;
            rec = track(d, t, name, stack_obj, view_of, 1);
            Py_DECREF(name);
        }
        if (rec == NULL || used(storages, rec, epoch) < 0)
            goto loop_fail;
    }
    rc = 0;
loop_fail:
    Py_DECREF(stack_obj);
out:
    Py_XDECREF(epoch);
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    tl_free(&ins);
    tl_free(&outs);
    add_busy(d, began);
    return rc;
}

/* Dispatcher.dispatch(mode, func, types, args=(), kwargs=None): the mode's
 * __torch_dispatch__ (bound to the mode). Runs the op, then records it;
 * a failure to record never fails the op (Tracker._recording_failed counts and
 * warns once). */
static PyObject *dispatch(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "vramtrace's __torch_dispatch__ takes no keywords");
        return NULL;
    }
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "__torch_dispatch__(mode, func, types, args=(), kwargs=None)");
        return NULL;
    }
    PyObject *func = argv[1], *types = argv[2];
    PyObject *args = nargs > 3 ? argv[3] : NULL;
    PyObject *kwargs = nargs > 4 && argv[4] != Py_None ? argv[4] : NULL;
    PyObject *empty = NULL;   /* args made here: () or args as a tuple */
    if (args == NULL) {
        args = empty = PyTuple_New(0);
    } else if (!PyTuple_Check(args)) {
        args = empty = PySequence_Tuple(args);
    }
    if (args == NULL)
        return NULL;

    if (d->tracker == NULL) {   /* cleared by a collection: only run the op */
        PyObject *out = PyObject_Call(func, args, kwargs);
        Py_XDECREF(empty);
        return out;
    }
    PyObject *owner = PyObject_GetAttr(d->tracker, s_owner);
    if (owner == NULL) {
        Py_XDECREF(empty);
        return NULL;
    }
    unsigned long owner_id = PyLong_AsUnsignedLong(owner);
    Py_DECREF(owner);
    if (owner_id == (unsigned long)-1 && PyErr_Occurred()) {
        Py_XDECREF(empty);
        return NULL;
    }
    PyObject *out;
    if (PyThread_get_thread_ident() != owner_id) {
        /* An autograd engine thread: the Python way (it runs the op under
         * the frames of the forward op it differentiates). */
        PyObject *a[4] = {func, types, args, kwargs ? kwargs : Py_None};
        out = call_method(d->tracker, s_engine_dispatch, a, 4);
        Py_XDECREF(empty);
        return out;
    }
    out = PyObject_Call(func, args, kwargs);
    if (out == NULL) {
        Py_XDECREF(empty);
        return NULL;
    }
    if (on_op(d, func, args, kwargs, out) < 0) {
        PyObject *exc_type, *exc, *tb;
        PyErr_Fetch(&exc_type, &exc, &tb);
        PyErr_NormalizeException(&exc_type, &exc, &tb);
        PyObject *a[2] = {func, exc ? exc : Py_None};
        PyObject *r = call_method(d->tracker, s_recording_failed, a, 2);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
        Py_XDECREF(exc_type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
    }
    Py_XDECREF(empty);
    return out;
}

/* Dispatcher(tracker, intern_frame, use, new, drop, external, external_free,
 * stacks): the addresses of vt_tensor_use_stack, vt_tensor_new_stack,
 * vt_tensor_drop, vt_storage_external_stack and
 * vt_storage_external_free_stack in the loaded library. */
static int dispatcher_init(Dispatcher *d, PyObject *args, PyObject *kwds)
{
    PyObject *tracker, *intern_frame;
    unsigned long long use_addr, new_addr, drop_addr, ext_addr, ext_free_addr;
    int stacks;
    if (!PyArg_ParseTuple(args, "OOKKKKKp", &tracker, &intern_frame, &use_addr, &new_addr,
                          &drop_addr, &ext_addr, &ext_free_addr, &stacks))
        return -1;
    if (tensor_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_trackfast.setup() was not called");
        return -1;
    }
    if (use_addr == 0 || new_addr == 0 || drop_addr == 0 || ext_addr == 0 ||
        ext_free_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "the library's entry points are needed");
        return -1;
    }
    Py_INCREF(tracker);
    Py_XSETREF(d->tracker, tracker);
    Py_INCREF(intern_frame);
    Py_XSETREF(d->intern_frame, intern_frame);
    d->use = (use_fn)(uintptr_t)use_addr;
    d->tensor_new = (new_fn)(uintptr_t)new_addr;
    d->drop = (drop_fn)(uintptr_t)drop_addr;
    d->external = (external_fn)(uintptr_t)ext_addr;
    d->external_free = (external_free_fn)(uintptr_t)ext_free_addr;
    d->stacks_enabled = stacks;
    if (d->codes == NULL && (d->codes = PyDict_New()) == NULL)
        return -1;
    for (size_t i = 0; i < sizeof container_names / sizeof container_names[0]; i++) {
        Py_CLEAR(d->containers[i]);
        if ((d->containers[i] = PyObject_GetAttr(tracker, *container_names[i])) == NULL)
            return -1;
    }
    /* The tracker's StorageLife: weak handles, and the use count a storage
     * has when only a dying tensor holds it. */
    PyObject *life = PyObject_GetAttr(tracker, s_life);
    if (life == NULL)
        return -1;
    PyObject *cls = PyObject_GetAttr(life, s_cls);
    PyObject *use_count = cls ? PyObject_GetAttr(life, s_use_count) : NULL;
    PyObject *sole = use_count ? PyObject_GetAttr(life, s_sole) : NULL;
    Py_DECREF(life);
    if (sole == NULL) {
        Py_XDECREF(cls);
        Py_XDECREF(use_count);
        return -1;
    }
    d->life_available = cls != Py_None;
    Py_CLEAR(d->free_weak_ref);
    if (d->life_available && (d->free_weak_ref = PyObject_GetAttr(cls, s_free_weak_ref)) == NULL) {
        Py_DECREF(cls);
        Py_DECREF(use_count);
        Py_DECREF(sole);
        return -1;
    }
    d->sole = sole == Py_None ? -1 : PyLong_AsLongLong(sole);
    Py_XSETREF(d->use_count, use_count == Py_None ? NULL : Py_NewRef(use_count));
    Py_DECREF(cls);
    Py_DECREF(use_count);
    Py_DECREF(sole);
    if (PyErr_Occurred())
        return -1;
    if (d->table == NULL && (d->table = PyMem_Calloc(TABLE_CAP, sizeof *d->table)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int dispatcher_traverse(Dispatcher *d, visitproc visit, void *arg)
{
    Py_VISIT(d->tracker);
    Py_VISIT(d->intern_frame);
    Py_VISIT(d->codes);
    Py_VISIT(d->use_count);
    Py_VISIT(d->free_weak_ref);
    for (size_t i = 0; i < sizeof d->containers / sizeof d->containers[0]; i++)
        Py_VISIT(d->containers[i]);
    return 0;
}

static int dispatcher_clear(Dispatcher *d)
{
    Py_CLEAR(d->tracker);
    Py_CLEAR(d->intern_frame);
    Py_CLEAR(d->codes);
    Py_CLEAR(d->use_count);
    Py_CLEAR(d->free_weak_ref);
    for (size_t i = 0; i < sizeof d->containers / sizeof d->containers[0]; i++)
        Py_CLEAR(d->containers[i]);
    return 0;
}

static void dispatcher_dealloc(Dispatcher *d)
{
    PyObject_GC_UnTrack(d);
    dispatcher_clear(d);
    if (d->table != NULL) {
        for (size_t i = 0; i < TABLE_CAP; i++)
            PyMem_Free(d->table[i]);
        PyMem_Free(d->table);
    }
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyObject *dispatcher_cached(Dispatcher *d, void *unused)
{
    return PyLong_FromSize_t(d->cached);
}

static PyMethodDef dispatcher_methods[] = {
    {"dispatch", (PyCFunction)(void (*)(void))dispatch, METH_FASTCALL | METH_KEYWORDS,
     "dispatch(mode, func, types, args=(), kwargs=None): the mode's __torch_dispatch__"},
    {NULL, NULL, 0, NULL},
};

static PyObject *dispatcher_ops(Dispatcher *d, void *unused)
{
    return PyLong_FromUnsignedLongLong(d->ops);
}

static PyObject *dispatcher_busy(Dispatcher *d, void *unused)
{
    return PyFloat_FromDouble(d->busy);
}

static PyGetSetDef dispatcher_getset[] = {
    {"cached_stacks", (getter)dispatcher_cached, NULL, "raw stacks cached", NULL},
    {"ops", (getter)dispatcher_ops, NULL, "ops recorded by the C path", NULL},
    {"busy", (getter)dispatcher_busy, NULL, "seconds the C path spent recording", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vramtrace._trackfast.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The tracker's per-op recording (see the module's docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dispatcher_init,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_methods = dispatcher_methods,
    .tp_getset = dispatcher_getset,
};

/* setup(Tensor, Parameter, sequence_nr, set_eval_frame, TensorRec,
 * StorageRec, pending_names, take_pending_name): what the module needs from torch and
 * vramtrace.torch, handed over by vramtrace.torch (so that this module
 * imports nothing). set_eval_frame may be None. */
static PyObject *module_setup(PyObject *self, PyObject *args)
{
    PyObject *tt, *pt, *seq, *sef, *rt, *srt, *pn, *tpn;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O", &tt, &pt, &seq, &sef, &rt, &srt, &PyDict_Type, &pn,
                          &tpn))
        return NULL;
    if (!PyType_Check(tt) || !PyType_Check(pt)) {
        PyErr_SetString(PyExc_TypeError, "setup() needs torch.Tensor and torch.nn.Parameter");
        return NULL;
    }
    Py_INCREF(tt);
    Py_XSETREF(tensor_type, tt);
    Py_INCREF(pt);
    Py_XSETREF(parameter_type, pt);
    Py_INCREF(seq);
    Py_XSETREF(sequence_nr_fn, seq);
    Py_INCREF(rt);
    Py_XSETREF(tensor_rec_type, rt);
    Py_INCREF(srt);
    Py_XSETREF(storage_rec_type, srt);
    if (!PyType_Check(rt) || !PyType_Check(srt)) {
        PyErr_SetString(PyExc_TypeError, "setup() needs the record classes");
        return NULL;
    }
    PyObject *rec_names[] = {s_tid, s_skey, s_ref, s_name, s_base, s_pend};
    PyObject *srec_names[] = {s_ptr, s_nbytes, s_external, s_tids, s_last_epoch, s_skey,
                              s_weak, s_declared};
    n_rec_slots = slot_table(rt, rec_names, 6, rec_slots);
    n_srec_slots = slot_table(srt, srec_names, 8, srec_slots);
    if (n_rec_slots < 0 || n_srec_slots < 0)
        return NULL;
    Py_INCREF(pn);
    Py_XSETREF(pending_names, pn);
    Py_INCREF(tpn);
    Py_XSETREF(take_pending_name_fn, tpn);
    if (sef == Py_None) {
        Py_CLEAR(set_eval_frame_fn);
    } else {
        Py_INCREF(sef);
        Py_XSETREF(set_eval_frame_fn, sef);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"setup", module_setup, METH_VARARGS,
     "setup(Tensor, Parameter, sequence_nr, set_eval_frame or None, TensorRec, "
     "StorageRec, pending_names, take_pending_name)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef trackfast_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "vramtrace._trackfast",
    .m_doc = "The per-op path of vramtrace.torch.track(), in C.",
    .m_size = -1,
    .m_methods = module_methods,
};

static int intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__trackfast(void);

PyMODINIT_FUNC PyInit__trackfast(void)
{
    struct { PyObject **slot; const char *s; } names[] = {
        {&s_recording, "_recording"}, {&s_maybe_gone, "_maybe_gone"},
        {&s_pending, "_pending"}, {&s_by_obj, "_by_obj"}, {&s_by_tid, "_by_tid"},
        {&s_storages, "_storages"}, {&s_epoch, "epoch"}, {&s_owner, "_owner"},
        {&s_tid, "tid"}, {&s_skey, "skey"}, {&s_last_epoch, "last_epoch"},
        {&s_pend, "pend"}, {&s_name, "name"}, {&s_base, "base"},
        {&s_encoded, "_encoded"}, {&s_op_meta, "_op_meta"},
        {&s_node_stacks, "_node_stacks"},
        {&s_settle, "_settle"}, {&s_track, "_track"}, {&s_out_name, "_out_name"},
        {&s_outs_slow, "_on_op"}, {&s_meta_of, "_meta_of"},
        {&s_engine_dispatch, "_engine_dispatch"}, {&s_recording_failed, "_recording_failed"},
        {&s_input, "input"}, {&s_parameter, "parameter"},
        {&s_base_attr, "_base"}, {&s_data_ptr, "data_ptr"}, {&s_nbytes, "nbytes"},
        {&s_untyped_storage, "untyped_storage"}, {&s_cdata, "_cdata"}, {&s_tids, "tids"},
        {&s_ptr, "ptr"}, {&s_ref, "ref"}, {&s_book, "_book"}, {&s_targeted, "_targeted"},
        {&s_forget_target, "forget_target"},
        {&s_on_death, "_on_death"}, {&s_manual_gc, "_manual_gc"}, {&s_in_gc, "_in_gc"},
        {&s_view_base, "view base"}, {&s_errors, "errors"}, {&s_is_cuda, "is_cuda"},
        {&s_get_device, "get_device"}, {&s_weak_ref, "_weak_ref"}, {&s_declare, "_declare"},
        {&s_external, "external"}, {&s_weak, "weak"},
        {&s_life, "_life"}, {&s_cls, "_cls"}, {&s_use_count, "_use_count"}, {&s_sole, "_sole"},
        {&s_starts, "_starts"}, {&s_at_ptr, "_at_ptr"}, {&s_declared, "declared"},
        {&s_free_weak_ref, "_free_weak_ref"}, {&s_names, "_names"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (intern(names[i].slot, names[i].s) < 0)
            return NULL;
    if (PyType_Ready(&DispatcherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&trackfast_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DispatcherType);
    if (PyModule_AddObject(m, "Dispatcher", (PyObject *)&DispatcherType) < 0) {
        Py_DECREF(&DispatcherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
