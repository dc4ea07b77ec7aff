/*
 * trace/snap/uncached.c - PASSTHROUGH events matched into allocations the
 * cache did not serve (uncached.h).
 */
#include "uncached.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vramtrace/format.h"

enum vt_uncached_kind vt_uncached_kind_of(unsigned call)
{
    switch (call) {
    case VT_PASS_MANAGED:       return VT_UK_MANAGED;
    case VT_PASS_HOST:
    case VT_PASS_HOST_REGISTER: return VT_UK_PINNED_HOST;
    case VT_PASS_PITCH:         return VT_UK_PITCHED;
    case VT_PASS_ARRAY:         return VT_UK_ARRAY;
    case VT_PASS_FROM_POOL:     return VT_UK_POOL;
    case VT_PASS_VMM_CREATE:    return VT_UK_VMM;
    case VT_PASS_GRAPH:         return VT_UK_GRAPH;
    default:                    return VT_UK_OTHER;
    }
}

const char *vt_uncached_kind_name(enum vt_uncached_kind k)
{
    static const char *const names[VT_UK_COUNT] = {
        [VT_UK_MANAGED] = "managed", [VT_UK_PINNED_HOST] = "pinned host",
        [VT_UK_PITCHED] = "pitched", [VT_UK_ARRAY] = "array", [VT_UK_POOL] = "pool",
        [VT_UK_VMM] = "vmm", [VT_UK_GRAPH] = "graph", [VT_UK_OTHER] = "other",
    };
    return (unsigned)k < VT_UK_COUNT ? names[k] : "other";
}

int vt_uncached_kind_is_host(enum vt_uncached_kind k)
{
    return k == VT_UK_PINNED_HOST;
}

/* Open allocations by addr: a small open-addressing map of indexes. */
struct open_map {
    uint64_t *keys;
    uint32_t *vals;          /* index + 1; 0 = empty, UINT32_MAX = deleted */
    size_t cap;
};

static size_t slot_of(const struct open_map *m, uint64_t k)
{
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (m->cap - 1);
}

static uint32_t *find(struct open_map *m, uint64_t k)
{
    for (size_t i = slot_of(m, k);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] == 0)
            return NULL;
        if (m->vals[i] != UINT32_MAX && m->keys[i] == k)
            return &m->vals[i];
    }
}

static void put(struct open_map *m, uint64_t k, uint32_t v)
{
    size_t i = slot_of(m, k);
    while (m->vals[i] != 0 && m->vals[i] != UINT32_MAX && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = k;
    m->vals[i] = v + 1;
}

int vt_uncached_build(const vt_snapshot_data *s, uint64_t fork_seq, vt_uncached **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t count = 0;
    for (size_t i = 0; i < s->nevents; i++)
        count += s->events[i].kind == VT_EV_PASSTHROUGH && !s->events[i].aux2 &&
                 s->events[i].aux != VT_PASS_VMM_MAP && s->events[i].aux != VT_PASS_FOREIGN_FREE;
    if (!count)
        return 0;
    struct open_map m = { 0 };
    m.cap = 16;
    while (m.cap < count * 2)
        m.cap <<= 1;
    m.keys = calloc(m.cap, sizeof *m.keys);
    m.vals = calloc(m.cap, sizeof *m.vals);
    vt_uncached *v = calloc(count, sizeof *v);
    if (!m.keys || !m.vals || !v) {
        free(m.keys);
        free(m.vals);
        free(v);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->kind != VT_EV_PASSTHROUGH || e->aux == VT_PASS_VMM_MAP)
            continue;
        uint32_t *slot = find(&m, e->addr);
        if (e->aux2) {              /* a release */
            if (!slot)
                continue;           /* allocated before the window, or not ours to show */
            vt_uncached *u = &v[*slot - 1];
            u->alive = 0;
            u->free_seq = e->seq;
            u->free_time_ns = e->time_ns;
            u->free_stack = e->stack;
            u->free_event = (uint32_t)i;
            *slot = UINT32_MAX;
            continue;
        }
        if (e->aux == VT_PASS_FOREIGN_FREE)
            continue;               /* always a release; an allocation flag would be corrupt */
        if (slot)                   /* the previous one's release was not recorded */
            *slot = UINT32_MAX;
        enum vt_uncached_kind kind = vt_uncached_kind_of((unsigned)e->aux);
        v[k] = (vt_uncached){
            .addr = e->addr, .size = e->size, .stream = e->stream,
            .alloc_seq = e->seq, .alloc_time_ns = e->time_ns, .alloc_stack = e->stack,
            .alloc_event = (uint32_t)i, .free_event = UINT32_MAX,
            .call = (uint8_t)e->aux, .kind = (uint8_t)kind, .alive = 1,
            .inherited = fork_seq && e->seq < fork_seq, .device = (int8_t)e->device,
        };
        put(&m, e->addr, (uint32_t)k);
        k++;
    }
    free(m.keys);
    free(m.vals);
    *out = v;
    *n = k;
    return 0;
}
