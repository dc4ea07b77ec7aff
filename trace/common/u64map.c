/* trace/common/u64map.c - the u64 -> u32 hash map (see u64map.h). */
#include "u64map.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int vt__u64map_init(vt__u64map *m, size_t expect)
{
    size_t slots = 64;
    while (slots < expect * 2)
        slots *= 2;
    memset(m, 0, sizeof *m);
    m->keys = malloc(slots * sizeof *m->keys);
    m->vals = malloc(slots * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        vt__u64map_free(m);
        return -ENOMEM;
    }
    memset(m->vals, 0xff, slots * sizeof *m->vals);
    m->mask = slots - 1;
    return 0;
}

void vt__u64map_free(vt__u64map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int grow(vt__u64map *m)
{
    vt__u64map bigger;
    if (vt__u64map_init(&bigger, m->mask + 1) < 0)
        return -ENOMEM;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->vals[i] == VT__U64MAP_NONE)
            continue;
        size_t j = vt__u64map_slot(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
    }
    bigger.n = m->n;
    vt__u64map_free(m);
    *m = bigger;
    return 0;
}

int vt__u64map_put(vt__u64map *m, uint64_t key, uint32_t val)
{
    size_t i = vt__u64map_slot(m, key);
    if (m->vals[i] == VT__U64MAP_NONE) {
        if ((m->n + 1) * 2 > m->mask + 1) {
            if (grow(m) < 0)
                return -ENOMEM;
            i = vt__u64map_slot(m, key);
        }
        m->keys[i] = key;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

void vt__u64map_del(vt__u64map *m, uint64_t key)
{
    if (!m->vals)
        return;
    size_t i = vt__u64map_slot(m, key);
    if (m->vals[i] == VT__U64MAP_NONE)
        return;
    m->vals[i] = VT__U64MAP_NONE;
    m->n--;
    /* Shift back the entries of the run after the hole that may not stay
     * past it: j's entry may fill hole i when its home is not in (i, j]. */
    for (size_t j = (i + 1) & m->mask; m->vals[j] != VT__U64MAP_NONE; j = (j + 1) & m->mask) {
        size_t home = (size_t)vt__mix64(m->keys[j]) & m->mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->vals[j] = VT__U64MAP_NONE;
        i = j;
    }
}
