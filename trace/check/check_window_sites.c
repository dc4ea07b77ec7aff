/*
 * trace/check/check_window_sites.c - the call site of a storage made before
 * the window and freed in it, for GROWTH, in a file older than 1.12.
 *
 * Where the ring overwrote a run's start, such a storage's ALLOC is gone;
 * since format 1.12 its free names its allocation stack (the timeline sets
 * it), and nothing here is needed. In an older file it has none, and GROWTH,
 * which judges a call site by its live bytes at every step end, saw a FIFO
 * (a replay memory) made in the window grow while the entries made before it
 * were evicted unseen. Under track() the tracker declared such a storage's
 * tensor again with the stack that made it: its site is the one whose
 * storages in the window have tensors made there (the DQN tutorial under
 * run --track, 2.7M events in a ring of 1M: 4 growth findings, "grows 15 B
 * per step", before this). Without tensors nothing places it
 * (docs/limitations.md).
 */
#include <errno.h>
#include <string.h>

#include "check_internal.h"

/* A stackless storage the evidence may place: made before the window,
 * freed in it. */
static int stackless(const ck_storage *st)
{
    return !st->alloc_stack && st->before_window;
}

static int by_made_stack(const ck_model *m, vt__u64map *by_made)
{
    if (vt__u64map_init(by_made, 64) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (!st->alloc_stack)
            continue;
        /* each of its tensors' (a kept view's: `.indices.view(1, 1)`,
         * whose base, the owner, is gone from a storage made before) */
        for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
            uint32_t made = m->nodes[t].made_stack;
            if (made && vt__u64map_get(by_made, made) == VT__U64MAP_NONE &&
                vt__u64map_put(by_made, made, st->alloc_stack) < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

int vt__ck_window_sites_init(const ck_model *m, ck_window_sites *ws)
{
    memset(ws, 0, sizeof *ws);
    if (!m->s->meta.events_overwritten || !m->ntensors)
        return 0;
    size_t nstackless = 0;
    for (size_t i = 0; i < m->nst; i++)
        nstackless += stackless(&m->st[i]);
    if (!nstackless)
        return 0;
    ws->on = 1;
    if (by_made_stack(m, &ws->by_made) < 0) {
        vt__ck_window_sites_free(ws);
        return -ENOMEM;
    }
    return 0;
}

uint32_t vt__ck_window_site_of(const ck_model *m, const ck_storage *st,
                              const ck_window_sites *ws)
{
    if (!ws->on || !stackless(st))
        return st->alloc_stack;
    for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
        uint32_t site = m->nodes[t].made_stack
                            ? vt__u64map_get(&ws->by_made, m->nodes[t].made_stack)
                            : VT__U64MAP_NONE;
        if (site != VT__U64MAP_NONE)
            return site;
    }
    return 0;
}

void vt__ck_window_sites_free(ck_window_sites *ws)
{
    vt__u64map_free(&ws->by_made);
    memset(ws, 0, sizeof *ws);
}
