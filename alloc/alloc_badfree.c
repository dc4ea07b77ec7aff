/*
 * alloc/alloc_badfree.c - what a pointer the cache could not free was.
 *
 * A bad free is reported once on stderr and recorded (VT_EV_BAD_FREE) with
 * the reason the program would want to read:
 *   - double free: an allocation started at this address and was freed, and
 *     none has started there since. Inside the cache each segment keeps a
 *     bit per 512 bytes for that (set at the free, cleared when a block is
 *     handed out there again), so a stale pointer is told from an interior
 *     pointer into freed memory even after the freed block merged with its
 *     neighbours; with cache:0 the memory went back to the device, so the
 *     addresses freed are remembered (up to VT_UNCACHED_FREED_MAX) until the
 *     device hands the address out again;
 *   - freed by a device reset: the pointer was live when cudaDeviceReset /
 *     cuDevicePrimaryCtxReset freed everything (remembered until the next
 *     reset), even when the address now lies inside a newer block;
 *   - interior pointer: inside a block (live or free), not where a live
 *     allocation starts;
 *   - unknown pointer: none of these, and the real free refused it too
 *     (a host pointer, a pointer never allocated).
 * A pointer outside the cache is always handed to the real free first, and
 * reported only when that fails: the error code stays the real one.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc_internal.h"
#include "order.h"
#include "recorder.h"

#define VT_UNCACHED_FREED_MAX (1u << 20)

static atomic_uint bad_free_lines;

void vt__badfree_report(int device, uint64_t addr, int reason, uint32_t stack)
{
    static const char *what[] = {
        [VT_BAD_FREE_UNKNOWN_POINTER] = "unknown pointer, not a live allocation",
        [VT_BAD_FREE_INTERIOR] = "points inside a block, not at the start of a live allocation",
        [VT_BAD_FREE_DOUBLE] = "block already freed (double free)",
        [VT_BAD_FREE_AFTER_RESET] = "freed by the device reset (a pointer from before it)",
    };
    /* One line per bad free; a program that does it in a loop must not
     * drown its own output, so the lines stop after 100. */
    unsigned n = atomic_fetch_add(&bad_free_lines, 1);
    if (n < 100)
        fprintf(stderr, "vramtrace: bad free of %p on device %d: %s\n",
                (void *)(uintptr_t)addr, device, what[reason]);
    else if (n == 100)
        fprintf(stderr, "vramtrace: more bad frees; no further ones are printed\n");
    vt__trace(.kind = VT_EV_BAD_FREE, .device = device, .addr = addr, .stack = stack,
              .aux = (uint64_t)reason);
}

/* Was addr live at the last reset? reset_ptrs holds addr << 1 | 1 for a
 * stream-ordered allocation, addr << 1 for a cudaMalloc one (sorted by
 * address): *stream_ordered says which (may be NULL). */
static bool reset_listed_as(const vt__heap *h, uint64_t addr, bool *stream_ordered)
{
    uint64_t lo = 0, hi = h->nreset, want = addr << 1;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (h->reset_ptrs[mid] < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= h->nreset || h->reset_ptrs[lo] >> 1 != addr)
        return false;
    if (stream_ordered)
        *stream_ordered = h->reset_ptrs[lo] & 1;
    return true;
}

static bool reset_listed(const vt__heap *h, uint64_t addr)
{
    return reset_listed_as(h, addr, NULL);
}

bool vt__badfree_accepted(const vt__heap *h, uint64_t addr, int reason)
{
    bool ordered = false;
    return reason == VT_BAD_FREE_AFTER_RESET && reset_listed_as(h, addr, &ordered) && ordered;
}

int vt__badfree_outside_segments(const vt__heap *h, uint64_t addr)
{
    bool ordered = false;
    return reset_listed_as(h, addr, &ordered) && ordered ? VT_BAD_FREE_AFTER_RESET : 0;
}

int vt__badfree_classify(vt__heap *h, const vt__segment *s, uint64_t addr)
{
    if (vt__seg_was_freed(s, addr))
        return VT_BAD_FREE_DOUBLE;
    if (reset_listed(h, addr))
        return VT_BAD_FREE_AFTER_RESET;
    return VT_BAD_FREE_INTERIOR;
}

int vt__badfree_foreign_reason(vt__heap *h, uint64_t addr)
{
    if (vt__ptrmap_get(&h->uncached_freed, addr))   /* since the reset: newer */
        return VT_BAD_FREE_DOUBLE;
    if (reset_listed(h, addr))
        return VT_BAD_FREE_AFTER_RESET;
    return VT_BAD_FREE_UNKNOWN_POINTER;
}

void vt__badfree_note_uncached_free(vt__heap *h, uint64_t addr)
{
    if (h->uncached_freed.count < VT_UNCACHED_FREED_MAX)
        vt__ptrmap_put(&h->uncached_freed, addr, (vt__block *)(uintptr_t)1);   /* a mark */
}

void vt__badfree_forget(vt__heap *h, uint64_t addr)
{
    if (vt__unlikely(h->uncached_freed.count))
        vt__ptrmap_del(&h->uncached_freed, addr);
}

void vt__badfree_note_reset(vt__heap *h, uint64_t *addrs, uint64_t n)
{
    if (n)
        qsort(addrs, n, sizeof *addrs, vt__qsort_u64);
    vt__heap_lock(h);
    uint64_t *old = h->reset_ptrs;
    h->reset_ptrs = addrs;
    h->nreset = n;
    /* the device's memory is all new: nothing of before was freed "twice" */
    uint64_t *keys = h->uncached_freed.keys;
    vt__block **vals = h->uncached_freed.vals;
    h->uncached_freed = (vt__ptrmap){ 0 };
    vt__heap_unlock(h);
    free(old);
    free(keys);
    free(vals);
}

void vt__alloc_report_foreign_free(int device, const void *ptr, uint32_t stack)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int reason = VT_BAD_FREE_UNKNOWN_POINTER;
    vt__heap *h = vt__heap_get(device, false);
    if (h) {
        vt__heap_lock(h);
        reason = vt__badfree_foreign_reason(h, addr);
        h->num_bad_frees++;
        vt__heap_unlock(h);
    }
    vt__badfree_report(device, addr, reason, stack);
}
