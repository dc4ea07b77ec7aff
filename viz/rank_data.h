/*
 * viz/rank_data.h - the data of one rank in the page of several ranks
 * (`vramtrace viz A B ...`, render_ranks.c): its allocated-bytes curve,
 * reduced to at most VT_RANK_POINTS points (each bucket keeps its maximum, so
 * no peak disappears), its marks, and the tool's pauses (track()'s marks and
 * walks, which the program did not run for), on the wall clock.
 */
#ifndef VT_VIZ_RANK_DATA_H
#define VT_VIZ_RANK_DATA_H

#include "buf.h"
#include "snapshot.h"
#include "timeline.h"

#define VT_RANK_POINTS 2000
#define VT_RANK_MIN_PAUSE_NS 1000000   /* a pause shorter is left out (rank_data.c) */

/* Append rank `rank`'s object {"rank", "file", "device", "peak", "points",
 * "marks", "pauses"} to `b`, as JSON that is safe inside an HTML <script> element:
 * every string goes through the one escaper's script form (json_str.h), so
 * a mark label or a file name can never close the element. */
void vt__viz_rank_json(vt__buf *b, int rank, const char *file, const vt__snapshot_data *s,
                       const vt__timeline *tl);

#endif /* VT_VIZ_RANK_DATA_H */
