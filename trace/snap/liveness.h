/*
 * trace/snap/liveness.h - what a snapshot knows about which allocations are alive
 * at its end, the one rule every view (timeline, leaks, summary, check) uses.
 *
 * A live snapshot copies the event ring while writers go on; writers that lap
 * the copy leave gaps: missing sequence numbers inside the kept window. An
 * allocation whose free is not among the kept events may have been freed in
 * a gap, or after the events were copied. So:
 *  - When the snapshot carries the allocator's complete state at snapshot
 *    time (vt__snapshot_state_complete), that state is the ground truth: an
 *    allocation is alive iff an active-allocated block starts at its address
 *    and (when both are known) carries its alloc seq.
 *  - Otherwise an allocation whose lifetime crosses a gap (a gap after its
 *    last known event) is of unknown fate, never alive.
 *
 * Pure function of the snapshot; needs no allocator.
 */
#ifndef VT_TRACE_LIVENESS_H
#define VT_TRACE_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

typedef struct vt__liveness vt__liveness;

/* @return 0 and *out (free with vt__liveness_free), or -ENOMEM. */
int vt__liveness_build(const vt__snapshot_data *s, vt__liveness **out);
/* The same for events read one at a time (event_stream.h): the state's
 * part first, then every event noted in order (index ev, its seq); the gaps
 * at or before an event are known once it is noted. @return 0 or -ENOMEM. */
int vt__liveness_build_state(const vt__snapshot_data *s, vt__liveness **out);
int vt__liveness_note_event(vt__liveness *lv, uint32_t ev, uint64_t seq);
void vt__liveness_free(vt__liveness *lv);

/* Does the snapshot's STATE section hold the allocator's complete state at
 * snapshot time? Format 1.2 says so in META (VT_META_STATE_COMPLETE); older
 * files, written by the recorder, had it whenever they had any segment. */
int vt__snapshot_state_complete(const vt__snapshot_data *s);

/* Gaps: event index i "follows a gap" when events[i].seq > events[i-1].seq + 1. */
size_t vt__liveness_gap_count(const vt__liveness *lv);
uint64_t vt__liveness_events_missing(const vt__liveness *lv); /* seqs missing inside the window */
/* The first event index > ev that follows a gap, or UINT32_MAX. */
uint32_t vt__liveness_gap_after(const vt__liveness *lv, uint32_t ev);
/* The last event index <= ev that follows a gap, or UINT32_MAX. */
uint32_t vt__liveness_gap_at_or_before(const vt__liveness *lv, uint32_t ev);

/* The fate at the snapshot of an allocation at `addr` (alloc seq
 * `alloc_seq`, 0 if unknown) whose free the kept events do not hold, and
 * whose last known event is index `last_ev` (UINT32_MAX: before the window). */
enum vt__fate {
    VT_FATE_ALIVE = 0,        /* allocated at the snapshot */
    VT_FATE_FREED_UNSEEN = 1, /* the state says it is gone: freed in a gap or after the copy */
    VT_FATE_UNKNOWN = 2,      /* no complete state, and a gap follows its last event */
};
enum vt__fate vt__liveness_fate(const vt__liveness *lv, uint64_t addr, uint64_t alloc_seq,
                                uint32_t last_ev);

/* The state block (index into s->blocks) that is active at `addr`, or -1. */
long vt__liveness_state_block(const vt__liveness *lv, uint64_t addr);

#endif /* VT_TRACE_LIVENESS_H */
