/*
 * alloc/replay/replay_map.c - recorded address -> entry: the shared hash map
 * (u64map.h, which deletes without tombstones: a replay frees as often as
 * it allocates, for millions of events) indexes a pool of entries whose
 * freed ones are reused, so neither grows past the most addresses live at
 * once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "replay_internal.h"

int vt__rmap_init(vt__rmap *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    m->free_head = VT__U64MAP_NONE;
    return vt__u64map_init(&m->index, expected);
}

void vt__rmap_destroy(vt__rmap *m)
{
    vt__u64map_free(&m->index);
    free(m->entries);
    memset(m, 0, sizeof *m);
}

vt__rmap_entry *vt__rmap_get(vt__rmap *m, uint64_t key)
{
    uint32_t x = key ? vt__u64map_get(&m->index, key) : VT__U64MAP_NONE;
    return x == VT__U64MAP_NONE ? NULL : &m->entries[x];
}

vt__rmap_entry *vt__rmap_put(vt__rmap *m, uint64_t key)
{
    vt__rmap_entry *e = vt__rmap_get(m, key);
    if (e || !key)
        return e;
    uint32_t x = m->free_head;
    if (x == VT__U64MAP_NONE) {
        if (m->nentries >= VT__U64MAP_NONE - 1 ||
            vt__grow((void **)&m->entries, &m->cap, m->nentries + 1, sizeof *m->entries))
            return NULL;
        x = (uint32_t)m->nentries;
    }
    if (vt__u64map_put(&m->index, key, x))
        return NULL;
    e = &m->entries[x];
    if (x == m->free_head)
        m->free_head = (uint32_t)e->value;
    else
        m->nentries++;
    memset(e, 0, sizeof *e);
    e->key = key;
    return e;
}

void vt__rmap_del(vt__rmap *m, vt__rmap_entry *e)
{
    vt__u64map_del(&m->index, e->key);
    e->key = 0;
    e->value = m->free_head;
    m->free_head = (uint32_t)(e - m->entries);
}
