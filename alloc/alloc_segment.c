/*
 * alloc/alloc_segment.c - segments: the device allocations a heap is made
 * of, from the backend and back to it.
 *
 * A heap keeps its segments sorted by address (the lookups of a free and of
 * a bad free). A new segment is allocated with the heap lock dropped (its
 * bytes count against the cap meanwhile). Segments go back to the device
 * only with the lock dropped too: detach under the lock, release after
 * (cuMemFree synchronizes the device). On a miss (vt__heap_grow): garbage
 * collection (gc threshold), a new segment, and the OOM chain: release
 * unused segments and retry, then wait for every pending free, release all
 * and retry, then a segment of exactly the request (what the program's own
 * cudaMalloc would have got), then fail.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

/* Mid-size requests (1 to 10 MiB) share segments of up to 20 MiB, as
 * PyTorch's do, but sized to a whole number of the request: a 20 MiB
 * segment of 7 MiB blocks would leave a 6 MiB tail that no later 7 MiB
 * request can use, and a program filling the device with them would run
 * out of memory at 70 % of what plain cudaMalloc gets (3 MiB: 90 %). */
static uint64_t segment_size(uint64_t size)
{
    if (size <= VT_SMALL_SIZE)
        return VT_SMALL_BUFFER;
    if (size < VT_MIN_LARGE_ALLOC)
        return size * (VT_LARGE_BUFFER / size);
    return (size + VT_ROUND_LARGE - 1) & ~(VT_ROUND_LARGE - 1);
}

int vt__segs_insert(vt__heap *h, vt__segment *s)
{
    if (vt__reserve_one((void **)&h->segs, h->nsegs, &h->capsegs, sizeof *h->segs, 64))
        return -1;
    uint64_t lo = 0, hi = h->nsegs;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (h->segs[mid]->addr < s->addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&h->segs[lo + 1], &h->segs[lo], (h->nsegs - lo) * sizeof *h->segs);
    h->segs[lo] = s;
    h->nsegs++;
    uint64_t v = atomic_load(&h->lo);
    while (s->addr < v && !atomic_compare_exchange_weak(&h->lo, &v, s->addr))
        ;
    v = atomic_load(&h->hi);
    while (s->addr + s->size > v && !atomic_compare_exchange_weak(&h->hi, &v, s->addr + s->size))
        ;
    return 0;
}

vt__segment *vt__segs_find(vt__heap *h, uint64_t addr, uint64_t *index)
{
    uint64_t lo = 0, hi = h->nsegs;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        vt__segment *s = h->segs[mid];
        if (addr < s->addr)
            hi = mid;
        else if (addr >= s->addr + s->size)
            lo = mid + 1;
        else {
            if (index)
                *index = mid;
            return s;
        }
    }
    return NULL;
}

void vt__segs_remove(vt__heap *h, vt__segment *s)
{
    uint64_t i;
    if (vt__segs_find(h, s->addr, &i) != s)
        return;
    memmove(&h->segs[i], &h->segs[i + 1], (h->nsegs - i - 1) * sizeof *h->segs);
    h->nsegs--;
}

bool vt__seg_unused(const vt__segment *s)
{
    if (s->pool == VT_POOL_UNCACHED)
        return false;
    if (!s->unmapped)
        return s->first->state == VT_B_FREE && s->first->size == s->size;
    for (const vt__block *b = s->first; b; b = b->next)   /* free blocks between holes */
        if (b->state != VT_B_FREE && b->state != VT_B_UNMAPPED)
            return false;
    return true;
}

void vt__seg_detach(vt__heap *h, vt__segment *s, vt__segment **list)
{
    for (vt__block *b = s->first, *n; b; b = n) {
        n = b->next;
        if (b->state == VT_B_FREE) {
            if (b->prev || b->next) {   /* beside a hole: counted as split */
                vt__stat_add(h->inactive_split_bytes, s->spool, -(int64_t)b->size);
                vt__stat_add(h->inactive_split, s->spool, -1);
            }
            if (!s->dead) {
                vt__index_remove(&h->free_idx[s->pool], b);
                h->nfree[s->pool]--;
            }
        }
        vt__block_release(h, b);
    }
    vt__segs_remove(h, s);
    vt__stat_add(h->reserved_bytes, s->spool, -(int64_t)vt__seg_mapped(s));
    vt__stat_add(h->segment, s->spool, -1);
    if (s->va_size)
        vt__expandable_trace_free(h, s);
    else
        vt__trace(.kind = VT_EV_SEGMENT_FREE, .device = h->device,
                  .stream = vt__trace_stream(s->stream), .addr = s->addr, .size = s->size,
                  .aux = s->pool);
    s->next = *list;
    *list = s;
}

/* Free detached segments on the device with the lock dropped (cuMemFree
 * synchronizes the device: other threads must not wait for that). */
int vt__release_detached(vt__heap *h, vt__segment *list)
{
    if (vt__unlikely(h->retired)) {   /* dead segments that became free: along too */
        vt__segment *t = h->retired;
        while (t->next)
            t = t->next;
        t->next = list;
        list = h->retired;
        h->retired = NULL;
    }
    if (!list)
        return 0;
    int rc = 0;
    uint64_t n = 0;
    vt__segment *deferred = NULL;
    vt__heap_unlock(h);
    while (list) {
        vt__segment *s = list;
        list = s->next;
        /* a range whose work cannot be waited for during a capture goes
         * back at a later release (not at every free of the capture: the
         * free path looks at h->retired only) */
        if (s->va_size && vt__expandable_wait(h, s) == VT_WAIT_CAPTURING) {
            s->next = deferred;
            deferred = s;
            continue;
        }
        int r = s->va_size ? vt__expandable_release(h, s) : vt__backend_free(h->device, s->addr);
        if (r && !rc)
            rc = r;
        n += s->va_size ? s->npieces : 1;   /* as many as SEGMENT_FREE events */
        free(s->freed);
        free(s->pieces);
        free(s);
    }
    vt__heap_lock(h);
    h->num_backend_frees += n;
    while (deferred) {
        vt__segment *s = deferred;
        deferred = s->next;
        s->next = h->unwaited;
        h->unwaited = s;
    }
    return rc;
}

/* Release unused segments: `need` bytes' worth (the smallest one that is big
 * enough, else the largest first), or all of them. */
static int release_cached(vt__heap *h, uint64_t need, bool all)
{
    vt__segment *list = h->unwaited;   /* ranges a capture kept: tried again */
    h->unwaited = NULL;
    vt__expandable_shrink(h);
    if (!all) {
        vt__segment *fit = NULL;
        for (uint64_t i = 0; i < h->nsegs; i++) {
            vt__segment *s = h->segs[i];
            if (vt__seg_unused(s) && vt__seg_mapped(s) >= need
                && (!fit || vt__seg_mapped(s) < vt__seg_mapped(fit)))
                fit = s;
        }
        if (fit) {
            vt__seg_detach(h, fit, &list);
            return vt__release_detached(h, list);
        }
    }
    uint64_t freed = 0;
    while (all || freed < need) {
        vt__segment *big = NULL;
        for (uint64_t i = 0; i < h->nsegs; i++) {
            vt__segment *s = h->segs[i];
            if (vt__seg_unused(s) && (!big || vt__seg_mapped(s) > vt__seg_mapped(big)))
                big = s;
        }
        if (!big)
            break;
        freed += vt__seg_mapped(big);
        vt__seg_detach(h, big, &list);
    }
    return vt__release_detached(h, list);
}

/* garbage_collection_threshold: before the cache grows past threshold x cap,
 * release the unused segments that have been idle longer than average. */
static void collect_garbage(vt__heap *h, uint64_t incoming, const vt__conf *cfg)
{
    double thr = cfg->garbage_collection_threshold;
    if (thr <= 0 || h->cap == UINT64_MAX)
        return;
    uint64_t target = (uint64_t)(thr * (double)h->cap);
    vt__segment *list = NULL;
    for (;;) {
        uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
        if (reserved + incoming <= target)
            break;
        uint64_t total_age = 0, n = 0;
        for (uint64_t i = 0; i < h->nsegs; i++)
            if (vt__seg_unused(h->segs[i])) {
                total_age += h->tick - h->segs[i]->first->free_tick;
                n++;
            }
        if (!n)
            break;
        uint64_t avg = total_age / n, released = 0;
        for (uint64_t i = 0; i < h->nsegs && reserved + incoming > target;) {
            vt__segment *s = h->segs[i];
            if (vt__seg_unused(s) && h->tick - s->first->free_tick >= avg) {
                reserved -= vt__seg_mapped(s);
                vt__seg_detach(h, s, &list);   /* shifts segs down: same i again */
                released++;
            } else {
                i++;
            }
        }
        if (!released)
            break;
    }
    vt__release_detached(h, list);
}

void vt__block_set_free(const vt__heap *h, const vt__segment *s, vt__block *b, uint64_t addr,
                        uint64_t size)
{
    b->addr = addr;
    b->size = size;
    b->stream = s->stream;
    b->seg = (vt__segment *)s;
    b->pool = s->pool;
    b->state = VT_B_FREE;
    b->free_tick = h->tick;
}

/* b becomes the one block of the new segment s, free, [s->addr, +size) on
 * s's stream and pool: indexed, and counted as reserved. */
void vt__segment_start_free(vt__heap *h, vt__segment *s, vt__block *b, uint64_t size)
{
    int pool = s->pool;
    vt__block_set_free(h, s, b, s->addr, size);
    vt__index_insert(&h->free_idx[pool], b);
    h->nfree[pool]++;
    vt__stat_add(h->reserved_bytes, pool, (int64_t)size);
    vt__stat_add(h->segment, pool, 1);
}

int vt__heap_backend_malloc(vt__heap *h, uint64_t size, uint64_t *addr)
{
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    if (h->cap != UINT64_MAX && reserved + h->inflight + size > h->cap)
        return VT_CUDA_ERR_OOM;
    h->inflight += size;
    vt__heap_unlock(h);
    int rc = vt__backend_malloc(h->device, size, addr);
    vt__heap_lock(h);
    h->inflight -= size;
    if (!rc)
        h->num_backend_allocs++;
    return rc;
}

/* A new segment from the backend, with the heap lock dropped during the
 * call. The reservation counts against the cap while the lock is dropped. */
static int new_segment(vt__heap *h, int pool, uint64_t key, uint64_t size,
                       uint32_t stack, bool whole, vt__block **out)
{
    if (vt__config()->expandable_segments && !whole) {
        int rc = vt__expandable_grow(h, pool, key, size, stack, out);
        if (rc != VT_EXPANDABLE_UNAVAILABLE)
            return rc;
    }
    if (!vt__index_stream(&h->free_idx[pool], key, true))
        return VT_CUDA_ERR_OOM;   /* no host memory for the stream's index */
    uint64_t addr = 0;
    int rc = vt__heap_backend_malloc(h, size, &addr);
    if (rc)
        return rc;
    vt__segment *s = malloc(sizeof *s);
    vt__block *b = vt__block_new(h);
    if (s)
        *s = (vt__segment){ .addr = addr, .size = size, .stream = key, .first = b,
                            .pool = (uint8_t)pool, .spool = (uint8_t)pool, .whole = whole,
                            .freed = calloc((size / VT_MIN_BLOCK + 63) / 64,
                                            sizeof(uint64_t)) };
    /* The stream's index again: its stream may have been destroyed (and
     * the index dropped) while the lock was dropped; a program error, but
     * one that must not crash the insert below. */
    if (!s || !b || !vt__index_stream(&h->free_idx[pool], key, true)
        || vt__segs_insert(h, s) != 0) {
        if (s)
            free(s->freed);
        free(s);
        if (b)
            vt__block_release(h, b);
        vt__heap_unlock(h);
        vt__backend_free(h->device, addr);
        vt__heap_lock(h);
        h->num_backend_frees++;
        return VT_CUDA_ERR_OOM;
    }
    vt__segment_start_free(h, s, b, size);
    vt__trace(.kind = VT_EV_SEGMENT_ALLOC, .device = h->device, .stream = vt__trace_stream(key),
              .addr = addr, .size = size, .stack = stack, .aux = (uint64_t)pool);
    *out = b;
    return 0;
}

/* ---- the OOM chain ------------------------------------------------------ */

void vt__oom_report(vt__heap *h, uint64_t key, uint64_t req, uint64_t size, uint32_t stack)
{
    uint64_t free_b = 0, total = 0;
    vt__backend_mem_info(h->device, &free_b, &total);
    vt__heap_lock(h);
    h->num_ooms++;
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    vt__trace(.kind = VT_EV_OOM, .device = h->device, .stream = vt__trace_stream(key),
              .req_size = req, .size = size, .stack = stack, .aux = free_b,
              .aux2 = reserved);
    vt__heap_unlock(h);
    vt__trace_out_of_memory();
}

/* The miss path: grow, or recover memory and retry. Called and returns with
 * the lock held; may drop it in between. */
int vt__heap_grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                  const vt__conf *cfg, vt__block **out)
{
    /* an expandable segment maps only what the request lacks; an ipc-safe
     * block is a segment of its own (alloc_ipc.c) */
    bool whole = vt__ipc_whole(key, cfg);
    uint64_t seg = whole || (cfg->expandable_segments && h->vmm_gran != UINT64_MAX)
        ? size : segment_size(size);
    collect_garbage(h, seg, cfg);
    if ((*out = vt__find_free(h, pool, key, size, cfg)))
        return 0;
    int rc = new_segment(h, pool, key, seg, stack, whole, out);
    if (rc != VT_CUDA_ERR_OOM)
        return rc;
    /* 1: release unused segments (enough for this one) and retry */
    h->num_alloc_retries++;
    release_cached(h, seg, false);
    if ((*out = vt__find_free(h, pool, key, size, cfg)))
        return 0;
    rc = new_segment(h, pool, key, seg, stack, whole, out);
    if (rc != VT_CUDA_ERR_OOM)
        return rc;
    /* 2: wait for every pending free, release everything unused, retry */
    h->num_sync_all++;
    vt__poll_fences(h, true);
    vt__release_detached(h, NULL);   /* dead segments that became free */
    if ((*out = vt__find_free(h, pool, key, size, cfg)))
        return 0;
    release_cached(h, 0, true);
    if ((*out = vt__find_free(h, pool, key, size, cfg)))
        return 0;
    rc = new_segment(h, pool, key, seg, stack, whole, out);
    if (rc != VT_CUDA_ERR_OOM || seg == size)
        return rc;
    /* 3: what the program's own cudaMalloc would have got: the request
     * alone, no room to share. A program that fits without the cache fits
     * with it. */
    return new_segment(h, pool, key, size, stack, whole, out);
}

/* ---- what the cache can give back --------------------------------------- */

int vt__heap_empty_cache(vt__heap *h)
{
    vt__heap_lock(h);
    vt__trace(.kind = VT_EV_EMPTY_CACHE, .device = h->device);   /* a replay does it here */
    h->num_sync_all++;
    vt__poll_fences(h, true);
    int rc = release_cached(h, 0, true);
    vt__heap_unlock(h);
    return rc;
}
/* What the next allocation can get back from the cache, whatever its size
 * and stream: the segments that hold no allocated block (free, or freed and
 * waiting for a fence, which the OOM chain waits for), which the OOM chain
 * gives back to the device. Free blocks in segments that still hold an
 * allocated block serve only requests that fit them, on their stream: not
 * counted, so cudaMemGetInfo never promises memory a cudaMalloc of that
 * size cannot get. */
static uint64_t releasable(const vt__heap *h)
{
    uint64_t v = 0;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        const vt__segment *s = h->segs[i];
        if (s->pool == VT_POOL_UNCACHED)
            continue;
        const vt__block *b = s->first;
        while (b && b->state != VT_B_ALLOCATED)
            b = b->next;
        if (!b)
            v += vt__seg_mapped(s);
        else if (s->va_size)   /* its whole free chunks, which the OOM chain unmaps */
            v += vt__expandable_free_chunks(h, s);
    }
    return v;
}

uint64_t vt__heap_cached_free(vt__heap *h)
{
    vt__heap_lock(h);
    uint64_t v = releasable(h);
    vt__heap_unlock(h);
    return v;
}

/* The cap counts reserved bytes: after the OOM chain gave the releasable
 * segments back, cap - (reserved - releasable) is all it lets through. */
uint64_t vt__heap_mem_free(vt__heap *h, uint64_t device_free)
{
    vt__heap_lock(h);
    uint64_t rel = releasable(h);
    uint64_t v = device_free + rel;
    if (h->cap != UINT64_MAX) {
        uint64_t kept = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current - rel;
        uint64_t room = h->cap > kept ? h->cap - kept : 0;
        if (v > room)
            v = room;
    }
    vt__heap_unlock(h);
    return v;
}
int vt__heap_set_fraction(vt__heap *h, double fraction)
{
    if (!(fraction > 0 && fraction <= 1))
        return -EINVAL;
    vt__heap_lock(h);
    h->fraction = fraction;
    if (h->total_mem != UINT64_MAX)
        h->cap = (uint64_t)(fraction * (double)h->total_mem);
    vt__heap_unlock(h);
    return 0;
}
