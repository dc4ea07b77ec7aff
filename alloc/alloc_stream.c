/*
 * alloc/alloc_stream.c - streams as the cache sees them: their keys, and
 * their lifecycle (created: fenced by frees of unknown stream; destroyed:
 * their work waited for when the cache depends on it, their segments given
 * back).
 *
 * Destroyed streams: free blocks belong to their stream, so the segments of
 * a destroyed stream could serve no one any more. Its fully free segments go
 * back to the device at once, the others when their last block is free
 * (vt__heap_stream_destroyed); a program that creates and destroys streams
 * per request keeps a bounded cache instead of growing it until an OOM.
 */
#include <stdlib.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

static atomic_uint_fast64_t ptds_serial;
static _Thread_local uint64_t my_ptds;    /* this thread's per-thread stream key */

/* ---- stream keys (VT_PTDS_KEY_BIT, VT_NO_STREAM_KEY: alloc_internal.h) --- */

uint64_t vt__stream_key(uint64_t raw)
{
    if (raw == 1)
        return 0;
    if (raw == 2) {
        if (vt__unlikely(!my_ptds))
            my_ptds = VT_PTDS_KEY_BIT | (atomic_fetch_add(&ptds_serial, 1) + 1);
        return my_ptds;
    }
    return raw;
}

/* The handle to record an event on for a stream key. Another thread's
 * per-thread stream cannot be named from here; the legacy stream can stand
 * in for it: legacy-stream work waits for all blocking streams, and
 * per-thread default streams are blocking. */
uint64_t vt__stream_raw(uint64_t key)
{
    if (key == VT_NO_STREAM_KEY)
        return 0;
    if (key & VT_PTDS_KEY_BIT)
        return key == my_ptds ? 2 : 0;
    return key;
}

/* ---- stream lifecycle --------------------------------------------------- */

void vt__heap_stream_created(vt__heap *h, uint64_t raw)
{
    if (raw <= 2)
        return;   /* default streams are covered by the legacy-stream event */
    vt__heap_lock(h);
    for (uint64_t i = 0; i < h->nstreams; i++)
        if (h->streams[i] == raw) {
            vt__heap_unlock(h);
            return;
        }
    if (vt__reserve_one((void **)&h->streams, h->nstreams, &h->capstreams, sizeof *h->streams, 16)) {
        vt__heap_unlock(h);
        return;
    }
    h->streams[h->nstreams++] = raw;
    vt__heap_unlock(h);
}

/* Does the cache still depend on work of stream `raw`: a segment of its
 * own (a later stream may get the same handle and reuse those blocks at
 * once) or a live block used on it (vt_record_stream, whose fence is only
 * recorded at the free)? */
static bool stream_in_use(vt__heap *h, uint64_t raw)
{
    for (uint64_t i = 0; i < h->nsegs; i++)
        if (h->segs[i]->stream == raw && !h->segs[i]->dead)
            return true;
    uint64_t pos = 0, addr;
    vt__block *b;
    while (vt__ptrmap_next(&h->live, &pos, &addr, &b))
        for (uint32_t k = 0; k < b->nx; k++)
            if (b->xstreams[k] == raw)
                return true;
    return false;
}

/* The segments of a destroyed stream, once its work is done. Only that
 * stream's allocations look in their index, and it will make none (a later
 * stream that gets the same handle value is a new stream and starts a new
 * index), so the memory would sit idle until an OOM or empty_cache:
 *   - a fully free one is detached onto *list, for the backend;
 *   - one that still holds allocated or pending blocks becomes dead: its
 *     free blocks leave the index, and make_free_dead() retires it when its
 *     last block is free. Frees of its blocks keep their ordinary rules
 *     (a free on the block's own stream needs no fence: that stream's work
 *     was waited for; a free on another stream is fenced on that stream), and
 *     the backend free (cuMemFree synchronizes the device) ends any doubt.
 * Why not re-home such a segment to the legacy stream and keep it cached:
 * the blocks were handed out for the destroyed stream, and the caller frees
 * them naming that stream (vt_free and PyTorch's pluggable-allocator free
 * pass the allocation stream). Re-homed, that free would look like a
 * cross-stream free and record a fence event on a dead handle (undefined on a
 * real driver); and a live block would move to a stream whose ordering the
 * program never agreed to. Releasing is safe without any such argument, and
 * the cost is one cudaMalloc for a later stream that needs the memory.
 * Then the stream's (empty) index is dropped: about 60 KiB of host memory per
 * pool and stream. */
static void retire_stream_segments(vt__heap *h, uint64_t key, vt__segment **list)
{
    for (uint64_t i = 0; i < h->nsegs;) {
        vt__segment *s = h->segs[i];
        if (s->stream != key || s->dead || s->pool == VT_POOL_UNCACHED) {
            i++;
            continue;
        }
        if (vt__seg_unused(s)) {
            vt__seg_detach(h, s, list);   /* shifts segs down: same i again */
            continue;
        }
        s->dead = 1;
        for (vt__block *b = s->first; b; b = b->next)
            if (b->state == VT_B_FREE) {
                vt__index_remove(&h->free_idx[s->pool], b);
                h->nfree[s->pool]--;
            }
        i++;
    }
    vt__index_drop(&h->free_idx[VT_POOL_SMALL], key);
    vt__index_drop(&h->free_idx[VT_POOL_LARGE], key);
}

/* Called before the stream is destroyed (its handle is invalid after: no
 * event can be recorded on it any more, and the value may name a new stream
 * later), while its queued work may still run. So: frees of unknown stream
 * still waiting for their fence get it now, with this stream in it; and
 * when blocks still depend on the stream's work, that work is waited for
 * here, after which the stream is dropped from every block's users and its
 * segments are given back (retire_stream_segments). */
void vt__heap_stream_destroyed(vt__heap *h, uint64_t raw)
{
    if (raw <= 2)
        return;   /* default streams are never destroyed */
    vt__heap_lock(h);
    if (h->batch)
        vt__record_batch_fence(h);
    for (uint64_t i = 0; i < h->nstreams; i++)
        if (h->streams[i] == raw) {
            h->streams[i] = h->streams[--h->nstreams];
            break;
        }
    bool busy = stream_in_use(h, raw);
    vt__heap_unlock(h);
    if (busy)
        vt__backend_stream_sync(h->device, raw);
    vt__heap_lock(h);
    uint64_t pos = 0, addr;
    vt__block *b;
    while (busy && vt__ptrmap_next(&h->live, &pos, &addr, &b))
        for (uint32_t k = 0; k < b->nx; k++)
            if (b->xstreams[k] == raw) {
                b->xstreams[k] = b->xstreams[--b->nx];
                break;
            }
    /* Completed frees first: a segment whose last pending block is done
     * goes back now rather than at a later poll. */
    if (h->fences || h->batch)
        vt__poll_fences(h, false);
    /* Traced when the cache holds segments of the stream (what a replay
     * must know to give them back as this did), before their SEGMENT_FREEs. */
    for (uint64_t i = 0; i < h->nsegs; i++)
        if (h->segs[i]->stream == raw && h->segs[i]->pool != VT_POOL_UNCACHED) {
            vt__trace(.kind = VT_EV_STREAM_DESTROY, .device = h->device, .stream = raw);
            break;
        }
    vt__segment *list = NULL;
    retire_stream_segments(h, raw, &list);
    vt__release_detached(h, list);
    vt__heap_unlock(h);
}
