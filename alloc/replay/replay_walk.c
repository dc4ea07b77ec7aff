/*
 * alloc/replay/replay_walk.c - the one walk of the recorded events, in
 * order, through an engine (vramtrace's allocator or PyTorch's model).
 *
 * What is the same under either rules lives here: what was held when the
 * window opened made first (replay_seed.c), which recorded address
 * is which replayed block, a recorded free of a block the replay never
 * served (already freed early, or of nothing it knows) skipped, the
 * frees moved earlier (options.free_at) made before the event they follow,
 * a recorded OOM asked again (and, when served, given back at once: the
 * recording does not say what the program would have done with it), the
 * counts of what was replayed, and where the replay ran out of memory.
 * What a block is, and how a free waits for other streams, is the engine's.
 */
#include <errno.h>

#include "replay_internal.h"

typedef struct walk {
    const vt__replay_engine *en;
    vt__replay_result *r;
    vt__rmap live;             /* recorded address -> served block */
    vt__early early;
    const vt__seeds *seeds;
    size_t next_seed;          /* the first seed not yet made */
    size_t caught_before;      /* options.caught_before */
    size_t empty_cache_at;     /* options.empty_cache_at */
} walk;

/* The engine ran out of memory at event i, e, asking `size` bytes. */
static void out_of_memory(walk *w, size_t i, const vt__event *e, uint64_t size)
{
    vt__replay_oom *o = &w->r->oom;
    *o = (vt__replay_oom){ .happened = true, .event_index = i, .seq = e->seq,
                          .time_ns = e->time_ns, .device = e->device, .stream = e->stream,
                          .req_size = size, .stack = e->stack };
    w->en->oom(w->en->self, e->device, o);
}

/* Free what options.free_at makes due before event i: each allocation
 * still live as its ALLOC made it, at once on its own stream. */
static int early_due(walk *w, size_t i)
{
    uint64_t addr;
    while (vt__early_due(&w->early, i, &addr)) {
        vt__rmap_entry *x = vt__rmap_get(&w->live, addr);
        if (!x || !x->early)
            continue;   /* freed by the recording already */
        uint64_t block = x->value, stream = x->stream;
        int device = x->device;
        vt__rmap_del(&w->live, x);
        if (w->en->free(w->en->self, device, block, stream, VT__REPLAY_AT_ONCE, 0)
            || vt__early_freed(&w->early, addr))
            return -ENOMEM;
        w->r->early_frees++;
        w->r->replayed++;
    }
    return 0;
}

/* @return 0, 1 when the replay stops here (out of memory), or -ENOMEM. */
static int alloc_event(walk *w, size_t i, const vt__event *e, bool early)
{
    uint64_t size = e->req_size ? e->req_size : e->size, block = 0, stream = 0;
    int a = w->en->malloc(w->en->self, e, size, &block, &stream);
    if (a < 0 || a == VT__REPLAY_PASS)
        return a < 0 ? a : 0;
    w->r->replayed++;
    vt__rmap_entry *x = vt__rmap_get(&w->live, e->addr);
    if (x)   /* allocated again without a free in the window: forget it */
        vt__rmap_del(&w->live, x);
    if (a == VT__REPLAY_OUT_OF_MEMORY) {
        out_of_memory(w, i, e, size);
        return 1;
    }
    if (a != VT__REPLAY_SERVED)
        return 0;
    if (!(x = vt__rmap_put(&w->live, e->addr))) {
        if (w->en->forget)
            w->en->forget(w->en->self, block);
        return -ENOMEM;
    }
    x->value = block;
    x->stream = stream;
    x->device = (int8_t)e->device;
    x->early = early;
    return 0;
}

static int free_event(walk *w, size_t i, const vt__event *e, const vt__completions *c)
{
    vt__rmap_entry *x = vt__rmap_get(&w->live, e->addr);
    if (!x || x->device != e->device) {
        if (!vt__early_recorded_free(&w->early, e->addr))   /* not one freed early */
            w->r->skipped_frees++;
        return 0;
    }
    uint64_t block = x->value, stream = x->stream, done;
    vt__rmap_del(&w->live, x);
    w->r->replayed++;
    if (vt__completed_at_once(c, i, e, &done))
        return w->en->free(w->en->self, e->device, block, stream, VT__REPLAY_AT_ONCE, 0);
    return w->en->free(w->en->self, e->device, block, stream, i, done);
}

/* Before event i, e: what was held when the window opened (before the
 * first event: and outside the pool), as ALLOCs of the recorded addresses.
 * @return 0, 1 when the replay stops here (out of memory), or -ENOMEM. */
static int seeds_due(walk *w, size_t i, const vt__event *e)
{
    const vt__seeds *sd = w->seeds;
    if (i == 0 && w->en->outside)
        for (size_t d = 0; d < w->r->ndevices; d++)
            if (sd->outside[d])
                w->en->outside(w->en->self, (int)d, sd->outside[d]);
    if (w->next_seed < sd->n && sd->v[w->next_seed].due <= i)
        w->en->now(w->en->self, i, e);
    for (; w->next_seed < sd->n && sd->v[w->next_seed].due <= i; w->next_seed++) {
        const vt__seed *x = &sd->v[w->next_seed];
        if (x->device >= (int)w->r->ndevices)
            continue;
        /* an observed framework's block: the state and the timeline say so */
        vt__event a = { .kind = VT_EV_ALLOC, .addr = x->addr, .size = x->size,
                        .req_size = x->req_size, .stream = x->stream, .stack = x->stack,
                        .device = x->device, .time_ns = e->time_ns,
                        .aux = VT_ALLOC_POOL_BLOCK };
        int rc = alloc_event(w, i, &a, false);
        if (rc)
            return rc;
        w->r->seeded++;
        w->r->seeded_bytes += x->size;
    }
    if (i == 0 && w->en->trail)
        w->en->trail->seeded = w->en->trail->nsegs;
    return 0;
}

/* The recorded program asked here and was refused: ask again. */
static int oom_event(walk *w, size_t i, const vt__event *e)
{
    if (!e->req_size)
        return 0;
    uint64_t block = 0, stream = 0;
    int a = w->en->malloc(w->en->self, e, e->req_size, &block, &stream);
    if (a < 0)
        return a;
    w->r->replayed++;
    if (a == VT__REPLAY_OUT_OF_MEMORY && i < w->caught_before) {
        w->r->recorded_ooms_failed++;   /* as recorded: the program caught it */
        return 0;
    }
    if (a == VT__REPLAY_OUT_OF_MEMORY) {
        out_of_memory(w, i, e, e->req_size);
        return 1;
    }
    if (a != VT__REPLAY_SERVED)
        return 0;
    w->r->recorded_ooms_served++;
    return w->en->free(w->en->self, e->device, block, stream, VT__REPLAY_AT_ONCE, 0);
}

int vt__replay_walk(vt__event_stream *es, const vt__replay_options *opt,
                    const vt__completions *c, const vt__seeds *seeds, vt__replay_result *r,
                    const vt__replay_engine *en)
{
    static const vt__seeds none = { 0 };
    walk w = { .en = en, .r = r, .seeds = seeds ? seeds : &none,
               .caught_before = opt ? opt->caught_before : 0,
               .empty_cache_at = opt ? opt->empty_cache_at : 0 };
    if (vt__rmap_init(&w.live, 4096))
        return -ENOMEM;
    if (vt__early_init(&w.early, vt__event_stream_count(es), opt)) {
        vt__early_destroy(&w.early);
        vt__rmap_destroy(&w.live);
        return -ENOMEM;
    }
    int rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++) {
        rc = 0;
        const vt__event *e = &ev;
        if ((rc = seeds_due(&w, i, e)))
            break;
        bool early = w.early.n && vt__early_alloc(&w.early, i, e);
        if (w.early.n && (rc = early_due(&w, i)))
            break;
        if (e->device < 0 || e->device >= (int)r->ndevices)
            continue;
        en->now(en->self, i, e);
        if (w.empty_cache_at == i + 1) {   /* the program's empty_cache() before it */
            vt__event emptied = { .seq = e->seq, .time_ns = e->time_ns, .device = e->device,
                                  .kind = VT_EV_EMPTY_CACHE };
            int calls = en->other(en->self, i, &emptied);
            if (calls < 0) {
                rc = calls;
                break;
            }
            r->replayed += (size_t)calls;
        }
        switch (e->kind) {
        case VT_EV_ALLOC:
            rc = alloc_event(&w, i, e, early);
            break;
        case VT_EV_FREE_REQUESTED:
            rc = free_event(&w, i, e, c);
            break;
        case VT_EV_OOM:
            rc = oom_event(&w, i, e);
            break;
        default: {
            int calls = en->other(en->self, i, e);
            if (calls < 0)
                rc = calls;
            else
                r->replayed += (size_t)calls;
            break;
        }
        }
        if (rc == 0 && en->after)
            en->after(en->self, i, e);
    }
    if (en->forget)
        for (size_t k = 0; k < w.live.nentries; k++)
            if (w.live.entries[k].key)
                en->forget(en->self, w.live.entries[k].value);
    vt__early_destroy(&w.early);
    vt__rmap_destroy(&w.live);
    return rc < 0 ? rc : 0;
}
