/*
 * alloc/backend_host.h - a device made of host bookkeeping only, for replay.
 *
 * backend_host.c implements backend.h without CUDA: each device is a range of
 * virtual addresses with a capacity; an allocation takes the lowest free
 * range that fits (page aligned, 2 MiB aligned from 2 MiB, as the driver and
 * the simulated device place them) and counts its bytes against the
 * capacity; nothing is ever mapped. The VMM calls (expandable segments)
 * reserve address ranges from a separate area, never reused, that count
 * nothing; mapped chunks count against the capacity like allocations. Every call is counted, and nothing
 * depends on wall time or threads, so the same calls always give the same
 * addresses and results.
 *
 * Streams and events are logical. A clock that the caller advances (the
 * index of the recorded event being replayed) is "now". Work on a logical
 * stream (a handle made by vt__host_logical_stream(t)) is done when the clock
 * reaches t, so an event recorded on it completes then; work on any other
 * stream is done at once. The caller knows from the recording when the work
 * an event fences was done (the recorded FREE_COMPLETED) and frees the block
 * on the logical stream of that moment. Synchronizing on an event or a
 * stream completes it at once (the caller waited).
 *
 * Not thread-safe: one replay drives it from one thread.
 */
#ifndef VT_ALLOC_BACKEND_HOST_H
#define VT_ALLOC_BACKEND_HOST_H

#include <stdint.h>

#include "backend.h"

#define VT_HOST_UNLIMITED UINT64_MAX   /* a capacity that never runs out */

/* What the allocator asked of the device. */
typedef struct vt__host_calls {
    uint64_t mallocs;          /* successful allocations (segments) */
    uint64_t failed_mallocs;   /* allocations refused: over capacity */
    uint64_t frees;
    uint64_t event_creates, event_records, event_queries, event_syncs;
    uint64_t stream_syncs, device_syncs;
    uint64_t mem_infos;
    uint64_t va_reserves, va_frees; /* expandable segments' address ranges */
    uint64_t maps, unmaps;          /* chunks mapped / unmapped */
    uint64_t failed_maps;           /* map calls refused: over capacity */
} vt__host_calls;

/* Start over with `ndevices` devices (1..64), each with `capacity[d]` bytes
 * (VT_HOST_UNLIMITED: no limit; total memory then reads as unknown).
 * Forgets every allocation, event and count. @return 0 or -EINVAL/-ENOMEM. */
int vt__host_setup(int ndevices, const uint64_t *capacity);
/* Give back everything vt__host_setup took. */
void vt__host_teardown(void);

/* The logical clock: work of logical streams up to `now` is done. */
void vt__host_set_now(uint64_t now);

/* The handle of the logical stream whose work is done at clock value `when`
 * (< 2^62). Bit 62 marks it; real stream handles are pointers far below,
 * and per-thread stream keys have bit 63. */
#define VT_HOST_LOGICAL_STREAM (1ull << 62)
static inline uint64_t vt__host_logical_stream(uint64_t when)
{
    return VT_HOST_LOGICAL_STREAM | (when & (VT_HOST_LOGICAL_STREAM - 1));
}

/* Counters of `device` (all zero for a device never set up). */
void vt__host_get_calls(int device, vt__host_calls *out);
/* Bytes allocated on `device` now. */
uint64_t vt__host_used(int device);

#endif /* VT_ALLOC_BACKEND_HOST_H */
