/*
 * trace/snap/free_match.h - which FREE_REQUESTED a FREE_COMPLETED
 * completes: the one rule the timeline (timeline_match.c) and the replay
 * (alloc/replay/replay_recorded.c) both follow.
 *
 * A FREE_COMPLETED completes the newest FREE_REQUESTED of its address,
 * unless an ALLOC took the address since or a FREE_COMPLETED already
 * completed it; otherwise it completes nothing (its request was before the
 * window). The address alone is the key: device addresses are unique
 * across devices.
 *
 * It holds a request only until its completion or the next ALLOC of its
 * address, so that a build over a stream of events stays bounded by what
 * is pending.
 */
#ifndef VT_TRACE_FREE_MATCH_H
#define VT_TRACE_FREE_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"
#include "u64map.h"

#define VT__FREE_MATCH_NONE VT__U64MAP_NONE

typedef struct vt__free_match {
    vt__u64map open;           /* addr -> its FREE_REQUESTED not yet completed */
} vt__free_match;

/* @return 0 or -ENOMEM. */
int vt__free_match_init(vt__free_match *m);
void vt__free_match_free(vt__free_match *m);
/* Note event e, of index i (below VT__FREE_MATCH_NONE), in the order of the
 * events: *request is, at a FREE_COMPLETED, the index of the FREE_REQUESTED
 * it completes, else VT__FREE_MATCH_NONE. @return 0 or -ENOMEM. */
int vt__free_match_event(vt__free_match *m, const vt__event *e, uint32_t i, uint32_t *request);

/* Forget the request at addr, for a caller to whom its completion no longer
 * matters (the streamed timeline, once it retired the lifetime there). */
void vt__free_match_drop(vt__free_match *m, uint64_t addr);

#endif /* VT_TRACE_FREE_MATCH_H */
