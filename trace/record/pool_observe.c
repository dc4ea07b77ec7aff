/*
 * trace/record/pool_observe.c - a framework's own caching allocator, observed.
 *
 * PyTorch keeps its own cache of device memory: it asks the device for
 * segments and hands tensors blocks inside them. Preloaded, vramtrace sees
 * only the segments. An observer inside the process (vramtrace.torch's, on
 * PyTorch's allocator trace tracker) reports every block and segment as it
 * happens, through vt_pool_event(), so the snapshot holds the framework's
 * blocks as allocations and its segments as segments, as its own snapshot
 * would, next to every other device allocation the hooks see.
 *
 * For that picture to be true, and for the framework to behave exactly as
 * without vramtrace, the device calls the framework's allocator makes for its
 * segments must not be cached or recorded a second time by the hooks: they
 * go to the device as they would without us (vt__pool_caller() tells the hooks
 * which calls those are: the ones made from the allocator's shared object).
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>

#include "fork_lock.h"
#include "vramtrace/format.h"

static _Atomic uintptr_t pool_lo, pool_hi;   /* the observed allocator's code */
static _Atomic uint32_t meta_flags;          /* VT_META_POOL_* for the snapshot */
#define POOL_MAX_DEVICES 64
static _Atomic uint64_t pool_total[POOL_MAX_DEVICES];  /* device memory an OOM reported */

int vt_pool_observe(const void *pool_code, const void *observer_code)
{
    uintptr_t lo, hi;
    if (!pool_code || vt__module_text((uintptr_t)pool_code, &lo, &hi) != 1)
        return -EINVAL;
    if (observer_code && vt__stacks_own_module(observer_code) != 0)
        return -EINVAL;
    atomic_store_explicit(&pool_hi, 0, memory_order_relaxed);
    atomic_store_explicit(&pool_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&pool_hi, hi, memory_order_release);
    atomic_fetch_or_explicit(&meta_flags, VT_META_POOL_OBSERVED, memory_order_relaxed);
    vt__note_activity();   /* this process uses a device, through that allocator */
    return 0;
}

static pthread_mutex_t settings_lock = PTHREAD_MUTEX_INITIALIZER;
static char settings[1024];   /* vt_pool_settings (under settings_lock) */

/* a snapshot's metadata reads the settings before its write lock is taken:
 * a fork then left this lock held in the child, whose own snapshot hung
 * (caught under load in
 * fork_while_another_thread_writes_a_snapshot_does_not_hang_the_child) */
VT__LOCK_ACROSS_FORK(pool_settings, settings_lock)

int vt_pool_settings(const char *text)
{
    pthread_mutex_lock(&settings_lock);
    snprintf(settings, sizeof settings, "%s", text ? text : "");
    pthread_mutex_unlock(&settings_lock);
    return 0;
}

void vt__pool_settings(char *buf, size_t len)
{
    pthread_mutex_lock(&settings_lock);
    snprintf(buf, len, "%s", settings);
    pthread_mutex_unlock(&settings_lock);
}

int vt_pool_block_at(uint64_t addr)
{
    return vt__pool_state_block_at(addr);
}

uint32_t vt_pool_block_stack(uint64_t addr, uint64_t *seq)
{
    return vt__pool_state_block_stack(addr, seq);
}

void vt_pool_unseen(void)
{
    atomic_fetch_or_explicit(&meta_flags, VT_META_POOL_UNSEEN, memory_order_relaxed);
}

bool vt__pool_caller(const void *ret)
{
    uintptr_t hi = atomic_load_explicit(&pool_hi, memory_order_acquire);
    if (vt__likely(hi == 0))
        return false;
    uintptr_t lo = atomic_load_explicit(&pool_lo, memory_order_relaxed);
    return (uintptr_t)ret - lo < hi - lo;
}

uint32_t vt__pool_meta_flags(void)
{
    return atomic_load_explicit(&meta_flags, memory_order_relaxed);
}

void vt__pool_add_devices(vt__snapshot_data *s)
{
    for (int d = 0; d < POOL_MAX_DEVICES; d++) {
        uint64_t total = atomic_load_explicit(&pool_total[d], memory_order_relaxed);
        bool listed = false;
        for (size_t i = 0; i < s->ndevices && !listed; i++)
            listed = s->devices[i].ordinal == d;
        if (total && !listed)
            vt__snapshot_add_device(s, d, "", total);   /* without it: total unknown */
    }
}

/* The observed allocator's OOM: `total` the device's memory (0: not known),
 * `pool` the private pool the request was for (format 1.15), 0: its default. */
static VT_REC_TEXT void record_oom(int device, uint64_t request, uint64_t free_bytes,
                                   uint64_t total, uint64_t stream, uint64_t pool)
{
    if (total && device >= 0 && device < POOL_MAX_DEVICES)
        atomic_store_explicit(&pool_total[device], total, memory_order_relaxed);
    vt__trace(.kind = VT_EV_OOM, .device = device, .stream = stream, .req_size = request,
              .size = request, .stack = vt__stack_capture(), .aux = free_bytes,
              .addr = VT_OOM_FRAMEWORK | VT_OOM_IN_POOL(pool));
    vt__trace_out_of_memory();
}

/* Only the kinds an allocator's life has; each with the stack a view shows
 * for it (the allocation's, the free's, the growth's, the failed request's). */
VT_REC_TEXT int vt_pool_event(int kind, int device, uint64_t addr, uint64_t size,
                              uint64_t stream, uint64_t aux)
{
    if (!vt__rec_on())
        return 0;
    switch (kind) {
    /* Each also kept in the book of what is alive (pool_state.c), which a
     * snapshot lists where the ring lost the events. */
    case VT_EV_ALLOC: {
        uint32_t stack = vt__stack_capture();
        uint64_t block = aux ? aux : size;
        uint64_t seq = vt__trace(.kind = VT_EV_ALLOC, .device = device, .stream = stream,
                                 .addr = addr, .req_size = size, .size = block, .stack = stack,
                                 .aux = VT_ALLOC_POOL_BLOCK);
        vt__pool_state_alloc(device, addr, block, size, stream, seq, stack);
        return 0;
    }
    case VT_EV_FREE_REQUESTED: {
        /* aux 1: the block counts as active until its FREE_COMPLETED, which
         * the allocator reports when the streams that used it are done.
         * aux2: where it was made (format 1.12), for a window whose ring
         * overwrote its ALLOC (a replay memory's oldest entries, evicted):
         * the book's, read as it marks the block, one look-up a free. */
        uint32_t made = vt__pool_state_free_requested(addr);
        vt__trace(.kind = VT_EV_FREE_REQUESTED, .device = device, .stream = stream,
                  .addr = addr, .size = size, .stack = vt__stack_capture_free(), .aux = 1,
                  .aux2 = made);
        return 0;
    }
    case VT_EV_FREE_COMPLETED:
    case VT_EV_SEGMENT_FREE:   /* no stack: views show the free's or the growth's */
        vt__trace(.kind = (uint8_t)kind, .device = device, .stream = stream, .addr = addr,
                  .size = size);
        if (kind == VT_EV_FREE_COMPLETED)
            vt__pool_state_free_completed(addr);
        else
            vt__pool_state_segment_free(addr, size);
        return 0;
    case VT_EV_SEGMENT_ALLOC: {
        /* aux: the pool kind, and above it the private pool (a CUDA graph's:
         * VT_POOL_EVENT_PRIVATE), which the event keeps in aux2 (format 1.14) */
        uint32_t stack = vt__stack_capture();
        uint64_t seq = vt__trace(.kind = VT_EV_SEGMENT_ALLOC, .device = device,
                                 .stream = stream, .addr = addr, .size = size, .stack = stack,
                                 .aux = aux & 0xff, .aux2 = aux >> 8);
        vt__pool_state_segment_alloc(device, addr, size, stream, seq, stack, (int)(aux & 0xff),
                                     aux >> 8);
        return 0;
    }
    case VT_EV_EMPTY_CACHE:   /* the program emptied the framework's cache */
        vt__trace(.kind = VT_EV_EMPTY_CACHE, .device = device, .stack = vt__stack_capture());
        return 0;
    case VT_EV_OOM:
        record_oom(device, size, aux, addr, stream, 0);
        return 0;
    default:
        return -EINVAL;
    }
}

VT_REC_TEXT int vt_pool_oom(int device, uint64_t request, uint64_t free_bytes, uint64_t total,
                            uint64_t stream, uint64_t pool)
{
    if (vt__rec_on())
        record_oom(device, request, free_bytes, total, stream, pool);
    return 0;
}
