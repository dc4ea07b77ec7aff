/*
 * trace/snap/passthrough.c - PASSTHROUGH events matched into allocations the
 * cache did not serve (passthrough.h).
 */
#include "passthrough.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "vramtrace/format.h"

enum vt__passthrough_kind vt__passthrough_kind_of(unsigned call)
{
    switch (call) {
    case VT_PASS_MANAGED:       return VT_PTK_MANAGED;
    case VT_PASS_HOST:
    case VT_PASS_HOST_REGISTER: return VT_PTK_PINNED_HOST;
    case VT_PASS_PITCH:         return VT_PTK_PITCHED;
    case VT_PASS_ARRAY:         return VT_PTK_ARRAY;
    case VT_PASS_FROM_POOL:     return VT_PTK_POOL;
    case VT_PASS_VMM_CREATE:    return VT_PTK_VMM;
    case VT_PASS_GRAPH:         return VT_PTK_GRAPH;
    default:                    return VT_PTK_OTHER;
    }
}

const char *vt__passthrough_kind_name(enum vt__passthrough_kind k)
{
    static const char *const names[VT_PTK_COUNT] = {
        [VT_PTK_MANAGED] = "managed", [VT_PTK_PINNED_HOST] = "pinned host",
        [VT_PTK_PITCHED] = "pitched", [VT_PTK_ARRAY] = "array", [VT_PTK_POOL] = "pool",
        [VT_PTK_VMM] = "vmm", [VT_PTK_GRAPH] = "graph", [VT_PTK_OTHER] = "other",
    };
    return (unsigned)k < VT_PTK_COUNT ? names[k] : "other";
}

int vt__passthrough_kind_is_host(enum vt__passthrough_kind k)
{
    return k == VT_PTK_PINNED_HOST;
}

int vt__passthrough_note(vt__passthrough_matcher *um, const vt__event *e, uint32_t i)
{
    if (e->kind != VT_EV_PASSTHROUGH || e->aux == VT_PASS_VMM_MAP)
        return 0;
    uint32_t open = vt__u64map_get(&um->open, e->addr);
    if (e->aux2) {              /* a release */
        if (open == VT__U64MAP_NONE)
            return 0;           /* allocated before the window, or not ours to show */
        vt__passthrough *u = &um->v[open];
        u->alive = 0;
        u->free_seq = e->seq;
        u->free_time_ns = e->time_ns;
        u->free_stack = e->stack;
        u->free_event = i;
        vt__u64map_del(&um->open, e->addr);
        return 0;
    }
    if (e->aux == VT_PASS_FOREIGN_FREE)
        return 0;               /* always a release; an allocation flag would be corrupt */
    /* an allocation open at the addr: its release was not recorded; the map
     * now names the new one */
    if (um->n >= UINT32_MAX - 1 || (!um->open.vals && vt__u64map_init(&um->open, 16)))
        return -ENOMEM;
    vt__passthrough *u = vt__grow_push((void **)&um->v, &um->cap, &um->n, sizeof *u);
    if (!u || vt__u64map_put(&um->open, e->addr, (uint32_t)(um->n - 1))) {
        if (u)
            um->n--;
        return -ENOMEM;
    }
    *u = (vt__passthrough){
        .addr = e->addr, .size = e->size, .stream = e->stream,
        .alloc_seq = e->seq, .alloc_time_ns = e->time_ns, .alloc_stack = e->stack,
        .alloc_event = i, .free_event = UINT32_MAX,
        .call = (uint8_t)e->aux, .kind = (uint8_t)vt__passthrough_kind_of((unsigned)e->aux),
        .alive = 1, .device = (int8_t)e->device,
    };
    return 0;
}

void vt__passthrough_finish(vt__passthrough_matcher *um, uint64_t fork_seq, vt__passthrough **out, size_t *n)
{
    for (size_t k = 0; k < um->n; k++)
        um->v[k].inherited = fork_seq && um->v[k].alloc_seq < fork_seq;
    *out = um->v;
    *n = um->n;
    vt__u64map_free(&um->open);
    memset(um, 0, sizeof *um);
}

void vt__passthrough_discard(vt__passthrough_matcher *um)
{
    vt__u64map_free(&um->open);
    free(um->v);
    memset(um, 0, sizeof *um);
}

int vt__passthrough_build(const vt__snapshot_data *s, uint64_t fork_seq, vt__passthrough **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    vt__passthrough_matcher um = { 0 };
    for (size_t i = 0; i < s->nevents; i++)
        if (vt__passthrough_note(&um, &s->events[i], (uint32_t)i)) {
            vt__passthrough_discard(&um);
            return -ENOMEM;
        }
    vt__passthrough_finish(&um, fork_seq, out, n);
    return 0;
}
