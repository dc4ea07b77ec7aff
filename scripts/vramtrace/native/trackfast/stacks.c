/* Raw Python stacks -> the library's stack ids, cached. */
#include "trackfast.h"

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
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

/* The stack id of the innermost Python frame's stack (0: none, disabled,
 * or the interner failed). The key is every frame's code identity and
 * instruction offset, as in _stacks.py; the codes of a cached key are kept
 * alive so that an identity is not reused while cached. */
uint32_t capture(Dispatcher *d)
{
    if (!d->stacks_enabled)
        return 0;
    /* Reading a frame makes its Python object, which lives until the
     * program's function returns: counted as the program's (gc_schedule.c). */
    long made = gc_held_count();
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
    gc_count_as_program(gc_held_count() - made);

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
