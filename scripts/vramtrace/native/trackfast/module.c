/* _trackfast (module.c): the books and per-op path of vramtrace.torch.track(),
 * in C.
 *
 * Every op of a tracked program reaches the tracker (its dispatch mode, or
 * the op observer). Written in Python, its recording (find the op's tensors,
 * look them up, record each use with the Python stack, record the outputs
 * held back from the previous op) cost about 35 us per op: a clean training
 * loop of 50 us ops ran at 2.3x. The rules that change the books on every
 * op and death are here, once: an op's uses and outputs (dispatch.c), a
 * tensor's first sight and its death (tensors.c), a storage declared,
 * closed and ended (storages.c), a record's TENSOR_NEW (records.c); the
 * tracker's Python calls them through the Dispatcher's methods. What is
 * rare or policy - names, a storage that moved or was reused behind our
 * back, twins on one memory, marks, walks, collections - is the
 * vramtrace.torch package's, called back from here.
 *
 * The books are this module's: a Dispatcher makes their containers (the
 * Tracker binds the same objects: BOOK_* in trackfast.h) and holds their
 * state (epoch, recording, errors, ...: fields the Tracker reads and
 * writes as the Dispatcher's attributes); the records' types are here too
 * (records.c). Besides, it keeps caches: the raw-stack -> stack id table,
 * and the library's function pointers.
 *
 * A Dispatcher is made per Tracker; `dispatch` is installed, bound to the
 * mode, as the mode's __torch_dispatch__ (an instance attribute: PyTorch
 * looks it up on the mode object). Being C, it has no Python frame for
 * torch._dynamo to compile, so it needs none of the disable wrapper
 * TorchDispatchMode puts around a Python __torch_dispatch__ (2 us per op);
 * the Python it calls back into runs with the frame evaluator reset, as
 * that wrapper would do.
 */
#include "trackfast.h"

#include <structmember.h>   /* T_DOUBLE */

#include <errno.h>

/* Interned attribute names and objects looked up once. */
PyObject *s_out_name, *s_meta_of, *s_engine_dispatch, *s_recording_failed,
    *s_base_attr, *s_data_ptr, *s_nbytes, *s_storage_offset,
    *s_element_size, *s_input_name, *s_tick, *s_pass_ended,
    *s_untyped_storage, *s_cdata, *s_book, *s_targeted,
    *s_forget_target, *s_view_base, *s_is_cuda,
    *s_get_device, *s_weak_ref, *s_life, *s_cls,
    *s_use_count, *s_sole, *s_sole_bare, *s_free_weak_ref, *s_now, *s_lent_for, *s_collected, *s_gc_dead,
    *s_grad, *s_set_name, *s_backward_marker;
PyObject *tensor_type, *parameter_type, *sequence_nr_fn, *set_eval_frame_fn,
    *pending_names, *take_pending_name_fn, *storage_id_fn,
    *data_address_fn;

/* The books' containers' attribute names and kinds, by BOOK_*. */
static const struct {
    const char *attr;
    int is_list;
} book_kinds[BOOKS] = {
    [BOOK_BY_OBJ] = {"by_obj", 0}, [BOOK_BY_TID] = {"by_tid", 0},
    [BOOK_PENDING] = {"pending", 1}, [BOOK_STORAGES] = {"storages", 0},
    [BOOK_MAYBE_GONE] = {"maybe_gone", 1}, [BOOK_HELD] = {"held_elsewhere", 1},
    [BOOK_OP_META] = {"op_meta", 0},
    [BOOK_NODE_STACKS] = {"node_stacks", 0}, [BOOK_NAMES] = {"names", 0},
    [BOOK_ENCODED] = {"encoded", 0}, [BOOK_STARTS] = {"starts", 1},
    [BOOK_AT_PTR] = {"at_ptr", 0}, [BOOK_GC_DEAD] = {"gc_dead", 1},
    [BOOK_LENT] = {"lent_frames", 0},
};

/* Dispatcher(tracker, intern_frame, use, new, drop, external, external_free,
 * rename, stacks[, python_frames[, again[, window[, paused[, block_at]]]]]):
 * the addresses of vt_tensor_use_stack, vt_tensor_new_stack, vt_tensor_drop,
 * vt_storage_external_stack, vt_storage_external_free_stack, vt_tensor_name,
 * vt_python_frames, vt_tensor_again, vt_trace_window, vt_paused and
 * vt_pool_block_at (0: a library without it) in the loaded library. */
static int dispatcher_init(Dispatcher *d, PyObject *args, PyObject *kwds)
{
    PyObject *tracker, *intern_frame;
    unsigned long long use_addr, new_addr, drop_addr, ext_addr, ext_free_addr, rename_addr;
    unsigned long long frames_addr = 0, again_addr = 0, window_addr = 0, paused_addr = 0;
    unsigned long long block_at_addr = 0;
    int stacks;
    if (!PyArg_ParseTuple(args, "OOKKKKKKp|KKKKK", &tracker, &intern_frame, &use_addr, &new_addr,
                          &drop_addr, &ext_addr, &ext_free_addr, &rename_addr, &stacks,
                          &frames_addr, &again_addr, &window_addr, &paused_addr, &block_at_addr))
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
    d->rename = (rename_fn)(uintptr_t)rename_addr;
    d->python_frames = (python_frames_fn)(uintptr_t)frames_addr;
    d->again = (again_fn)(uintptr_t)again_addr;
    d->window = (window_fn)(uintptr_t)window_addr;
    d->paused = (paused_fn)(uintptr_t)paused_addr;
    d->pool_block_at = (pool_block_at_fn)(uintptr_t)block_at_addr;
    d->stacks_enabled = stacks;
    if (d->codes == NULL && (d->codes = PyDict_New()) == NULL)
        return -1;
    for (size_t i = 0; i < BOOKS; i++) {
        if (d->containers[i] == NULL &&
            (d->containers[i] = book_kinds[i].is_list ? PyList_New(0) : PyDict_New()) == NULL)
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
    PyObject *sole_bare = sole ? PyObject_GetAttr(life, s_sole_bare) : NULL;
    if (sole_bare == NULL) {
        Py_XDECREF(sole);
        Py_DECREF(life);
        Py_XDECREF(cls);
        Py_XDECREF(use_count);
        return -1;
    }
    d->life_available = cls != Py_None;
    Py_CLEAR(d->free_weak_ref);
    Py_CLEAR(d->life_now);
    if (d->life_available && ((d->free_weak_ref = PyObject_GetAttr(cls, s_free_weak_ref)) == NULL ||
                              (d->life_now = PyObject_GetAttr(life, s_now)) == NULL)) {
        Py_DECREF(life);
        Py_DECREF(cls);
        Py_DECREF(use_count);
        Py_DECREF(sole);
        Py_DECREF(sole_bare);
        return -1;
    }
    Py_DECREF(life);
    d->sole = sole == Py_None ? -1 : PyLong_AsLongLong(sole);
    d->sole_bare = sole_bare == Py_None ? -1 : PyLong_AsLongLong(sole_bare);
    Py_DECREF(sole_bare);
    Py_XSETREF(d->use_count, use_count == Py_None ? NULL : Py_NewRef(use_count));
    Py_DECREF(cls);
    Py_DECREF(use_count);
    Py_DECREF(sole);
    if (PyErr_Occurred())
        return -1;
    if (d->lent == NULL && (d->lent = PyMem_Calloc(LENT_SLOTS, sizeof *d->lent)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (d->table == NULL && (d->table = PyMem_Calloc(TABLE_CAP, sizeof *d->table)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (d->op_cache == NULL && (d->op_cache = op_cache_new()) == NULL)
        return -1;
    d->seq_noted = -1;
    return 0;
}

/* Its own references, then the books' containers (an array of them), then
 * the op cache's slots. */
static const Py_ssize_t dispatcher_owned[] = {
    offsetof(Dispatcher, tracker),   offsetof(Dispatcher, intern_frame),
    offsetof(Dispatcher, codes),     offsetof(Dispatcher, use_count),
    offsetof(Dispatcher, holders),   offsetof(Dispatcher, targeted),
    offsetof(Dispatcher, free_weak_ref), offsetof(Dispatcher, life_now),
};

static int dispatcher_traverse(Dispatcher *d, visitproc visit, void *arg)
{
    int rc = visit_owned((PyObject *)d, dispatcher_owned, NOWNED(dispatcher_owned), visit, arg);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < NOWNED(d->containers); i++)
        Py_VISIT(d->containers[i]);
    return op_cache_traverse(d->op_cache, visit, arg);
}

static int dispatcher_clear(Dispatcher *d)
{
    clear_owned((PyObject *)d, dispatcher_owned, NOWNED(dispatcher_owned));
    for (size_t i = 0; i < NOWNED(d->containers); i++)
        Py_CLEAR(d->containers[i]);
    op_cache_clear(d->op_cache);
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
    PyMem_Free(d->op_cache);
    PyMem_Free(d->lent);   /* the op observer was uninstalled before: none reads it */
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyObject *dispatcher_cached(Dispatcher *d, void *unused)
{
    return PyLong_FromSize_t(d->cached);
}

static PyObject *dispatcher_storages_to_check(Dispatcher *d, PyObject *unused)
{
    if (d->tracker == NULL)
        return PyList_New(0);
    return storages_to_check(d);
}

static PyObject *dispatcher_stale_storages(Dispatcher *d, PyObject *args)
{
    long long threshold;
    int final, host_later;
    if (!PyArg_ParseTuple(args, "Lpp", &threshold, &final, &host_later))
        return NULL;
    if (d->tracker == NULL)
        return Py_BuildValue("([][]i)", 0);
    return stale_storages(d, threshold, final, host_later);
}

static PyObject *dispatcher_shared_storages(Dispatcher *d, PyObject *unused)
{
    if (d->tracker == NULL)
        return PyList_New(0);
    return shared_storages(d);
}

/* Dispatcher.declare_again(limit, scale) -> how many: records.c's declare_again. */
static PyObject *dispatcher_declare_again(Dispatcher *d, PyObject *args)
{
    Py_ssize_t limit;
    unsigned long long scale;
    if (!PyArg_ParseTuple(args, "nK", &limit, &scale))
        return NULL;
    if (d->tracker == NULL)
        return PyLong_FromLong(0);
    Py_ssize_t n = declare_again(d, limit, scale);
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

/* Dispatcher.trace_window() -> (events recorded, the ring's room), or None
 * without vt_trace_window; Dispatcher.paused(ns): a PAUSE of ns recorded,
 * False without vt_paused. A mark reads the window twice and records its
 * pause once: called here, not through ctypes, whose call made right after
 * a step (its code out of the caches) costs many times its warm cost
 * (docs/benchmarks.md, session 47). The tracker chooses between the two
 * once (_fast_path._ring_calls). */
static PyObject *dispatcher_trace_window(Dispatcher *d, PyObject *unused)
{
    if (d->window == NULL)
        Py_RETURN_NONE;
    uint64_t recorded = 0, capacity = 0;
    int rc = d->window(&recorded, &capacity);
    if (rc != 0)
        return PyErr_Format(PyExc_RuntimeError, "vt_trace_window() failed (%d)", rc);
    return Py_BuildValue("(KK)", (unsigned long long)recorded, (unsigned long long)capacity);
}

static PyObject *dispatcher_paused(Dispatcher *d, PyObject *arg)
{
    unsigned long long ns = PyLong_AsUnsignedLongLong(arg);
    if (ns == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (d->paused == NULL)
        Py_RETURN_FALSE;
    int rc = ns > 0 ? d->paused((uint64_t)ns) : 0;
    if (rc != 0)
        return PyErr_Format(PyExc_RuntimeError, "vt_paused(%llu) failed (%d)", ns, rc);
    Py_RETURN_TRUE;
}

/* call_with_text(address, text) -> int: the library's ``int f(const char
 * *)`` at ``address`` (vt_mark) called with ``text`` in UTF-8, a lone
 * surrogate replaced as Library's own encoding does, the GIL held (as
 * vt_paused is). For Library.mark: a program marks every step, and the
 * ctypes call, made right after a step, costs several microseconds. */
static PyObject *py_call_with_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1]))
        return PyErr_Format(PyExc_TypeError, "call_with_text(address, text: str)");
    void *addr = PyLong_AsVoidPtr(args[0]);
    if (addr == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "call_with_text: address 0");
        return NULL;
    }
    int (*fn)(const char *) = (int (*)(const char *))(uintptr_t)addr;
    const char *utf8 = PyUnicode_AsUTF8(args[1]);
    if (utf8 != NULL)
        return PyLong_FromLong(fn(utf8));
    PyErr_Clear();   /* a lone surrogate: replaced */
    PyObject *bytes = PyUnicode_AsEncodedString(args[1], "utf-8", "replace");
    if (bytes == NULL)
        return NULL;
    PyObject *rc = PyLong_FromLong(fn(PyBytes_AS_STRING(bytes)));
    Py_DECREF(bytes);
    return rc;
}

static PyObject *dispatcher_tensors_to_check(Dispatcher *d, PyObject *unused)
{
    if (d->tracker == NULL)
        return PyList_New(0);
    return tensors_to_check(d);
}

/* The op observer's functions, handed over from Python by address (0:
 * none) as three attributes: weak_maker, its trackobs_make_weak, given while it
 * hands ops over (the facts it hands over with them are used only then:
 * they come with the means to take a weak handle without a storage
 * object); storage_reader, its trackobs_storage_now, which storages_to_check
 * reads storages with instead of Python's data_ptr(); engine_drainer, its
 * trackobs_drain, which flush() calls first while it hands ops over;
 * use_counter, its trackobs_storage_use_count, which a storage left without
 * tensors is asked with instead of torch._C._storage_Use_Count. */
enum { WEAK_MAKER, STORAGE_READER, ENGINE_DRAINER, USE_COUNTER };

static PyObject *dispatcher_get_observer_fn(Dispatcher *d, void *which)
{
    intptr_t w = (intptr_t)which;
    uintptr_t a = w == WEAK_MAKER ? (uintptr_t)d->make_weak
                  : w == STORAGE_READER ? (uintptr_t)d->storage_now
                  : w == USE_COUNTER    ? (uintptr_t)d->use_count_now
                                        : (uintptr_t)d->drain;
    return PyLong_FromUnsignedLongLong(a);
}

static int dispatcher_set_observer_fn(Dispatcher *d, PyObject *value, void *which)
{
    unsigned long long a = value != NULL ? PyLong_AsUnsignedLongLong(value) : 0;
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if ((intptr_t)which == WEAK_MAKER)
        d->make_weak = (vt__make_weak_fn)(uintptr_t)a;
    else if ((intptr_t)which == STORAGE_READER)
        d->storage_now = (vt__storage_now_fn)(uintptr_t)a;
    else if ((intptr_t)which == USE_COUNTER)
        d->use_count_now = (vt__use_count_fn)(uintptr_t)a;
    else
        d->drain = (vt__drain_fn)(uintptr_t)a;
    return 0;
}

/* Dispatcher.read_storages_with(address, probe) -> bool: the op observer's
 * trackobs_storage_key (``address``; 0: none) read a tensor's StorageImpl
 * from now on, given the TensorImpl that tensor_impl_of() reads from the
 * Python tensor, if it reads ``probe``'s (a tensor) as torch says it is
 * (its ``_cdata``): the Python tensor's layout is torch's, not ours to
 * assume. False: torch._C._storage_id is asked, as before. */
static PyObject *dispatcher_read_storages_with(Dispatcher *d, PyObject *const *argv,
                                               Py_ssize_t nargs)
{
    if (nargs != 2 || !PyObject_TypeCheck(argv[1], (PyTypeObject *)tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "read_storages_with(address: int, probe: Tensor)");
        return NULL;
    }
    unsigned long long a = PyLong_AsUnsignedLongLong(argv[0]);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    d->storage_key = NULL;
    PyObject *cdata = PyObject_GetAttrString(argv[1], "_cdata");
    if (cdata == NULL)
        return NULL;
    unsigned long long impl = PyLong_AsUnsignedLongLong(cdata);
    Py_DECREF(cdata);
    if (impl == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (a != 0 && impl != 0 && tensor_impl_of(argv[1]) == impl)
        d->storage_key = (vt__storage_key_fn)(uintptr_t)a;
    return PyBool_FromLong(d->storage_key != NULL);
}

/* Dispatcher.use(tid): a use of recorded tensor tid with no stack (a
 * parameter's .grad used with it at a mark): one C call, no ctypes. */
static PyObject *dispatcher_use(Dispatcher *d, PyObject *arg)
{
    uint64_t tid = PyLong_AsUnsignedLongLong(arg);
    if (tid == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    d->use(tid, 0);
    Py_RETURN_NONE;
}

/* The books' rules for the tracker's Python (marks, walks, sweeps, its own
 * collections): each rule is here once, the per-op path's own. A failure
 * with no Python error set is a wrong argument. */
static PyObject *rule_done(int rc, const char *call)
{
    if (rc >= 0)
        Py_RETURN_NONE;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "%s", call);
    return NULL;
}

/* Dispatcher.follow_grads(epoch, named, param_names, model_of) -> (models,
 * todo): each parameter used since mark ``epoch`` has its .grad used and
 * named (grads.c). */
static PyObject *dispatcher_follow_grads(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyAnySet_Check(argv[1]) || !PyDict_Check(argv[2]) ||
        !PyDict_Check(argv[3])) {
        PyErr_SetString(PyExc_TypeError, "follow_grads(epoch: int, named: set, "
                                         "param_names: dict, model_of: dict)");
        return NULL;
    }
    long long epoch = PyLong_AsLongLong(argv[0]);
    if (epoch == -1 && PyErr_Occurred())
        return NULL;
    if (d->tracker == NULL)
        return Py_BuildValue("(NN)", PySet_New(NULL), PyList_New(0));
    return follow_grads(d, epoch, argv[1], argv[2], argv[3]);
}

/* Dispatcher.follow_state(state, epoch, timed) -> renames: a model's
 * parameters and buffers used with it (grads.c). */
static PyObject *dispatcher_follow_state(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "follow_state(state: list, epoch: int, timed: bool)");
        return NULL;
    }
    long long epoch = PyLong_AsLongLong(argv[1]);
    int timed = PyObject_IsTrue(argv[2]);
    if ((epoch == -1 && PyErr_Occurred()) || timed < 0)
        return NULL;
    if (d->tracker == NULL)
        return PyList_New(0);
    return follow_state(d, argv[0], epoch, timed);
}

/* Dispatcher.name_grad(grec, label): a .grad's record named after its
 * parameter, with the backward output it views (grads.c); name_record(rec,
 * label): a tracked tensor renamed (records.c). */
static PyObject *naming_rule(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs,
                             int (*rule)(Dispatcher *, PyObject *, PyObject *), const char *call)
{
    if (nargs != 2 || !is_tensor_rec(argv[0]) || !PyUnicode_Check(argv[1])) {
        PyErr_Format(PyExc_TypeError, "%s(rec: TensorRec, label: str)", call);
        return NULL;
    }
    if (d->tracker == NULL)
        Py_RETURN_NONE;
    return rule_done(rule(d, argv[0], argv[1]), call);
}

static PyObject *dispatcher_name_grad(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    return naming_rule(d, argv, nargs, name_grad, "name_grad");
}

static PyObject *dispatcher_name_record(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    return naming_rule(d, argv, nargs, name_record, "name_record");
}

static int books_args(Dispatcher *d, Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi,
                      const char *call)
{
    if (nargs < lo || nargs > hi) {
        PyErr_Format(PyExc_TypeError, "%s", call);
        return -1;
    }
    if (d->tracker == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the tracker is gone");
        return -1;
    }
    return 0;
}

/* Dispatcher.record(rec) -> tid: rec's TENSOR_NEW if not made yet. */
static PyObject *dispatcher_record(Dispatcher *d, PyObject *rec)
{
    static const char call[] = "record(rec: TensorRec)";
    if (books_args(d, 1, 1, 1, call) < 0)
        return NULL;
    if (!is_tensor_rec(rec))
        return rule_done(-1, call);
    uint64_t tid = 0;
    int rc = record(d, rec, &tid);
    return rc < 0 ? rule_done(rc, call) : PyLong_FromUnsignedLongLong(tid);
}

/* Dispatcher.saved_stand_in(srec, name, stack, said_base) -> rec: the record
 * standing for a tensor an autograd node saved (records.c). */
static PyObject *dispatcher_saved_stand_in(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    static const char call[] = "saved_stand_in(srec: StorageRec, name: str, stack: int, said_base: int)";
    if (books_args(d, nargs, 4, 4, call) < 0)
        return NULL;
    if (!is_storage_rec(argv[0]) || !PyUnicode_Check(argv[1]) || !PyLong_Check(argv[2]))
        return rule_done(-1, call);
    uint64_t base = PyLong_AsUnsignedLongLong(argv[3]);
    if (base == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    PyObject *rec = saved_stand_in(d, argv[0], argv[1], argv[2], base);
    return rec != NULL ? rec : rule_done(-1, call);
}

/* Dispatcher.flush(): record the outputs held back, in creation order. */
static PyObject *dispatcher_flush(Dispatcher *d, PyObject *unused)
{
    if (d->tracker == NULL)
        Py_RETURN_NONE;
    if (d->drain != NULL)   /* the engine threads' ops held back come first */
        d->drain();
    return rule_done(flush(d), "flush()");
}

/* Dispatcher.settle(): storages.c's settle() for the tracker, before it
 * reads the books (a mark's sweep, the block's end, a collection). */
static PyObject *dispatcher_settle(Dispatcher *d, PyObject *unused)
{
    if (d->tracker == NULL)
        Py_RETURN_NONE;
    return rule_done(settle(d, 1), "settle()");
}

/* Dispatcher.track(t, name, stack, base=None) -> rec or None: tensor ``t``
 * into the books (and recorded) under ``name``, first seen at stack id
 * ``stack``; ``base``: what the trace is told of its base, as record()'s
 * (VT_TENSOR_SAVED_ONLY for a tensor a walk found that no op showed); None
 * for a tensor without memory of its own. */
static PyObject *dispatcher_track(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    static const char call[] = "track(t: Tensor, name: str, stack: int, base: int = None)";
    if (books_args(d, nargs, 3, 4, call) < 0)
        return NULL;
    if (!PyUnicode_Check(argv[1]) || !PyLong_Check(argv[2]))
        return rule_done(-1, call);
    uint64_t base;
    int said = nargs == 4 && argv[3] != Py_None;
    if (said && (base = PyLong_AsUnsignedLongLong(argv[3])) == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    PyObject *rec = track(d, argv[0], NULL, argv[1], argv[2], Py_None, 0, said ? &base : NULL);
    if (rec == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "the tracker's books are not as expected");
    return rec;
}

/* A rule on one record (``is_rec`` checks its type), with the stack id
 * where it happens (None: captured here). */
static PyObject *record_rule(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs,
                             int (*is_rec)(PyObject *),
                             int (*rule)(Dispatcher *, PyObject *, PyObject *), const char *call)
{
    if (books_args(d, nargs, 1, 2, call) < 0)
        return NULL;
    if (!is_rec(argv[0]))
        return rule_done(-1, call);
    return rule_done(rule(d, argv[0], nargs == 2 ? argv[1] : Py_None), call);
}

/* Dispatcher.drop(rec, stack=None): tensor record ``rec`` ends (its
 * storage's release, if it was the last). */
static PyObject *dispatcher_drop(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    return record_rule(d, argv, nargs, is_tensor_rec, drop,
                       "drop(rec: TensorRec, stack: int = None)");
}

/* Dispatcher.check_storage(srec, stack=None) and move_tensor(rec, stack=None):
 * a mark's sweep found a storage gone or on other memory, a tensor on
 * another storage (storage_turns.c). */
static int check_storage_found(Dispatcher *d, PyObject *srec, PyObject *stack_obj)
{
    return check_storage(d, srec, stack_obj, 0);
}

static PyObject *dispatcher_check_storage(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    return record_rule(d, argv, nargs, is_storage_rec, check_storage_found,
                       "check_storage(srec: StorageRec, stack: int = None)");
}

static PyObject *dispatcher_move_tensor(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    return record_rule(d, argv, nargs, is_tensor_rec, move_tensor,
                       "move_tensor(rec: TensorRec, stack: int = None)");
}

static PyMethodDef dispatcher_methods[] = {
    {"read_storages_with", (PyCFunction)(void (*)(void))dispatcher_read_storages_with,
     METH_FASTCALL,
     "read_storages_with(address, probe) -> bool: the op observer's trackobs_storage_key "
     "reads a tensor's storage from now on, if the tensor's TensorImpl is read right "
     "(probe's _cdata); else torch._C._storage_id is asked"},
    {"use", (PyCFunction)dispatcher_use, METH_O,
     "use(tid): a use of recorded tensor tid, no stack"},
    {"follow_grads", (PyCFunction)(void (*)(void))dispatcher_follow_grads, METH_FASTCALL,
     "follow_grads(epoch, named, param_names, model_of) -> (models, todo): each "
     "parameter used since the mark has its .grad used and named (grads.c)"},
    {"follow_state", (PyCFunction)(void (*)(void))dispatcher_follow_state, METH_FASTCALL,
     "follow_state(state, epoch, timed) -> renames: a model's parameters and buffers "
     "used with it (grads.c)"},
    {"name_grad", (PyCFunction)(void (*)(void))dispatcher_name_grad, METH_FASTCALL,
     "name_grad(grec, label): a .grad named after its parameter (grads.c)"},
    {"name_record", (PyCFunction)(void (*)(void))dispatcher_name_record, METH_FASTCALL,
     "name_record(rec, label): a tracked tensor goes by label from now on (records.c)"},
    {"dispatch", (PyCFunction)(void (*)(void))dispatch, METH_FASTCALL | METH_KEYWORDS,
     "dispatch(mode, func, types, args=(), kwargs=None): the mode's __torch_dispatch__"},
    {"observed", (PyCFunction)(void (*)(void))observed, METH_FASTCALL,
     "observed(func, args, out, facts, seq): record an op the C++ observer saw run"},
    {"observed_engine", (PyCFunction)(void (*)(void))observed_engine, METH_FASTCALL,
     "observed_engine(func, args, out, facts, stack[, storage_uses]): record an "
     "autograd engine thread's op the C++ observer saw run, under the forward op's "
     "frames lent, and its uses of storages whose tensors died before the hand-over"},
    {"engine_op", (PyCFunction)(void (*)(void))engine_op, METH_FASTCALL,
     "engine_op(func, args, kwargs, out): record an autograd engine thread's op that "
     "ran under the forward op's frames (the mode's way)"},
    {"record", (PyCFunction)dispatcher_record, METH_O,
     "record(rec) -> tid: rec's TENSOR_NEW if not made yet"},
    {"saved_stand_in", (PyCFunction)(void (*)(void))dispatcher_saved_stand_in, METH_FASTCALL,
     "saved_stand_in(srec, name, stack, said_base) -> rec: the record standing for a "
     "tensor an autograd node saved"},
    {"flush", (PyCFunction)dispatcher_flush, METH_NOARGS,
     "flush(): record the outputs held back"},
    {"settle", (PyCFunction)dispatcher_settle, METH_NOARGS,
     "settle(): storages whose last tensor died while held elsewhere released if gone"},
    {"track", (PyCFunction)(void (*)(void))dispatcher_track, METH_FASTCALL,
     "track(t, name, stack) -> rec or None: a tensor into the books"},
    {"drop", (PyCFunction)(void (*)(void))dispatcher_drop, METH_FASTCALL,
     "drop(rec, stack=None): a tensor record ends (its storage with it, if the last)"},
    {"check_storage", (PyCFunction)(void (*)(void))dispatcher_check_storage, METH_FASTCALL,
     "check_storage(srec, stack=None): the books follow a storage gone or on other memory"},
    {"move_tensor", (PyCFunction)(void (*)(void))dispatcher_move_tensor, METH_FASTCALL,
     "move_tensor(rec, stack=None): a tensor recorded anew on the storage it has now"},
    {"storages_to_check", (PyCFunction)dispatcher_storages_to_check, METH_NOARGS,
     "the storages check_storage must look at (gone, or on other memory)"},
    {"stale_storages", (PyCFunction)dispatcher_stale_storages, METH_VARARGS,
     "stale_storages(threshold, final, host_later) -> (looked, resting, host, regrown, "
     "carried): of the storages not used since that mark, those a walk may start from, "
     "those resting, and how many host ones were left out; of the others, those rebuilt "
     "larger from their own line's value, and how many were made before that mark "
     "(storages.c); every storage's epochs brought up to date"},
    {"shared_storages", (PyCFunction)dispatcher_shared_storages, METH_NOARGS,
     "shared_storages() -> the storages more than one tracked tensor is on"},
    {"trace_window", (PyCFunction)dispatcher_trace_window, METH_NOARGS,
     "trace_window() -> (recorded, room) | None: the library's ring (vt_trace_window); "
     "None: a library without it"},
    {"paused", (PyCFunction)dispatcher_paused, METH_O,
     "paused(ns) -> bool: a PAUSE of ns recorded (vt_paused); False: a library without it"},
    {"declare_again", (PyCFunction)dispatcher_declare_again, METH_VARARGS,
     "declare_again(limit, scale) -> n: the recorded tensors in the books declared again "
     "(vt_tensor_again, their rests times scale), the oldest first, n <= limit; 0 with a "
     "library without it"},
    {"tensors_to_check", (PyCFunction)dispatcher_tensors_to_check, METH_NOARGS,
     "the recorded tensors whose storage may have changed"},
    {NULL, NULL, 0, NULL},
};

static PyObject *dispatcher_uses_only(Dispatcher *d, void *unused)
{
    return PyLong_FromUnsignedLongLong(d->uses_only);
}

static PyObject *dispatcher_ops(Dispatcher *d, void *unused)
{
    return PyLong_FromUnsignedLongLong(d->ops);
}

static PyObject *dispatcher_from_facts(Dispatcher *d, void *unused)
{
    return PyLong_FromUnsignedLongLong(d->from_facts);
}

static PyObject *dispatcher_busy(Dispatcher *d, void *unused)
{
    return PyFloat_FromDouble(d->busy);
}

static PyObject *dispatcher_object_walks(Dispatcher *d, void *unused)
{
    return PyLong_FromUnsignedLongLong(d->object_walks);
}

static PyMemberDef dispatcher_members[] = {
    {"tick_s", T_DOUBLE, offsetof(Dispatcher, tick_s), 0,
     "seconds between Tracker._tick calls, 0: none"},
    {"pass_ticks", T_INT, offsetof(Dispatcher, pass_ticks), 0,
     "Tracker._pass_ended at the owner's first op after a backward pass, 0: never"},
    {"recording", T_INT, offsetof(Dispatcher, recording), 0,
     "ops are recorded (inside the block, not at a mark)"},
    {"marking", T_ULONG, offsetof(Dispatcher, marking), 0,
     "the thread doing a mark's work now, 0: none"},
    {"owner", T_ULONG, offsetof(Dispatcher, owner), 0,
     "the thread that entered the block: it runs the forward ops"},
    {"epoch", T_LONGLONG, offsetof(Dispatcher, epoch), 0, "marks (and ticks) seen"},
    {"manual_gc", T_ULONG, offsetof(Dispatcher, manual_gc), 0,
     "the thread in the tracker's own cycle collection, 0: none"},
    {"in_gc", T_ULONG, offsetof(Dispatcher, in_gc), 0,
     "the thread in a garbage collection the tracker did not start, 0: none"},
    {"errors", T_LONGLONG, offsetof(Dispatcher, errors), 0, "recordings that failed"},
    {"device_seen", T_BOOL, offsetof(Dispatcher, device_seen), READONLY,
     "a storage on a device was tracked"},
    {"lend", T_INT, offsetof(Dispatcher, lend), 0,
     "the op observer reads the frames to lend engine threads (lent_reader, lent_table)"},
    {NULL, 0, 0, 0, NULL},
};

/* Dispatcher.lent_reader, .lent_table: the addresses the op observer reads
 * the frames to lend an engine thread with (lent_read(lent_table, seq)). */
static PyObject *dispatcher_lent_reader(Dispatcher *d, void *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)lent_read);
}

static PyObject *dispatcher_lent_table(Dispatcher *d, void *unused)
{
    return PyLong_FromVoidPtr(d->lent);
}

/* Dispatcher.marking_address: where the op observer reads which thread
 * does a mark's work now (Dispatcher.marking). */
static PyObject *dispatcher_marking_address(Dispatcher *d, void *unused)
{
    return PyLong_FromVoidPtr(&d->marking);
}

/* Dispatcher.engine_uses_address: the address of engine_uses
 * (vt__engine_uses_fn, tensor_facts.h), which the op observer calls with
 * this Dispatcher (id(dispatcher)) for a backward op whose outputs died. */
static PyObject *dispatcher_engine_uses_address(Dispatcher *d, void *unused)
{
    vt__engine_uses_fn fn = engine_uses;
    return PyLong_FromVoidPtr((void *)(uintptr_t)fn);
}

/* Dispatcher.by_obj, .storages, ...: the books' containers (book_kinds). */
static PyObject *dispatcher_book(Dispatcher *d, void *index)
{
    PyObject *c = d->containers[(uintptr_t)index];
    if (c == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the Dispatcher has no books yet");
        return NULL;
    }
    return Py_NewRef(c);
}

/* one BOOK(i) below per book: module init names them (book_kinds) */
_Static_assert(BOOKS == 14, "dispatcher_getset lists BOOK(0) to BOOK(BOOKS - 1)");
static PyGetSetDef dispatcher_getset[] = {
#define BOOK(i) {(char *)"", (getter)dispatcher_book, NULL, NULL, (void *)(uintptr_t)(i)}
    BOOK(0), BOOK(1), BOOK(2), BOOK(3), BOOK(4), BOOK(5), BOOK(6), BOOK(7), BOOK(8), BOOK(9),
    BOOK(10), BOOK(11), BOOK(12), BOOK(13),
#undef BOOK
    {"cached_stacks", (getter)dispatcher_cached, NULL, "raw stacks cached", NULL},
    {"object_walks", (getter)dispatcher_object_walks, NULL,
     "stacks keyed by walking frame objects (where vt_python_frames cannot read them)", NULL},
    {"ops", (getter)dispatcher_ops, NULL, "ops recorded by the C path", NULL},
    {"uses_only_ops", (getter)dispatcher_uses_only, NULL,
     "of them, backward ops whose outputs had died, recorded by engine_uses", NULL},
    {"busy", (getter)dispatcher_busy, NULL, "seconds the C path spent recording", NULL},
    {"tracked_from_facts", (getter)dispatcher_from_facts, NULL,
     "tensors tracked from the op observer's facts, without asking Python", NULL},
    {"weak_maker", (getter)dispatcher_get_observer_fn, (setter)dispatcher_set_observer_fn,
     "address of the op observer's trackobs_make_weak, 0: none (its facts unused)",
     (void *)(intptr_t)WEAK_MAKER},
    {"storage_reader", (getter)dispatcher_get_observer_fn, (setter)dispatcher_set_observer_fn,
     "address of the op observer's trackobs_storage_now, 0: none (Python's data_ptr())",
     (void *)(intptr_t)STORAGE_READER},
    {"use_counter", (getter)dispatcher_get_observer_fn, (setter)dispatcher_set_observer_fn,
     "address of the op observer's trackobs_storage_use_count, 0: none "
     "(torch._C._storage_Use_Count)",
     (void *)(intptr_t)USE_COUNTER},
    {"engine_drainer", (getter)dispatcher_get_observer_fn, (setter)dispatcher_set_observer_fn,
     "address of the op observer's trackobs_drain, 0: none (flush() hands nothing over)",
     (void *)(intptr_t)ENGINE_DRAINER},
    {"lent_reader", (getter)dispatcher_lent_reader, NULL,
     "address of lent_read (vt__lent_read_fn, tensor_facts.h)", NULL},
    {"lent_table", (getter)dispatcher_lent_table, NULL, "address of its lent table", NULL},
    {"marking_address", (getter)dispatcher_marking_address, NULL,
     "address of marking (the thread doing a mark's work), for the op observer", NULL},
    {"engine_uses_address", (getter)dispatcher_engine_uses_address, NULL,
     "address of engine_uses (vt__engine_uses_fn), for the op observer", NULL},
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
    .tp_members = dispatcher_members,
};

/* setup(Tensor, Parameter, sequence_nr, set_eval_frame, pending_names,
 * take_pending_name, storage_id, data_address):
 * what the module needs from torch and vramtrace.torch, handed over by
 * vramtrace.torch (so that this module imports nothing). set_eval_frame,
 * storage_id (torch._C._storage_id) and data_address (torch._C._data_address)
 * may be None. */
static PyObject *module_setup(PyObject *self, PyObject *args)
{
    PyObject *tt, *pt, *seq, *sef, *pn, *tpn, *sid, *dad;
    if (!PyArg_ParseTuple(args, "OOOOO!OOO", &tt, &pt, &seq, &sef, &PyDict_Type, &pn, &tpn, &sid,
                          &dad))
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
    Py_INCREF(pn);
    Py_XSETREF(pending_names, pn);
    Py_INCREF(tpn);
    Py_XSETREF(take_pending_name_fn, tpn);
    if (sid == Py_None)
        Py_CLEAR(storage_id_fn);
    else
        Py_XSETREF(storage_id_fn, Py_NewRef(sid));
    if (dad == Py_None)
        Py_CLEAR(data_address_fn);
    else
        Py_XSETREF(data_address_fn, Py_NewRef(dad));
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
     "setup(Tensor, Parameter, sequence_nr, set_eval_frame or None, pending_names, "
     "take_pending_name, storage_id or None, data_address or None)"},
    {"gc_hold", py_gc_hold, METH_NOARGS,
     "gc_hold() -> token: the collector's count held while the tracker works "
     "(gc_schedule.c); give the token to gc_release()"},
    {"gc_release", py_gc_release, METH_O, "gc_release(token): the count as gc_hold() found it"},
    {"gc_held_count", py_gc_held_count, METH_NOARGS, "gc_held_count(): the count now"},
    {"gc_count_as_program", py_gc_count_as_program, METH_O,
     "gc_count_as_program(n): inside a hold, n objects made are the program's"},
    {"gc_program_read", py_gc_program_read, METH_NOARGS,
     "gc_program_read(): inside a hold, a walk of the program's objects begins: the "
     "frame objects it makes, which CPython keeps, are the program's (gc_reads.c)"},
    {"gc_torch_kept_types", py_gc_torch_kept_types, METH_O,
     "gc_torch_kept_types(types): the types, defined in C, of the objects PyTorch keeps "
     "with its C++ objects (an autograd node's, a storage's): those a walk makes are "
     "neither counted nor, when freed, subtracted (gc_reads.c)"},
    {"frame_stack", py_frame_stack, METH_O,
     "frame_stack(frame) -> list: what a running function's frame holds on its value "
     "stack, where it saved it (at a call to a Python function); () where it cannot tell"},
    {"instances_of", (PyCFunction)(void (*)(void))py_instances_of, METH_FASTCALL,
     "instances_of(objects: list, cls: type) -> list: the items whose type is cls or a "
     "subclass of it"},
    {"call_with_text", (PyCFunction)(void (*)(void))py_call_with_text, METH_FASTCALL,
     "call_with_text(address, text) -> int: the C function int f(const char *) at "
     "address called with text in UTF-8 (Library.mark's vt_mark)"},
    {"referrers_of", py_referrers_of, METH_O,
     "referrers_of(objects: list | tuple) -> list: the objects the collector tracks that "
     "refer to any of them, in one pass over the heap (gc.get_referrers's answer; "
     "referrers.c)"},
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
        {&s_out_name, "_out_name"}, {&s_meta_of, "_meta_of"},
        {&s_engine_dispatch, "_engine_dispatch"}, {&s_recording_failed, "_recording_failed"},
        {&s_input_name, "_input_name"}, {&s_tick, "_tick"}, {&s_pass_ended, "_pass_ended"},
        {&s_base_attr, "_base"}, {&s_data_ptr, "data_ptr"}, {&s_nbytes, "nbytes"},
        {&s_storage_offset, "storage_offset"}, {&s_element_size, "element_size"},
        {&s_untyped_storage, "untyped_storage"}, {&s_cdata, "_cdata"}, {&s_book, "_book"},
        {&s_targeted, "_targeted"},
        {&s_forget_target, "forget_target"},
        {&s_view_base, "view base"}, {&s_is_cuda, "is_cuda"},
        {&s_get_device, "get_device"}, {&s_weak_ref, "_weak_ref"},
        {&s_life, "_life"}, {&s_cls, "_cls"}, {&s_use_count, "_use_count"}, {&s_sole, "_sole"},
        {&s_sole_bare, "_sole_bare"},
        {&s_free_weak_ref, "_free_weak_ref"},
        {&s_now, "now"}, {&s_lent_for, "_lent_for"}, {&s_collected, "_collected"},
        {&s_grad, "_grad"}, {&s_set_name, "_set_name"}, {&s_backward_marker, "backward: "},
        };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (intern(names[i].slot, names[i].s) < 0)
            return NULL;
    for (size_t i = 0; i < BOOKS; i++)
        dispatcher_getset[i].name = book_kinds[i].attr;   /* BOOK(i) */
    if (PyType_Ready(&DispatcherType) < 0 || PyType_Ready(&DeathCallType) < 0 ||
        PyType_Ready(&ReferrerIndexType) < 0 || records_ready() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&trackfast_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Dispatcher", (PyObject *)&DispatcherType) < 0 ||
        PyModule_AddObjectRef(m, "TensorRec", (PyObject *)&TensorRecType) < 0 ||
        PyModule_AddObjectRef(m, "StorageRec", (PyObject *)&StorageRecType) < 0 ||
        PyModule_AddObjectRef(m, "ReferrerIndex", (PyObject *)&ReferrerIndexType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* whether gc_hold() holds anything (False: built without CPython's
     * internal headers, or free-threaded) */
    if (PyModule_AddIntConstant(m, "GC_HELD", gc_can_hold()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* the same hold for the op observer's work, by address (0: none) */
    static const vt__gc_hold_api gc_api = {gc_hold, gc_release, gc_held_count,
                                          gc_count_as_program};
    PyObject *api = PyLong_FromVoidPtr(gc_can_hold() ? (void *)&gc_api : NULL);
    if (api == NULL || PyModule_AddObject(m, "GC_HOLD_API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
