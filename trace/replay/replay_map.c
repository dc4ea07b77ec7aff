/*
 * trace/replay/replay_map.c - recorded address -> entry, open addressing with
 * linear probing and backward-shift deletion (no tombstones: a replay frees
 * as often as it allocates, for millions of events).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"

static inline uint64_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

int vt__rmap_init(vt__rmap *m, size_t expected)
{
    uint64_t cap = 64;
    while (cap < expected * 2)
        cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return -ENOMEM;
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void vt__rmap_destroy(vt__rmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

vt__rmap_entry *vt__rmap_get(vt__rmap *m, uint64_t key)
{
    if (!key)
        return NULL;
    for (uint64_t i = hash(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key)
            return &m->slots[i];
        if (!m->slots[i].key)
            return NULL;
    }
}

static int grow(vt__rmap *m)
{
    vt__rmap old = *m;
    vt__rmap_entry *n = calloc((old.mask + 1) * 2, sizeof *n);
    if (!n)
        return -ENOMEM;
    m->slots = n;
    m->mask = old.mask * 2 + 1;
    for (uint64_t i = 0; i <= old.mask; i++) {
        if (!old.slots[i].key)
            continue;
        uint64_t j = hash(old.slots[i].key) & m->mask;
        while (m->slots[j].key)
            j = (j + 1) & m->mask;
        m->slots[j] = old.slots[i];
    }
    free(old.slots);
    return 0;
}

vt__rmap_entry *vt__rmap_put(vt__rmap *m, uint64_t key)
{
    if (!key)
        return NULL;
    vt__rmap_entry *e = vt__rmap_get(m, key);
    if (e)
        return e;
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && grow(m))
        return NULL;
    uint64_t i = hash(key) & m->mask;
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    memset(&m->slots[i], 0, sizeof m->slots[i]);
    m->slots[i].key = key;
    m->count++;
    return &m->slots[i];
}

void vt__rmap_del(vt__rmap *m, vt__rmap_entry *e)
{
    uint64_t i = (uint64_t)(e - m->slots);
    m->slots[i].key = 0;
    m->count--;
    /* shift back the entries of the run after i that may not stay past it */
    for (uint64_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        uint64_t home = hash(m->slots[j].key) & m->mask;
        /* j's entry may fill the hole i when its home is not in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->slots[i] = m->slots[j];
        m->slots[j].key = 0;
        i = j;
    }
}
