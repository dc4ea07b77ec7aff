/*
 * alloc/replay/replay_torch.c - a recording replayed under PyTorch's caching
 * allocator's rules: a model of its state (pools, blocks, segments) driven by
 * the recorded allocations and frees.
 *
 * What is modelled, from PyTorch's c10/cuda/CUDACachingAllocator.cpp
 * (DeviceCachingAllocator: malloc, alloc_found_block, free, free_block,
 * try_merge_blocks, get_free_block, should_split, round_size,
 * roundup_power2_next_division, get_allocation_size, alloc_block,
 * garbage_collect_cached_blocks, release_available_cached_blocks,
 * release_cached_blocks, release_blocks, synchronize_and_free_events, and
 * for expandable segments find_expandable_block, map_block, unmap_block,
 * try_allocate_expandable_block, ExpandableSegment::map/unmap) and
 * c10/cuda/CUDAAllocatorConfig.cpp (the PYTORCH_CUDA_ALLOC_CONF keys and
 * roundup_power2_divisions' per-size lookup). Read, not copied:
 *  - sizes: a request rounds up to a 512-byte multiple (512 at least), or,
 *    with roundup_power2_divisions N (N > 1 and the size above 512*N), to the
 *    next of N equal steps between two powers of two;
 *  - pools: rounded sizes up to 1 MiB are small (2 MiB segments), larger
 *    ones large (a 20 MiB segment below 10 MiB, else the size rounded up to
 *    2 MiB); free blocks are ordered by (stream, size, address) and a request
 *    takes the smallest one of its own stream and pool that is large enough;
 *  - splits: a small block splits when 512 bytes or more would remain, a
 *    large one when more than 1 MiB would remain and the request is below
 *    max_split_size (expandable segments split like small blocks);
 *  - max_split_size_mb: a cached block at or over it never serves a request
 *    below it, and serves a larger request only when it is less than 20 MiB
 *    over it;
 *  - a freed block merges with free neighbours of its segment; a block freed
 *    while used on other streams comes back when their events complete: the
 *    recording's FREE_COMPLETED says when (or earlier, when the model
 *    synchronizes all events before releasing its cache);
 *  - no cached block fits: with a per-process memory fraction and
 *    garbage_collection_threshold, unsplit large cached blocks are released
 *    by age (how many searches of their pool they sat through) until
 *    reserved is under the threshold; then a new segment; on failure (the
 *    fraction's limit or the device's capacity) cached oversize blocks are
 *    released and it tries again, then every unsplit cached block (after all
 *    pending frees complete) and a last try; then out of memory;
 *  - expandable segments: one segment of address space per stream and pool
 *    (1 1/8 of the device), mapped in 2 MiB (small) or 20 MiB (large) pages at
 *    the lowest address that fits; emptying the cache unmaps the free pages.
 * Not modelled: CUDA graph private pools, free-memory callbacks, IPC, and the
 * roundup_power2_divisions table form ("[256:1,>:4]"): one number only.
 *
 * Which events are PyTorch's: in a recording that observed PyTorch's
 * allocator (VT_META_POOL_OBSERVED) the ALLOCs flagged VT_ALLOC_POOL_BLOCK
 * are its requests, and a SEGMENT_ALLOC is its when the next allocation on
 * that device is one of its blocks; the other device allocations (a
 * library's own cudaMalloc, served by vramtrace's cache) hold device memory
 * outside the pool, as recorded. In an imported PyTorch snapshot every event
 * is PyTorch's; an emptied cache is not an event there, so a run of segment
 * frees that no allocation explains is taken as one. Otherwise (a vramtrace
 * recording replayed under PyTorch's rules) every ALLOC is a request.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grow.h"
#include "replay_internal.h"

#define KB512 512ull
#define SMALL_SIZE (1ull << 20)         /* largest small request */
#define SMALL_BUFFER (2ull << 20)       /* small segments, small pages */
#define LARGE_BUFFER (20ull << 20)      /* segments of 1-10 MiB requests, large pages */
#define MIN_LARGE_ALLOC (10ull << 20)
#define ROUND_LARGE (2ull << 20)
#define NO_LIMIT UINT64_MAX

typedef struct tseg {                  /* an expandable segment's address space */
    uint64_t base, size, page;
} tseg;

typedef struct tblock {
    uint64_t addr, size;
    uint64_t req;                      /* as asked (allocated blocks) */
    uint64_t stream;
    struct tblock *prev, *next;        /* neighbours in the segment */
    tseg *seg;                         /* expandable segment, or NULL */
    int64_t gc_base;                   /* pool's search count when cached */
    uint64_t serial;                   /* which block this is (never reused) */
    uint8_t pool;                      /* 0 small, 1 large */
    bool allocated, pending, mapped;
} tblock;

typedef struct tset {                  /* blocks ordered by (stream, size, addr) */
    tblock **v;
    size_t n, cap;
    bool by_addr;                      /* (stream, addr): the unmapped ranges */
} tset;

typedef struct tconf {
    uint64_t max_split;                /* NO_LIMIT: unlimited */
    uint64_t max_nonsplit_round;       /* oversize blocks serve requests this far below */
    unsigned divisions;                /* roundup_power2_divisions, 0/1: none */
    double gc_threshold;
    double fraction;                   /* per-process memory fraction, 0: none */
    bool expandable;
    bool uncached;                     /* cache:0 (PYTORCH_NO_CUDA_MEMORY_CACHING) */
} tconf;

typedef struct tdev {
    tset free[2], unmapped[2];
    int64_t searches[2];               /* get_free_block calls (the GC's clock) */
    tblock **pending;                  /* freed, waiting for other streams */
    size_t npending, cappending;
    tseg **segs;
    size_t nsegs, capsegs;
    uint64_t capacity, allowed;        /* allowed: NO_LIMIT without a fraction */
    uint64_t reserved, allocated, requested, live;
    uint64_t outside;                  /* device memory held outside the pool */
    uint64_t peak_reserved, peak_allocated;
    uint64_t next_addr;
} tdev;

typedef struct tstate {
    tconf c;
    tdev dev[VT_REPLAY_MAX_DEVICES];
    vt_replay_result *r;
    size_t now;                        /* event being replayed */
    uint64_t now_ns;
    bool want_curve, failed;
    uint64_t *segs;                    /* segment allocations (vt__seg_code) */
    size_t nsegs, capsegs;
    size_t capcurve;
    uint64_t serials;
} tstate;

/* ---- ordered sets -------------------------------------------------------- */

static int key_cmp(const tset *s, const tblock *a, uint64_t stream, uint64_t size, uint64_t addr)
{
    if (a->stream != stream)
        return a->stream < stream ? -1 : 1;
    if (!s->by_addr && a->size != size)
        return a->size < size ? -1 : 1;
    return a->addr < addr ? -1 : a->addr > addr;
}

static size_t lower_bound(const tset *s, uint64_t stream, uint64_t size, uint64_t addr)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(s, s->v[mid], stream, size, addr) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int set_insert(tstate *t, tset *s, tblock *b)
{
    if (vt__grow_from((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, 64)) {
        t->failed = true;
        return -ENOMEM;
    }
    size_t i = lower_bound(s, b->stream, b->size, b->addr);
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
    s->v[i] = b;
    s->n++;
    return 0;
}

static void set_remove(tset *s, tblock *b)
{
    size_t i = lower_bound(s, b->stream, b->size, b->addr);
    if (i < s->n && s->v[i] == b) {
        memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
        s->n--;
    }
}

/* ---- books --------------------------------------------------------------- */

static void note_reserved(tstate *t, int d, int64_t delta, bool is_alloc)
{
    tdev *v = &t->dev[d];
    v->reserved = (uint64_t)((int64_t)v->reserved + delta);
    vt_replay_device *o = &t->r->devices[d];
    if (is_alloc) {
        if (vt__grow_from((void **)&t->segs, &t->capsegs, t->nsegs + 1, sizeof *t->segs, 256))
            t->failed = true;
        else
            t->segs[t->nsegs++] = vt__seg_code(false, d, (uint64_t)delta);
    }
    if (v->reserved > v->peak_reserved) {
        v->peak_reserved = v->reserved;
        o->allocated_at_peak = v->allocated;
        o->peak_event = t->now;
    }
}

/* the reserved curve (options.curve) */
static void curve_point(tstate *t, int d)
{
    vt_replay_result *r = t->r;
    if (!t->want_curve)
        return;
    if (vt__grow_from((void **)&r->curve, &t->capcurve, r->ncurve + 1, sizeof *r->curve, 1024)) {
        t->failed = true;
        return;
    }
    r->curve[r->ncurve++] = (vt_replay_point){ .event = t->now, .time_ns = t->now_ns,
                                               .reserved = t->dev[d].reserved,
                                               .device = (int8_t)d };
}

static tblock *new_block(tstate *t, uint64_t addr, uint64_t size, uint64_t stream, int pool)
{
    tblock *b = calloc(1, sizeof *b);
    if (!b) {
        t->failed = true;
        return NULL;
    }
    b->serial = ++t->serials;
    b->addr = addr;
    b->size = size;
    b->stream = stream;
    b->pool = (uint8_t)pool;
    b->mapped = true;
    return b;
}

static int cache_block(tstate *t, int d, tblock *b)   /* insert_into_blocks */
{
    b->gc_base = t->dev[d].searches[b->pool];
    return set_insert(t, &t->dev[d].free[b->pool], b);
}

/* ---- sizes --------------------------------------------------------------- */

static uint64_t pow2_floor(uint64_t x)
{
    return x ? 1ull << (63 - __builtin_clzll(x)) : 0;
}

static uint64_t round_size(const tconf *c, uint64_t size)
{
    if (size < KB512)
        return KB512;
    unsigned div = c->divisions;
    if (div > 1 && size > KB512 * div) {
        if ((size & (size - 1)) == 0)
            return size;
        uint64_t floor2 = pow2_floor(size);
        uint64_t step = floor2 >> (63 - __builtin_clzll(div));
        if (step == 0)
            return floor2 << 1;
        uint64_t down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return (size + KB512 - 1) / KB512 * KB512;
}

static uint64_t allocation_size(uint64_t size)
{
    if (size <= SMALL_SIZE)
        return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC)
        return LARGE_BUFFER;
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

/* ---- segments ------------------------------------------------------------ */

static uint64_t take_address(tdev *v, uint64_t size)
{
    uint64_t a = v->next_addr;
    v->next_addr += (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE + ROUND_LARGE;
    return a;
}

/* Would the device give `size` more bytes? (cudaMalloc / cuMemCreate) */
static bool device_has(const tdev *v, uint64_t size)
{
    return v->capacity == NO_LIMIT || v->reserved + v->outside + size <= v->capacity;
}

static void release_block(tstate *t, int d, tblock *b)
{
    tdev *v = &t->dev[d];
    set_remove(&v->free[b->pool], b);
    note_reserved(t, d, -(int64_t)b->size, false);
    t->r->devices[d].segment_frees++;
    t->r->devices[d].device_frees++;
    curve_point(t, d);
    free(b);
}

/* try_merge_blocks: `src` into `dst` when both are free alike. */
static uint64_t try_merge(tstate *t, int d, tblock *dst, tblock *src)
{
    if (!src || src->allocated || src->pending || dst->mapped != src->mapped)
        return 0;
    tdev *v = &t->dev[d];
    set_remove(src->mapped ? &v->free[src->pool] : &v->unmapped[src->pool], src);
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    dst->size += src->size;
    uint64_t n = src->size;
    free(src);
    return n;
}

static void free_block(tstate *t, int d, tblock *b)
{
    b->allocated = false;
    b->pending = false;
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    cache_block(t, d, b);
}

/* map_block: back [b, b + size) with pages; false when the device has none. */
static bool map_block(tstate *t, int d, tblock *b, uint64_t size)
{
    tdev *v = &t->dev[d];
    tseg *s = b->seg;
    uint64_t begin = (b->addr - s->base) / s->page;
    uint64_t end = (b->addr + size - s->base + s->page - 1) / s->page;
    uint64_t bytes = (end - begin) * s->page;
    if (!device_has(v, bytes)) {
        t->r->devices[d].device_failed_mallocs++;
        return false;
    }
    set_remove(&v->unmapped[b->pool], b);
    b->mapped = true;
    if (bytes < b->size) {
        tblock *rest = new_block(t, b->addr + bytes, b->size - bytes, b->stream, b->pool);
        if (!rest)
            return false;
        rest->mapped = false;
        rest->seg = s;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        set_insert(t, &v->unmapped[b->pool], rest);
        b->size = bytes;
    }
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    cache_block(t, d, b);
    note_reserved(t, d, (int64_t)bytes, true);
    t->r->devices[d].device_maps += bytes / s->page;
    t->r->devices[d].device_mallocs++;
    t->r->devices[d].segment_allocs++;
    curve_point(t, d);
    return true;
}

static bool allocatable(const tblock *b)
{
    return b && !b->allocated && !b->pending;
}

static tblock *find_expandable_block(tstate *t, int d, uint64_t stream, int pool, uint64_t size)
{
    tdev *v = &t->dev[d];
    tset *u = &v->unmapped[pool];
    for (size_t i = lower_bound(u, stream, 0, 0); i < u->n && u->v[i]->stream == stream; i++) {
        tblock *c = u->v[i];
        if (allocatable(c->prev))
            c = c->prev;
        uint64_t bytes = 0;
        for (tblock *x = c; bytes < size && allocatable(x); x = x->next)
            bytes += x->size;
        if (bytes >= size)
            return c;
    }
    /* a new segment: address space for 1 1/8 of the device */
    uint64_t page = pool ? LARGE_BUFFER : SMALL_BUFFER;
    uint64_t space = v->capacity == NO_LIMIT ? 1ull << 46 : v->capacity + v->capacity / 8;
    space = (space + page - 1) / page * page;
    if (space < size)
        space = (size + page - 1) / page * page;
    tseg *s = calloc(1, sizeof *s);
    if (!s || vt__grow_from((void **)&v->segs, &v->capsegs, v->nsegs + 1, sizeof *v->segs, 8)) {
        free(s);
        t->failed = true;
        return NULL;
    }
    v->next_addr = (v->next_addr + page - 1) / page * page;
    *s = (tseg){ .base = take_address(v, space), .size = space, .page = page };
    v->segs[v->nsegs++] = s;
    tblock *b = new_block(t, s->base, space, stream, pool);
    if (!b)
        return NULL;
    b->mapped = false;
    b->seg = s;
    set_insert(t, u, b);
    return b;
}

static tblock *try_allocate_expandable(tstate *t, int d, uint64_t stream, int pool, uint64_t size)
{
    tblock *c = find_expandable_block(t, d, stream, pool, size);
    if (!c)
        return NULL;
    if (!c->mapped && !map_block(t, d, c, c->size < size ? c->size : size))
        return NULL;
    while (c->size < size) {
        tblock *n = c->next;   /* unmapped: map what is missing, merged with c */
        uint64_t missing = size - c->size;
        if (!n || !map_block(t, d, n, missing < n->size ? missing : n->size))
            return NULL;
        c = n;
    }
    set_remove(&t->dev[d].free[pool], c);
    return c;
}

/* unmap_block: give back the whole pages inside free block b. */
static void unmap_block(tstate *t, int d, tblock *b)
{
    tdev *v = &t->dev[d];
    tseg *s = b->seg;
    uint64_t begin = (b->addr - s->base + s->page - 1) / s->page;
    uint64_t end = (b->addr + b->size - s->base) / s->page;
    if (begin >= end)
        return;
    set_remove(&v->free[b->pool], b);
    uint64_t lo = s->base + begin * s->page, hi = s->base + end * s->page;
    if (lo > b->addr) {
        tblock *x = new_block(t, b->addr, lo - b->addr, b->stream, b->pool);
        if (!x)
            return;
        x->seg = s;
        x->prev = b->prev;
        x->next = b;
        if (b->prev)
            b->prev->next = x;
        b->prev = x;
        cache_block(t, d, x);
    }
    if (hi < b->addr + b->size) {
        tblock *x = new_block(t, hi, b->addr + b->size - hi, b->stream, b->pool);
        if (!x)
            return;
        x->seg = s;
        x->prev = b;
        x->next = b->next;
        if (b->next)
            b->next->prev = x;
        b->next = x;
        cache_block(t, d, x);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->mapped = false;
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    set_insert(t, &v->unmapped[b->pool], b);
    note_reserved(t, d, -(int64_t)(hi - lo), false);
    t->r->devices[d].device_unmaps += (hi - lo) / s->page;
    t->r->devices[d].device_frees++;
    t->r->devices[d].segment_frees++;
    curve_point(t, d);
}

static void release_expandable_segment(tstate *t, int d, tblock *b)
{
    tdev *v = &t->dev[d];
    set_remove(&v->unmapped[b->pool], b);
    for (size_t i = 0; i < v->nsegs; i++)
        if (v->segs[i] == b->seg) {
            v->segs[i] = v->segs[--v->nsegs];
            break;
        }
    free(b->seg);
    free(b);
}

static void release_blocks(tstate *t, int d, int pool)
{
    tset *s = &t->dev[d].free[pool];
    size_t n = s->n;
    tblock **copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) {
        t->failed = true;
        return;
    }
    memcpy(copy, s->v, n * sizeof *copy);
    size_t nunmap = 0;
    for (size_t i = 0; i < n; i++) {
        tblock *b = copy[i];
        if (b->seg)
            copy[nunmap++] = b;   /* after the others: unmapping changes the set */
        else if (!b->prev && !b->next)
            release_block(t, d, b);
    }
    for (size_t i = 0; i < nunmap; i++) {
        tblock *b = copy[i];
        unmap_block(t, d, b);
        if (!b->mapped && !b->prev && !b->next)
            release_expandable_segment(t, d, b);
    }
    free(copy);
}

/* synchronize_and_free_events, then every unsplit cached block back. */
static void release_cached_blocks(tstate *t, int d)
{
    tdev *v = &t->dev[d];
    t->r->devices[d].sync_all++;
    for (size_t i = 0; i < v->npending; i++)
        if (v->pending[i])
            free_block(t, d, v->pending[i]);
    v->npending = 0;
    release_blocks(t, d, 1);
    release_blocks(t, d, 0);
}

/* ---- malloc -------------------------------------------------------------- */

typedef struct req {
    uint64_t size, alloc_size, stream;
    int pool;
    tblock *block;
} req;

static bool get_free_block(tstate *t, int d, req *p)
{
    tdev *v = &t->dev[d];
    const tconf *c = &t->c;
    tset *s = &v->free[p->pool];
    if (c->fraction > 0 && c->gc_threshold > 0)
        v->searches[p->pool]++;
    size_t i = lower_bound(s, p->stream, p->size, 0);
    if (i >= s->n || s->v[i]->stream != p->stream)
        return false;
    if (s->v[i]->seg) {
        /* best fit counts what a block can grow into: the unmapped range after it */
#define GROWABLE(b) ((b)->size + ((b)->next && !(b)->next->mapped ? (b)->next->size : 0))
        while (s->v[i]->seg && i + 1 < s->n && s->v[i + 1]->stream == p->stream &&
               GROWABLE(s->v[i + 1]) < GROWABLE(s->v[i]))
            i++;
#undef GROWABLE
    }
    tblock *b = s->v[i];
    if (p->size < c->max_split && b->size >= c->max_split)
        return false;
    if (p->size >= c->max_split && b->size >= p->size + c->max_nonsplit_round)
        return false;
    p->block = b;
    set_remove(s, b);
    return true;
}

static void garbage_collect(tstate *t, int d)
{
    tdev *v = &t->dev[d];
    uint64_t threshold = (uint64_t)(t->c.gc_threshold * (double)v->allowed);
    if (v->reserved <= threshold)
        return;
    uint64_t target = v->reserved - threshold, reclaimed = 0;
    tset *s = &v->free[1];
    double total_age = 0;
    int count = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!s->v[i]->prev && !s->v[i]->next && !s->v[i]->seg) {
            total_age += (double)(v->searches[1] - s->v[i]->gc_base);
            count++;
        }
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = total_age / count;
        freed = false;
        for (size_t i = 0; i < s->n;) {
            tblock *b = s->v[i];
            double age = (double)(v->searches[1] - b->gc_base);
            if (!b->prev && !b->next && !b->seg && age >= age_threshold) {
                freed = true;
                reclaimed += b->size;
                total_age -= age;
                count--;
                release_block(t, d, b);   /* removes s->v[i] */
            } else {
                i++;
            }
        }
    }
}

static bool alloc_block(tstate *t, int d, req *p, bool retry)
{
    tdev *v = &t->dev[d];
    if (retry)
        t->r->devices[d].alloc_retries++;
    if (v->allowed != NO_LIMIT && v->reserved + p->alloc_size > v->allowed)
        return false;
    if (t->c.expandable) {
        p->block = try_allocate_expandable(t, d, p->stream, p->pool, p->size);
        return p->block != NULL;
    }
    if (!device_has(v, p->alloc_size)) {
        t->r->devices[d].device_failed_mallocs++;
        return false;
    }
    tblock *b = new_block(t, take_address(v, p->alloc_size), p->alloc_size, p->stream, p->pool);
    if (!b)
        return false;
    note_reserved(t, d, (int64_t)p->alloc_size, true);
    t->r->devices[d].segment_allocs++;
    t->r->devices[d].device_mallocs++;
    curve_point(t, d);
    p->block = b;
    return true;
}

/* release_available_cached_blocks: oversize cached blocks, enough of them. */
static bool release_oversize(tstate *t, int d, const req *p)
{
    const tconf *c = &t->c;
    if (c->max_split == NO_LIMIT)
        return false;
    tset *s = &t->dev[d].free[p->pool];
    uint64_t key = p->size < c->max_split ? c->max_split : p->size;
    size_t i = lower_bound(s, p->stream, key, 0);
    if (i < s->n && s->v[i]->stream == p->stream) {
        if (s->v[i]->prev || s->v[i]->next || s->v[i]->seg)
            return false;
        release_block(t, d, s->v[i]);
        return true;
    }
    if (i == 0)
        return false;
    uint64_t released = 0;
    for (i--;; i--) {
        tblock *b = s->v[i];
        if (released >= key || b->size < c->max_split || b->stream != p->stream ||
            b->prev || b->next || b->seg)
            break;
        released += b->size;
        release_block(t, d, b);
        if (i == 0)
            break;
    }
    return released >= key;
}

static bool should_split(const tconf *c, const tblock *b, uint64_t size)
{
    uint64_t rest = b->size - size;
    if (b->pool == 0 || c->expandable)
        return rest >= KB512;
    return size < c->max_split && rest > SMALL_SIZE;
}

/* @return the block, or NULL: out of memory (t->failed: out of host memory) */
/* Block b handed to the program, which asked for `asked` bytes: the
 * device's allocated figures as PyTorch keeps them (block sizes). */
static tblock *hand_out(tdev *v, tblock *b, uint64_t asked)
{
    b->allocated = true;
    b->req = asked;
    v->allocated += b->size;
    v->requested += asked;
    v->live++;
    if (v->allocated > v->peak_allocated)
        v->peak_allocated = v->allocated;
    return b;
}

static tblock *torch_malloc(tstate *t, int d, uint64_t asked, uint64_t stream)
{
    tdev *v = &t->dev[d];
    const tconf *c = &t->c;
    req p = { .size = round_size(c, asked), .stream = stream };
    if (c->uncached) {   /* every request its own device allocation */
        if (!device_has(v, p.size) || (v->allowed != NO_LIMIT && v->reserved + p.size > v->allowed))
            return NULL;
        tblock *b = new_block(t, take_address(v, p.size), p.size, stream, 1);
        if (!b)
            return NULL;
        note_reserved(t, d, (int64_t)p.size, true);
        t->r->devices[d].segment_allocs++;
        t->r->devices[d].device_mallocs++;
        curve_point(t, d);
        return hand_out(v, b, asked);
    }
    p.pool = p.size <= SMALL_SIZE ? 0 : 1;
    p.alloc_size = allocation_size(p.size);
    bool found = get_free_block(t, d, &p);
    if (!found) {
        if (c->fraction > 0 && c->gc_threshold > 0 && v->allowed != NO_LIMIT)
            garbage_collect(t, d);
        found = alloc_block(t, d, &p, false) ||
                (release_oversize(t, d, &p) && alloc_block(t, d, &p, false));
        if (!found && !t->failed) {
            release_cached_blocks(t, d);
            found = alloc_block(t, d, &p, true);
        }
    }
    if (!found || t->failed)
        return NULL;
    tblock *b = p.block;
    if (should_split(c, b, p.size)) {
        tblock *head = new_block(t, b->addr, p.size, stream, p.pool);
        if (!head)
            return NULL;
        head->seg = b->seg;
        head->prev = b->prev;
        if (head->prev)
            head->prev->next = head;
        head->next = b;
        b->prev = head;
        b->addr += p.size;
        b->size -= p.size;
        cache_block(t, d, b);
        b = head;
    }
    return hand_out(v, b, asked);
}

static void torch_free(tstate *t, int d, tblock *b, bool pending)
{
    tdev *v = &t->dev[d];
    v->allocated -= b->size;
    v->requested -= b->req;
    v->live--;
    if (t->c.uncached) {
        note_reserved(t, d, -(int64_t)b->size, false);
        t->r->devices[d].segment_frees++;
        t->r->devices[d].device_frees++;
        curve_point(t, d);
        free(b);
        return;
    }
    if (!pending) {
        free_block(t, d, b);
        return;
    }
    b->allocated = false;
    b->pending = true;
    if (vt__grow_from((void **)&v->pending, &v->cappending, v->npending + 1, sizeof *v->pending, 64)) {
        t->failed = true;
        return;
    }
    v->pending[v->npending++] = b;
}

/* the recorded FREE_COMPLETED of a pending free */
static void torch_free_completed(tstate *t, int d, tblock *b, uint64_t serial)
{
    tdev *v = &t->dev[d];
    /* not pending any more when the model synchronized them all: then the
     * block may be gone (compared by pointer only, never read) */
    for (size_t i = v->npending; i-- > 0;)
        if (v->pending[i] == b && b->serial == serial) {
            v->pending[i] = v->pending[--v->npending];
            free_block(t, d, b);
            return;
        }
}

/* ---- settings ------------------------------------------------------------ */

static bool parse_bool(const char *v, size_t n, bool *out)
{
    if ((n == 4 && !strncasecmp(v, "true", 4)) || (n == 1 && *v == '1')) {
        *out = true;
        return true;
    }
    if ((n == 5 && !strncasecmp(v, "false", 5)) || (n == 1 && *v == '0')) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_num(const char *v, size_t n, double *out)
{
    char buf[64];
    if (!n || n >= sizeof buf)
        return false;
    memcpy(buf, v, n);
    buf[n] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0' && isfinite(*out);
}

/* "key:value,..." over c; @return 0, or -EINVAL with one line in err. */
static int apply_conf(tconf *c, const char *text, char *err, size_t errlen)
{
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        const char *next = end ? end + 1 : NULL;
        if (n == 0) {
            p = next;
            continue;
        }
        if (!colon) {
            snprintf(err, errlen, "'%.*s' is not key:value", (int)n, p);
            return -EINVAL;
        }
        size_t klen = (size_t)(colon - p), vlen = n - klen - 1;
        const char *v = colon + 1;
        double x = 0;
        bool ok = true, flag;
#define KEY(name) (klen == sizeof name - 1 && !strncmp(p, name, klen))
        if (KEY("max_split_size_mb")) {
            if (vlen == 9 && !strncmp(v, "unlimited", 9))
                c->max_split = NO_LIMIT;
            else if ((ok = parse_num(v, vlen, &x) && x > 0))
                /* PyTorch takes at least one large segment's worth */
                c->max_split = x * 1048576.0 > (double)LARGE_BUFFER ? (uint64_t)(x * 1048576.0)
                                                                    : LARGE_BUFFER;
        } else if (KEY("max_non_split_rounding_mb")) {
            if ((ok = parse_num(v, vlen, &x) && x >= 0))
                c->max_nonsplit_round = (uint64_t)(x * 1048576.0);
        } else if (KEY("roundup_power2_divisions")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x <= 64 && x == floor(x) &&
                 ((unsigned)x & ((unsigned)x - 1)) == 0;
            if (ok)
                c->divisions = (unsigned)x;
        } else if (KEY("garbage_collection_threshold")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x < 1;
            if (ok)
                c->gc_threshold = x;
        } else if (KEY("per_process_memory_fraction")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x <= 1;
            if (ok)
                c->fraction = x;
        } else if (KEY("expandable_segments")) {
            if ((ok = parse_bool(v, vlen, &flag)))
                c->expandable = flag;
        } else if (KEY("cache")) {
            if ((ok = parse_bool(v, vlen, &flag)))
                c->uncached = !flag;
        } else if (KEY("release_lock_on_cudamalloc") || KEY("backend") ||
                   (klen > 7 && !strncmp(p, "pinned_", 7))) {
            /* no effect on what the cache holds */
        } else {
            snprintf(err, errlen, "unknown key '%.*s' for PyTorch's allocator", (int)klen, p);
            return -EINVAL;
        }
#undef KEY
        if (!ok) {
            snprintf(err, errlen, "bad value '%.*s' for %.*s", (int)vlen, v, (int)klen, p);
            return -EINVAL;
        }
        p = next;
    }
    return 0;
}

static void format_conf(const tconf *c, char *buf, size_t len)
{
    char split[32];
    if (c->max_split == NO_LIMIT)
        snprintf(split, sizeof split, "unlimited");
    else
        snprintf(split, sizeof split, "%llu", (unsigned long long)(c->max_split >> 20));
    snprintf(buf, len,
             "max_split_size_mb:%s,roundup_power2_divisions:%u,garbage_collection_threshold:%g,"
             "per_process_memory_fraction:%g,expandable_segments:%s%s",
             split, c->divisions, c->gc_threshold, c->fraction, c->expandable ? "True" : "False",
             c->uncached ? ",cache:0" : "");
}

/* ---- the recording ------------------------------------------------------- */

bool vt__replay_is_torch(const vt_snapshot_data *s)
{
    return (s->meta.flags & VT_META_POOL_OBSERVED) ||
           !strcmp(vt_snapshot_string(s, s->meta.library_version), "pytorch");
}

static bool imported(const vt_snapshot_data *s)
{
    return !strcmp(vt_snapshot_string(s, s->meta.library_version), "pytorch");
}

/* Is ALLOC e a request to PyTorch's allocator? */
static bool pool_request(const vt_snapshot_data *s, const vt_event *e)
{
    return !(s->meta.flags & VT_META_POOL_OBSERVED) || (e->aux & VT_ALLOC_POOL_BLOCK);
}

enum { SEG_TORCH = 1, SEG_OUTSIDE = 2, SEG_EMPTY_CACHE = 4 };

/* Per event: whose segment event it is, and where the cache was emptied. */
static int classify(const vt_snapshot_data *s, bool gc_recorded, uint8_t *cls)
{
    bool observed = s->meta.flags & VT_META_POOL_OBSERVED;
    bool infer_empty = imported(s);
    /* backwards: the next allocation (or OOM) on each device */
    int8_t next_kind[VT_REPLAY_MAX_DEVICES];   /* 0 none, 1 pool, 2 outside, 3 segment alloc */
    memset(next_kind, 0, sizeof next_kind);
    for (size_t i = s->nevents; i-- > 0;) {
        const vt_event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        int d = e->device;
        switch (e->kind) {
        case VT_EV_ALLOC:
            next_kind[d] = pool_request(s, e) ? 1 : 2;
            break;
        case VT_EV_OOM:
            next_kind[d] = 1;
            break;
        case VT_EV_SEGMENT_ALLOC:
            /* PyTorch's when its allocation follows (or when nothing
             * follows and the recording is PyTorch's alone) */
            cls[i] = !observed || next_kind[d] != 2 ? SEG_TORCH : SEG_OUTSIDE;
            break;
        default:
            break;
        }
    }
    vt__u64map outside;
    if (vt__u64map_init(&outside, 64))
        return -ENOMEM;
    bool in_batch[VT_REPLAY_MAX_DEVICES] = { false };
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        int d = e->device;
        if (e->kind == VT_EV_SEGMENT_ALLOC) {
            if (cls[i] == SEG_OUTSIDE && vt__u64map_put(&outside, e->addr, 1)) {
                vt__u64map_free(&outside);
                return -ENOMEM;
            }
            in_batch[d] = false;
        } else if (e->kind == VT_EV_SEGMENT_FREE) {
            if (observed && vt__u64map_get(&outside, e->addr) != VT__U64MAP_NONE) {
                vt__u64map_del(&outside, e->addr);
                cls[i] = SEG_OUTSIDE;
                continue;
            }
            cls[i] = SEG_TORCH;
            if (!infer_empty || in_batch[d])
                continue;
            /* a run of segment frees: a malloc releasing cached blocks (the
             * GC, or the retry after a failed cudaMalloc) goes on to a
             * segment or an OOM; anything else emptied the cache */
            bool by_malloc = false;
            for (size_t k = i + 1; k < s->nevents; k++) {
                const vt_event *n = &s->events[k];
                if (n->device != d)
                    continue;
                if (n->kind == VT_EV_SEGMENT_FREE)
                    continue;
                if (n->kind == VT_EV_SEGMENT_ALLOC || n->kind == VT_EV_OOM)
                    by_malloc = gc_recorded || n->kind == VT_EV_OOM;
                if (n->kind == VT_EV_ALLOC || n->kind == VT_EV_FREE_REQUESTED ||
                    n->kind == VT_EV_SEGMENT_ALLOC || n->kind == VT_EV_OOM)
                    break;
            }
            in_batch[d] = true;
            if (!by_malloc)
                cls[i] |= SEG_EMPTY_CACHE;
        } else if (e->kind == VT_EV_ALLOC || e->kind == VT_EV_FREE_REQUESTED ||
                   e->kind == VT_EV_OOM) {
            in_batch[d] = false;
        }
    }
    vt__u64map_free(&outside);
    return 0;
}

/* The recording's own figures, PyTorch's segments only. */
static void recorded_books(const vt_snapshot_data *s, const uint8_t *cls, vt_replay_result *r,
                           uint64_t *segs, size_t *nsegs)
{
    int64_t reserved[VT_REPLAY_MAX_DEVICES] = { 0 }, allocated[VT_REPLAY_MAX_DEVICES] = { 0 };
    vt__rmap live;
    bool have_live = vt__rmap_init(&live, 1024) == 0;
    *nsegs = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        vt_replay_device *d = &r->devices[e->device];
        switch (e->kind) {
        case VT_EV_SEGMENT_ALLOC:
        case VT_EV_SEGMENT_FREE: {
            if (!(cls[i] & SEG_TORCH))
                break;
            bool is_free = e->kind == VT_EV_SEGMENT_FREE;
            reserved[e->device] += is_free ? -(int64_t)e->size : (int64_t)e->size;
            if (reserved[e->device] > (int64_t)d->recorded_peak_reserved)
                d->recorded_peak_reserved = (uint64_t)reserved[e->device];
            d->recorded_segment_allocs += !is_free;
            d->recorded_segment_frees += is_free;
            if (!is_free)
                segs[(*nsegs)++] = vt__seg_code(false, e->device, e->size);
            break;
        }
        case VT_EV_ALLOC:
            if (!pool_request(s, e))
                break;
            allocated[e->device] += (int64_t)e->size;
            if (allocated[e->device] > (int64_t)d->recorded_peak_allocated)
                d->recorded_peak_allocated = (uint64_t)allocated[e->device];
            if (have_live) {
                vt__rmap_entry *x = vt__rmap_put(&live, e->addr);
                if (x) {
                    x->value = e->size;
                    x->device = e->device;
                }
            }
            break;
        case VT_EV_FREE_REQUESTED:
            /* the block's size as allocated (a free names what was asked) */
            if (have_live) {
                vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
                if (x && x->device == e->device) {
                    allocated[e->device] -= (int64_t)x->value;
                    vt__rmap_del(&live, x);
                }
            }
            break;
        case VT_EV_OOM:
            r->recorded_ooms++;
            break;
        default:
            break;
        }
    }
    if (have_live)
        vt__rmap_destroy(&live);
}

static void note_oom(tstate *t, const vt_snapshot_data *s, size_t i)
{
    const vt_event *e = &s->events[i];
    tdev *v = &t->dev[e->device];
    vt_replay_oom *o = &t->r->oom;
    o->happened = true;
    o->event_index = i;
    o->seq = e->seq;
    o->time_ns = e->time_ns;
    o->device = e->device;
    o->stream = e->stream;
    o->req_size = e->req_size ? e->req_size : e->size;
    o->stack = e->stack;
    o->allocated = v->allocated;
    o->requested = v->requested;
    o->live_blocks = v->live;
    o->reserved = v->reserved;
    o->device_free = v->capacity == NO_LIMIT ? 0
                     : v->capacity > v->reserved + v->outside ? v->capacity - v->reserved - v->outside
                                                              : 0;
}

static void free_all(tstate *t)
{
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++) {
        tdev *v = &t->dev[d];
        /* every block is in exactly one place: a set, pending, or live (the
         * live ones are freed by the caller's map walk) */
        for (int p = 0; p < 2; p++) {
            for (size_t i = 0; i < v->free[p].n; i++)
                free(v->free[p].v[i]);
            for (size_t i = 0; i < v->unmapped[p].n; i++)
                free(v->unmapped[p].v[i]);
            free(v->free[p].v);
            free(v->unmapped[p].v);
        }
        for (size_t i = 0; i < v->npending; i++)
            free(v->pending[i]);
        free(v->pending);
        for (size_t i = 0; i < v->nsegs; i++)
            free(v->segs[i]);
        free(v->segs);
    }
    free(t->segs);
}

/* Free what options.free_at makes due before event `i`: each block still
 * live as its ALLOC made it, at once (as on its own stream). */
static void early_due(tstate *t, vt__early *ef, const vt_snapshot_data *s, vt__rmap *live,
                      size_t i)
{
    uint64_t addr;
    while (vt__early_due(ef, s, i, &addr)) {
        vt__rmap_entry *x = vt__rmap_get(live, addr);
        if (!x || !x->early)
            continue;   /* freed by the recording already */
        tblock *b = (tblock *)(uintptr_t)x->value;
        int d = x->device;
        vt__rmap_del(live, x);
        torch_free(t, d, b, false);
        if (vt__early_freed(ef, addr))
            t->failed = true;
        t->r->early_frees++;
        t->r->replayed++;
    }
}

static int drive(tstate *t, const vt_snapshot_data *s, const vt_replay_options *opt,
                 const uint8_t *cls, const uint64_t *completion, const uint8_t *immediate)
{
    vt_replay_result *r = t->r;
    vt__rmap live, pend;
    vt__early ef;
    if (vt__rmap_init(&live, 4096))
        return -ENOMEM;
    if (vt__rmap_init(&pend, 256)) {
        vt__rmap_destroy(&live);
        return -ENOMEM;
    }
    if (vt__early_init(&ef, s, opt)) {
        vt__early_destroy(&ef);
        vt__rmap_destroy(&live);
        vt__rmap_destroy(&pend);
        return -ENOMEM;
    }
    (void)completion;
    int rc = 0;
    for (size_t i = 0; i < s->nevents && !t->failed; i++) {
        const vt_event *e = &s->events[i];
        if (ef.n)
            early_due(t, &ef, s, &live, i);
        if (e->device < 0 || e->device >= (int)r->ndevices)
            continue;
        int d = e->device;
        tdev *v = &t->dev[d];
        t->now = i;
        t->now_ns = e->time_ns;
        switch (e->kind) {
        case VT_EV_ALLOC: {
            if (!pool_request(s, e))
                break;   /* outside the pool: its segment (if any) counts as recorded */
            vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
            if (x)   /* allocated again without a free in the window: forget it */
                vt__rmap_del(&live, x);
            uint64_t asked = e->req_size ? e->req_size : e->size;
            tblock *b = torch_malloc(t, d, asked, e->stream);
            r->replayed++;
            if (!b) {
                if (!t->failed)
                    note_oom(t, s, i);
                goto done;
            }
            if (!(x = vt__rmap_put(&live, e->addr))) {
                free(b);
                t->failed = true;
                break;
            }
            x->value = (uint64_t)(uintptr_t)b;
            x->device = (int8_t)d;
            x->early = ef.marked && ef.marked[i];
            break;
        }
        case VT_EV_FREE_REQUESTED: {
            vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
            if (!x || x->device != d) {
                if (!vt__early_recorded_free(&ef, e->addr))   /* not one freed early */
                    r->skipped_frees++;
                break;
            }
            tblock *b = (tblock *)(uintptr_t)x->value;
            vt__rmap_del(&live, x);
            bool pending = !immediate[i];
            torch_free(t, d, b, pending);
            if (pending && !t->c.uncached) {
                vt__rmap_entry *y = vt__rmap_put(&pend, e->addr);
                if (!y) {
                    t->failed = true;
                    break;
                }
                y->value = (uint64_t)(uintptr_t)b;
                y->stream = b->serial;
                y->device = (int8_t)d;
            }
            r->replayed++;
            break;
        }
        case VT_EV_FREE_COMPLETED: {
            vt__rmap_entry *y = vt__rmap_get(&pend, e->addr);
            if (!y || y->device != d)
                break;
            tblock *b = (tblock *)(uintptr_t)y->value;
            uint64_t serial = y->stream;
            vt__rmap_del(&pend, y);
            torch_free_completed(t, d, b, serial);
            break;
        }
        case VT_EV_OOM: {
            if (!e->req_size)
                break;
            tblock *b = torch_malloc(t, d, e->req_size, e->stream);
            r->replayed++;
            if (!b) {
                if (!t->failed)
                    note_oom(t, s, i);
                goto done;
            }
            torch_free(t, d, b, false);
            r->recorded_ooms_served++;
            break;
        }
        case VT_EV_EMPTY_CACHE:
            release_cached_blocks(t, d);
            vt__rmap_destroy(&pend);   /* every pending free completed */
            if (vt__rmap_init(&pend, 256))
                t->failed = true;
            r->replayed++;
            break;
        case VT_EV_SEGMENT_ALLOC:
            if (cls[i] & SEG_OUTSIDE)
                v->outside += e->size;
            break;
        case VT_EV_SEGMENT_FREE:
            if (cls[i] & SEG_OUTSIDE)
                v->outside = v->outside > e->size ? v->outside - e->size : 0;
            if (cls[i] & SEG_EMPTY_CACHE) {
                release_cached_blocks(t, d);
                vt__rmap_destroy(&pend);
                if (vt__rmap_init(&pend, 256))
                    t->failed = true;
                r->replayed++;
            }
            break;
        default:
            break;
        }
    }
done:
    /* the blocks still handed out */
    for (size_t k = 0; k < live.nentries; k++)
        if (live.entries[k].key)
            free((void *)(uintptr_t)live.entries[k].value);
    vt__rmap_destroy(&live);
    vt__rmap_destroy(&pend);
    vt__early_destroy(&ef);
    if (t->failed)
        rc = -ENOMEM;
    return rc;
}

int vt__replay_torch(const vt_snapshot_data *s, const vt_replay_options *opt,
                     vt_replay_result *r, const uint64_t *completion, const uint8_t *immediate,
                     char *err, size_t errlen)
{
    tstate *t = calloc(1, sizeof *t);
    uint8_t *cls = calloc(s->nevents ? s->nevents : 1, 1);
    uint64_t *rsegs = calloc(s->nevents ? s->nevents : 1, sizeof *rsegs);
    int rc = 0;
    if (!t || !cls || !rsegs) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    t->r = r;
    t->want_curve = opt->curve;
    t->c = (tconf){ .max_split = NO_LIMIT, .max_nonsplit_round = LARGE_BUFFER };
    /* the settings PyTorch ran with: an imported snapshot has them; a
     * recording of the observed allocator has them as the framework's
     * settings (format 1.7: PYTORCH_CUDA_ALLOC_CONF text), and vramtrace's
     * own in its config, which are not PyTorch's (older recordings: the
     * defaults) */
    char recorded[1024] = "";
    bool expandable = false;
    if (!opt->ignore_recorded_conf && imported(s))
        vt__replay_conf_from_meta(vt_snapshot_string(s, s->meta.config), recorded,
                                  sizeof recorded, &expandable);
    else if (!opt->ignore_recorded_conf && (s->meta.flags & VT_META_FRAMEWORK_SETTINGS))
        snprintf(recorded, sizeof recorded, "%s",
                 vt_snapshot_string(s, s->meta.framework_settings));
    char msg[256] = "";
    if (apply_conf(&t->c, recorded, msg, sizeof msg)) {
        rc = -EINVAL;
        snprintf(err, errlen, "the recorded settings '%s' are not valid: %s", recorded, msg);
        goto out;
    }
    if (expandable)
        t->c.expandable = true;
    if (opt->conf && *opt->conf && apply_conf(&t->c, opt->conf, msg, sizeof msg)) {
        rc = -EINVAL;
        snprintf(err, errlen, "bad --conf '%s': %s", opt->conf, msg);
        goto out;
    }
    format_conf(&t->c, r->conf, sizeof r->conf);
    r->expandable_segments = t->c.expandable;
    for (size_t d = 0; d < r->ndevices; d++) {
        tdev *v = &t->dev[d];
        uint64_t cap = r->devices[d].capacity;
        v->capacity = cap == VT_REPLAY_UNLIMITED ? NO_LIMIT : cap;
        v->allowed = t->c.fraction > 0 && v->capacity != NO_LIMIT
                         ? (uint64_t)(t->c.fraction * (double)v->capacity)
                         : NO_LIMIT;
        v->next_addr = (uint64_t)(d + 1) << 52;
        v->free[0].by_addr = v->free[1].by_addr = false;
        v->unmapped[0].by_addr = v->unmapped[1].by_addr = true;
    }
    if ((rc = classify(s, strstr(recorded, "garbage_collection_threshold") != NULL, cls))) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    size_t nrsegs = 0;
    recorded_books(s, cls, r, rsegs, &nrsegs);
    if ((rc = drive(t, s, opt, cls, completion, immediate))) {
        snprintf(err, errlen, "out of host memory");
        goto out;
    }
    for (size_t d = 0; d < r->ndevices; d++) {
        r->devices[d].peak_reserved = t->dev[d].peak_reserved;
        r->devices[d].peak_allocated = t->dev[d].peak_allocated;
    }
    size_t n = nrsegs < t->nsegs ? nrsegs : t->nsegs, k = 0;
    while (k < n && rsegs[k] == t->segs[k])
        k++;
    r->segments_identical = k == n && nrsegs == t->nsegs;
    r->segments_compared = n;
    r->first_segment_difference = k;
out:
    if (t)
        free_all(t);
    if (rc && r->curve) {
        free(r->curve);
        r->curve = NULL;
        r->ncurve = 0;
    }
    free(t);
    free(cls);
    free(rsegs);
    return rc;
}
