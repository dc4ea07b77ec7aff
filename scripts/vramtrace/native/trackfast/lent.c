/* The frames to lend an autograd engine thread, ready before it asks.
 *
 * A backward op on an engine thread runs no Python: the op observer lends
 * the thread the frames of the forward op it differentiates, found by the
 * sequence number of the autograd node it runs, so that what the op
 * allocates is recorded under them. Asking Python for them (the tracker's
 * _engine_frames) takes the GIL on the engine thread once per op; so the
 * recording of each forward op, which holds the GIL anyway and knows the
 * node's number and the op's stack, writes the answer into a table the
 * observer reads without the GIL (vt__lent_read_fn in tensor_facts.h). A
 * number the table has lost (more than LENT_SLOTS nodes since) reads 0 and
 * the observer asks Python as before.
 */
#include "trackfast.h"

/* The stack id to lend for the backward of a node made by a forward op
 * recorded with ``stack``: the forward's frames named "forward of ...",
 * interned (Tracker._lent_for), cached in the books. 0: none. */
static uint32_t lent_for(Dispatcher *d, uint32_t stack)
{
    PyObject *key = PyLong_FromUnsignedLong(stack);
    if (key == NULL)
        return 0;
    PyObject *got = PyDict_GetItemWithError(d->containers[BOOK_LENT], key);   /* borrowed */
    Py_XINCREF(got);
    if (got == NULL && !PyErr_Occurred())
        got = call_method(d->tracker, s_lent_for, &key, 1);
    Py_DECREF(key);
    unsigned long sid = got ? PyLong_AsUnsignedLong(got) : 0;
    Py_XDECREF(got);
    if (PyErr_Occurred()) {
        PyErr_Clear();   /* the observer asks Python then */
        return 0;
    }
    return (uint32_t)sid;
}

/* The forward op just recorded with ``stack`` made the autograd node
 * numbered ``seq``: its frames to lend, into the table (only while the op
 * observer reads it). Called with the GIL held. */
int lent_note(Dispatcher *d, long long seq, uint32_t stack)
{
    if (!d->lend || seq < 0 || stack == 0)
        return 0;
    uint32_t sid = lent_for(d, stack);
    if (sid == 0)
        return 0;
    LentSlot *s = &d->lent[(uint64_t)seq & (LENT_SLOTS - 1)];
    /* readers see the key cleared, or the new sid under the new key */
    atomic_store_explicit(&s->key, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->sid, sid, memory_order_relaxed);
    atomic_store_explicit(&s->key, (uint64_t)seq + 1, memory_order_release);
    return 0;
}

/* vt__lent_read_fn: any thread, no GIL. The key read before and after
 * the sid: a slot rewritten meanwhile reads 0. */
uint32_t lent_read(const void *table, uint64_t seq)
{
    const LentSlot *s = &((const LentSlot *)table)[seq & (LENT_SLOTS - 1)];
    uint64_t key = atomic_load_explicit(&s->key, memory_order_acquire);
    if (key != seq + 1)
        return 0;
    uint32_t sid = atomic_load_explicit(&s->sid, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&s->key, memory_order_relaxed) == key ? sid : 0;
}
