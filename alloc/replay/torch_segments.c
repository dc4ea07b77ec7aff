/*
 * alloc/replay/torch_segments.c - the memory of the PyTorch model
 * (torch_model.h): blocks in segments, free blocks ordered by (stream,
 * size, address), segments taken from the device and given back, and for
 * expandable segments one range of address space per stream and pool
 * (1 1/8 of the device), mapped in 2 MiB (small) or 20 MiB (large) pages
 * at the lowest address that fits and unmapped when emptied. From
 * PyTorch's DeviceCachingAllocator: free_block, try_merge_blocks,
 * release_cached_blocks, release_blocks, synchronize_and_free_events,
 * find_expandable_block, map_block, unmap_block,
 * try_allocate_expandable_block, ExpandableSegment::map/unmap.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "grow.h"
#include "torch_model.h"

/* ---- ordered sets -------------------------------------------------------- */

static int key_cmp(const tset *s, const tblock *a, uint64_t stream, uint64_t size, uint64_t addr)
{
    if (a->stream != stream)
        return a->stream < stream ? -1 : 1;
    if (!s->by_addr && a->size != size)
        return a->size < size ? -1 : 1;
    return a->addr < addr ? -1 : a->addr > addr;
}

size_t tm_lower_bound(const tset *s, uint64_t stream, uint64_t size, uint64_t addr)
{
    size_t at;
    VT__PARTITION_POINT(s->n, i, key_cmp(s, s->v[i], stream, size, addr) < 0, at);
    return at;
}

int tm_set_insert(tstate *t, tset *s, tblock *b)
{
    if (vt__grow_from((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, 64)) {
        t->failed = true;
        return -ENOMEM;
    }
    size_t i = tm_lower_bound(s, b->stream, b->size, b->addr);
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
    s->v[i] = b;
    s->n++;
    return 0;
}

void tm_set_remove(tset *s, tblock *b)
{
    size_t i = tm_lower_bound(s, b->stream, b->size, b->addr);
    if (i < s->n && s->v[i] == b) {
        memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
        s->n--;
    }
}

/* ---- books --------------------------------------------------------------- */

void tm_note_held(tdev *v)
{
    if (v->reserved + v->outside > v->peak_held)
        v->peak_held = v->reserved + v->outside;
}

void tm_reserve(tstate *t, int d, int64_t delta)
{
    tdev *v = &t->dev[d];
    v->reserved = (uint64_t)((int64_t)v->reserved + delta);
    tm_note_held(v);
    if (vt__trail_reserved(&t->trail, d, delta, v->reserved, t->now, t->now_ns))
        t->failed = true;
    if (v->reserved > v->peak_reserved) {
        v->peak_reserved = v->reserved;
        t->r->devices[d].allocated_at_peak = v->allocated;
        t->r->devices[d].peak_event = t->now;
        t->r->devices[d].peak_time_ns = t->now_ns;
    }
}

tblock *tm_new_block(tstate *t, uint64_t addr, uint64_t size, uint64_t stream, int pool)
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

tblock *tm_neighbour(tstate *t, tblock *b, uint64_t addr, uint64_t size, bool before)
{
    tblock *x = tm_new_block(t, addr, size, b->stream, b->pool);
    if (!x)
        return NULL;
    x->seg = b->seg;
    if (before) {
        x->prev = b->prev;
        x->next = b;
        if (b->prev)
            b->prev->next = x;
        b->prev = x;
    } else {
        x->prev = b;
        x->next = b->next;
        if (b->next)
            b->next->prev = x;
        b->next = x;
    }
    return x;
}

int tm_cache_block(tstate *t, int d, tblock *b)   /* insert_into_blocks */
{
    b->gc_base = t->dev[d].searches[b->pool];
    return tm_set_insert(t, &t->dev[d].free[b->pool], b);
}

/* ---- segments ------------------------------------------------------------ */

uint64_t tm_take_address(tdev *v, uint64_t size)
{
    uint64_t a = v->next_addr;
    v->next_addr += (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE + ROUND_LARGE;
    return a;
}

/* Would the device give `size` more bytes? (cudaMalloc / cuMemCreate) */
bool tm_device_has(const tdev *v, uint64_t size)
{
    return v->capacity == NO_LIMIT || v->reserved + v->outside + size <= v->capacity;
}

void tm_release_block(tstate *t, int d, tblock *b)
{
    tdev *v = &t->dev[d];
    tm_set_remove(&v->free[b->pool], b);
    tm_reserve(t, d, -(int64_t)b->size);
    t->r->devices[d].segment_frees++;
    t->r->devices[d].device_frees++;
    free(b);
}

/* try_merge_blocks: `src` into `dst` when both are free alike. */
static uint64_t try_merge(tstate *t, int d, tblock *dst, tblock *src)
{
    if (!src || src->allocated || src->pending || dst->mapped != src->mapped)
        return 0;
    tdev *v = &t->dev[d];
    tm_set_remove(src->mapped ? &v->free[src->pool] : &v->unmapped[src->pool], src);
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

void tm_free_block(tstate *t, int d, tblock *b)
{
    b->allocated = false;
    b->pending = false;
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    tm_cache_block(t, d, b);
}

/* map_block: back [b, b + size) with pages; false when the device has none. */
static bool map_block(tstate *t, int d, tblock *b, uint64_t size)
{
    tdev *v = &t->dev[d];
    tseg *s = b->seg;
    uint64_t begin = (b->addr - s->base) / s->page;
    uint64_t end = (b->addr + size - s->base + s->page - 1) / s->page;
    uint64_t bytes = (end - begin) * s->page;
    if (!tm_device_has(v, bytes)) {
        t->r->devices[d].device_failed_mallocs++;
        return false;
    }
    tm_set_remove(&v->unmapped[b->pool], b);
    b->mapped = true;
    if (bytes < b->size) {
        tblock *rest = tm_neighbour(t, b, b->addr + bytes, b->size - bytes, false);
        if (!rest)
            return false;
        rest->mapped = false;
        tm_set_insert(t, &v->unmapped[b->pool], rest);
        b->size = bytes;
    }
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    tm_cache_block(t, d, b);
    tm_reserve(t, d, (int64_t)bytes);
    t->r->devices[d].device_maps += bytes / s->page;
    t->r->devices[d].device_mallocs++;
    t->r->devices[d].segment_allocs++;
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
    for (size_t i = tm_lower_bound(u, stream, 0, 0); i < u->n && u->v[i]->stream == stream; i++) {
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
    *s = (tseg){ .base = tm_take_address(v, space), .size = space, .page = page };
    v->segs[v->nsegs++] = s;
    tblock *b = tm_new_block(t, s->base, space, stream, pool);
    if (!b)
        return NULL;
    b->mapped = false;
    b->seg = s;
    tm_set_insert(t, u, b);
    return b;
}

tblock *tm_try_allocate_expandable(tstate *t, int d, uint64_t stream, int pool, uint64_t size)
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
    tm_set_remove(&t->dev[d].free[pool], c);
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
    tm_set_remove(&v->free[b->pool], b);
    uint64_t lo = s->base + begin * s->page, hi = s->base + end * s->page;
    if (lo > b->addr) {
        tblock *x = tm_neighbour(t, b, b->addr, lo - b->addr, true);
        if (!x)
            return;
        tm_cache_block(t, d, x);
    }
    if (hi < b->addr + b->size) {
        tblock *x = tm_neighbour(t, b, hi, b->addr + b->size - hi, false);
        if (!x)
            return;
        tm_cache_block(t, d, x);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->mapped = false;
    try_merge(t, d, b, b->prev);
    try_merge(t, d, b, b->next);
    tm_set_insert(t, &v->unmapped[b->pool], b);
    tm_reserve(t, d, -(int64_t)(hi - lo));
    t->r->devices[d].device_unmaps += (hi - lo) / s->page;
    t->r->devices[d].device_frees++;
    t->r->devices[d].segment_frees++;
}

static void release_expandable_segment(tstate *t, int d, tblock *b)
{
    tdev *v = &t->dev[d];
    tm_set_remove(&v->unmapped[b->pool], b);
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
            tm_release_block(t, d, b);
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
void tm_release_cached_blocks(tstate *t, int d)
{
    tdev *v = &t->dev[d];
    t->r->devices[d].sync_all++;
    for (size_t i = 0; i < v->npending; i++)
        if (v->pending[i])
            tm_free_block(t, d, v->pending[i]);
    v->npending = 0;
    release_blocks(t, d, 1);
    release_blocks(t, d, 0);
    tm_private_release(t, d);
}

void tm_free_all(tstate *t)
{
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++) {
        tdev *v = &t->dev[d];
        /* every block is in exactly one place: a set, pending, or live (the
         * live ones the walker hands to the engine's forget) */
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
        free(v->priv);
        for (size_t i = 0; i < v->nsegs; i++)
            free(v->segs[i]);
        free(v->segs);
    }
}
