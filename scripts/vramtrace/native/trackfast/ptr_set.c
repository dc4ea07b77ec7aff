/* A set of object addresses, open addressing with linear probing: the
 * referrer passes' set of the objects asked about (referrers.c) and the
 * autograd nodes a walk made for the program (gc_reads.c). No Python
 * object is made or freed: it may be used inside a dealloc. */
#include "trackfast.h"

size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

int ptr_set_init(ptr_set *s, Py_ssize_t n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap <<= 1;
    s->slots = PyMem_Calloc(cap, sizeof *s->slots);
    s->mask = cap - 1;
    s->count = 0;
    return s->slots ? 0 : -1;
}

void ptr_set_free(ptr_set *s)
{
    PyMem_Free(s->slots);
    s->slots = NULL;
    s->mask = s->count = 0;
}

/* The slot holding o, or the empty one where it would go. */
static size_t slot_for(const ptr_set *s, const void *o)
{
    size_t i = ptr_hash(o) & s->mask;
    while (s->slots[i] != NULL && s->slots[i] != o)
        i = (i + 1) & s->mask;
    return i;
}

int ptr_set_has(const ptr_set *s, const void *o)
{
    return s->slots != NULL && s->slots[slot_for(s, o)] == o;
}

void ptr_set_add(ptr_set *s, PyObject *o)
{
    size_t i = slot_for(s, o);
    s->count += s->slots[i] == NULL;
    s->slots[i] = o;
}

int ptr_set_insert(ptr_set *s, PyObject *o)
{
    if (s->slots == NULL && ptr_set_init(s, 8) < 0)
        return -1;
    if ((s->count + 1) * 2 > s->mask + 1) {   /* half full at most: short probes */
        ptr_set bigger;
        if (ptr_set_init(&bigger, (Py_ssize_t)(s->count + 1) * 2) < 0)
            return -1;
        for (size_t k = 0; k <= s->mask; k++)
            if (s->slots[k] != NULL)
                ptr_set_add(&bigger, s->slots[k]);
        PyMem_Free(s->slots);
        *s = bigger;
    }
    ptr_set_add(s, o);
    return 0;
}

int ptr_set_remove(ptr_set *s, const void *o)
{
    if (s->slots == NULL)
        return 0;
    size_t i = slot_for(s, o);
    if (s->slots[i] == NULL)
        return 0;
    s->slots[i] = NULL;
    s->count--;
    /* the entries after it in its run move back where their probe finds
     * them (no tombstones: a lookup stops at the first empty slot) */
    for (size_t j = (i + 1) & s->mask; s->slots[j] != NULL; j = (j + 1) & s->mask) {
        size_t home = ptr_hash(s->slots[j]) & s->mask;
        /* j's entry stays where its home lies cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        s->slots[i] = s->slots[j];
        s->slots[j] = NULL;
        i = j;
    }
    return 1;
}
