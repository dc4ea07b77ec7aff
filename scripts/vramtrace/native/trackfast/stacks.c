/* Raw Python stacks -> the library's stack ids, cached. */
#include "trackfast.h"

#include <stdbool.h>

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t key_of(const uintptr_t *pairs, uint32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t k = 0; k < 2 * n; k++)
        h = mix(h, pairs[k]);
    return h;
}

void clear_stacks(Dispatcher *d)
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

/* The calling thread's frames as (code identity, instruction offset) pairs
 * in pairs[0..2n), innermost first, through the frame objects (made where
 * missing: they live until the program's functions return, so they count as
 * the program's, gc_schedule.c); their key in *h. */
static uint32_t frames_through_objects(uintptr_t *pairs, uint64_t *h)
{
    long made = gc_held_count();
    uint32_t n = 0;
    PyFrameObject *f = PyEval_GetFrame();   /* borrowed */
    Py_XINCREF(f);
    while (f != NULL && n < MAX_RAW_FRAMES) {
        PyCodeObject *code = PyFrame_GetCode(f);
        pairs[2 * n] = (uintptr_t)code;
        Py_DECREF(code);   /* the frame holds it */
        pairs[2 * n + 1] = (uintptr_t)(intptr_t)PyFrame_GetLasti(f);
        n++;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    gc_count_as_program(gc_held_count() - made);
    *h = key_of(pairs, n);
    return n;
}

/* The same pairs read by the library (vt_python_frames: the one reader of
 * Python frames in C, which makes no objects), or through the frame objects
 * where it cannot read this interpreter or is too old to have the call. */
static uint32_t frames(Dispatcher *d, uintptr_t *pairs, uint64_t *h, bool *objects_made)
{
    if (d->python_frames != NULL) {
        int n = d->python_frames((uint64_t *)pairs, MAX_RAW_FRAMES);
        if (n >= 0) {
            *objects_made = false;
            *h = key_of(pairs, (uint32_t)n);
            return (uint32_t)n;
        }
    }
    d->object_walks++;
    *objects_made = true;
    return frames_through_objects(pairs, h);
}

/* The stack id of the innermost Python frame's stack (0: none, disabled,
 * or the interner failed). The key is every frame's code identity and
 * instruction offset; the codes of a cached key are kept alive so that an
 * identity is not reused while cached. */
uint32_t capture(Dispatcher *d)
{
    if (!d->stacks_enabled)
        return 0;
    uintptr_t pairs[2 * MAX_RAW_FRAMES];
    uint64_t h;
    bool objects_made;
    uint32_t n = frames(d, pairs, &h, &objects_made);
    if (n == 0)
        return 0;

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

    /* A stack not seen before: the interner reads its frames and lines
     * through their objects. They are made here, where their count is
     * credited to the program (they live as long as its calls), not by the
     * interner inside the tracker's hold of the collector's count. */
    if (!objects_made) {
        uintptr_t walked[2 * MAX_RAW_FRAMES];
        uint64_t walked_key;
        (void)frames_through_objects(walked, &walked_key);
    }
    PyObject *arg = (PyObject *)PyEval_GetFrame();   /* borrowed */
    if (arg == NULL)
        return 0;
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
    /* Keep the codes of the key alive: live while their frames run, now. */
    for (uint32_t k = 0; k < n; k++) {
        PyObject *code = (PyObject *)pairs[2 * k];
        PyObject *key = PyLong_FromVoidPtr(code);
        if (key == NULL || PyDict_SetItem(d->codes, key, code) < 0)
            PyErr_Clear();
        Py_XDECREF(key);
    }
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
