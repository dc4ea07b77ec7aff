/*
 * trace/snap/liveness.c - gaps in the kept events and the allocator state as the
 * ground truth of what is alive (the rule: liveness.h).
 *
 * Active state blocks are indexed by address in one sorted array (binary
 * search); gaps are the sorted event indexes that follow missing seqs.
 */
#include "bsearch.h"
#include "grow.h"
#include "liveness.h"

#include <errno.h>
#include <stdlib.h>

struct vt__liveness {
    const vt__snapshot_data *s;
    uint32_t *gaps;          /* event indexes that follow a gap, ascending */
    size_t ngaps, gcap;
    uint64_t prev_seq;       /* of the last event noted */
    uint64_t missing;
    uint32_t *active;        /* indexes of non-inactive blocks, by addr */
    size_t nactive;
    int complete;            /* vt__snapshot_state_complete */
};

int vt__snapshot_state_complete(const vt__snapshot_data *s)
{
    if (s->meta.format_version >= ((1u << 16) | 2))
        return (s->meta.flags & VT_META_STATE_COMPLETE) != 0;
    return s->nsegments > 0 || (s->meta.flags & VT_META_STATE_COMPLETE);
}

static const vt__snapshot_data *sort_s;

static int cmp_block(const void *a, const void *b)
{
    uint64_t x = sort_s->blocks[*(const uint32_t *)a].addr;
    uint64_t y = sort_s->blocks[*(const uint32_t *)b].addr;
    return x < y ? -1 : x > y;
}

int vt__liveness_build_state(const vt__snapshot_data *s, vt__liveness **out)
{
    *out = NULL;
    vt__liveness *lv = calloc(1, sizeof *lv);
    if (!lv)
        return -ENOMEM;
    lv->s = s;
    lv->complete = vt__snapshot_state_complete(s);
    size_t na = 0;
    for (size_t i = 0; i < s->nblocks; i++)
        na += s->blocks[i].state != VT_BLOCK_INACTIVE;
    lv->active = malloc((na + 1) * sizeof *lv->active);
    if (!lv->active) {
        vt__liveness_free(lv);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].state != VT_BLOCK_INACTIVE)
            lv->active[lv->nactive++] = (uint32_t)i;
    /* blocks are in segment order, segments in any order: sort once */
    sort_s = s;
    qsort(lv->active, lv->nactive, sizeof *lv->active, cmp_block);
    *out = lv;
    return 0;
}

int vt__liveness_note_event(vt__liveness *lv, uint32_t ev, uint64_t seq)
{
    if (ev > 0 && seq > lv->prev_seq + 1) {
        if (vt__grow((void **)&lv->gaps, &lv->gcap, lv->ngaps + 1, sizeof *lv->gaps))
            return -ENOMEM;
        lv->gaps[lv->ngaps++] = ev;
        lv->missing += seq - lv->prev_seq - 1;
    }
    lv->prev_seq = seq;
    return 0;
}

int vt__liveness_build(const vt__snapshot_data *s, vt__liveness **out)
{
    int rc = vt__liveness_build_state(s, out);
    for (size_t i = 0; i < s->nevents && !rc; i++)
        rc = vt__liveness_note_event(*out, (uint32_t)i, s->events[i].seq);
    if (rc) {
        vt__liveness_free(*out);
        *out = NULL;
    }
    return rc;
}

void vt__liveness_free(vt__liveness *lv)
{
    if (!lv)
        return;
    free(lv->gaps);
    free(lv->active);
    free(lv);
}

size_t vt__liveness_gap_count(const vt__liveness *lv) { return lv->ngaps; }
uint64_t vt__liveness_events_missing(const vt__liveness *lv) { return lv->missing; }

/* How many gaps are at or before event ev. */
static size_t gaps_upto(const vt__liveness *lv, uint32_t ev)
{
    size_t lo;
    VT__PARTITION_POINT(lv->ngaps, i, lv->gaps[i] <= ev, lo);
    return lo;
}

uint32_t vt__liveness_gap_after(const vt__liveness *lv, uint32_t ev)
{
    /* ev = UINT32_MAX: before the first event, so any gap is after it */
    size_t k = ev == UINT32_MAX ? 0 : gaps_upto(lv, ev);
    return k < lv->ngaps ? lv->gaps[k] : UINT32_MAX;
}

uint32_t vt__liveness_gap_at_or_before(const vt__liveness *lv, uint32_t ev)
{
    if (ev == UINT32_MAX)
        return UINT32_MAX;
    size_t k = gaps_upto(lv, ev);
    return k ? lv->gaps[k - 1] : UINT32_MAX;
}

long vt__liveness_state_block(const vt__liveness *lv, uint64_t addr)
{
    size_t lo;
    VT__PARTITION_POINT(lv->nactive, i, lv->s->blocks[lv->active[i]].addr < addr, lo);
    if (lo < lv->nactive && lv->s->blocks[lv->active[lo]].addr == addr)
        return (long)lv->active[lo];
    return -1;
}

enum vt__fate vt__liveness_fate(const vt__liveness *lv, uint64_t addr, uint64_t alloc_seq,
                                uint32_t last_ev)
{
    if (lv->complete) {
        long b = vt__liveness_state_block(lv, addr);
        if (b < 0)
            return VT_FATE_FREED_UNSEEN;
        const vt__snap_block *bl = &lv->s->blocks[b];
        if (bl->state != VT_BLOCK_ACTIVE_ALLOCATED)
            return VT_FATE_FREED_UNSEEN;
        if (alloc_seq && bl->alloc_seq && bl->alloc_seq != alloc_seq)
            return VT_FATE_FREED_UNSEEN;   /* freed, and the addr handed out again */
        return VT_FATE_ALIVE;
    }
    return vt__liveness_gap_after(lv, last_ev) != UINT32_MAX ? VT_FATE_UNKNOWN : VT_FATE_ALIVE;
}
