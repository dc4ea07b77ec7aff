/*
 * alloc/replay/replay_result.c - what a replay measures in order, whichever
 * rules it follows: the segment allocations (compared with the recording's:
 * the same sequence means the replay is the run that was recorded) and,
 * when asked, the reserved bytes after every change.
 */
#include <stdlib.h>

#include "grow.h"
#include "replay_internal.h"

int vt__trail_reserved(vt__replay_trail *t, int device, int64_t delta, uint64_t reserved,
                       size_t event, uint64_t time_ns)
{
    if (delta > 0) {
        if (vt__grow_from((void **)&t->segs, &t->capsegs, t->nsegs + 1, sizeof *t->segs, 1024))
            return -ENOMEM;
        t->segs[t->nsegs++] = vt__seg_code(device, (uint64_t)delta);
    }
    if (!t->want_curve)
        return 0;
    if (vt__grow_from((void **)&t->curve, &t->capcurve, t->ncurve + 1, sizeof *t->curve, 1024))
        return -ENOMEM;
    t->curve[t->ncurve++] = (vt__replay_point){ .event = event, .time_ns = time_ns,
                                               .reserved = reserved, .device = (int8_t)device };
    return 0;
}

void vt__trail_finish(vt__replay_trail *t, const uint64_t *recorded, size_t nrecorded,
                      vt__replay_result *r)
{
    const uint64_t *segs = t->segs + t->seeded;
    size_t nsegs = t->nsegs - t->seeded;
    size_t n = nrecorded < nsegs ? nrecorded : nsegs, k = 0;
    while (k < n && recorded[k] == segs[k])
        k++;
    r->segments_identical = k == n && nrecorded == nsegs;
    r->segments_compared = n;
    r->first_segment_difference = k;
    r->curve = t->curve;
    r->ncurve = t->ncurve;
    t->curve = NULL;
    vt__trail_free(t);
}

void vt__trail_free(vt__replay_trail *t)
{
    free(t->segs);
    free(t->curve);
    t->segs = NULL;
    t->curve = NULL;
    t->nsegs = t->capsegs = t->ncurve = t->capcurve = t->seeded = 0;
}

void vt__replay_result_free(vt__replay_result *r)
{
    if (!r)
        return;
    free(r->curve);
    r->curve = NULL;
    r->ncurve = 0;
}

uint64_t vt__replay_peak_reserved(const vt__replay_result *r)
{
    uint64_t m = 0;
    for (size_t d = 0; d < r->ndevices; d++)
        if (r->devices[d].peak_reserved > m)
            m = r->devices[d].peak_reserved;
    return m;
}
