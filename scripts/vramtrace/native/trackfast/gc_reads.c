/* gc_reads.c - what the tracker's reading of the program's objects makes
 * for them, counted as the program's (gc_schedule.c says why the count
 * matters); and what a running frame's value stack holds, which no reading
 * through the collector sees (frame_stack, below).
 *
 * A holder walk (a mark's, a tick's, a snapshot's) reads every thread's
 * frames and their locals. Reading a frame that has no Python object makes
 * one (and a function's locals dict), which CPython keeps while the frame
 * runs: it outlives the walk's hold and is freed when the function
 * returns, outside any hold, taking one off the program's count. A tick
 * inside backward() moved the count per step from 3 to 0 (three frames of
 * torch's backward), on the CPU under `run --track` in CI. Untracked, none
 * of them would exist.
 *
 * The walk's own objects are thousands, made and freed in the same hold, so
 * no count taken around it tells the frames' apart. So the walk says when
 * it begins (gc_program_read(): _gc_hold.program_read()), once a hold:
 * every thread's running frames are noted, with whether each had its
 * Python object and its locals dict; at the hold's end each frame still
 * running that gained an object has it counted as the program's, and a
 * function's locals dict the walk made is dropped (it exists only for
 * locals() and f_locals, which make it again; kept, it would hold the
 * locals' values until the function returns, and its free would change the
 * dict free list's level).
 *
 * The Python objects PyTorch keeps for the C++ objects a walk reads are
 * the same kind of object: an autograd node's (made when a walk first
 * reads grad_fn or next_functions) and a storage's (untyped_storage()),
 * kept by the C++ object while anything else holds it (PyTorch 2.x's
 * PyObjectSlot) and freed with it, outside any hold. Uncounted, a
 * walk that reached a step's live graph moved that step's count by the
 * objects it made (-2 in CI, the differential suite's
 * the_collectors_count_moves_per_step_as_untracked[cuda], a tick's walk).
 * Counted as the program's, a walk that reached graphs a dropped cycle
 * keeps moved its step's count by 23 to 44 (freed by a collection, much
 * later; with ticks every millisecond), and each freed inside a hold
 * (autograd's device thread, the GIL let go) by one. Neither is as
 * untracked, where no such object exists: so none is counted when made,
 * and none is subtracted when freed. The walk's start
 * (gc_program_read()) tracks a marker object, at the young generation's
 * end, where CPython links each container it tracks; at the hold's end the
 * objects of those types linked after it (made in the hold, still alive)
 * are noted by address, and their type's tp_dealloc (one for each kind:
 * gc_torch_kept_types()) is wrapped by one that gives a noted object's
 * free back to the count. Not hidden: what is made when a collection ran
 * inside the hold (it may reorder the generation: none runs, the count
 * held, unless the tracker collects), and a tensor's Python object (none
 * was seen made by a walk: those it reads are the program's).
 *
 * Built with VT_GC_FRAMES (the frame layout of CPython 3.11 and 3.12;
 * meson checks it compiles); without it, nothing is counted: the declared
 * limit of docs/limitations.md. What it cannot tell: a frame another thread
 * pushed at the address of one it popped while the walk let the GIL go.
 * Test: the differential suite's the_collectors_count_moves_per_step_as_untracked,
 * and test_track_observer_collector's frames test (a walk in a hold, frames read).
 */
#if (defined(VT_GC_INTERNALS) && defined(VT_GC_FRAMES) || defined(VT_FRAME_STACKS)) && \
    !defined(Py_GIL_DISABLED)
#define Py_BUILD_CORE_MODULE 1
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "trackfast.h"

#if defined(VT_FRAME_STACKS) && !defined(Py_GIL_DISABLED)
#include "internal/pycore_frame.h"
#endif

#if defined(VT_GC_INTERNALS) && defined(VT_GC_FRAMES) && !defined(Py_GIL_DISABLED)
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"

/* A frame as the walk found it. */
typedef struct {
    const _PyInterpreterFrame *frame;
    unsigned char had_object, had_locals;
} FrameSeen;

/* Enough for every frame of a few hundred threads; frames past it are
 * not counted. */
#define FRAMES_SEEN_MAX 8192
static FrameSeen frames_seen[FRAMES_SEEN_MAX];
static int frames_noted = -1;   /* entries noted in this hold; -1: none */

/* The marker tracked at the walk's start in this hold (NULL: none), and
 * the collections run when it was. */
static PyObject *kept_marker;
static unsigned long kept_collections;
/* The objects a walk made that PyTorch keeps, alive: their frees are given
 * back to the count. */
static ptr_set walk_made;

/* The kinds of object PyTorch keeps (gc_torch_kept_types()): each kind's
 * tp_dealloc, and the one that replaces it once a walk made one. A wrapper
 * a kind of its own, so that a type which inherits it still frees as its
 * kind. */
#define KEPT_KINDS 4
static destructor kept_dealloc[KEPT_KINDS];

/* Every free of the kind's objects, the program's too (each tensor's
 * storage): one lookup, and the count read only for an object a walk made. */
static void walk_made_free(int kind, PyObject *op)
{
    if (walk_made.count == 0 || !ptr_set_remove(&walk_made, op)) {
        kept_dealloc[kind](op);
        return;
    }
    int *count = gc_young_count();
    int before = *count;
    kept_dealloc[kind](op);
    /* PyObject_GC_Del took one off if the count stood above 0 (inside a
     * hold it is held, and put back at its end; a collection sets it to 0
     * when it starts, and frees what it collects with the count at 0) */
    if (*count >= 0 && (*count > 0 || *count < before) &&
        !PyInterpreterState_Get()->gc.collecting)
        ++*count;
}

#define KEPT_WRAPPER(k) \
    static void walk_made_free_##k(PyObject *op) { walk_made_free(k, op); }
KEPT_WRAPPER(0)
KEPT_WRAPPER(1)
KEPT_WRAPPER(2)
KEPT_WRAPPER(3)
static const destructor kept_wrapper[KEPT_KINDS] = {
    walk_made_free_0, walk_made_free_1, walk_made_free_2, walk_made_free_3};

/* The collections run so far, of every generation: one inside the hold
 * may have moved the marker among objects made before it. */
static unsigned long collections_run(void)
{
    struct _gc_runtime_state *gc = &PyInterpreterState_Get()->gc;
    unsigned long n = 0;
    for (int g = 0; g < NUM_GENERATIONS; g++)
        n += (unsigned long)gc->generation_stats[g].collections;
    return n;
}

static _PyInterpreterFrame *running_frame(PyThreadState *ts)
{
    return ts->cframe != NULL ? ts->cframe->current_frame : NULL;
}

void gc_program_read(void)
{
    if (gc_hold_depth() == 0 || frames_noted >= 0)
        return;
    int n = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
         ts != NULL; ts = PyThreadState_Next(ts))
        for (_PyInterpreterFrame *f = running_frame(ts); f != NULL && n < FRAMES_SEEN_MAX;
             f = f->previous)
            frames_seen[n++] = (FrameSeen){f, f->frame_obj != NULL, f->f_locals != NULL};
    frames_noted = n;
    if (kept_dealloc[0] == NULL)   /* no kind given (gc_torch_kept_types) */
        return;
    kept_marker = PyList_New(0);   /* tracked: linked at the young generation's end */
    if (kept_marker == NULL)
        PyErr_Clear();
    kept_collections = collections_run();
}

/* The frame objects that the noted frames gained and still have; the
 * locals dicts they gained dropped. The frames come back in the order
 * noted, so each search starts where the last one ended. */
static long frames_settle(void)
{
    long made = 0;
    int at = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
         ts != NULL && frames_noted > 0; ts = PyThreadState_Next(ts))
        for (_PyInterpreterFrame *f = running_frame(ts); f != NULL; f = f->previous)
            for (int k = 0; k < frames_noted; k++) {
                const FrameSeen *seen = &frames_seen[(at + k) % frames_noted];
                if (seen->frame != f)
                    continue;
                made += !seen->had_object && f->frame_obj != NULL;
                if (!seen->had_locals && f->f_locals != NULL &&
                    (f->f_code->co_flags & CO_OPTIMIZED))
                    Py_CLEAR(f->f_locals);
                at = (at + k + 1) % frames_noted;
                break;
            }
    return made;
}

int gc_torch_kept_types(PyObject *types)
{
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(types); i++) {
        PyTypeObject *type = (PyTypeObject *)PySequence_Fast_GET_ITEM(types, i);
        /* a class defined in Python frees through subtype_dealloc, which
         * must not be wrapped (kept_type) */
        if (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
            return -1;
        destructor dealloc = type->tp_dealloc;
        int k = 0;
        while (k < KEPT_KINDS && kept_dealloc[k] != NULL && kept_dealloc[k] != dealloc)
            k++;
        if (k == KEPT_KINDS)
            return -1;
        kept_dealloc[k] = dealloc;
    }
    return 0;
}

/* Whether gc is the head of one of the collector's lists. */
static int is_generation_head(PyGC_Head *gc)
{
    struct _gc_runtime_state *state = &PyInterpreterState_Get()->gc;
    for (int g = 0; g < NUM_GENERATIONS; g++)
        if (gc == &state->generations[g].head)
            return 1;
    return gc == &state->permanent_generation.head;
}

/* The type whose tp_dealloc frees op as one of the kinds PyTorch keeps
 * (*kind set), or NULL. A class defined in Python (torch.UntypedStorage)
 * frees through CPython's subtype_dealloc, which calls the tp_dealloc of
 * its nearest base that is not such a class (torch._C.StorageBase): that
 * base's is the one wrapped (the class's own, wrapped, was called again by
 * subtype_dealloc, for ever). */
static PyTypeObject *kept_type(PyObject *op, int *kind)
{
    for (PyTypeObject *t = Py_TYPE(op); t != NULL; t = t->tp_base) {
        for (int k = 0; k < KEPT_KINDS && kept_dealloc[k] != NULL; k++)
            if (t->tp_dealloc == kept_dealloc[k] || t->tp_dealloc == kept_wrapper[k]) {
                *kind = k;
                return t;
            }
        if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return NULL;
    }
    return NULL;
}

/* The objects PyTorch keeps linked after the marker, made in this hold and
 * alive, noted. */
static void kept_settle(void)
{
    if (collections_run() == kept_collections)
        for (PyGC_Head *gc = _PyGCHead_NEXT(_Py_AS_GC(kept_marker)); !is_generation_head(gc);
             gc = _PyGCHead_NEXT(gc)) {
            int k;
            PyObject *op = (PyObject *)((char *)gc + sizeof(PyGC_Head));
            PyTypeObject *frees = kept_type(op, &k);
            if (frees == NULL)
                continue;
            if (ptr_set_insert(&walk_made, op) < 0)
                break;   /* out of memory: this one's free is subtracted */
            frees->tp_dealloc = kept_wrapper[k];
        }
    Py_CLEAR(kept_marker);
}

long gc_reads_settle(void)
{
    if (frames_noted < 0)   /* no walk in this hold: every op's release ends here */
        return 0;
    /* a hold may end with an error set (the op's, the walk's): kept across
     * the dicts dropped, whose frees run the values' destructors */
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    long made = frames_settle();
    frames_noted = -1;
    if (kept_marker != NULL)
        kept_settle();
    PyErr_Restore(exc_type, exc, tb);
    return made;
}
#else
void gc_program_read(void)
{
}

int gc_torch_kept_types(PyObject *types)
{
    (void)types;
    return 0;
}

long gc_reads_settle(void)
{
    return 0;
}
#endif

/* frame_stack(frame): the objects on the value stack of a running
 * function's frame, what it holds beyond its locals (a for loop's iterator:
 * `for x in [t.cuda() for t in data]` keeps its list there alone). The
 * collector does not traverse a running frame's stack, so no heap pass
 * finds them. Read where the frame saved its stack pointer, at a call to
 * a Python function (the frames below the innermost one a walk reads): a
 * frame executing, or calling into C, has none saved (3.11 sets stacktop to
 * -1 when it takes the pointer back: tests/python/test_track_fast.py), and
 * gives (). Built with VT_FRAME_STACKS (meson checks the layout, 3.11
 * only); else always (). */
PyObject *py_frame_stack(PyObject *self, PyObject *frame)
{
    (void)self;
    if (!PyFrame_Check(frame)) {
        PyErr_SetString(PyExc_TypeError, "frame_stack: a frame object");
        return NULL;
    }
#if defined(VT_FRAME_STACKS) && !defined(Py_GIL_DISABLED)
    const _PyInterpreterFrame *f = ((PyFrameObject *)frame)->f_frame;
    int first = f != NULL ? f->f_code->co_nlocalsplus : 0;
    if (f == NULL || f->owner != FRAME_OWNED_BY_THREAD || f->stacktop <= first ||
        f->stacktop > first + f->f_code->co_stacksize)
        return PyTuple_New(0);
    PyObject *out = PyList_New(0);
    for (int i = first; out != NULL && i < f->stacktop; i++)
        if (f->localsplus[i] != NULL && PyList_Append(out, f->localsplus[i]) < 0)
            Py_CLEAR(out);
    return out;
#else
    return PyTuple_New(0);
#endif
}

PyObject *py_gc_program_read(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    gc_program_read();
    Py_RETURN_NONE;
}

PyObject *py_gc_torch_kept_types(PyObject *self, PyObject *types)
{
    (void)self;
    PyObject *seq = PySequence_Fast(types, "gc_torch_kept_types: a sequence of types");
    if (seq == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
        if (!PyType_Check(PySequence_Fast_GET_ITEM(seq, i))) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "gc_torch_kept_types: a sequence of types");
            return NULL;
        }
    int rc = gc_torch_kept_types(seq);
    Py_DECREF(seq);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, "gc_torch_kept_types: a class defined in Python, "
                        "or more kinds than it holds");
        return NULL;
    }
    Py_RETURN_NONE;
}
