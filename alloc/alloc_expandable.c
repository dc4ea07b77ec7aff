/*
 * alloc/alloc_expandable.c - expandable segments (expandable_segments:1).
 *
 * The semantics PyTorch documents for its allocator: instead of one device
 * allocation per segment, each stream and pool (small, large) gets one range
 * of virtual addresses, reserved once, into which physical memory is mapped
 * chunk by chunk (the device's VMM granularity, 2 MiB on current GPUs) at
 * its end when a request does not fit, and from which the whole free chunks
 * at its end are unmapped when the cache gives memory back (empty_cache, the
 * OOM chain). Blocks split and coalesce inside the range as in any segment,
 * so a block freed anywhere in the range joins its free neighbours, and a
 * request larger than any hole is served by mapping only the difference at
 * the end: the fragmentation that pins fixed segments (a live small block in
 * each of many segments) does not make the cache reserve a new segment.
 *
 * A range is a vt__segment whose va_size is the reserved size and whose
 * size is the mapped prefix [addr, addr + size). It stays in h->segs like
 * any segment; a range that becomes wholly free is released whole (every
 * chunk unmapped, the addresses freed) by the normal release path.
 *
 * Device calls here run with the heap lock held: the end of a range must
 * not move while chunks are mapped there or unmapped from there. They are
 * the miss path and empty_cache only.
 *
 * Only the tail of a range is unmapped: a free hole in the middle stays
 * mapped (and reusable by any request of the stream that fits it).
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

#define NO_VMM UINT64_MAX
#define UNKNOWN_TOTAL_RESERVE (64ull << 30)   /* total memory unknown: per large range */

static uint64_t round_up(uint64_t n, uint64_t g)
{
    return (n + g - 1) / g * g;
}

/* The device's granularity, asked once (NO_VMM: no VMM, plain segments). */
static uint64_t granularity(vt__heap *h)
{
    if (!h->vmm_gran) {
        uint64_t g = 0;
        int rc = vt__backend_vmm_granularity(h->device, &g);
        h->vmm_gran = rc || !g || g % VT_MIN_BLOCK ? NO_VMM : g;
    }
    return h->vmm_gran;
}

static vt__block *tail_of(const vt__segment *s)
{
    vt__block *b = s->first;
    while (b->next)
        b = b->next;
    return b;
}

/* The inactive-split counters of a free block that has a neighbour (as
 * alloc_heap.c keeps them). */
static void account_split(vt__heap *h, const vt__segment *s, int64_t blocks, int64_t bytes)
{
    vt__stat_add(h->inactive_split_bytes, s->spool, bytes);
    vt__stat_add(h->inactive_split, s->spool, blocks);
}

/* Traced mappings: each growth is one SEGMENT_ALLOC of its chunks; every
 * SEGMENT_FREE names exactly one of them (timelines pair the two by
 * address), so an unmapping that cuts a mapping frees it and allocates
 * its kept part again. */
static void trace_map(vt__heap *h, const vt__segment *s, uint64_t addr, uint64_t size,
                      uint32_t stack)
{
    vt__trace(.kind = VT_EV_SEGMENT_ALLOC, .device = h->device,
              .stream = vt__trace_stream(s->stream), .addr = addr, .size = size, .stack = stack,
              .aux = s->pool);
}

static void trace_unmap(vt__heap *h, const vt__segment *s, uint64_t addr, uint64_t size)
{
    vt__trace(.kind = VT_EV_SEGMENT_FREE, .device = h->device,
              .stream = vt__trace_stream(s->stream), .addr = addr, .size = size, .aux = s->pool);
}

/* Room for one more piece. @return 0 or -1 (no host memory). */
static int reserve_piece(vt__segment *s)
{
    if (s->npieces < s->cappieces)
        return 0;
    uint32_t cap = s->cappieces ? s->cappieces * 2 : 8;
    uint64_t *p = realloc(s->pieces, cap * sizeof *p);
    if (!p)
        return -1;
    s->pieces = p;
    s->cappieces = cap;
    return 0;
}

void vt__expandable_trace_free(vt__heap *h, vt__segment *s)
{
    uint64_t end = s->addr + s->size;
    while (s->npieces) {
        uint64_t start = s->pieces[--s->npieces];
        trace_unmap(h, s, start, end - start);
        end = start;
    }
}

/* The traced mappings after the range was cut back to `keep` bytes. */
static void trace_cut(vt__heap *h, vt__segment *s, uint64_t keep)
{
    uint64_t end = s->addr + s->size, new_end = s->addr + keep;
    while (s->npieces && s->pieces[s->npieces - 1] >= new_end) {
        uint64_t start = s->pieces[--s->npieces];
        trace_unmap(h, s, start, end - start);
        end = start;
    }
    if (end > new_end && s->npieces) {   /* the last one is cut: again, shorter */
        uint64_t start = s->pieces[s->npieces - 1];
        trace_unmap(h, s, start, end - start);
        trace_map(h, s, start, new_end - start, 0);
        h->num_backend_allocs++;
    }
}

static bool over_cap(const vt__heap *h, uint64_t more)
{
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    return h->cap != UINT64_MAX && reserved + h->inflight + more > h->cap;
}

/* The freed-start bits cover the mapped size (NULL: unknown from now on). */
static void resize_freed_bits(vt__segment *s, uint64_t old_size, uint64_t new_size)
{
    if (!s->freed)
        return;
    size_t old_words = (old_size / VT_MIN_BLOCK + 63) / 64;
    size_t new_words = (new_size / VT_MIN_BLOCK + 63) / 64;
    if (new_words <= old_words)
        return;
    uint64_t *f = realloc(s->freed, new_words * sizeof *f);
    if (!f) {
        free(s->freed);
        s->freed = NULL;
        return;
    }
    memset(f + old_words, 0, (new_words - old_words) * sizeof *f);
    s->freed = f;
}

/* A new range for (pool, key) with its first `need` bytes mapped. */
static int new_range(vt__heap *h, int pool, uint64_t key, uint64_t need, uint64_t g,
                     uint32_t stack, vt__block **out)
{
    uint64_t total = h->total_mem == UINT64_MAX ? UNKNOWN_TOTAL_RESERVE : h->total_mem;
    /* PyTorch reserves the device's memory for every range; small blocks
     * (<= 1 MiB) rarely need more than an eighth of it, and a full range
     * just starts another one. */
    uint64_t va_size = round_up(pool == VT_POOL_SMALL ? total / 8 : total, g);
    if (va_size < need)
        va_size = need;
    if (!vt__index_stream(&h->free_idx[pool], key, true))
        return VT_CUDA_ERR_OOM;   /* no host memory for the stream's index */
    vt__segment *s = malloc(sizeof *s);
    vt__block *b = vt__block_new(h);
    uint64_t *freed = calloc((need / VT_MIN_BLOCK + 63) / 64, sizeof(uint64_t));
    uint64_t addr = 0;
    int rc = VT_CUDA_ERR_OOM;
    uint64_t *pieces = malloc(8 * sizeof *pieces);
    if (!s || !b || !pieces
        || vt__reserve_one((void **)&h->segs, h->nsegs, &h->capsegs, sizeof *h->segs, 64))
        goto fail;
    if (vt__backend_va_reserve(h->device, va_size, &addr)) {
        rc = VT_EXPANDABLE_UNAVAILABLE;   /* no address space: a plain segment */
        goto fail;
    }
    if ((rc = vt__backend_map(h->device, addr, need, g))) {
        vt__backend_va_free(h->device, addr, va_size);
        goto fail;
    }
    *s = (vt__segment){ .addr = addr, .size = need, .va_size = va_size, .stream = key,
                        .first = b, .pool = (uint8_t)pool, .spool = (uint8_t)pool,
                        .freed = freed, .pieces = pieces, .npieces = 1, .cappieces = 8 };
    pieces[0] = addr;
    vt__segs_insert(h, s);   /* cannot fail: room reserved above */
    vt__segment_start_free(h, s, b, need);
    h->num_backend_allocs++;
    trace_map(h, s, addr, need, stack);
    *out = b;
    return 0;
fail:
    free(pieces);
    free(freed);
    free(s);
    if (b)
        vt__block_release(h, b);
    return rc;
}

/* Map `need` more bytes at the end of s; the free block at its end grows
 * (or a new one starts there). */
static int extend(vt__heap *h, vt__segment *s, vt__block *tail, uint64_t need, uint64_t g,
                  uint32_t stack, vt__block **out)
{
    int pool = s->pool;
    if (reserve_piece(s))
        return VT_CUDA_ERR_OOM;
    vt__block *b = tail->state == VT_B_FREE ? tail : vt__block_new(h);
    if (!b)
        return VT_CUDA_ERR_OOM;
    uint64_t end = s->addr + s->size;
    int rc = vt__backend_map(h->device, end, need, g);
    if (rc) {
        if (b != tail)
            vt__block_release(h, b);
        return rc;
    }
    resize_freed_bits(s, s->size, s->size + need);
    if (b == tail) {
        vt__index_remove(&h->free_idx[pool], b);
        b->size += need;
        if (b->prev)
            account_split(h, s, 0, (int64_t)need);
    } else {
        b->addr = end;
        b->size = need;
        b->stream = s->stream;
        b->seg = s;
        b->pool = (uint8_t)pool;
        b->state = VT_B_FREE;
        b->free_tick = h->tick;
        b->prev = tail;
        tail->next = b;
        h->nfree[pool]++;
        account_split(h, s, 1, (int64_t)need);
    }
    vt__index_insert(&h->free_idx[pool], b);
    s->size += need;
    uint64_t v = atomic_load(&h->hi);
    while (s->addr + s->size > v && !atomic_compare_exchange_weak(&h->hi, &v, s->addr + s->size))
        ;
    h->num_backend_allocs++;   /* one device allocation: a mapping (a SEGMENT_ALLOC event) */
    vt__stat_add(h->reserved_bytes, pool, (int64_t)need);
    s->pieces[s->npieces++] = end;
    trace_map(h, s, end, need, stack);
    *out = b;
    return 0;
}

int vt__expandable_grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                        vt__block **out)
{
    uint64_t g = granularity(h);
    if (g == NO_VMM)
        return VT_EXPANDABLE_UNAVAILABLE;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *s = h->segs[i];
        if (!s->va_size || s->pool != pool || s->stream != key || s->dead)
            continue;
        vt__block *tail = tail_of(s);
        uint64_t have = tail->state == VT_B_FREE ? tail->size : 0;
        if (have >= size)
            continue;   /* fits but was refused (max_split_size): not this way */
        uint64_t need = round_up(size - have, g);
        if (s->size + need > s->va_size)
            continue;   /* full: another range of the stream, or a new one */
        if (over_cap(h, need))
            return VT_CUDA_ERR_OOM;
        return extend(h, s, tail, need, g, stack, out);
    }
    uint64_t need = round_up(size, g);
    if (over_cap(h, need))
        return VT_CUDA_ERR_OOM;
    return new_range(h, pool, key, need, g, stack, out);
}

uint64_t vt__expandable_free_tail(const vt__heap *h, const vt__segment *s)
{
    const vt__block *t = tail_of(s);
    if (s->dead || t->state != VT_B_FREE || t == s->first)
        return 0;
    uint64_t keep = round_up(t->addr - s->addr, h->vmm_gran);
    return keep < s->size ? s->size - keep : 0;
}

void vt__expandable_shrink(vt__heap *h)
{
    uint64_t g = h->vmm_gran;
    if (!g || g == NO_VMM)
        return;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *s = h->segs[i];
        if (!s->va_size || s->dead)
            continue;
        vt__block *t = tail_of(s);
        /* a wholly free range goes back whole (vt__seg_unused) */
        if (t->state != VT_B_FREE || t == s->first)
            continue;
        uint64_t keep = round_up(t->addr - s->addr, g);
        if (keep >= s->size)
            continue;
        uint64_t cut = s->size - keep;
        if (vt__backend_unmap(h->device, s->addr + keep, cut, g))
            continue;
        vt__index_remove(&h->free_idx[s->pool], t);
        if (t->addr == s->addr + keep) {   /* the whole block was in the cut */
            account_split(h, s, -1, -(int64_t)t->size);
            t->prev->next = NULL;
            h->nfree[s->pool]--;
            vt__block_release(h, t);
        } else {
            t->size -= cut;
            account_split(h, s, 0, -(int64_t)cut);
            vt__index_insert(&h->free_idx[s->pool], t);
        }
        trace_cut(h, s, keep);
        s->size = keep;
        h->num_backend_frees++;
        vt__stat_add(h->reserved_bytes, s->spool, -(int64_t)cut);
    }
}

int vt__expandable_release(vt__heap *h, vt__segment *s)
{
    int rc = vt__backend_unmap(h->device, s->addr, s->size, h->vmm_gran);
    int r = vt__backend_va_free(h->device, s->addr, s->va_size);
    return rc ? rc : r;
}
