/*
 * alloc/alloc_uncached.c - cache:0, every request straight to the device.
 *
 * One backend allocation per request, in a segment of its own (pool
 * VT_POOL_UNCACHED), tracked only so that frees, bad frees, the statistics
 * and the trace know it; a free gives it back to the device at once.
 */
#include <stdlib.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

int vt__uncached_malloc(vt__heap *h, uint64_t req, uint64_t key, uint32_t stack, void **out)
{
    int spool = req <= VT_SMALL_SIZE ? VT_STAT_SMALL : VT_STAT_LARGE;
    vt__heap_lock(h);
    uint64_t addr = 0;
    int rc = vt__heap_backend_malloc(h, req, &addr);
    if (rc) {
        vt__heap_unlock(h);
        if (rc == VT_CUDA_ERR_OOM)
            vt__oom_report(h, key, req, req, stack);
        return rc;
    }
    vt__badfree_forget(h, addr);   /* the device hands the address out again */
    vt__segment *s = malloc(sizeof *s);
    vt__block *b = vt__block_new(h);
    if (s && b) {
        *s = (vt__segment){ .addr = addr, .size = req, .stream = key, .first = b,
                            .pool = VT_POOL_UNCACHED, .spool = (uint8_t)spool };
        b->addr = addr;
        b->size = req;
        b->req_size = req;
        b->stream = key;
        b->seg = s;
        b->stack = stack;
        b->state = VT_B_ALLOCATED;
        b->pool = VT_POOL_UNCACHED;
    }
    if (!s || !b || vt__segs_insert(h, s)) {
        free(s);
        if (b)
            vt__block_release(h, b);
        vt__heap_unlock(h);
        vt__backend_free(h->device, addr);
        return VT_CUDA_ERR_OOM;
    }
    if (vt__ptrmap_put(&h->live, addr, b)) {
        vt__segs_remove(h, s);
        free(s);
        vt__block_release(h, b);
        vt__heap_unlock(h);
        vt__backend_free(h->device, addr);
        return VT_CUDA_ERR_OOM;
    }
    vt__stat_add(h->reserved_bytes, spool, (int64_t)req);
    vt__stat_add(h->segment, spool, 1);
    vt__stat_add(h->allocated_bytes, spool, (int64_t)req);
    vt__stat_add(h->requested_bytes, spool, (int64_t)req);
    vt__stat_add(h->active_bytes, spool, (int64_t)req);
    vt__stat_add(h->allocation, spool, 1);
    vt__stat_add(h->active, spool, 1);
    vt__trace(.kind = VT_EV_SEGMENT_ALLOC, .device = h->device, .stream = vt__trace_stream(key),
              .addr = addr, .size = req, .stack = stack, .aux = VT_POOL_UNCACHED);
    b->alloc_seq = vt__trace(.kind = VT_EV_ALLOC, .device = h->device,
                             .stream = vt__trace_stream(key), .addr = addr,
                             .req_size = req, .size = req, .stack = stack,
                             .aux = key == VT_NO_STREAM_KEY ? VT_ALLOC_NO_STREAM : 0);
    vt__heap_unlock(h);
    *out = (void *)(uintptr_t)addr;
    return 0;
}

void vt__uncached_free(vt__heap *h, vt__block *b)
{
    vt__segment *s = b->seg, *list = NULL;
    int sp = s->spool;
    vt__stat_add(h->allocated_bytes, sp, -(int64_t)b->size);
    vt__stat_add(h->requested_bytes, sp, -(int64_t)b->req_size);
    vt__stat_add(h->active_bytes, sp, -(int64_t)b->size);
    vt__stat_add(h->allocation, sp, -1);
    vt__stat_add(h->active, sp, -1);
    vt__trace(.kind = VT_EV_FREE_COMPLETED, .device = h->device,
              .stream = vt__trace_stream(b->stream), .addr = b->addr, .size = b->size);
    vt__badfree_note_uncached_free(h, b->addr);
    b->state = VT_B_PENDING;   /* not FREE: detach must not look in the index */
    vt__seg_detach(h, s, &list);
    vt__release_detached(h, list);
}

