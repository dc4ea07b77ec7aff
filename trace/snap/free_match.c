/*
 * trace/snap/free_match.c - a FREE_COMPLETED matched with its
 * FREE_REQUESTED (the rule in free_match.h).
 */
#include <errno.h>

#include "free_match.h"

int vt__free_match_init(vt__free_match *m)
{
    return vt__u64map_init(&m->open, 1024);
}

void vt__free_match_free(vt__free_match *m)
{
    vt__u64map_free(&m->open);
}

int vt__free_match_event(vt__free_match *m, const vt__event *e, uint32_t i, uint32_t *request)
{
    *request = VT__FREE_MATCH_NONE;
    switch (e->kind) {
    case VT_EV_ALLOC:
        vt__u64map_del(&m->open, e->addr);
        return 0;
    case VT_EV_FREE_REQUESTED:
        return vt__u64map_put(&m->open, e->addr, i);
    case VT_EV_FREE_COMPLETED:
        *request = vt__u64map_get(&m->open, e->addr);
        vt__u64map_del(&m->open, e->addr);
        return 0;
    default:
        return 0;
    }
}

void vt__free_match_drop(vt__free_match *m, uint64_t addr)
{
    vt__u64map_del(&m->open, addr);
}
