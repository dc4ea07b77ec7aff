/*
 * alloc/alloc_reset.c - empty the cache's books before a device reset.
 *
 * A real cudaDeviceReset (cuDevicePrimaryCtxReset) frees every allocation of
 * the device and destroys its streams and events. Left alone, the cache would
 * keep segments whose addresses are gone, blocks the program still holds with
 * stale addresses, streams it records fences on and events from the dead
 * context. So before the real reset:
 *   1. every block the program holds is freed on its own stream (no fence:
 *      the program's pointers are invalid after the reset anyway; the FREE
 *      events carry the reset's call stack);
 *   2. vt__heap_empty_cache waits for the fences still in flight and gives
 *      every segment back (the device is still intact here);
 *   3. the announced streams are forgotten (the reset destroys them; a later
 *      stream may reuse a handle value) and the idle fence events destroyed.
 * A later free of an old pointer is no longer the cache's: it goes to the
 * real free, which fails it as the real runtime does (invalid value); the
 * pointers are remembered so that such a free is reported as what it is,
 * a pointer freed by the reset (alloc_badfree.c). A free of an old
 * stream-ordered allocation is the exception: a real driver accepts it
 * (cudaSuccess, cudaFree and cudaFreeAsync alike; driver_facts.real,
 * reset_then_free_old, and prog_misc reset on an H200): the heap answers
 * success for it, reported all the same, whether its address now lies in a
 * newer segment or in none (alloc_badfree.c, vt__badfree_accepted).
 * The hooks call it from cudaDeviceReset and cuDevicePrimaryCtxReset.
 */
#include <stdlib.h>

#include "alloc_internal.h"
#include "backend.h"
#include "allocator.h"
#include "recorder.h"

struct live {
    uint64_t addr;
    uint64_t key;     /* the block's own stream key: freeing there needs no fence */
};

/* The program's live blocks of h, copied out under the lock. @return the
 * count (*out: malloc'ed, NULL when none or out of memory). */
static uint64_t collect_live(vt__heap *h, struct live **out)
{
    *out = NULL;
    for (;;) {
        vt__heap_lock(h);
        uint64_t n = h->live.count;
        vt__heap_unlock(h);
        if (n == 0)
            return 0;
        struct live *v = malloc((n + 16) * sizeof *v);
        if (!v)
            return 0;
        vt__heap_lock(h);
        if (h->live.count > n + 16) {   /* another thread allocated meanwhile */
            vt__heap_unlock(h);
            free(v);
            continue;
        }
        uint64_t k = 0, pos = 0, addr;
        vt__block *b;
        while (vt__ptrmap_next(&h->live, &pos, &addr, &b))
            v[k++] = (struct live){ addr, b->stream };
        vt__heap_unlock(h);
        *out = v;
        return k;
    }
}

/* Forget the streams announced on h; destroy the idle fence events. */
static void forget_streams_and_events(vt__heap *h)
{
    vt__heap_lock(h);
    uint64_t ns = h->nstreams, ne = h->nevpool;
    uint64_t *streams = ns ? malloc(ns * sizeof *streams) : NULL;
    void **events = ne ? malloc(ne * sizeof *events) : NULL;
    if (streams)
        for (uint64_t i = 0; i < ns; i++)
            streams[i] = h->streams[i];
    if (events) {
        for (uint64_t i = 0; i < ne; i++)
            events[i] = h->evpool[i];
        h->nevpool = 0;
    }
    vt__heap_unlock(h);
    for (uint64_t i = 0; streams && i < ns; i++)
        vt__heap_stream_destroyed(h, streams[i]);
    for (uint64_t i = 0; events && i < ne; i++)
        vt__backend_event_destroy(h->device, events[i]);
    free(streams);
    free(events);
}

void vt__alloc_device_reset(int device)
{
    vt__heap *h = vt__heap_get(device, false);
    if (!h)
        return;   /* the cache never touched this device */
    struct live *v;
    uint64_t n = collect_live(h, &v);
    uint32_t stack = n && vt__trace_enabled() ? vt__stack_capture_free() : 0;
    uint64_t *addrs = n ? malloc(n * sizeof *addrs) : NULL;
    for (uint64_t i = 0; i < n; i++) {
        vt__heap_free((void *)(uintptr_t)v[i].addr, v[i].key, VT_FREE_ON_STREAM, stack);
        if (addrs)   /* alloc_badfree.c: the address, and whether stream-ordered */
            addrs[i] = v[i].addr << 1 | (v[i].key != VT_NO_STREAM_KEY);
    }
    free(v);
    vt__heap_empty_cache(h);
    vt__badfree_note_reset(h, addrs, addrs ? n : 0);
    forget_streams_and_events(h);
}
