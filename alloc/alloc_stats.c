/*
 * alloc/alloc_stats.c - the heap's counters as the public vt_stats, and
 * their peaks' reset. The counters move under the heap lock
 * (vt__stat_add, inline in alloc_internal.h: the malloc and free paths).
 */
#include <string.h>

#include "alloc_internal.h"

static void copy_stats(vt_stat *dst, const vt_stat *src)
{
    memcpy(dst, src, 3 * sizeof *src);
}

void vt__heap_stats(vt__heap *h, vt_stats *o)
{
    memset(o, 0, sizeof *o);
    vt__heap_lock(h);
    copy_stats(o->allocated_bytes, h->allocated_bytes);
    copy_stats(o->reserved_bytes, h->reserved_bytes);
    copy_stats(o->active_bytes, h->active_bytes);
    copy_stats(o->inactive_split_bytes, h->inactive_split_bytes);
    copy_stats(o->requested_bytes, h->requested_bytes);
    copy_stats(o->allocation, h->allocation);
    copy_stats(o->segment, h->segment);
    copy_stats(o->active, h->active);
    copy_stats(o->inactive_split, h->inactive_split);
    o->num_alloc_retries = h->num_alloc_retries;
    o->num_ooms = h->num_ooms;
    o->num_backend_allocs = h->num_backend_allocs;
    o->num_backend_frees = h->num_backend_frees;
    o->num_sync_all = h->num_sync_all;
    o->num_fence_events = h->num_fence_events;
    o->num_bad_frees = h->num_bad_frees;
    vt__heap_unlock(h);
}

void vt__heap_reset_peaks(vt__heap *h)
{
    vt_stat *all[] = { h->allocated_bytes, h->reserved_bytes, h->active_bytes,
                          h->inactive_split_bytes, h->requested_bytes, h->allocation,
                          h->segment, h->active, h->inactive_split };
    vt__heap_lock(h);
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        for (int i = 0; i < 3; i++)
            all[k][i].peak = all[k][i].current;
    vt__heap_unlock(h);
}
