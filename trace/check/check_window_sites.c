/*
 * trace/check/check_window_sites.c - the call site of a storage made before
 * the window and freed in it, for GROWTH.
 *
 * Where the ring overwrote a run's start, such a storage's ALLOC is gone;
 * since format 1.12 its free names its allocation stack (the timeline sets
 * it), and nothing here is needed. In an older file or an imported PyTorch
 * snapshot it has none (the timeline gives it the free event's size and
 * stack only). GROWTH judges a call site by its live bytes at every step end: a
 * FIFO (a replay memory, a prefetch queue) made in the window grows while
 * the entries made before it are evicted unseen, so a full memory in steady
 * state reads as growth. Such a storage is given back to its site by the
 * evidence the window still has, or stays without one:
 *
 *  - Under track(), its tensor was declared again with the stack that made
 *    it: the site whose storages in the window have tensors made there
 *    (the DQN tutorial under run --track, 2.7M events in a ring of 1M: 4
 *    growth findings, "grows 15 B per step", before this).
 *  - Without tensors (plain run), its size and where it was freed: the
 *    window's own storages of that size freed at that stack are a site's
 *    (an eviction at `memory.append`). Several sites' storages freed there
 *    with that size (a transition's state, action and reward, evicted
 *    together, each a 512-byte block) share the stackless ones in the
 *    proportions of the window's, in turn: each site's series then stands
 *    as a steady FIFO's does (the DQN loop under plain run in a ring of 8
 *    MiB: 3 growth lines before this).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* The window's storages of one site freed at one stack with one size.
 * What size a free event carries depends on the allocator: PyTorch's
 * observed pool reports the size asked for, vramtrace's own the block's
 * (and a stackless storage has the size its free event carried): each
 * storage is counted under its asked size (by_req) and its block's, and
 * a stackless one looks for its size among the asked sizes first. */
typedef struct ck_freed_at {
    uint32_t free_stack;
    uint32_t by_req;     /* 1: size is the size asked for, 0: the block's */
    uint64_t size;
    uint32_t site;
    uint32_t count;      /* the window's storages */
    uint32_t given;      /* stackless storages given this site so far */
} ck_freed_at;

static int cmp_freed_at(const void *p, const void *q)
{
    const ck_freed_at *x = p, *y = q;
    if (x->free_stack != y->free_stack)
        return x->free_stack < y->free_stack ? -1 : 1;
    if (x->by_req != y->by_req)
        return x->by_req > y->by_req ? -1 : 1;   /* the asked sizes first */
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return (x->site > y->site) - (x->site < y->site);
}

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

/* A storage of the window freed in it, with a call site. */
static int freed_in_window(const ck_storage *st)
{
    return st->alloc_stack && !st->before_window && st->freed && st->free_stack;
}

static int by_free_stack(const ck_model *m, ck_window_sites *ws)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nst; i++)
        n += freed_in_window(&m->st[i]) ? 1 + !!m->st[i].req_size : 0;
    if (!n)
        return 0;
    ck_freed_at *f = malloc(n * sizeof *f);
    if (!f)
        return -ENOMEM;
    n = 0;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (!freed_in_window(st))
            continue;
        f[n++] = (ck_freed_at){ st->free_stack, 0, st->size, st->alloc_stack, 1, 0 };
        if (st->req_size)
            f[n++] = (ck_freed_at){ st->free_stack, 1, st->req_size, st->alloc_stack, 1, 0 };
    }
    qsort(f, n, sizeof *f, cmp_freed_at);
    size_t k = 0;   /* one entry per (free stack, by_req, size, site), counted */
    for (size_t i = 0; i < n; i++) {
        if (k && !cmp_freed_at(&f[k - 1], &f[i]))
            f[k - 1].count++;
        else
            f[k++] = f[i];
    }
    ws->freed_at = f;
    ws->nfreed_at = k;
    return 0;
}

int vt__ck_window_sites_init(const ck_model *m, ck_window_sites *ws)
{
    memset(ws, 0, sizeof *ws);
    if (!m->s->meta.events_overwritten)
        return 0;
    size_t nstackless = 0;
    for (size_t i = 0; i < m->nst; i++)
        nstackless += stackless(&m->st[i]);
    if (!nstackless)
        return 0;
    ws->on = 1;
    if ((m->ntensors && by_made_stack(m, &ws->by_made) < 0) || by_free_stack(m, ws) < 0) {
        vt__ck_window_sites_free(ws);
        return -ENOMEM;
    }
    return 0;
}

/* The entries of (free stack, by_req, size): [*lo, return). */
static size_t freed_alike(const ck_window_sites *ws, uint32_t free_stack, uint32_t by_req,
                          uint64_t size, size_t *lo)
{
    ck_freed_at key = { free_stack, by_req, size, 0, 0, 0 };
    size_t a = 0, b = ws->nfreed_at;
    while (a < b) {   /* the first entry not below key */
        size_t mid = a + (b - a) / 2;
        if (cmp_freed_at(&ws->freed_at[mid], &key) < 0)
            a = mid + 1;
        else
            b = mid;
    }
    *lo = a;
    while (b < ws->nfreed_at && ws->freed_at[b].free_stack == free_stack &&
           ws->freed_at[b].by_req == by_req && ws->freed_at[b].size == size)
        b++;
    return b > a ? b : a;
}

/* Of the sites whose storages of st's size were freed at st's free stack,
 * the one whose share of the stackless storages given so far is the
 * smallest against its share of the window's (smooth weighted turns). */
static uint32_t site_freed_alike(ck_window_sites *ws, const ck_storage *st)
{
    if (!st->freed || !st->free_stack)
        return 0;
    size_t lo, hi = freed_alike(ws, st->free_stack, 1, st->size, &lo);
    if (hi == lo)
        hi = freed_alike(ws, st->free_stack, 0, st->size, &lo);
    ck_freed_at *best = NULL;
    for (size_t i = lo; i < hi; i++) {
        ck_freed_at *c = &ws->freed_at[i];
        /* (given + 1) / count smallest */
        if (!best || (uint64_t)(c->given + 1) * best->count <
                         (uint64_t)(best->given + 1) * c->count)
            best = c;
    }
    if (!best)
        return 0;
    best->given++;
    return best->site;
}

uint32_t vt__ck_window_site_of(const ck_model *m, const ck_storage *st, ck_window_sites *ws)
{
    if (!ws->on || !stackless(st))
        return st->alloc_stack;
    if (m->ntensors) {
        for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
            uint32_t site = m->nodes[t].made_stack
                                ? vt__u64map_get(&ws->by_made, m->nodes[t].made_stack)
                                : VT__U64MAP_NONE;
            if (site != VT__U64MAP_NONE)
                return site;
        }
    }
    return site_freed_alike(ws, st);
}

void vt__ck_window_sites_free(ck_window_sites *ws)
{
    vt__u64map_free(&ws->by_made);
    free(ws->freed_at);
    memset(ws, 0, sizeof *ws);
}
