/*
 * cli/compare_growth.h - growth across steps and ranks, the part of
 * `vramtrace compare` that aligns the ranks by step (cli/compare_growth.c).
 */
#ifndef VT_CLI_COMPARE_GROWTH_H
#define VT_CLI_COMPARE_GROWTH_H

#include <stddef.h>
#include <stdio.h>

#include "snapshot.h"
#include "timeline.h"

/* A rank is flat when it grows at most this much per step (or a thousandth
 * of the ranks' median bytes at their last mark, when that is more); a
 * rank's growth differs from the others' by more than that and 4 x the
 * ranks' median deviation. */
#define VT_GROWTH_FLAT_PER_STEP (64u * 1024u)

/* One rank as compare read it. */
typedef struct vt__growth_rank {
    int rank;
    const vt__snapshot_data *s;
    const vt__timeline *tl;
} vt__growth_rank;

typedef struct vt__growth vt__growth;

/* The growth of ranks r[0..n) (in the order to show them): their bytes
 * allocated at each mark, the k-th mark of every rank being the same step;
 * the ranks whose growth per step differs from the rest; and for those the
 * call sites (vt__report_site_frame) whose live bytes grow step over step.
 * Series are judged by vt__check_growth_fit. Names are read from r[i].s as
 * they are (escaped or not: the caller's choice). @return 0 and *out, or
 * -ENOMEM. */
int vt__growth_build(const vt__growth_rank *r, size_t n, vt__growth **out);
/* The text section of compare, and its "growth" JSON value; `top` sites per
 * rank at most. */
void vt__growth_print(FILE *f, const vt__growth *g, size_t top);
void vt__growth_json(FILE *f, const vt__growth *g, size_t top);
void vt__growth_free(vt__growth *g);

#endif /* VT_CLI_COMPARE_GROWTH_H */
