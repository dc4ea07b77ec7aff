/*
 * alloc/alloc_check.c - the invariant checker: every structure of a heap
 * read whole and verified against the others (tests, debugging).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc_internal.h"

static int fail(const vt__heap *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vramtrace: allocator invariant broken on device %d: ", h->device);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

struct sums {
    int64_t alloc_b, alloc_n, active_b, active_n, req_b, reserved, segs, split_b, split_n;
};

static int cmp_stat(const vt__heap *h, const char *name, const vt_stat *st, int i, int64_t v)
{
    if (st[i].current != v)
        return fail(h, "stat %s[%d] is %lld, the blocks sum to %lld", name, i,
                    (long long)st[i].current, (long long)v);
    if (st[i].peak < st[i].current || st[i].allocated - st[i].freed != st[i].current)
        return fail(h, "stat %s[%d] peak/allocated/freed inconsistent", name, i);
    return 0;
}

/* The choice is exact (size, address) best fit: asked for b's own size on
 * b's stream, the index must answer a block of exactly that size at b's
 * address or below. Holding for every free block b, that is: each size's
 * answer is its lowest-address block (checked against the blocks
 * themselves, not the index's own view of its order). */
static int check_best_fit(vt__heap *h, const vt__block *b)
{
    const vt__block *r = vt__index_best_fit(&h->free_idx[b->pool], b->stream, b->size);
    if (!r || r->size != b->size || r->addr > b->addr || r->state != VT_B_FREE
        || r->stream != b->stream || r->pool != b->pool)
        return fail(h, "best fit for %llu bytes on stream %#llx is %#llx (%llu bytes), "
                    "not the lowest-address block of that size (free block %#llx is one)",
                    (unsigned long long)b->size, (unsigned long long)b->stream,
                    (unsigned long long)(r ? r->addr : 0), (unsigned long long)(r ? r->size : 0),
                    (unsigned long long)b->addr);
    return 0;
}

static int check_heap(vt__heap *h)
{
    struct sums s[3];
    memset(s, 0, sizeof s);
    uint64_t nfree[2] = { 0, 0 }, nalloc = 0, npending = 0;
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *g = h->segs[i];
        if (g->addr < prev_end)
            return fail(h, "segment %#llx overlaps or is out of order", (unsigned long long)g->addr);
        prev_end = g->addr + g->size;
        /* 2 MiB small segments, whole numbers of a mid-size request, 2 MiB
         * multiples; and the OOM chain's exact-size ones of either pool */
        if (g->va_size) {   /* an expandable segment: whole chunks, within its range */
            if (!g->size || g->size % h->vmm_gran || g->size > g->va_size)
                return fail(h, "expandable segment %#llx maps %llu of %llu bytes",
                            (unsigned long long)g->addr, (unsigned long long)g->size,
                            (unsigned long long)g->va_size);
        } else if (g->size % VT_MIN_BLOCK
            || (g->pool == VT_POOL_SMALL && g->size > VT_SMALL_BUFFER))
            return fail(h, "small segment of %llu bytes", (unsigned long long)g->size);
        if (!g->va_size && g->pool == VT_POOL_LARGE && g->size <= VT_SMALL_SIZE)
            return fail(h, "large segment of %llu bytes", (unsigned long long)g->size);
        if (!g->first || g->first->prev || g->first->addr != g->addr)
            return fail(h, "segment %#llx does not start with its first block",
                        (unsigned long long)g->addr);
        if (g->whole && (g->first->next || g->first->size != g->size || g->va_size
                         || g->stream != VT_NO_STREAM_KEY))
            return fail(h, "ipc-safe segment %#llx is not one block for no stream",
                        (unsigned long long)g->addr);
        uint64_t off = g->addr;
        struct sums *p = &s[g->spool];
        p->reserved += (int64_t)vt__seg_mapped(g);
        uint64_t holes = 0;
        p->segs++;
        for (vt__block *b = g->first; b; b = b->next) {
            if (b->seg != g || b->addr != off || !b->size)
                return fail(h, "block %#llx does not tile segment %#llx",
                            (unsigned long long)b->addr, (unsigned long long)g->addr);
            if (g->pool != VT_POOL_UNCACHED && b->size % VT_MIN_BLOCK)
                return fail(h, "block %#llx size %llu not a multiple of 512",
                            (unsigned long long)b->addr, (unsigned long long)b->size);
            if (b->next && b->next->prev != b)
                return fail(h, "block %#llx: broken neighbour links", (unsigned long long)b->addr);
            if (b->pool != g->pool || b->stream != g->stream)
                return fail(h, "block %#llx: pool/stream differ from its segment",
                            (unsigned long long)b->addr);
            switch (b->state) {
            case VT_B_FREE:
                if (b->prev && b->prev->state == VT_B_FREE)
                    return fail(h, "free blocks %#llx and %#llx not merged",
                                (unsigned long long)b->prev->addr, (unsigned long long)b->addr);
                if (g->pool == VT_POOL_UNCACHED)
                    return fail(h, "free block %#llx in an uncached segment",
                                (unsigned long long)b->addr);
                if (g->dead) {
                    /* a dead segment's free blocks must never be carved again */
                    if (vt__index_contains(&h->free_idx[b->pool], b))
                        return fail(h, "free block %#llx of a dead segment is in the index",
                                    (unsigned long long)b->addr);
                    if (!b->prev && !b->next)
                        return fail(h, "dead segment %#llx is free but not released",
                                    (unsigned long long)g->addr);
                } else {
                    if (!vt__index_contains(&h->free_idx[b->pool], b))
                        return fail(h, "free block %#llx missing from the free index",
                                    (unsigned long long)b->addr);
                    if (check_best_fit(h, b))
                        return -1;
                    nfree[b->pool]++;
                }
                if (b->prev || b->next) {
                    p->split_b += (int64_t)b->size;
                    p->split_n++;
                }
                break;
            case VT_B_ALLOCATED:
                if (vt__ptrmap_get(&h->live, b->addr) != b)
                    return fail(h, "allocated block %#llx missing from the pointer map",
                                (unsigned long long)b->addr);
                nalloc++;
                p->alloc_b += (int64_t)b->size;
                p->alloc_n++;
                p->req_b += (int64_t)b->req_size;
                p->active_b += (int64_t)b->size;
                p->active_n++;
                break;
            case VT_B_PENDING:
                if (!b->nwait)
                    return fail(h, "pending block %#llx waits for nothing",
                                (unsigned long long)b->addr);
                npending++;
                p->active_b += (int64_t)b->size;
                p->active_n++;
                break;
            case VT_B_UNMAPPED:
                if (!g->va_size || (b->addr - g->addr) % h->vmm_gran || b->size % h->vmm_gran)
                    return fail(h, "hole %#llx is not whole chunks of an expandable segment",
                                (unsigned long long)b->addr);
                if (!b->next || (b->prev && b->prev->state == VT_B_UNMAPPED))
                    return fail(h, "hole %#llx ends its segment or is not merged",
                                (unsigned long long)b->addr);
                holes += b->size;
                break;
            default:
                return fail(h, "block %#llx in state %d", (unsigned long long)b->addr, b->state);
            }
            off += b->size;
        }
        if (holes != g->unmapped)
            return fail(h, "segment %#llx has %llu bytes of holes, counts %llu",
                        (unsigned long long)g->addr, (unsigned long long)holes,
                        (unsigned long long)g->unmapped);
        if (off != g->addr + g->size)
            return fail(h, "blocks of segment %#llx cover %llu of %llu bytes",
                        (unsigned long long)g->addr, (unsigned long long)(off - g->addr),
                        (unsigned long long)g->size);
    }
    for (int pool = 0; pool < 2; pool++) {
        int64_t n = vt__index_check(&h->free_idx[pool]);
        if (n < 0)
            return fail(h, "free index of pool %d is inconsistent (bitmaps, tree order, "
                        "links, balance or a block's class, stream or state)", pool);
        if ((uint64_t)n != nfree[pool] || h->nfree[pool] != nfree[pool])
            return fail(h, "free index of pool %d holds %lld blocks, segments have %llu", pool,
                        (long long)n, (unsigned long long)nfree[pool]);
    }
    if (h->retired)
        return fail(h, "retired segment %#llx not released to the device",
                    (unsigned long long)h->retired->addr);
    if (h->live.count != nalloc)
        return fail(h, "pointer map holds %llu, segments have %llu allocated",
                    (unsigned long long)h->live.count, (unsigned long long)nalloc);
    if (h->npending != npending)
        return fail(h, "%llu pending counted, %llu found", (unsigned long long)h->npending,
                    (unsigned long long)npending);
    uint64_t nb = 0;
    for (vt__block *b = h->batch; b; b = b->bnext) {
        if (b->state != VT_B_PENDING || !b->in_batch)
            return fail(h, "block %#llx in the batch is not pending", (unsigned long long)b->addr);
        nb++;
    }
    if (nb != h->nbatch)
        return fail(h, "batch length %llu, counted %llu", (unsigned long long)nb,
                    (unsigned long long)h->nbatch);
    for (vt__fence *f = h->fences; f; f = f->next)
        for (uint32_t i = 0; i < f->nblocks; i++)
            if (f->blocks[i]->state != VT_B_PENDING)
                return fail(h, "a fence waits for block %#llx, which is not pending",
                            (unsigned long long)f->blocks[i]->addr);
    s[2] = s[0];
    int64_t *a = &s[2].alloc_b, *b1 = &s[1].alloc_b;
    for (size_t k = 0; k < sizeof(struct sums) / sizeof(int64_t); k++)
        a[k] += b1[k];
    for (int i = 0; i < 3; i++) {
        if (cmp_stat(h, "allocated_bytes", h->allocated_bytes, i, s[i].alloc_b)
            || cmp_stat(h, "allocation", h->allocation, i, s[i].alloc_n)
            || cmp_stat(h, "active_bytes", h->active_bytes, i, s[i].active_b)
            || cmp_stat(h, "active", h->active, i, s[i].active_n)
            || cmp_stat(h, "requested_bytes", h->requested_bytes, i, s[i].req_b)
            || cmp_stat(h, "reserved_bytes", h->reserved_bytes, i, s[i].reserved)
            || cmp_stat(h, "segment", h->segment, i, s[i].segs)
            || cmp_stat(h, "inactive_split_bytes", h->inactive_split_bytes, i, s[i].split_b)
            || cmp_stat(h, "inactive_split", h->inactive_split, i, s[i].split_n))
            return -1;
    }
    return 0;
}

VT_API int vt__alloc_check_invariants(int device)
{
    int rc = 0, n = vt__heap_count();
    for (int d = 0; d < n; d++) {
        if (device >= 0 && d != device)
            continue;
        vt__heap *h = vt__heap_get(d, false);
        if (!h)
            continue;
        vt__heap_lock(h);
        if (check_heap(h))
            rc = -1;
        vt__heap_unlock(h);
    }
    return rc;
}
