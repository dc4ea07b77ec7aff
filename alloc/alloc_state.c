/*
 * alloc/alloc_state.c - the allocator's live state for a snapshot: every
 * heap's devices, segments and blocks, and the allocator's own peaks. The
 * recorder calls it as its state provider (registered by alloc_api.c) with
 * no recorder lock held; each heap is read under its lock.
 */
#include <errno.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

/* A segment as the snapshot shows it: an expandable one with holes is one
 * segment per mapped run of blocks (as PyTorch's snapshots show it). */
static int describe(vt__heap *h, vt__snapshot_data *snap)
{
    for (uint64_t i = 0; i < h->nsegs; i++) {
        vt__segment *g = h->segs[i];
        for (vt__block *b = g->first; b; b = b->next) {
            if (b->state == VT_B_UNMAPPED)
                continue;
            if (!b->prev || b->prev->state == VT_B_UNMAPPED) {   /* a run starts */
                uint64_t end = b->addr;
                for (const vt__block *x = b; x && x->state != VT_B_UNMAPPED; x = x->next)
                    end = x->addr + x->size;
                vt__snap_segment seg = { .addr = b->addr, .size = end - b->addr,
                                   .stream = vt__trace_stream(g->stream),
                                   .device = (int8_t)h->device, .pool = g->pool };
                int rc = vt__snapshot_add_segment(snap, &seg);
                if (rc)
                    return rc;
            }
            vt__snap_block blk = { .addr = b->addr, .size = b->size,
                                   .stream = vt__trace_stream(b->stream), .state = b->state };
            if (b->state != VT_B_FREE) {
                blk.req_size = b->req_size;
                blk.alloc_seq = b->alloc_seq;
                blk.stack = b->stack;
            }
            int rc = vt__snapshot_add_block(snap, &blk);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int vt__alloc_describe_state(vt__snapshot_data *snap)
{
    /* asked from a signal handler that interrupted this thread inside the
     * allocator: the heap lock it would wait for is its own */
    if (vt__heap_locks_held)
        return -EDEADLK;
    if (!snap)
        return 0;
    int n = vt__heap_count();
    for (int d = 0; d < n; d++) {
        vt__heap *h = vt__heap_get(d, false);
        if (!h)
            continue;
        char name[256] = "";
        if (vt__backend_device_name(d, name, sizeof name))
            name[0] = '\0';
        int rc = vt__snapshot_add_device(snap, d, name,
                                         h->total_mem == UINT64_MAX ? 0 : h->total_mem);
        if (rc)
            return rc;
        vt__heap_lock(h);
        rc = describe(h, snap);
        vt__heap_unlock(h);
        if (rc)
            return rc;
        /* The allocator's own peaks, whatever the event window keeps. Read
         * after the state: other threads go on allocating, and a peak read
         * before could be below what the state then holds (peaks only grow). */
        vt_stats st;
        vt__heap_stats(h, &st);
        vt__snap_device *di = &snap->devices[snap->ndevices - 1];
        di->peak_allocated = (uint64_t)st.allocated_bytes[VT_STAT_ALL].peak;
        di->peak_reserved = (uint64_t)st.reserved_bytes[VT_STAT_ALL].peak;
        di->peak_active = (uint64_t)st.active_bytes[VT_STAT_ALL].peak;
    }
    snap->meta.flags |= VT_META_DEVICE_PEAKS;
    if (vt__ipc_whole(VT_NO_STREAM_KEY, vt__config()))
        snap->meta.flags |= VT_META_IPC_SAFE;   /* a replay reproduces it (alloc_ipc.c) */
    return 0;
}
