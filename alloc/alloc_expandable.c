/*
 * alloc/alloc_expandable.c - expandable segments (expandable_segments:1).
 *
 * The semantics PyTorch documents for its allocator: instead of one device
 * allocation per segment, each stream and pool (small, large) gets one range
 * of virtual addresses, reserved once, into which physical memory is mapped
 * chunk by chunk (the device's VMM granularity, 2 MiB on current GPUs) when
 * a request does not fit, and from which every whole free chunk is unmapped
 * when the cache gives memory back (empty_cache, the OOM chain), at the end
 * of the range or in its middle. Blocks split and coalesce inside the range
 * as in any segment, so a block freed anywhere in the range joins its free
 * neighbours, and a request larger than any hole is served by mapping only
 * the difference: the fragmentation that pins fixed segments (a live small
 * block in each of many segments) does not make the cache reserve a new
 * segment, and the free memory between live blocks goes back to the device.
 *
 * A range is a vt__segment whose va_size is the reserved size and whose
 * size is the extent of its blocks [addr, addr + size); beyond it nothing
 * is mapped. Unmapped chunks inside that extent are holes: VT_B_UNMAPPED
 * blocks, never in the free index, never merged with free blocks (adjacent
 * holes merge), never the last block (the extent shrinks instead). A range
 * reserves size - unmapped bytes. It stays in h->segs like any segment; a
 * range that holds no allocated or pending block goes back whole (every
 * mapping unmapped, the addresses freed) by the normal release path.
 *
 * Where a request maps memory follows PyTorch's search: among the holes of
 * the stream's ranges and their unmapped ends, the smallest (then lowest)
 * one that, with the free block just before it and the free and unmapped
 * blocks after it, spans the request; the holes of that run are mapped
 * (only as much of the last one as the request needs) and the run becomes
 * one free block. No such hole: a new range.
 *
 * Device calls here run with the heap lock held: the blocks around a chunk
 * must not change while it is mapped or unmapped. They are the miss path and
 * empty_cache only.
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

static uint64_t round_down(uint64_t n, uint64_t g)
{
    return n / g * g;
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

/* ---- free blocks in the cache's books ------------------------------------ */

/* The inactive-split counters of a free block that has a neighbour (as
 * alloc_heap.c keeps them). */
static void account_free(vt__heap *h, const vt__block *b, int sign)
{
    if (b->prev || b->next) {
        vt__stat_add(h->inactive_split_bytes, b->seg->spool, sign * (int64_t)b->size);
        vt__stat_add(h->inactive_split, b->seg->spool, sign);
    }
}

/* A free block leaves the books (before its links or size change) ... */
static void unlist_free(vt__heap *h, vt__block *b)
{
    account_free(h, b, -1);
    vt__index_remove(&h->free_idx[b->pool], b);
    h->nfree[b->pool]--;
}

/* ... and enters them (after). */
static void list_free(vt__heap *h, vt__block *b)
{
    account_free(h, b, +1);
    vt__index_insert(&h->free_idx[b->pool], b);
    h->nfree[b->pool]++;
}

/* b goes into s's block list before `at` (NULL: at the end, after `last`). */
static void link_before(vt__segment *s, vt__block *b, vt__block *at, vt__block *last)
{
    b->next = at;
    b->prev = at ? at->prev : last;
    if (b->prev)
        b->prev->next = b;
    else
        s->first = b;
    if (at)
        at->prev = b;
}

static void unlink_block(vt__segment *s, vt__block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        s->first = b->next;
    if (b->next)
        b->next->prev = b->prev;
}

/* Free block f (not in the books) absorbs its free neighbours and enters
 * the books. */
static void absorb_free_neighbours(vt__heap *h, vt__segment *s, vt__block *f)
{
    vt__block *p = f->prev, *n = f->next;
    if (p && p->state == VT_B_FREE) {
        unlist_free(h, p);
        f->addr = p->addr;
        f->size += p->size;
        unlink_block(s, p);
        vt__block_release(h, p);
    }
    if (n && n->state == VT_B_FREE) {
        unlist_free(h, n);
        f->size += n->size;
        unlink_block(s, n);
        vt__block_release(h, n);
    }
    list_free(h, f);
}

/* ---- the mappings as the trace shows them --------------------------------- */

/* Traced mappings: each mapping is one SEGMENT_ALLOC of its chunks; every
 * SEGMENT_FREE names exactly one of them (timelines pair the two by
 * address), so an unmapping that cuts a mapping frees it and allocates its
 * kept parts again. */
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

/* Room for `more` pieces. @return 0 or -1 (no host memory). */
static int reserve_pieces(vt__segment *s, uint32_t more)
{
    if (s->npieces + more <= s->cappieces)
        return 0;
    uint32_t cap = s->cappieces ? s->cappieces : 8;
    while (cap < s->npieces + more)
        cap *= 2;
    vt__mapping *p = realloc(s->pieces, cap * sizeof *p);
    if (!p)
        return -1;
    s->pieces = p;
    s->cappieces = cap;
    return 0;
}

/* A new mapping [start, end), traced, in address order (room reserved). */
static void add_piece(vt__heap *h, vt__segment *s, uint64_t start, uint64_t end, uint32_t stack)
{
    uint32_t i = s->npieces;
    while (i && s->pieces[i - 1].start > start)
        i--;
    memmove(&s->pieces[i + 1], &s->pieces[i], (s->npieces - i) * sizeof *s->pieces);
    s->pieces[i] = (vt__mapping){ start, end };
    s->npieces++;
    trace_map(h, s, start, end - start, stack);
}

/* [u0, u1) was unmapped: the mappings it cuts are traced as freed, their
 * kept parts as allocated again (room for two more pieces reserved). */
static void trace_unmapped(vt__heap *h, vt__segment *s, uint64_t u0, uint64_t u1)
{
    vt__mapping keep[2];
    int nkeep = 0;
    for (uint32_t i = s->npieces; i-- > 0;) {
        vt__mapping m = s->pieces[i];
        if (m.end <= u0 || m.start >= u1)
            continue;
        trace_unmap(h, s, m.start, m.end - m.start);
        h->num_backend_frees++;   /* one device free per traced mapping freed */
        memmove(&s->pieces[i], &s->pieces[i + 1], (s->npieces - i - 1) * sizeof *s->pieces);
        s->npieces--;
        if (m.end > u1)
            keep[nkeep++] = (vt__mapping){ u1, m.end };
        if (m.start < u0)
            keep[nkeep++] = (vt__mapping){ m.start, u0 };
    }
    for (int k = 0; k < nkeep; k++) {
        add_piece(h, s, keep[k].start, keep[k].end, 0);
        h->num_backend_allocs++;
    }
}

void vt__expandable_trace_free(vt__heap *h, vt__segment *s)
{
    for (uint32_t i = s->npieces; i-- > 0;)
        trace_unmap(h, s, s->pieces[i].start, s->pieces[i].end - s->pieces[i].start);
}

/* ---- growing ---------------------------------------------------------------- */

static bool over_cap(const vt__heap *h, uint64_t more)
{
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    return h->cap != UINT64_MAX && reserved + h->inflight + more > h->cap;
}

/* The freed-start bits cover the extent (NULL: unknown from now on). */
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
    vt__mapping *pieces = malloc(8 * sizeof *pieces);
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
                        .freed = freed, .pieces = pieces, .cappieces = 8 };
    vt__segs_insert(h, s);   /* cannot fail: room reserved above */
    vt__segment_start_free(h, s, b, need);
    h->num_backend_allocs++;
    add_piece(h, s, addr, addr + need, stack);
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
 * (or a new one starts there). *head: that block. */
static int extend(vt__heap *h, vt__segment *s, uint64_t need, uint64_t g, uint32_t stack,
                  vt__block **head)
{
    vt__block *tail = tail_of(s);
    if (reserve_pieces(s, 1))
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
        unlist_free(h, b);
        b->size += need;
    } else {
        vt__block_set_free(h, s, b, end, need);
        link_before(s, b, NULL, tail);
    }
    list_free(h, b);
    s->size += need;
    uint64_t v = atomic_load(&h->hi);
    while (s->addr + s->size > v && !atomic_compare_exchange_weak(&h->hi, &v, s->addr + s->size))
        ;
    h->num_backend_allocs++;   /* one device allocation: a mapping (a SEGMENT_ALLOC event) */
    vt__stat_add(h->reserved_bytes, s->spool, (int64_t)need);
    add_piece(h, s, end, end + need, stack);
    *head = b;
    return 0;
}

/* Map the first `need` bytes of hole u; they join the free blocks around
 * them. *head: the free block they are now part of. */
static int map_hole(vt__heap *h, vt__segment *s, vt__block *u, uint64_t need, uint64_t g,
                    uint32_t stack, vt__block **head)
{
    if (reserve_pieces(s, 1))
        return VT_CUDA_ERR_OOM;
    vt__block *f = need < u->size ? vt__block_new(h) : u;
    if (!f)
        return VT_CUDA_ERR_OOM;
    uint64_t at = u->addr;
    int rc = vt__backend_map(h->device, at, need, g);
    if (rc) {
        if (f != u)
            vt__block_release(h, f);
        return rc;
    }
    if (f != u) {
        vt__block_set_free(h, s, f, at, need);
        link_before(s, f, u, NULL);
        u->addr += need;
        u->size -= need;
    } else {
        vt__block_set_free(h, s, f, at, need);   /* the whole hole: links kept */
    }
    s->unmapped -= need;
    absorb_free_neighbours(h, s, f);
    h->num_backend_allocs++;
    vt__stat_add(h->reserved_bytes, s->spool, (int64_t)need);
    add_piece(h, s, at, at + need, stack);
    *head = f;
    return 0;
}

/* The run from block `from` (NULL: the unmapped end of s) can serve `size`
 * bytes: its free and unmapped blocks, then the unmapped end when the run
 * reaches it. @return the bytes to map (0: it cannot, or needs nothing
 * mapped, which the free index already refused). */
static uint64_t run_needs(const vt__segment *s, const vt__block *from, uint64_t size, uint64_t g)
{
    uint64_t got = 0, map = 0;
    const vt__block *b = from;
    for (; b && got < size; b = b->next) {
        if (b->state == VT_B_FREE) {
            got += b->size;
        } else if (b->state == VT_B_UNMAPPED) {
            uint64_t x = round_up(size - got, g);
            x = x < b->size ? x : b->size;
            map += x;
            got += x;
        } else {
            return 0;
        }
    }
    if (got < size) {   /* b == NULL: the unmapped end */
        uint64_t x = round_up(size - got, g);
        if (s->size + x > s->va_size)
            return 0;
        map += x;
    }
    return map;
}

typedef struct run_choice {
    vt__segment *s;
    vt__block *from;          /* first block of the run; NULL: the unmapped end */
    uint64_t key_size, key_addr; /* the unmapped space it was found by */
    uint64_t map;             /* bytes to map */
} run_choice;

/* Unmapped space [addr, +size) of s (hole u, or NULL: the end after block
 * `before`): the run from the free block before it, or from it. */
static void consider(run_choice *best, vt__segment *s, vt__block *u, vt__block *before,
                     uint64_t addr, uint64_t size, uint64_t want, uint64_t g)
{
    if (best->s && (size > best->key_size || (size == best->key_size && addr > best->key_addr)))
        return;
    vt__block *from = before && before->state == VT_B_FREE ? before : u;
    uint64_t map = run_needs(s, from, want, g);
    if (map)
        *best = (run_choice){ .s = s, .from = from, .key_size = size, .key_addr = addr,
                              .map = map };
}

int vt__expandable_grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                        vt__block **out)
{
    uint64_t g = granularity(h);
    if (g == NO_VMM)
        return VT_EXPANDABLE_UNAVAILABLE;
    run_choice best = { 0 };
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *s = h->segs[i];
        if (!s->va_size || s->pool != pool || s->stream != key || s->dead)
            continue;
        vt__block *last = NULL;
        for (vt__block *b = s->first; b; b = b->next) {
            if (b->state == VT_B_UNMAPPED)
                consider(&best, s, b, b->prev, b->addr, b->size, size, g);
            last = b;
        }
        if (s->size < s->va_size)
            consider(&best, s, NULL, last, s->addr + s->size, s->va_size - s->size, size, g);
    }
    if (!best.s) {
        uint64_t need = round_up(size, g);
        if (over_cap(h, need))
            return VT_CUDA_ERR_OOM;
        return new_range(h, pool, key, need, g, stack, out);
    }
    if (over_cap(h, best.map))
        return VT_CUDA_ERR_OOM;
    vt__segment *s = best.s;
    vt__block *head = best.from && best.from->state == VT_B_FREE ? best.from : NULL;
    vt__block *u = head ? head->next : best.from;   /* the next hole; NULL: the end */
    while (!head || head->size < size) {
        uint64_t have = head ? head->size : 0;
        uint64_t need = round_up(size - have, g);
        int rc;
        if (u && u->state != VT_B_UNMAPPED)
            return VT_CUDA_ERR_OOM;   /* cannot happen: run_needs walked this run */
        if (u)
            rc = map_hole(h, s, u, need < u->size ? need : u->size, g, stack, &head);
        else
            rc = extend(h, s, need, g, stack, &head);
        if (rc)
            return rc;   /* what was mapped stays, free */
        u = head->next;
    }
    *out = head;
    return 0;
}

/* ---- giving memory back ------------------------------------------------------ */

uint64_t vt__expandable_free_chunks(const vt__heap *h, const vt__segment *s)
{
    uint64_t g = h->vmm_gran, v = 0;
    if (s->dead || !g || g == NO_VMM)
        return 0;
    for (const vt__block *b = s->first; b; b = b->next) {
        if (b->state != VT_B_FREE)
            continue;
        uint64_t u0 = round_up(b->addr - s->addr, g), u1 = round_down(b->addr + b->size - s->addr, g);
        v += u1 > u0 ? u1 - u0 : 0;
    }
    return v;
}

/* Unmap the whole chunks of free block b of range s (which holds an
 * allocated or pending block): the ones at the end of the range move its
 * end back, the others become a hole between what is left of b.
 * @return the block to look at next. */
static vt__block *unmap_free_chunks(vt__heap *h, vt__segment *s, vt__block *b, uint64_t g)
{
    uint64_t end = b->addr + b->size;
    uint64_t u0 = s->addr + round_up(b->addr - s->addr, g);
    uint64_t u1 = s->addr + round_down(end - s->addr, g);
    if (u1 <= u0)
        return b->next;
    bool at_end = !b->next, before = u0 > b->addr, after = u1 < end;
    vt__block *fb = before && !at_end ? vt__block_new(h) : NULL;
    vt__block *fa = after ? vt__block_new(h) : NULL;
    if ((before && !at_end && !fb) || (after && !fa) || reserve_pieces(s, 2)
        || vt__backend_unmap(h->device, u0, u1 - u0, g)) {
        if (fb)
            vt__block_release(h, fb);
        if (fa)
            vt__block_release(h, fa);
        return b->next;
    }
    unlist_free(h, b);
    vt__stat_add(h->reserved_bytes, s->spool, -(int64_t)(u1 - u0));
    trace_unmapped(h, s, u0, u1);
    if (at_end) {
        if (before) {
            b->size = u0 - b->addr;
            list_free(h, b);
        } else {
            vt__block *p = b->prev;   /* exists: the range holds another block */
            unlink_block(s, b);
            vt__block_release(h, b);
            if (p->state == VT_B_UNMAPPED) {   /* the hole before is the end now */
                s->unmapped -= p->size;
                u0 = p->addr;
                unlink_block(s, p);
                vt__block_release(h, p);
            }
        }
        s->size = u0 - s->addr;
        return NULL;
    }
    if (before) {
        vt__block_set_free(h, s, fb, b->addr, u0 - b->addr);
        fb->free_tick = b->free_tick;
        link_before(s, fb, b, NULL);
    }
    if (after) {
        vt__block_set_free(h, s, fa, u1, end - u1);
        fa->free_tick = b->free_tick;
        link_before(s, fa, b->next, NULL);   /* b->next exists: b is not the last */
    }
    b->addr = u0;
    b->size = u1 - u0;
    b->state = VT_B_UNMAPPED;
    b->free_tick = h->tick;
    s->unmapped += u1 - u0;
    vt__block *p = b->prev, *n = b->next;
    if (p && p->state == VT_B_UNMAPPED) {   /* adjacent holes are one */
        b->addr = p->addr;
        b->size += p->size;
        unlink_block(s, p);
        vt__block_release(h, p);
    }
    if (n && n->state == VT_B_UNMAPPED) {
        b->size += n->size;
        unlink_block(s, n);
        vt__block_release(h, n);
    }
    if (fb)
        list_free(h, fb);
    if (fa)
        list_free(h, fa);
    return b->next;
}

/* cuMemUnmap does not wait for work still queued on the memory (an H200,
 * driver 580: the fact unmap_while_queued in tests/gpucheck/driver_facts.c;
 * the queued work then faults, and the context with it). So a range waits
 * for its stream before it gives chunks back, as PyTorch's expandable
 * segments do. Only the range's own stream can still touch a free block:
 * one used on other streams stays pending until they reached its free
 * (alloc_fence.c). So a range of memory of no stream (cudaMalloc's, whose
 * every free is fenced on every stream) needs no wait, and a dead range's
 * stream was waited for when it was destroyed (alloc_stream.c). A range of
 * another thread's per-thread stream (which cannot be named from here)
 * waits for the whole device. Nothing may wait while a capture is underway
 * (synchronizing a capturing stream invalidates the capture): the range
 * keeps its chunks then. */
int vt__expandable_wait(vt__heap *h, const vt__segment *s)
{
    if (s->dead || s->stream == VT_NO_STREAM_KEY)
        return 0;
    uint64_t raw = vt__stream_raw(s->stream);
    bool whole_device = (s->stream & VT_PTDS_KEY_BIT) && raw != 2;
    if (whole_device ? vt__heap_any_capturing(h) : vt__backend_stream_capturing(h->device, raw))
        return VT_WAIT_CAPTURING;
    return whole_device ? vt__backend_device_sync(h->device)
                        : vt__backend_stream_sync(h->device, raw);
}

void vt__expandable_shrink(vt__heap *h)
{
    uint64_t g = h->vmm_gran;
    if (!g || g == NO_VMM)
        return;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *s = h->segs[i];
        /* a wholly free range goes back whole (vt__seg_unused) */
        if (!s->va_size || s->dead || vt__seg_unused(s))
            continue;
        if (!vt__expandable_free_chunks(h, s) || vt__expandable_wait(h, s))
            continue;
        for (vt__block *b = s->first; b;)
            b = b->state == VT_B_FREE ? unmap_free_chunks(h, s, b, g) : b->next;
    }
}

int vt__expandable_release(vt__heap *h, vt__segment *s)
{
    int rc = 0;
    for (uint32_t i = 0; i < s->npieces; i++) {
        int r = vt__backend_unmap(h->device, s->pieces[i].start,
                                  s->pieces[i].end - s->pieces[i].start, h->vmm_gran);
        if (r && !rc)
            rc = r;
    }
    int r = vt__backend_va_free(h->device, s->addr, s->va_size);
    return rc ? rc : r;
}
