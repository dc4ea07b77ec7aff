/*
 * alloc/alloc_fence.c - frees that wait for other streams: the whole story
 * of a fenced free.
 *
 * A block whose only user is its own stream is free at once (alloc_heap.c).
 * A block used on other streams (vt_record_stream, or freed on another
 * stream) waits on a fence: one event per extra stream. A free of unknown
 * stream (plain cudaFree through the hooks) joins the heap's batch; one
 * fence over every known stream covers the whole batch, and a new batch
 * fence is recorded only when the previous one completed, so a burst of
 * frees costs one event per stream in total.
 *
 * When a block may be used again, and by whom (every path):
 *   - on its own stream, at once after a free on that stream: stream order
 *     puts the new work after the old (the legacy stream is a stream too);
 *   - by anyone else only through a fence on every stream that may still
 *     use it: the freeing stream when it is not the block's own, the
 *     streams of vt_record_stream, every known stream for a free of unknown
 *     stream. An event on the legacy stream covers the blocking streams and
 *     every thread's per-thread stream (legacy-stream rules);
 *   - cudaMalloc/cuMemAlloc memory (VT_NO_STREAM) may be used on any stream
 *     at once, so it has a key of its own: it never takes a block freed on a
 *     stream before that stream reached the free;
 *   - a segment goes back to the device (release, gc, a destroyed stream's,
 *     reset) only with cuMemFree, which waits for the device.
 *
 * Streams capturing into a graph: nothing is ever recorded on them (an
 * event there would become a node of the program's graph, and recording on
 * the legacy stream while a blocking stream captures would invalidate the
 * capture). A block whose extra streams include a capturing one goes to the
 * batch, and the batch fence is recorded only when no stream of the device
 * captures: until then those blocks stay pending.
 *
 * Life of a fenced free: vt__fence_free marks the block PENDING and puts it
 * on a fence (its extra streams) and/or the batch (unknown stream);
 * vt__poll_fences (each allocation while fences are in flight, the OOM chain,
 * the program's synchronize calls through vt__heap_sync_begin/end) records
 * the batch fence, queries the events, and fence_done makes every block
 * whose last fence completed free (FREE_COMPLETED).
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

/* ---- events and fences -------------------------------------------------- */

static void *event_get(vt__heap *h)
{
    if (h->nevpool)
        return h->evpool[--h->nevpool];
    void *ev = NULL;
    if (vt__backend_event_create(h->device, &ev))
        return NULL;
    return ev;
}

static void event_put(vt__heap *h, void *ev)
{
    if (vt__reserve_one((void **)&h->evpool, h->nevpool, &h->capevpool, sizeof *h->evpool, 64)) {
        vt__backend_event_destroy(h->device, ev);
        return;
    }
    h->evpool[h->nevpool++] = ev;
}

static vt__fence *fence_new(uint32_t nstreams)
{
    vt__fence *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->events = calloc(nstreams ? nstreams : 1, sizeof *f->events);
    if (!f->events) {
        free(f);
        return NULL;
    }
    return f;
}

/* Is any stream this heap fences capturing (the legacy one included)? */
bool vt__heap_any_capturing(vt__heap *h)
{
    if (vt__backend_stream_capturing(h->device, 0))
        return true;
    for (uint64_t i = 0; i < h->nstreams; i++)
        if (vt__backend_stream_capturing(h->device, h->streams[i]))
            return true;
    return false;
}

/* An event on `raw` stream. A stream we cannot record on (destroyed,
 * another context) cannot be waited for either: it is skipped. */
static void fence_record(vt__heap *h, vt__fence *f, uint64_t raw)
{
    void *ev = event_get(h);
    if (!ev)
        return;
    if (vt__backend_event_record(h->device, ev, raw)) {
        event_put(h, ev);
        return;
    }
    f->events[f->nev++] = ev;
    h->num_fence_events++;
}

static int fence_add_block(vt__fence *f, vt__block *b)
{
    uint64_t cap = f->capblocks;
    if (vt__reserve_one((void **)&f->blocks, f->nblocks, &cap, sizeof *f->blocks, 4))
        return -1;
    f->capblocks = (uint32_t)cap;
    f->blocks[f->nblocks++] = b;
    b->nwait++;
    return 0;
}

static void finish_pending(vt__heap *h, vt__block *b)
{
    h->npending--;
    vt__stat_add(h->active_bytes, b->seg->spool, -(int64_t)b->size);
    vt__stat_add(h->active, b->seg->spool, -1);
    uint64_t addr = b->addr, size = b->size, stream = b->stream;
    vt__make_free(h, b);
    vt__trace(.kind = VT_EV_FREE_COMPLETED, .device = h->device,
              .stream = vt__trace_stream(stream), .addr = addr, .size = size);
}

/* Record the fence of the current unknown-stream batch: the legacy stream
 * (which waits for all blocking streams, per-thread ones included) and every
 * stream announced on this device. */
void vt__record_batch_fence(vt__heap *h)
{
    if (vt__heap_any_capturing(h))
        return;   /* retried at the next poll, once the captures ended */
    vt__fence *f = fence_new((uint32_t)h->nstreams + 1);
    if (!f)
        return;   /* retried at the next poll */
    f->batch = 1;
    fence_record(h, f, 0);
    for (uint64_t i = 0; i < h->nstreams; i++)
        fence_record(h, f, h->streams[i]);
    while (h->batch) {
        vt__block *b = h->batch;
        if (fence_add_block(f, b))
            break;
        h->batch = b->bnext;
        b->bnext = NULL;
        b->in_batch = 0;
        b->nwait--;       /* the batch's wait is now this fence's */
        h->nbatch--;
    }
    f->next = h->fences;
    h->fences = f;
    h->batch_fence = f;
}

static void fence_done(vt__heap *h, vt__fence *f)
{
    for (uint32_t i = 0; i < f->nev; i++)
        event_put(h, f->events[i]);
    if (h->batch_fence == f)
        h->batch_fence = NULL;
    for (uint32_t i = 0; i < f->nblocks; i++) {
        vt__block *b = f->blocks[i];
        if (--b->nwait == 0)
            finish_pending(h, b);
    }
    free(f->blocks);
    free(f->events);
    free(f);
}

/* Retire completed fences (wait: block until every one completed). */
void vt__poll_fences(vt__heap *h, bool wait)
{
    if (h->batch && (wait || !h->batch_fence))
        vt__record_batch_fence(h);
    vt__fence **pp = &h->fences;
    while (*pp) {
        vt__fence *f = *pp;
        while (f->ndone < f->nev) {
            void *ev = f->events[f->ndone];
            int r = wait ? vt__backend_event_sync(h->device, ev)
                         : vt__backend_event_query(h->device, ev);
            if (r == VT_BACKEND_NOT_READY)
                break;
            f->ndone++;   /* done, or failed: its work will never run */
        }
        if (f->ndone == f->nev) {
            *pp = f->next;
            fence_done(h, f);
        } else {
            pp = &f->next;
        }
    }
    if (h->batch && !h->batch_fence)
        vt__record_batch_fence(h);
}

/* Add an extra stream the block is used on. @return 1 added, 0 already
 * known, -1 no memory. */
int vt__block_use_stream(vt__block *b, uint64_t key)
{
    for (uint32_t i = 0; i < b->nx; i++)
        if (b->xstreams[i] == key)
            return 0;
    if (b->nx == b->capx) {
        uint64_t *n = malloc(b->capx * 2 * sizeof *n);
        if (!n)
            return -1;
        memcpy(n, b->xstreams, b->nx * sizeof *n);
        if (b->xstreams != b->xinline)
            free(b->xstreams);
        b->xstreams = n;
        b->capx *= 2;
    }
    b->xstreams[b->nx++] = key;
    return 1;
}

/* ---- a free that must wait -------------------------------------------- */

void vt__fence_free(vt__heap *h, vt__block *b, bool unknown)
{
    b->state = VT_B_PENDING;
    b->nwait = 0;
    h->npending++;
    if (b->nx) {
        bool capturing = false;
        for (uint32_t i = 0; i < b->nx && !capturing; i++)
            capturing = vt__backend_stream_capturing(h->device, vt__stream_raw(b->xstreams[i]));
        vt__fence *f = capturing ? NULL : fence_new(b->nx);
        if (capturing)
            unknown = true;   /* the batch waits until no stream captures */
        if (f) {
            for (uint32_t i = 0; i < b->nx; i++)
                fence_record(h, f, vt__stream_raw(b->xstreams[i]));
            if (fence_add_block(f, b) == 0) {
                f->next = h->fences;
                h->fences = f;
            } else {
                free(f->events);
                free(f);
                f = NULL;
            }
        }
        if (!f && !unknown) {
            /* no host memory for a fence: fall back to the batch, which
             * fences every stream */
            unknown = true;
        }
    }
    if (unknown) {
        b->in_batch = 1;
        b->nwait++;
        b->bnext = h->batch;
        h->batch = b;
        h->nbatch++;
    }
}

int vt__fence_record_use(vt__heap *h, vt__block *b, uint64_t key)
{
    if (key == b->stream || b->pool == VT_POOL_UNCACHED)
        return 0;
    int r = vt__block_use_stream(b, key);
    if (r < 0)
        return VT_CUDA_ERR_OOM;
    if (r > 0)
        vt__trace(.kind = VT_EV_STREAM_USE, .device = h->device, .stream = key, .addr = b->addr,
                  .size = b->size);
    return 0;
}

/* ---- the program waits for the device ----------------------------------- */

void vt__heap_sync_begin(vt__heap *h, bool all)
{
    vt__heap_lock(h);
    if (h->batch && (all || !h->batch_fence))
        vt__record_batch_fence(h);
    vt__heap_unlock(h);
}

void vt__heap_sync_end(vt__heap *h)
{
    vt__heap_lock(h);
    if (h->fences || h->batch) {
        vt__poll_fences(h, false);
        if (h->retired)
            vt__release_detached(h, NULL);
    }
    vt__heap_unlock(h);
}
