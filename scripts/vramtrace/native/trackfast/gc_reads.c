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
 * Not counted: the Python objects PyTorch keeps for the tensors, storages
 * and autograd nodes a walk reads (its PyObject preservation: a step's
 * graph nodes, freed with the graph). Counted when made, they were too
 * many whenever autograd's device thread freed the graph while a hold had
 * let the GIL go (+38 in a step, with a tick at every op); uncounted, a
 * walk that reaches a live graph moves that step's count by the nodes it
 * made (-2 in one step of two runs in five, the same way). A declared limit
 * (docs/limitations.md).
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
    PyErr_Restore(exc_type, exc, tb);
    return made;
}
#else
void gc_program_read(void)
{
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
