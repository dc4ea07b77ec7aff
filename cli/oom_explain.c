/*
 * cli/oom_explain.c - the OOM explanation: the state at the OOM from the
 * timeline, the checker's findings, and the candidates replayed (see
 * oom_explain.h). The printers are in oom_print.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "oom_explain.h"
#include "order.h"
#include "replay.h"
#include "bsearch.h"
#include "grow.h"
#include "report_util.h"
#include "u64map.h"
#include "user_code.h"

#define MIB (1ull << 20)

/* ---- the state at the OOM ----------------------------------------------- */

static bool before(uint32_t ev, size_t k) { return ev != VT_TL_NONE && ev <= k; }

/* Lifetime l holds its block right after event k: allocated, or freed and
 * still waiting for stream work. */
static bool occupies(const vt__lifetime *l, size_t k)
{
    if (vt__lifetime_allocated_at(l, (uint32_t)k))
        return true;
    if (!before(l->free_event, k))
        return false;
    return l->reusable_event != VT_TL_NONE ? l->reusable_event > k
                                           : (l->flags & VT_LT_PENDING_FREE) != 0;
}

/* A library's own allocation next to an observed framework allocator
 * (VT_LT_OUTSIDE_POOL) is in no allocated curve, so occupies() never counts
 * it: it holds its block from its allocation (checked by the caller) to its
 * free. */
static bool outside_holds(const vt__lifetime *l, size_t k)
{
    return !before(l->free_event, k) && !(l->flags & VT_LT_AFTER_WINDOW);
}

static bool pending_at(const vt__lifetime *l, size_t k)
{
    return occupies(l, k) && !vt__lifetime_allocated_at(l, (uint32_t)k);
}

static bool segment_alive(const vt__segment_span *g, size_t k)
{
    bool born = g->alloc_event != VT_TL_NONE ? g->alloc_event <= k
                                             : (g->flags & VT_LT_BEFORE_WINDOW) != 0;
    return born && !before(g->free_event, k);
}

typedef struct seg_at {
    uint64_t addr, size, stream;
    uint64_t private_pool;     /* vt__segment_span's */
    uint8_t pool, outside, framework;
    uint8_t used;              /* a block occupies it (vt__oom_graph_pools) */
    int8_t device;
} seg_at;

typedef struct span { uint64_t addr, end; } span;

static int cmp_seg(const void *a, const void *b)
{
    const seg_at *x = a, *y = b;
    return vt__order(x->addr, y->addr);
}

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return vt__order(x->addr, y->addr);
}

/* The segment of segs[0..n) (sorted) holding addr, or -1. */
static long find_seg(const seg_at *segs, size_t n, uint64_t addr)
{
    size_t lo;   /* the first segment that starts above addr */
    VT__PARTITION_POINT(n, i, segs[i].addr <= addr, lo);
    if (lo == 0 || addr >= segs[lo - 1].addr + segs[lo - 1].size)
        return -1;
    return (long)(lo - 1);
}

static int add_piece(vt__oom_report *r, const seg_at *g, uint64_t bytes)
{
    if (!bytes)
        return 0;
    r->cache_free += bytes;
    r->cache_pieces++;
    if (bytes > r->largest_free)
        r->largest_free = bytes;
    if (bytes < r->size)
        r->free_smaller += bytes;
    else if (g->pool == r->pool && g->stream == r->stream)
        r->fit_where_served += bytes;
    else
        r->fit_elsewhere += bytes;
    size_t i = 0;
    while (i < r->ngroups && !(r->groups[i].pool == g->pool && r->groups[i].stream == g->stream))
        i++;
    if (i == r->ngroups) {
        vt__oom_free_group *p = realloc(r->groups, (r->ngroups + 1) * sizeof *p);
        if (!p)
            return -ENOMEM;
        r->groups = p;
        r->groups[r->ngroups++] = (vt__oom_free_group){ .pool = g->pool, .stream = g->stream };
    }
    vt__oom_free_group *fg = &r->groups[i];
    fg->bytes += bytes;
    fg->pieces++;
    if (bytes > fg->largest)
        fg->largest = bytes;
    return 0;
}

static int cmp_group(const void *a, const void *b)
{
    const vt__oom_free_group *x = a, *y = b;
    return vt__report_cmp_bytes(x->bytes, x->stream, y->bytes, y->stream);
}

/* Reserved, allocated, free pieces and what lies outside the cache, right
 * after event k on r->device. */
static int device_state(const vt__snapshot_data *s, const vt__timeline *tl, vt__oom_report *r)
{
    size_t k = r->event;
    size_t nseg = 0;
    for (size_t i = 0; i < tl->nsegments; i++)
        nseg += tl->segments[i].device == r->device && segment_alive(&tl->segments[i], k);
    seg_at *segs = calloc(nseg ? nseg : 1, sizeof *segs);
    span *occ = NULL;
    size_t nocc = 0;
    int rc = -ENOMEM;
    if (!segs)
        return -ENOMEM;
    nseg = 0;
    for (size_t i = 0; i < tl->nsegments; i++) {
        const vt__segment_span *g = &tl->segments[i];
        if (g->device != r->device || !segment_alive(g, k))
            continue;
        uint64_t stream = g->alloc_event != VT_TL_NONE ? s->events[g->alloc_event].stream
                                                       : g->stream;
        segs[nseg++] = (seg_at){ .addr = g->addr, .size = g->size, .stream = stream,
                                 .private_pool = g->private_pool, .pool = g->pool,
                                 .device = g->device };
    }
    qsort(segs, nseg, sizeof *segs, cmp_seg);
    occ = malloc((tl->nlifetimes ? tl->nlifetimes : 1) * sizeof *occ);
    if (!occ)
        goto out;
    bool observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->device != r->device)
            continue;
        bool made = l->alloc_event != VT_TL_NONE ? l->alloc_event <= k
                                                 : (l->flags & VT_LT_BEFORE_WINDOW) != 0;
        if (!made)
            continue;
        long g = find_seg(segs, nseg, l->addr);
        bool outside = observed && (l->flags & VT_LT_OUTSIDE_POOL);
        if (g >= 0) {
            if (outside)
                segs[g].outside = 1;
            else
                segs[g].framework = 1;
        }
        if (outside ? !outside_holds(l, k) : !occupies(l, k))
            continue;
        if (outside) {
            r->outside_allocated += l->size;
        } else if (pending_at(l, k)) {
            r->pending += l->size;
        } else {
            r->allocated += l->size;
        }
        if (!outside && l->alloc_event == VT_TL_NONE)
            r->before_window += l->size;
        if (g >= 0)
            occ[nocc++] = (span){ l->addr, l->addr + l->size };
    }
    qsort(occ, nocc, sizeof *occ, cmp_span);
    size_t o = 0;
    for (size_t i = 0; i < nseg; i++) {
        seg_at *g = &segs[i];
        uint64_t end = g->addr + g->size, at = g->addr;
        /* a segment only a library's own allocations ever used is not the
         * framework's cache: its bytes are outside it */
        bool lib = g->outside && !g->framework;
        if (lib)
            r->outside_reserved += g->size;
        else
            r->reserved += g->size;
        /* a CUDA graph's pool's free bytes are its own, no other request's
         * (vt__oom_graph_pools counts them) */
        bool cache = !lib && !g->private_pool;
        while (o < nocc && occ[o].end <= g->addr)
            o++;
        for (; o < nocc && occ[o].addr < end; o++) {
            if (cache && occ[o].addr > at && add_piece(r, g, occ[o].addr - at))
                goto out;
            if (occ[o].end > at)
                at = occ[o].end;
        }
        if (cache && end > at && add_piece(r, g, end - at))
            goto out;
    }
    qsort(r->groups, r->ngroups, sizeof *r->groups, cmp_group);
    for (size_t i = 0; i < tl->npassthrough; i++) {
        const vt__passthrough *u = &tl->passthrough[i];
        if (u->device != r->device || vt__passthrough_kind_is_host(u->kind) || u->alloc_event > k)
            continue;
        if (u->free_event == UINT32_MAX || u->free_event > k)
            r->passthrough += u->size;
    }
    rc = 0;
out:
    free(segs);
    free(occ);
    return rc;
}

/* ---- CUDA graphs' private pools ----------------------------------------- */

/* Was the capture of stack `id` torch.compile's (a frame of its cudagraph
 * trees), not the program's own torch.cuda.graph? Its pool is then the
 * trees', released by torch._dynamo.reset(), not by deleting a graph the
 * program holds. */
static bool captured_by_compile(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[256];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 256);
    for (size_t i = 0; i < n && i < 256; i++)
        if (vt__source_is_cudagraph_trees(vt__snapshot_string(s, fr[i]->file)))
            return true;
    return false;
}

/* What private pool `id` is (enum vt__oom_pool_kind), `stack` where it
 * began (0: not known): torch.compile's where its capture was (asked first:
 * its cudagraph trees share a graph_pool_handle(), an odd id); else a
 * program's own (odd: torch.cuda.MemPool, graph_pool_handle()) or a
 * graph's own (even). Once, for the request's pool and for every pool. */
static uint8_t pool_kind(const vt__snapshot_data *s, uint64_t id, uint32_t stack)
{
    return !id                                        ? VT__OOM_POOL_DEFAULT
           : stack && captured_by_compile(s, stack) ? VT__OOM_POOL_COMPILED
           : id & 1                                   ? VT__OOM_POOL_PROGRAM
                                                      : VT__OOM_POOL_CAPTURE;
}

/* Pool `id`'s index in out->ids, added there when `add` and not seen yet
 * (up to VT__OOM_PRIVATE_IDS); out->pools when not there. */
static size_t pool_index(vt__graph_pools *out, uint64_t id, bool add)
{
    size_t p = 0;
    while (p < out->pools && out->ids[p] != id)
        p++;
    if (add && p == out->pools && p < VT__OOM_PRIVATE_IDS)
        out->ids[out->pools++] = id;
    return p;
}

int vt__oom_graph_pools(const vt__snapshot_data *s, const vt__timeline *tl, int device, size_t k,
                        vt__graph_pools *out)
{
    *out = (vt__graph_pools){ 0 };
    size_t n = 0;
    for (size_t i = 0; i < tl->nsegments; i++) {
        const vt__segment_span *g = &tl->segments[i];
        n += g->private_pool && g->device == device && segment_alive(g, k);
    }
    if (!n)
        return 0;
    seg_at *segs = malloc(n * sizeof *segs);
    if (!segs)
        return -ENOMEM;
    n = 0;
    for (size_t i = 0; i < tl->nsegments; i++) {
        const vt__segment_span *g = &tl->segments[i];
        if (!g->private_pool || g->device != device || !segment_alive(g, k))
            continue;
        segs[n++] = (seg_at){ .addr = g->addr, .size = g->size, .private_pool = g->private_pool,
                              .device = g->device };
        out->reserved += g->size;
        size_t p = pool_index(out, g->private_pool, true);
        /* where the capture ran: its segment's stack (a whole snapshot's events) */
        if (p < out->pools && !out->stacks[p] && g->alloc_event != VT_TL_NONE && s->events)
            out->stacks[p] = s->events[g->alloc_event].stack;
    }
    qsort(segs, n, sizeof *segs, cmp_seg);
    uint64_t occupied = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->device != device || !occupies(l, k))
            continue;
        long g = find_seg(segs, n, l->addr);
        if (g < 0)
            continue;
        segs[g].used = 1;
        occupied += l->size;
        size_t p = pool_index(out, segs[g].private_pool, false);
        if (p < out->pools && !out->stacks[p])   /* the ring overwrote the capture's events */
            out->stacks[p] = l->alloc_stack;
    }
    for (size_t i = 0; i < n; i++)
        if (!segs[i].used)
            out->whole += segs[i].size;
    out->program_made = out->pools > 0;
    for (size_t p = 0; p < out->pools; p++) {
        out->program_made = out->program_made && pool_kind(s, out->ids[p], out->stacks[p]) ==
                                                     VT__OOM_POOL_PROGRAM;
        if (!out->stack)
            out->stack = out->stacks[p];
    }
    free(segs);
    out->free = out->reserved > occupied ? out->reserved - occupied : 0;
    out->compiled = out->stack && captured_by_compile(s, out->stack);
    return 0;
}

/* ---- what was alive, by line ------------------------------------------- */

const vt__frame *vt__oom_site_frame(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *f = vt__report_site_frame(s, id);
    if (!f || vt__frame_is_python(s, f))
        return f;
    const vt__frame *fr[256];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 256);
    for (size_t i = 0; i < n && i < 256; i++) {
        const char *file = vt__snapshot_string(s, fr[i]->file);
        size_t len = strlen(file);
        if (!fr[i]->ip && !fr[i]->module && len > 3 && !strcmp(file + len - 3, ".py")
            && vt__source_is_programs(file))
            return fr[i];
    }
    return f;
}

typedef struct site_key {
    uint64_t key;              /* the line's frame, as function/file/line */
    const vt__frame *frame;
    vt__report_inside inside;  /* what a library made of it under the line */
    uint64_t bytes;
    uint32_t lt;               /* lifetime index */
    uint32_t finding;          /* UINT32_MAX: not flagged */
} site_key;

static int cmp_site_key(const void *a, const void *b)
{
    const site_key *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return vt__report_cmp_bytes(x->bytes, x->lt, y->bytes, y->lt);
}

static int cmp_site(const void *a, const void *b)
{
    const vt__oom_site *x = a, *y = b;
    return vt__report_cmp_bytes(x->bytes, x->frame ? x->frame->line : 0, y->bytes,
                                y->frame ? y->frame->line : 0);
}

/* A storage finding the checker made about lifetime l: the storage alive
 * at the OOM after the last use of its tensors. */
static bool flagged_at(const vt__check_finding *f, uint64_t oom_seq)
{
    if (f->external || f->before_window || f->nallocs != 1 || !f->last_use_seq)
        return false;
    if (!(f->rule & (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_CYCLE | VT_CHECK_RULE_TAPE |
                     VT_CHECK_RULE_PINNED)))
        return false;
    return f->alloc_seq < oom_seq && f->last_use_seq < oom_seq
           && (!f->freed || f->free_seq > oom_seq);
}

/* Without tensors the checker names call sites, not storages (never-freed,
 * growth, outlier): each line alive at the OOM gets the largest finding
 * whose allocations that line made. */
static void site_findings(const vt__snapshot_data *s, vt__oom_report *r)
{
    const unsigned native = VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH | VT_CHECK_RULE_OUTLIER;
    for (size_t i = 0; r->check && i < r->check->nfindings; i++) {
        const vt__check_finding *f = &r->check->findings[i];
        if (!(f->rule & native))
            continue;
        uint64_t key = vt__report_frame_key(s, vt__oom_site_frame(s, f->alloc_stack));
        for (size_t k = 0; key && k < r->nsites; k++) {
            vt__oom_site *st = &r->sites[k];
            if (vt__report_frame_key(s, st->frame) != key)
                continue;
            if (!st->site_finding || f->bytes > st->site_finding->bytes)
                st->site_finding = f;
            break;
        }
    }
}

/* The libraries' lines under one line of the program (its keys k[0..n)):
 * the largest VT__OOM_INSIDE_SHOWN in st->inside, how many in st->ninside. */
static int inside_lines(const vt__snapshot_data *s, const site_key *k, size_t n, vt__oom_site *st)
{
    vt__report_inside *items = malloc((n ? n : 1) * sizeof *items);
    if (!items)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        items[i] = k[i].inside;
    int rc = vt__report_sum_inside(s, items, n, st->inside, VT__OOM_INSIDE_SHOWN, &st->ninside);
    free(items);
    return rc;
}

static int alive_sites(const vt__snapshot_data *s, const vt__timeline *tl, vt__oom_report *r)
{
    size_t k = r->event;
    bool observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    site_key *keys = malloc((tl->nlifetimes ? tl->nlifetimes : 1) * sizeof *keys);
    /* by_stack: the first key of each allocation stack, whose line and
     * library line the others take (a walk of the stack each: 0.65 s for
     * 21,649 blocks alive at a Hugging Face generate()'s OOM) */
    vt__u64map by_addr = { 0 }, owner = { 0 }, tids = { 0 }, by_stack = { 0 };
    int rc = -ENOMEM;
    if (!keys || vt__u64map_init(&by_addr, 1024) || vt__u64map_init(&owner, 64)
        || vt__u64map_init(&tids, 64) || vt__u64map_init(&by_stack, 256))
        goto out;
    size_t n = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->device != r->device || !vt__lifetime_allocated_at(l, (uint32_t)k)
            || (observed && (l->flags & VT_LT_OUTSIDE_POOL)))
            continue;
        uint32_t same = vt__u64map_get(&by_stack, l->alloc_stack);
        if (same != VT__U64MAP_NONE) {
            keys[n] = keys[same];
        } else {
            const vt__frame *f = vt__oom_site_frame(s, l->alloc_stack);
            keys[n] = (site_key){ .key = vt__report_frame_key(s, f), .frame = f,
                                  .inside = vt__report_inside_of(s, l->alloc_stack, 0) };
            if (vt__u64map_put(&by_stack, l->alloc_stack, (uint32_t)n))
                goto out;
        }
        keys[n].bytes = keys[n].inside.bytes = l->size;
        keys[n].lt = (uint32_t)i;
        keys[n].finding = UINT32_MAX;
        if (vt__u64map_put(&by_addr, l->addr, (uint32_t)n))
            goto out;
        n++;
        r->alive_bytes += l->size;
        r->alive_count++;
    }
    /* track()'s names of the tensors that own them (the latest made on
     * each before the OOM, as it was called at the OOM: a parameter first
     * seen by the line that used it is renamed after its model at a mark),
     * and the checker's findings about them */
    for (size_t i = 0; i < k && i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind == VT_EV_TENSOR_NAME && e->str && vt__u64map_get(&tids, e->aux) != VT__U64MAP_NONE) {
            if (vt__u64map_put(&tids, e->aux, e->str))
                goto out;
            continue;
        }
        if (e->kind != VT_EV_TENSOR_NEW || VT_TENSOR_BASE(e->aux2) || !e->str)
            continue;
        uint32_t x = vt__u64map_get(&by_addr, e->addr);
        if (x != VT__U64MAP_NONE && e->seq > tl->lifetimes[keys[x].lt].alloc_seq
            && (vt__u64map_put(&owner, e->addr, (uint32_t)e->aux)
                || vt__u64map_put(&tids, e->aux, e->str)))
            goto out;
    }
    if (r->check)
        for (size_t i = 0; i < r->check->nfindings; i++) {
            const vt__check_finding *f = &r->check->findings[i];
            if (!flagged_at(f, r->seq))
                continue;
            uint32_t x = vt__u64map_get(&by_addr, f->addr);
            if (x == VT__U64MAP_NONE || tl->lifetimes[keys[x].lt].alloc_seq != f->alloc_seq)
                continue;
            keys[x].finding = (uint32_t)i;
            r->nflagged++;
            r->flagged_bytes += keys[x].bytes;
        }
    qsort(keys, n, sizeof *keys, cmp_site_key);
    r->sites = calloc(n ? n : 1, sizeof *r->sites);
    if (!r->sites)
        goto out;
    for (size_t i = 0; i < n;) {
        vt__oom_site *st = &r->sites[r->nsites++];
        st->frame = keys[i].frame;
        uint32_t tid = vt__u64map_get(&owner, tl->lifetimes[keys[i].lt].addr);
        uint32_t name = tid == VT__U64MAP_NONE ? VT__U64MAP_NONE : vt__u64map_get(&tids, tid);
        st->tensor = name == VT__U64MAP_NONE ? 0 : name;
        size_t j = i;
        for (; j < n && keys[j].key == keys[i].key; j++) {
            st->bytes += keys[j].bytes;
            st->count++;
            if (keys[j].finding != UINT32_MAX) {
                st->flagged++;
                st->flagged_bytes += keys[j].bytes;
                if (!st->finding)
                    st->finding = &r->check->findings[keys[j].finding];
            }
        }
        if (inside_lines(s, keys + i, j - i, st))
            goto out;
        i = j;
    }
    qsort(r->sites, r->nsites, sizeof *r->sites, cmp_site);
    if (!r->tensors)
        site_findings(s, r);
    rc = 0;
out:
    free(keys);
    vt__u64map_free(&by_addr);
    vt__u64map_free(&owner);
    vt__u64map_free(&tids);
    vt__u64map_free(&by_stack);
    return rc;
}

/* ---- what would have fit ------------------------------------------------ */

/* The index of the event with sequence number seq (or the last before it). */
static size_t event_of_seq(const vt__snapshot_data *s, uint64_t seq)
{
    size_t lo;   /* the first event after seq */
    VT__PARTITION_POINT(s->nevents, i, s->events[i].seq <= seq, lo);
    return lo ? lo - 1 : 0;
}

/* The allocations to free earlier: `gc` those alive at the OOM that only a
 * reference cycle holds, freed just before it; else every storage the
 * checker flags with a last use, freed right after it. */
static size_t moved_frees(const vt__snapshot_data *s, const vt__timeline *tl, const vt__oom_report *r,
                          bool gc, vt__replay_free_at *out, uint64_t *bytes)
{
    size_t n = 0;
    *bytes = 0;
    if (!r->check)
        return 0;
    for (size_t i = 0; i < r->check->nfindings; i++) {
        const vt__check_finding *f = &r->check->findings[i];
        if (f->external || f->before_window || f->nallocs != 1 || !f->last_use_seq || !f->alloc_seq
            || (f->rule & VT_CHECK_RULE_PINNED) || !(f->rule & (VT_CHECK_RULE_LINGER |
                                                               VT_CHECK_RULE_CYCLE |
                                                               VT_CHECK_RULE_TAPE)))
            continue;
        size_t a = event_of_seq(s, f->alloc_seq);
        if (s->events[a].kind != VT_EV_ALLOC || s->events[a].seq != f->alloc_seq)
            continue;
        size_t at;
        if (gc) {
            bool cycle = (f->rule & VT_CHECK_RULE_CYCLE) ? f->gc_seq > r->seq
                                                         : f->npaths && f->paths[0].cycle;
            if (!cycle || !flagged_at(f, r->seq))
                continue;
            at = r->event ? r->event - 1 : 0;
        } else {
            at = event_of_seq(s, f->last_use_seq);
        }
        if (at < a)
            continue;
        out[n++] = (vt__replay_free_at){ .alloc_event = a, .at_event = at };
        *bytes += f->bytes;
    }
    (void)tl;
    return n;
}

static void fill_fix(vt__oom_fix *fx, const vt__replay_result *res, int status, const char *err)
{
    if (status) {
        fx->failed = true;
        snprintf(fx->err, sizeof fx->err, "%s", err && *err ? err : "the replay failed");
        return;
    }
    fx->peak_reserved = vt__replay_peak_reserved(res);
    fx->fits = !res->oom.happened;
    fx->oom_event = res->oom.happened ? res->oom.event_index : SIZE_MAX;
}

static int cmp_fix(const void *a, const void *b)
{
    const vt__oom_fix *x = a, *y = b;
    int fx = x->failed ? 2 : !x->fits, fy = y->failed ? 2 : !y->fits;
    if (fx != fy)
        return fx - fy;
    if ((x->kind == VT__OOM_FIX_DEVICE) != (y->kind == VT__OOM_FIX_DEVICE))
        return x->kind == VT__OOM_FIX_DEVICE ? 1 : -1;   /* a bigger device last */
    return vt__order(x->peak_reserved, y->peak_reserved);
}

/* The recorded value of a key in the replayed settings text, or "". */
static void conf_value(const char *conf, const char *key, char *out, size_t len)
{
    out[0] = '\0';
    const char *p = strstr(conf, key);
    if (!p || p[strlen(key)] != ':')
        return;
    p += strlen(key) + 1;
    size_t n = strcspn(p, ",");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
}

#define MAX_CANDIDATES 16
#define PROBES 4           /* capacities replayed at once by the device search */

static int replays(const vt__snapshot_data *s, const vt__timeline *tl, vt__oom_report *r,
                   unsigned jobs)
{
    vt__replay_options opts[MAX_CANDIDATES];
    vt__oom_fix cand[MAX_CANDIDATES];
    vt__replay_result *res = calloc(MAX_CANDIDATES, sizeof *res);
    int status[MAX_CANDIDATES];
    char (*errs)[256] = calloc(MAX_CANDIDATES, sizeof *errs);
    size_t nmax = r->check ? r->check->nfindings : 0;
    vt__replay_free_at *flagged = calloc(nmax ? nmax : 1, sizeof *flagged);
    vt__replay_free_at *cycles = calloc(nmax ? nmax : 1, sizeof *cycles);
    int rc = -ENOMEM;
    if (!res || !errs || !flagged || !cycles)
        goto out;
    memset(opts, 0, sizeof opts);
    memset(cand, 0, sizeof cand);
    uint64_t cap = r->capacity ? r->capacity : VT_REPLAY_UNLIMITED;

    /* 0: the recorded settings at the capacity; 1: the same, unlimited */
    size_t n = 0;
    opts[n++] = (vt__replay_options){ .capacity = cap };
    opts[n++] = (vt__replay_options){ .capacity = VT_REPLAY_UNLIMITED };
    size_t first = n;
    char recorded[512];
    vt__replay_recorded_conf(s, recorded, sizeof recorded);
    char have[64];
    conf_value(recorded, "expandable_segments", have, sizeof have);
    bool expandable_on = !strcmp(have, "1") || !strcasecmp(have, "true");
    if (!expandable_on)
        snprintf(cand[n++].conf, sizeof cand[0].conf, "expandable_segments:True");
    /* blocks at least this large are never split: powers of two from the
     * request's down (PyTorch takes no value under 20 MiB) */
    uint64_t req_mib = (r->size + MIB - 1) / MIB, p2 = 32;
    while (p2 * 2 <= req_mib)
        p2 *= 2;
    uint64_t splits[3] = { p2 >= 64 ? p2 / 2 : 32, p2 > 32 ? p2 : 64, p2 > 32 ? p2 * 2 : 128 };
    for (int i = 0; i < 3; i++)
        snprintf(cand[n++].conf, sizeof cand[0].conf, "max_split_size_mb:%" PRIu64, splits[i]);
    snprintf(cand[n++].conf, sizeof cand[0].conf, "garbage_collection_threshold:0.6");
    snprintf(cand[n++].conf, sizeof cand[0].conf, "roundup_power2_divisions:4");
    snprintf(cand[n++].conf, sizeof cand[0].conf, "roundup_power2_divisions:8");
    for (size_t i = first; i < n; i++) {
        cand[i].kind = VT__OOM_FIX_SETTING;
        opts[i] = (vt__replay_options){ .conf = cand[i].conf, .capacity = cap };
    }
    uint64_t fb = 0, cb = 0;
    size_t nh = r->held_prev_count;
    const vt__replay_free_at *held = r->held_frees;
    size_t nf = moved_frees(s, tl, r, false, flagged, &fb);
    size_t nc = moved_frees(s, tl, r, true, cycles, &cb);
    if (nf) {
        cand[n] = (vt__oom_fix){ .kind = VT__OOM_FIX_FREE_FLAGGED, .storages = (uint32_t)nf,
                                 .storage_bytes = fb };
        snprintf(cand[n].conf, sizeof cand[0].conf,
                 "free the %zu storage%s check flags at their last use", nf, nf == 1 ? "" : "s");
        opts[n++] = (vt__replay_options){ .capacity = cap, .free_at = flagged, .nfree_at = nf };
    }
    if (nc) {
        cand[n] = (vt__oom_fix){ .kind = VT__OOM_FIX_GC, .storages = (uint32_t)nc,
                                 .storage_bytes = cb };
        snprintf(cand[n].conf, sizeof cand[0].conf,
                 "gc.collect() before the retry (%zu storage%s held by reference cycles)", nc,
                 nc == 1 ? "" : "s");
        opts[n++] = (vt__replay_options){ .capacity = cap, .free_at = cycles, .nfree_at = nc };
    }
    if (r->library && r->cache_free) {
        char b1[32];
        cand[n] = (vt__oom_fix){ .kind = VT__OOM_FIX_EMPTY_CACHE,
                                 .storage_bytes = r->cache_free };
        snprintf(cand[n].conf, sizeof cand[0].conf,
                 "torch.cuda.empty_cache() before it (the %s free in PyTorch's cache given back"
                 " to the device)", vt__fmt_bytes(r->cache_free, b1));
        opts[n++] = (vt__replay_options){ .capacity = cap, .empty_cache_at = r->event + 1 };
    }
    /* not where the only pool is the one the request was asked into: that
     * graph cannot be deleted before its own capture */
    bool only_its_own = r->in_pool && r->pools.pools == 1 && r->pools.ids[0] == r->in_pool;
    if (r->pools.whole && !r->library && !only_its_own) {
        /* a CUDA graph's pool is PyTorch's to give back only once the graph
         * is gone: then the retry inside the failed request releases it */
        char b1[32];
        cand[n] = (vt__oom_fix){ .kind = VT__OOM_FIX_GRAPHS_DELETED,
                                 .storage_bytes = r->pools.whole };
        if (r->pools.compiled)
            snprintf(cand[n].conf, sizeof cand[0].conf,
                     "torch._dynamo.reset() before it (torch.compile's CUDA graphs released: %s "
                     "of their pool, in wholly free segments, given back at the retry)",
                     vt__fmt_bytes(r->pools.whole, b1));
        else
            snprintf(cand[n].conf, sizeof cand[0].conf,
                     "delete the CUDA graph%s before it (%s of %s pool%s, in wholly free "
                     "segments, given back at the retry)", r->pools.pools == 1 ? "" : "s",
                     vt__fmt_bytes(r->pools.whole, b1),
                     r->pools.pools == 1 ? "its" : "their", r->pools.pools == 1 ? "" : "s");
        opts[n++] = (vt__replay_options){ .capacity = cap, .graphs_deleted_at = r->event + 1 };
    }
    if (nh) {
        char b1[32];
        cand[n] = (vt__oom_fix){ .kind = VT__OOM_FIX_RETRY_OUTSIDE, .storages = (uint32_t)nh,
                                 .storage_bytes = r->held_prev_bytes };
        snprintf(cand[n].conf, sizeof cand[0].conf,
                 r->held_in_handler
                     ? "retry after the except clause (the %s %s made, freed when it ran out)"
                     : "free the %s %s made when it ran out",
                 vt__fmt_bytes(r->held_prev_bytes, b1), r->failed_call_name);
        opts[n++] = (vt__replay_options){ .capacity = cap, .free_at = held, .nfree_at = nh };
    }
    /* every replay lets the OOMs before this one fail as the program saw
     * them (it caught them) */
    for (size_t i = 0; i < n; i++)
        opts[i].caught_before = r->event;
    r->nreplays += n;
    if (vt__replay_sweep(s, opts, n, jobs, res, status, errs)) {
        snprintf(r->replay_err, sizeof r->replay_err, "cannot start the replays");
        rc = 0;
        goto out;
    }
    if (status[0]) {
        snprintf(r->replay_err, sizeof r->replay_err, "%s", errs[0]);
        rc = 0;
        goto out;
    }
    r->replayed = true;
    snprintf(r->baseline_conf, sizeof r->baseline_conf, "%s", res[0].conf);
    r->rules = vt__replay_rules_name(res[0].rules);
    /* running out later than the program did would be kinder than the
     * device was: then no candidate is shown to fit by its replay */
    r->reproduced = res[0].oom.happened && res[0].oom.event_index <= r->event
                    && res[0].oom.device == r->device;
    r->baseline_oom_event = res[0].oom.happened ? res[0].oom.event_index : SIZE_MAX;
    r->events_lost = res[0].events_lost;
    r->baseline_peak = vt__replay_peak_reserved(&res[0]);
    for (size_t i = first; i < n; i++) {
        cand[i].capacity = cap;
        fill_fix(&cand[i], &res[i], status[i], errs[i]);
    }

    /* a bigger device: the smallest capacity the recorded settings fit in,
     * searched between the capacity (too small: the replay reproduced the
     * OOM) and what the unlimited replay held at its highest (its segments
     * and the libraries' own memory outside them, which a capacity must
     * hold too), from its peak allocated (no capacity below it can fit) */
    uint64_t unl = 0, unl_alloc = 0;
    for (size_t d = 0; !status[1] && d < res[1].ndevices; d++) {
        if (res[1].devices[d].peak_held > unl)
            unl = res[1].devices[d].peak_held;
        if (res[1].devices[d].peak_allocated > unl_alloc)
            unl_alloc = res[1].devices[d].peak_allocated;
    }
    vt__oom_fix dev = { .kind = VT__OOM_FIX_DEVICE };
    if (unl && r->capacity && r->reproduced) {
        const uint64_t G = 2 * MIB;
        uint64_t lo = r->capacity, hi = unl > r->capacity ? unl : r->capacity + G;
        /* a library's request is not held by the unlimited replay (it failed
         * in the program): a device must hold it beside the rest */
        if (r->library && hi < unl + r->size)
            hi = unl + r->size;
        hi = (hi + G - 1) / G * G;
        uint64_t best = 0, best_peak = 0;
        for (int round = 0; round < 2 && (round ? hi > lo + G : hi > lo); round++) {
            vt__replay_options po[PROBES];
            uint64_t pc[PROBES];
            size_t np = 0;
            /* first: the floor, two between it and the peak, the peak;
             * then three between the largest that failed and the smallest
             * that fitted (2 MiB apart at least) */
            uint64_t from = round == 0 && unl_alloc > lo ? unl_alloc : lo;
            for (int k = 0; k < PROBES; k++) {
                uint64_t c = round == 0 ? (k == PROBES - 1 ? hi : from + (hi - from) * (uint64_t)k / (PROBES - 1))
                                        : lo + (hi - lo) * (uint64_t)(k + 1) / PROBES;
                c = (c + G - 1) / G * G;
                if (c <= lo || (np && c <= pc[np - 1]) || (round && c >= hi) || c > hi)
                    continue;
                pc[np] = c;
                po[np++] = (vt__replay_options){ .capacity = c, .caught_before = r->event };
            }
            if (!np)
                break;
            r->nreplays += np;
            if (vt__replay_sweep(s, po, np, jobs, res, status, errs))
                break;
            uint64_t prev_fail = lo;
            for (size_t k = 0; k < np; k++) {
                if (status[k])
                    continue;
                if (!res[k].oom.happened) {
                    if (!best || pc[k] < best) {
                        best = pc[k];
                        best_peak = vt__replay_peak_reserved(&res[k]);
                    }
                    break;
                }
                prev_fail = pc[k];
            }
            if (!best)
                break;
            lo = prev_fail;
            hi = best;
        }
        if (best) {
            r->min_capacity = best;
            dev.capacity = best;
            dev.peak_reserved = best_peak;
            dev.fits = true;
            char b1[32], b2[32];
            uint64_t total = best + (r->total ? r->other : 0);
            vt__fmt_bytes(total, b1);
            /* a few MiB more than the device rounds to its own size ("a
             * device with 1 GiB or more" of a 1 GiB device): in MiB then */
            if (r->total && !strcmp(b1, vt__fmt_bytes(r->total, b2)))
                snprintf(b1, sizeof b1, "%" PRIu64 " MiB", (uint64_t)((total + MIB - 1) / MIB));
            snprintf(dev.conf, sizeof dev.conf, "a device with %s or more%s", b1,
                     r->total && r->other ? " (for this process and the others)" : "");
        }
    }
    if (!dev.fits) {
        dev.failed = true;
        snprintf(dev.conf, sizeof dev.conf, "a bigger device");
        snprintf(dev.err, sizeof dev.err, "no capacity was found that fits");
    }
    cand[n++] = dev;

    r->fixes = calloc(n - first, sizeof *r->fixes);
    if (!r->fixes)
        goto out;
    memcpy(r->fixes, &cand[first], (n - first) * sizeof *r->fixes);
    r->nfixes = n - first;
    qsort(r->fixes, r->nfixes, sizeof *r->fixes, cmp_fix);
    rc = 0;
out:
    free(res);
    free(errs);
    free(flagged);
    free(cycles);
    return rc;
}

/* ---- the whole -------------------------------------------------------- */

int vt__oom_explain(const vt__snapshot_data *s, const vt__timeline *tl, const vt__oom_options *opt,
                    vt__oom_report **out, char *err, size_t errlen)
{
    static const vt__oom_options defaults = { 0 };
    if (!opt)
        opt = &defaults;
    *out = NULL;
    size_t noom = 0, last = SIZE_MAX, last_alloc = SIZE_MAX;
    for (size_t i = 0; i < s->nevents; i++) {
        if (s->events[i].kind == VT_EV_OOM) {
            noom++;
            last = i;
        }
        if (s->events[i].kind == VT_EV_ALLOC)
            last_alloc = i;
    }
    if (!noom) {
        snprintf(err, errlen, "the recording holds no out-of-memory event: the program did not "
                              "run out of device memory while it was recorded");
        return -ENOENT;
    }
    /* which: by default the OOM the program ended with (the last, nothing
     * allocated after it: the earlier ones were caught, a batch-size search
     * or a retry), else the first */
    size_t which = opt->which;
    bool ended_with_it = last_alloc == SIZE_MAX || last_alloc < last;
    if (which == VT__OOM_LAST || (!which && noom > 1 && ended_with_it))
        which = noom;
    else if (!which)
        which = 1;
    if (which > noom) {
        snprintf(err, errlen, "the recording holds %zu out-of-memory event%s, not %zu", noom,
                 noom == 1 ? "" : "s", which);
        return -ERANGE;
    }
    vt__oom_report *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->prev_event = SIZE_MAX;
    for (size_t i = 0, k = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_OOM && ++k == which) {
            r->event = i;
            break;
        } else if (s->events[i].kind == VT_EV_OOM) {
            r->prev_event = i;
        }
    const vt__event *e = &s->events[r->event];
    r->noom = noom;
    r->index = which;
    if (r->prev_event != SIZE_MAX) {
        const vt__event *p = &s->events[r->prev_event];
        r->prev_size = p->req_size ? p->req_size : p->size;
    }
    for (size_t i = r->event + 1; i < s->nevents; i++)
        r->allocs_after += s->events[i].kind == VT_EV_ALLOC;
    r->device = e->device;
    r->stream = e->stream;
    r->size = e->req_size ? e->req_size : e->size;
    /* the pool that serves it: PyTorch's cache and vramtrace's alike */
    r->pool = r->size <= VT_POOL_SMALL_MAX_REQUEST ? VT_POOL_SMALL : VT_POOL_LARGE;
    r->seq = e->seq;
    r->time_ns = e->time_ns;
    r->stack = e->stack;
    r->device_free = e->aux;
    r->baseline_oom_event = SIZE_MAX;
    r->library = vt__snapshot_oom_outside_framework(s, e);
    r->in_pool = r->library ? 0 : VT_OOM_POOL(e->addr);   /* asked into a private pool */
    r->pytorch = (s->meta.flags & VT_META_POOL_OBSERVED)
                 || !strncmp(vt__snapshot_string(s, s->meta.library_version), "pytorch", 7);
    const vt__snap_device *di = vt__report_device(s, r->device);
    r->total = di ? di->total_bytes : 0;

    int rc = device_state(s, tl, r);
    if (rc == 0)
        rc = vt__oom_graph_pools(s, tl, r->device, r->event, &r->pools);
    if (rc)
        goto fail;
    /* the request's pool among them (none before its first segment): where
     * it began, and what it is */
    size_t in = pool_index(&r->pools, r->in_pool, false);
    r->in_pool_stack = r->in_pool && in < r->pools.pools ? r->pools.stacks[in] : 0;
    r->in_pool_kind = pool_kind(s, r->in_pool, r->in_pool_stack);
    uint64_t held = r->reserved + r->outside_reserved + r->passthrough;
    if (r->total) {
        r->other = r->total > held + r->device_free ? r->total - held - r->device_free : 0;
        r->capacity = r->total - r->other;
    } else {
        r->capacity = held + r->device_free;
    }
    /* the checker's storage rules need track()'s tensors; its native rules
     * name call sites, not storages to free: they annotate the lines */
    bool tensors = false;
    for (size_t i = 0; i < s->nevents && !tensors; i++)
        tensors = s->events[i].kind == VT_EV_TENSOR_NEW;
    char cerr[256];
    vt__check_report *rep = NULL;
    r->tensors = tensors;
    if (vt__check_run(s, NULL, &rep, cerr, sizeof cerr) == 0)
        r->check = rep;
    if ((rc = alive_sites(s, tl, r)))
        goto fail;
    if ((rc = vt__oom_held_since_caught(s, tl, r)))
        goto fail;
    if (!opt->no_replay) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned jobs = opt->jobs ? opt->jobs : cpus > 0 ? (unsigned)cpus : 1;
        if ((rc = replays(s, tl, r, jobs)))
            goto fail;
    } else {
        snprintf(r->replay_err, sizeof r->replay_err, "not replayed (--no-replay)");
    }
    *out = r;
    return 0;
fail:
    vt__oom_free(r);
    snprintf(err, errlen, "out of memory");
    return rc;
}

void vt__oom_free(vt__oom_report *r)
{
    if (!r)
        return;
    free(r->groups);
    free(r->sites);
    free(r->fixes);
    free(r->held_frees);
    vt__check_report_free(r->check);
    free(r);
}
