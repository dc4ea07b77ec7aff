/*
 * alloc/alloc_ptrmap.c - address -> allocated block.
 *
 * Open addressing with linear probing and backward-shift deletion (no
 * tombstones, so a long run of alloc/free never degrades it). Keys are block
 * addresses, never 0. Grows at 1/2 load; never shrinks (it is sized by the
 * peak number of live blocks, which is small).
 */
#include <stdlib.h>

#include "alloc_internal.h"

static inline uint64_t slot(const vt__ptrmap *m, uint64_t key)
{
    /* addresses are multiples of 512: drop those bits, then mix */
    return ((key >> 9) * 0x9E3779B97F4A7C15ull >> 20) & m->mask;
}

static int grow(vt__ptrmap *m)
{
    uint64_t ncap = m->mask ? (m->mask + 1) * 2 : 1024;
    uint64_t *keys = calloc(ncap, sizeof *keys);
    vt__block **vals = calloc(ncap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    vt__ptrmap n = { keys, vals, ncap - 1, 0 };
    for (uint64_t i = 0; m->mask && i <= m->mask; i++)
        if (m->keys[i])
            vt__ptrmap_put(&n, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    *m = n;
    return 0;
}

int vt__ptrmap_put(vt__ptrmap *m, uint64_t key, vt__block *b)
{
    if (vt__unlikely((m->count + 1) * 2 > m->mask + 1) && grow(m))
        return -1;
    uint64_t i = slot(m, key);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & m->mask;
    if (!m->keys[i])
        m->count++;
    m->keys[i] = key;
    m->vals[i] = b;
    return 0;
}

vt__block *vt__ptrmap_get(const vt__ptrmap *m, uint64_t key)
{
    if (vt__unlikely(!m->keys))
        return NULL;
    uint64_t i = slot(m, key);
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key)
            return m->vals[i];
        if (!k)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

vt__block *vt__ptrmap_del(vt__ptrmap *m, uint64_t key)
{
    if (vt__unlikely(!m->keys))
        return NULL;
    uint64_t i = slot(m, key);
    while (m->keys[i] != key) {
        if (!m->keys[i])
            return NULL;
        i = (i + 1) & m->mask;
    }
    vt__block *b = m->vals[i];
    /* Backward shift: move later entries of the probe run into the hole
     * unless their home slot lies (cyclically) after the hole. */
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->keys[j])
            break;
        uint64_t home = slot(m, m->keys[j]);
        if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->count--;
    return b;
}

bool vt__ptrmap_next(const vt__ptrmap *m, uint64_t *pos, uint64_t *key, vt__block **val)
{
    for (uint64_t i = *pos; m->keys && i <= m->mask; i++)
        if (m->keys[i]) {
            *key = m->keys[i];
            *val = m->vals[i];
            *pos = i + 1;
            return true;
        }
    return false;
}
