/* The mode's __torch_dispatch__: run the op, then record it. */
#include "trackfast.h"

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

/* Whether ``t`` is one of ``l``'s tensors (the same object). */
static int tl_has(const TensorList *l, PyObject *t)
{
    for (Py_ssize_t i = 0; i < l->n; i++)
        if (l->items[i] == t)
            return 1;
    return 0;
}

/* Append the tensors of a nested list/tuple/dict (an op's arguments or outputs). */
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

/* ``rec``'s tensor was used in this op (None: a tensor without a storage,
 * not tracked); its storage's record in ``*s`` where asked (NULL: none;
 * borrowed from the books). Takes the reference to ``rec``. */
static int used(PyObject *storages, PyObject *rec, long long epoch, StorageRec **s)
{
    StorageRec *at = NULL;
    int bad = rec != Py_None && storage_rec_of(storages, rec, &at) < 0;
    if (at != NULL)
        at->last_epoch = epoch;
    Py_DECREF(rec);
    if (s != NULL)
        *s = at;
    return bad ? -1 : 0;
}

/* Whether the tensor of ``rec`` now lives on another storage than the
 * one it was recorded on, as the observer's facts tell (facts->storage is
 * the StorageImpl, what the record's key names). Module.to(), .cuda() and
 * .half() give a parameter new memory by ``param.data = copy``, which no op
 * shows: without this its uses would be counted on the memory it left
 * until a mark's sweep (never, in a program without marks). */
static int moved(PyObject *rec, const vt__tensor_facts *f)
{
    if (f == NULL || f->storage == 0 || !PyLong_Check(TREC(rec)->skey))
        return 0;
    unsigned long long key = PyLong_AsUnsignedLongLong(TREC(rec)->skey);
    if (key == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return key != f->storage;
}

/* Tracker.<method>() (_tick, _pass_ended: a mark's work), the next tick
 * due tick_s after it. */
static int tracker_works(Dispatcher *d, PyObject *method)
{
    PyObject *r = call_method(d->tracker, method, NULL, 0);
    d->next_tick = now_s() + d->tick_s;
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Tracker._tick, when a tick is due (dispatcher.tick_s): a mark's work in
 * a program that has made no mark, or whose marks have gone quiet (the
 * tracker says which, and does nothing otherwise). The first op starts the
 * clock. The next tick is due tick_s after this one's work ended: counted
 * from its start, a
 * tick whose work took tick_s (a loaded machine) was followed by another
 * at the program's next op, and the two paused the program for longer
 * than `check`'s time rule waits before a finding. */
static int tick(Dispatcher *d, double now)
{
    int first = d->next_tick == 0;
    d->next_tick = now + d->tick_s;
    return first ? 0 : tracker_works(d, s_tick);
}

/* Tracker._pass_ended, at the owner thread's first op after a backward pass
 * (its ops recorded since: an autograd engine thread's, or the observer's
 * hand-over of them at this op) that reads a tensor a backward op made (a
 * gradient: `p.data.add_(p.grad, alpha=-lr)`, a clip of the gradients'
 * norm): in a program that has made no mark, a training loop that steps
 * its parameters by hand, that ends a step for the tracker's books as an
 * optimizer's mark would (`check` tells the steps of such a trace from its
 * backward passes: timeline_steps.c). A backward whose gradients the
 * program never reads (a loop of gradients taken and dropped) is not a
 * step: a mark's work there (a walk reaching a live graph) only moves the
 * collector's count (gc_reads.c's declared limit), which the differential
 * suite's the_collectors_count_moves_per_step_as_untracked caught in two
 * runs of three (a step's count 0 and the next's 4, where untracked 2 and
 * 2). Nor is the first pass's end: an optimizer reads the gradients before
 * its step's mark, and a mark's work there, a step early, took the walks'
 * credit that named a kept list's holder at the marks after it
 * (test_results_kept_on_purpose_are_minor_and_a_kept_graph_is_not). */
static int pass_ended(Dispatcher *d)
{
    d->backward_ran = 0;
    if (!d->pass_seen) {
        d->pass_seen = 1;
        return 0;   /* the first: an optimizer's step may mark it yet */
    }
    return tracker_works(d, s_pass_ended);
}

/* -- the op ------------------------------------------------------------------- */

/* What the op observer hands over with an op besides its tensors
 * (observed(), observed_engine()); none from the mode. */
typedef struct {
    const vt__tensor_facts *facts;   /* one per tensor in order (tensor_facts.h), or NULL */
    Py_ssize_t n;
    long long seq;                  /* the autograd sequence number's last value */
    int backward;                   /* an autograd engine thread's op: recorded with
                                     * ``stack``, named as a backward op */
    uint32_t stack;                 /* there: the forward op's frames lent (0: none) */
    const uint64_t *storage_uses;   /* there: (StorageImpl*, data pointer) pairs, the
                                     * storages of inputs dead by the hand-over */
    Py_ssize_t nstorage_uses;       /* pairs */
} Observed;

/* The storages a backward op read through tensors dead by the time the
 * observer handed it over (observer.cpp: a saved output is read through a
 * tensor SavedVariable::unpack makes for that backward): a use of a storage
 * recorded at that address with that memory (another storage there since,
 * never recorded, is not one), on its first recorded tensor (the rules
 * judge a storage by its tensors' uses together; one a graph's views share
 * can have thousands). */
static int use_storages(Dispatcher *d, PyObject *storages, const Observed *obs, uint32_t stack,
                        long long epoch)
{
    for (Py_ssize_t i = 0; i < obs->nstorage_uses; i++) {
        PyObject *key = PyLong_FromUnsignedLongLong(obs->storage_uses[2 * i]);
        PyObject *srec = key ? PyDict_GetItemWithError(storages, key) : NULL;
        Py_XDECREF(key);
        if (srec == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if (!is_storage_rec(srec))
            return -1;
        if (SREC(srec)->ptr != obs->storage_uses[2 * i + 1])
            continue;
        /* the set is not changed meanwhile: nothing here runs Python */
        Py_ssize_t pos = 0;
        Py_hash_t hash;
        PyObject *rec;
        uint64_t first = 0;
        while (_PySet_NextEntry(SREC(srec)->tids, &pos, &rec, &hash))
            if (Py_IS_TYPE(rec, &TensorRecType) && !TREC(rec)->pending && TREC(rec)->tid != 0 &&
                (first == 0 || TREC(rec)->tid < first))
                first = TREC(rec)->tid;
        if (first != 0) {
            d->use(first, stack);
            SREC(srec)->last_epoch = epoch;
        }
    }
    return 0;
}

/* torch._C._autograd._get_sequence_nr() - 1: the number the last autograd
 * node made on this thread took; -1 if unknown. */
static long long last_sequence_nr(void)
{
    PyObject *v = sequence_nr_fn != NULL ? PyObject_CallNoArgs(sequence_nr_fn) : NULL;
    long long s = v != NULL ? PyLong_AsLongLong(v) - 1 : -1;
    Py_XDECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        s = -1;
    }
    return s;
}

/* An op that ran: its inputs used, its new outputs tracked. The owner
 * thread's forward ops (the stack captured here), and the autograd engine
 * threads' backward ops (obs->backward: the stack of the forward op's
 * frames, lent to the thread; no autograd node made; outputs named as a
 * backward op's), handed over by the op observer or by the mode's engine
 * dispatch (engine_op). */
static int on_op(Dispatcher *d, PyObject *func, PyObject *args, PyObject *kwargs, PyObject *out,
                 const Observed *obs)
{
    if (!d->recording)
        return 0;

    long vi;
    int flags;
    if (op_meta(d, func, &vi, &flags) < 0)
        return -1;
    int reshaping = flags & OP_RESHAPES;
    int backward = obs != NULL && obs->backward;
    int grad_read = 0;   /* an input a backward op made (pass_ended) */

    double began = now_s();
    int rc = -1;
    TensorList ins, outs;
    tl_init(&ins);
    tl_init(&outs);
    PyObject *by_obj = NULL, *storages = NULL;
    long long epoch;

    if (settle(d, 0) < 0 || flush(d) < 0)
        goto out;
    d->ops++;

    if (tensors_in(args, &ins, 0) < 0 || (kwargs && tensors_in(kwargs, &ins, 0) < 0) ||
        tensors_in(out, &outs, 0) < 0)
        goto out;
    if (ins.n == 0 && outs.n == 0 && (obs == NULL || obs->nstorage_uses == 0)) {
        rc = 0;
        goto out;
    }
    /* the observer's facts, if they are for these tensors */
    const vt__tensor_facts *facts = obs != NULL && obs->n == ins.n + outs.n ? obs->facts : NULL;
    uint32_t stack = backward ? obs->stack : capture(d);
    /* The autograd node this op made (below autograd, so before the op
     * ran) holds the sequence number just taken: the observer read it. A
     * backward op's nodes (double backward) are not the program's forward. */
    long long seq = !stack || backward ? -1 : obs != NULL ? obs->seq : last_sequence_nr();
    /* (an op that made no node has the number of the last one, noted already) */
    if (seq >= 0 && seq != d->seq_noted) {
        PyObject *nodes = book(d, BOOK_NODE_STACKS);
        if (nodes == NULL)
            goto out;
        PyObject *skey = PyLong_FromLongLong(seq);
        int have = skey ? PyDict_Contains(nodes, skey) : -1;
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
        if (have < 0 || (have == 0 && lent_note(d, seq, stack) < 0))
            goto out;
        d->seq_noted = seq;
    }
    epoch = d->epoch;
    by_obj = book(d, BOOK_BY_OBJ);
    storages = book(d, BOOK_STORAGES);
    if (by_obj == NULL || storages == NULL)
        goto out;
    PyObject *stack_obj = PyLong_FromUnsignedLong(stack);
    if (stack_obj == NULL)
        goto out;

    /* Inputs: a use each; one seen for the first time is recorded with
     * this op's stack (its TENSOR_NEW is its use here). The smallest
     * input storage made at this very stack in an earlier step, if any: a
     * new output larger than it is that line's value rebuilt from itself
     * (StorageRec.regrown). Not within a step: every op of a backward
     * shares a stack (the forward op's lent to an engine thread, or the
     * line that called backward() on the CPU), and a weight's gradient is
     * made from a smaller one made there before it. */
    uint64_t same_line_in = UINT64_MAX;
    for (Py_ssize_t i = 0; i < ins.n; i++) {
        PyObject *t = ins.items[i];
        PyObject *rec = record_of(by_obj, t);
        if (rec == NULL && PyErr_Occurred())
            goto loop_fail;
        if (rec != NULL && moved(rec, facts ? &facts[i] : NULL)) {
            /* recorded anew on its memory now, with this op's stack (its
             * TENSOR_NEW is its use here) */
            int bad = migrate(d, rec, stack_obj) < 0;
            Py_DECREF(rec);
            if (bad)
                goto loop_fail;
            rec = record_of(by_obj, t);
            if (rec == NULL && !PyErr_Occurred())
                rec = Py_NewRef(Py_None);   /* not tracked again (no storage) */
        } else if (rec != NULL) {
            d->use(TREC(rec)->tid, stack);
            grad_read |= TREC(rec)->by_backward;
        } else if (!PyErr_Occurred() && (flags & (OP_RESHAPES | OP_WRITES_OUT)) &&
                   tl_has(&outs, t)) {
            /* set_/resize_ on a tensor not tracked (no memory yet: what
             * torch.load's rebuild and `torch.empty(0)` then `resize_`
             * make): its memory is this op's doing, so it is tracked below
             * as the op's output, named by this line, not as an input. So
             * is memory first written as an op's `out=` argument, made
             * where no op showed it: torch.compile's generated code makes
             * its buffers with empty_strided_cuda, which calls no op, and
             * fills them with `extern_kernels.mm(a, b, out=buf)` */
            continue;
        } else if (!PyErr_Occurred()) {
            /* Tracker._input_name(is_param, stack, storage's address or
             * 0): rare (a tensor's first sight), and it caches */
            int is_param = PyObject_TypeCheck(t, (PyTypeObject *)parameter_type);
            PyObject *addr = PyLong_FromUnsignedLongLong(
                facts && facts[i].storage ? facts[i].storage_ptr : 0);
            if (addr == NULL)
                goto loop_fail;
            PyObject *a[3] = {is_param ? Py_True : Py_False, stack_obj, addr};
            PyObject *name = call_method(d->tracker, s_input_name, a, 3);
            Py_DECREF(addr);
            if (name == NULL)
                goto loop_fail;
            rec = track(d, t, facts ? &facts[i] : NULL, name, stack_obj, Py_None, 0, NULL);
            Py_DECREF(name);
        }
        StorageRec *s;
        if (rec == NULL || used(storages, rec, epoch, &s) < 0)
            goto loop_fail;
        if (s != NULL && stack != 0 && s->made_stack == stack && s->made_epoch < epoch &&
            s->nbytes < same_line_in)
            same_line_in = s->nbytes;
    }
    if (obs != NULL && obs->nstorage_uses && use_storages(d, storages, obs, stack, epoch) < 0)
        goto loop_fail;

    /* Outputs: an input returned (in-place, out=) is a use; a new one is
     * tracked under its creation name, recorded at the next recording. */
    PyObject *view_of = Py_None;
    if (vi >= 0 && PyTuple_Check(args) && vi < PyTuple_GET_SIZE(args) &&
        PyObject_TypeCheck(PyTuple_GET_ITEM(args, vi), (PyTypeObject *)tensor_type))
        view_of = PyTuple_GET_ITEM(args, vi);
    for (Py_ssize_t i = 0; i < outs.n; i++) {
        PyObject *t = outs.items[i];
        int made = 0;   /* tracked here, as this op's new tensor */
        PyObject *rec = record_of(by_obj, t);
        if (rec == NULL && PyErr_Occurred())
            goto loop_fail;
        if (rec != NULL && reshaping) {   /* set_, resize_: maybe other memory */
            PyObject *now = reshaped(d, t, rec, stack_obj);
            Py_DECREF(rec);
            if (now == NULL)
                goto loop_fail;
            if (now == Py_None) {   /* no longer tracked */
                Py_DECREF(now);
                continue;
            }
            rec = now;
        }
        if (rec != NULL) {
            uint64_t tid;
            if (record(d, rec, &tid) < 0) {
                Py_DECREF(rec);
                goto loop_fail;
            }
            d->use(tid, stack);
        } else if (!PyErr_Occurred()) {
            PyObject *name = out_name(d, func, i, stack, stack_obj, !backward);
            if (name == NULL)
                goto loop_fail;
            rec = track(d, t, facts ? &facts[ins.n + i] : NULL, name, stack_obj, view_of, 1,
                        NULL);
            Py_DECREF(name);
            if (rec != NULL && backward && Py_IS_TYPE(rec, &TensorRecType))   /* not None */
                TREC(rec)->by_backward = 1;
            made = 1;
        }
        StorageRec *s;
        if (rec == NULL || used(storages, rec, epoch, &s) < 0)
            goto loop_fail;
        if (made && s != NULL && same_line_in != UINT64_MAX && s->made_stack == stack &&
            s->nbytes > same_line_in)
            s->regrown = 1;
    }
    rc = 0;
loop_fail:
    Py_DECREF(stack_obj);
out:
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    tl_free(&ins);
    tl_free(&outs);
    add_busy(d, began);
    /* after the op's recording, and not in its busy time: the tick pays
     * its work from the walks' credit as a mark does; on the thread that
     * entered (a thread that joined it runs no mark's work) */
    /* (the thread asked last: not at every op) */
    int pass = d->backward_ran && d->pass_ticks && grad_read;
    if (rc == 0 && backward)
        d->backward_ran = 1;
    else if (rc == 0 && (pass || (d->tick_s > 0 && began >= d->next_tick)) &&
             PyThread_get_thread_ident() == d->owner)
        rc = pass ? pass_ended(d) : tick(d, began);
    return rc;
}

/* The recording of ``func`` failed (the error set): reported to
 * Tracker._recording_failed, which counts and warns once; never the op's. */
static void recording_failed(Dispatcher *d, PyObject *func)
{
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    PyErr_NormalizeException(&exc_type, &exc, &tb);
    if (exc != NULL && tb != NULL)   /* where it failed, for whoever reads exc */
        PyException_SetTraceback(exc, tb);
    PyObject *a[2] = {func, exc ? exc : Py_None};
    PyObject *r = call_method(d->tracker, s_recording_failed, a, 2);
    if (r == NULL)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(exc_type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
}

/* Record an op that ran: a failure to record never fails the op. What
 * recording allocates is kept out of the collector's count (gc_schedule.c). */
static void record_op(Dispatcher *d, PyObject *func, PyObject *args, PyObject *kwargs,
                      PyObject *out, const Observed *obs)
{
    long held = gc_hold();
    if (on_op(d, func, args, kwargs, out, obs) != 0)
        recording_failed(d, func);
    gc_release(held);
}

/* Dispatcher.dispatch(mode, func, types, args=(), kwargs=None): the mode's
 * __torch_dispatch__ (bound to the mode). Runs the op, then records it. */
PyObject *dispatch(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs,
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
    PyObject *out;
    if (PyThread_get_thread_ident() != d->owner) {
        /* An autograd engine thread: Tracker._engine_dispatch runs the op
         * under the frames of the forward op it differentiates, then hands
         * it to engine_op(). */
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
    record_op(d, func, args, kwargs, out, NULL);
    Py_XDECREF(empty);
    return out;
}

/* The observer's arguments (func, args: tuple, out, facts: bytes, last: int,
 * and up to `more` after them, the caller's to read) read into *obs (its
 * facts, when they are whole records) and *last; -1 with a TypeError naming
 * `call` when they are not. */
static int observer_args(PyObject *const *argv, Py_ssize_t nargs, Py_ssize_t more,
                         const char *call, Observed *obs, PyObject **last)
{
    if (nargs < 5 || nargs > 5 + more || !PyTuple_Check(argv[1]) || !PyBytes_Check(argv[3]) ||
        !PyLong_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, call);
        return -1;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(argv[3]);
    obs->facts = size % (Py_ssize_t)sizeof(vt__tensor_facts) == 0
                     ? (const vt__tensor_facts *)PyBytes_AS_STRING(argv[3]) : NULL;
    obs->n = size / (Py_ssize_t)sizeof(vt__tensor_facts);
    *last = argv[4];
    return 0;
}

/* Dispatcher.observed(func, args, out, facts, seq): an op of the owner
 * thread that ran already, handed over by the C++ observer
 * (scripts/vramtrace/native/trackobs/) instead of the mode: ``args`` its arguments in schema
 * order (tensors, lists of tensors, None for the rest), ``out`` a tuple of
 * its outputs, ``facts`` bytes of a vt__tensor_facts per tensor
 * (tensor_facts.h; used while Dispatcher.weak_maker holds the observer's
 * trackobs_make_weak), ``seq`` the autograd sequence number's value after
 * the op (torch._C._autograd._get_sequence_nr() - 1). */
PyObject *observed(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    Observed obs = {0};
    PyObject *seq;
    if (observer_args(argv, nargs, 0, "observed(func, args: tuple, out, facts: bytes, seq: int)",
                      &obs, &seq) < 0)
        return NULL;
    obs.seq = PyLong_AsLongLong(seq);
    if (obs.seq == -1 && PyErr_Occurred())
        return NULL;
    if (d->tracker != NULL)
        record_op(d, argv[0], argv[1], NULL, argv[2], &obs);
    Py_RETURN_NONE;
}

/* Dispatcher.observed_engine(func, args, out, facts, stack[, storage_uses]):
 * an op that ran on an autograd engine thread (a backward op), handed over
 * by the C++ observer: as observed(), with ``stack`` the stack id of the
 * frames of the forward op it differentiates, lent to the thread while it
 * ran (0: none known; the thread runs no Python of the program, so there is
 * nothing to capture), and ``storage_uses`` bytes of (StorageImpl*, data
 * pointer) pairs, uint64 each: the storages of inputs that died before the
 * hand-over (None in ``args``), used by it. Its outputs are named
 * "backward: ...". */
PyObject *observed_engine(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    Observed obs = {0};
    PyObject *stack_obj;
    static const char call[] =
        "observed_engine(func, args: tuple, out, facts: bytes, stack: int[, storage_uses: bytes])";
    if (observer_args(argv, nargs, 1, call, &obs, &stack_obj) < 0)
        return NULL;
    if (nargs == 6 && (!PyBytes_Check(argv[5]) ||
                       PyBytes_GET_SIZE(argv[5]) % (2 * sizeof(uint64_t)))) {
        PyErr_SetString(PyExc_TypeError, call);
        return NULL;
    }
    if (nargs == 6) {
        obs.storage_uses = (const uint64_t *)PyBytes_AS_STRING(argv[5]);
        obs.nstorage_uses = PyBytes_GET_SIZE(argv[5]) / (Py_ssize_t)(2 * sizeof(uint64_t));
    }
    unsigned long stack = PyLong_AsUnsignedLong(stack_obj);
    if (stack == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    obs.seq = -1;
    obs.backward = 1;
    obs.stack = d->stacks_enabled ? (uint32_t)stack : 0;
    if (d->tracker != NULL)
        record_op(d, argv[0], argv[1], NULL, argv[2], &obs);
    Py_RETURN_NONE;
}

/* Dispatcher.engine_op(func, args, kwargs, out): an op that ran on an
 * autograd engine thread under the mode, through Tracker._engine_dispatch's
 * functions named after the frames of the forward op it differentiates:
 * recorded with the stack captured here (those frames), named as a
 * backward op's, as observed_engine() records the op observer's. */
PyObject *engine_op(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "engine_op(func, args, kwargs, out)");
        return NULL;
    }
    if (d->tracker == NULL)
        Py_RETURN_NONE;
    Observed obs = {0};
    obs.seq = -1;
    obs.backward = 1;
    obs.stack = capture(d);
    record_op(d, argv[0], argv[1], argv[2] != Py_None ? argv[2] : NULL, argv[3], &obs);
    Py_RETURN_NONE;
}

/* The op observer's vt__engine_uses (tensor_facts.h): a backward op whose
 * outputs all died before the hand-over (most of a backward's ops: the
 * gradients flowing through it), recorded without its tensors given to
 * Python and without observed_engine()'s op machinery: a use, under
 * ``stack``, of each input still alive (``objs``: their Python objects,
 * borrowed; each must be a tensor the books know, else 1 and nothing is
 * recorded: the observer hands the op over whole, and the input is tracked
 * as a first sight there), and of the storages ``pairs`` names, as
 * use_storages() reads them. Called with the GIL held; 0 once recorded (or
 * nothing to record: not recording), -1 on a failure, reported as a
 * recording's is. */
int engine_uses(void *self, void *func, void *const *objs, size_t n, uint32_t stack,
                const uint64_t *pairs, size_t npairs)
{
    Dispatcher *d = self;
    if (d->tracker == NULL || !d->recording)
        return 0;
    enum { MAX_USES = 64 };
    if (n > MAX_USES)
        return 1;
    long held = gc_hold();
    double began = now_s();
    PyObject *recs[MAX_USES];
    size_t nrecs = 0;
    int rc = -1;
    PyObject *by_obj = NULL, *storages = NULL;
    if (settle(d, 0) < 0 || flush(d) < 0)
        goto out;
    by_obj = book(d, BOOK_BY_OBJ);
    storages = book(d, BOOK_STORAGES);
    for (; nrecs < n; nrecs++) {
        PyObject *rec = record_of(by_obj, (PyObject *)objs[nrecs]);
        if (rec == NULL) {
            rc = PyErr_Occurred() ? -1 : 1;
            goto out;
        }
        recs[nrecs] = rec;
    }
    d->ops++;
    d->uses_only++;
    uint32_t st = d->stacks_enabled ? stack : 0;
    long long epoch = d->epoch;
    rc = 0;
    for (size_t i = 0; i < nrecs; i++) {   /* as on_op's inputs: a use, its storage's too */
        if (rc == 0 && TREC(recs[i])->tid != 0)
            d->use(TREC(recs[i])->tid, st);
        if (rc == 0)
            rc = used(storages, recs[i], epoch, NULL);   /* takes the reference */
        else
            Py_DECREF(recs[i]);
    }
    nrecs = 0;
    Observed obs = {0};
    obs.storage_uses = pairs;
    obs.nstorage_uses = (Py_ssize_t)npairs;
    if (rc == 0 && npairs > 0)
        rc = use_storages(d, storages, &obs, st, epoch);
    if (rc == 0)
        d->backward_ran = 1;
out:
    for (size_t i = 0; i < nrecs; i++)
        Py_DECREF(recs[i]);
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    add_busy(d, began);
    if (rc < 0)
        recording_failed(d, func);
    gc_release(held);
    return rc;
}
