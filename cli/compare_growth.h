/*
 * cli/compare_growth.h - growth across steps and ranks, the part of
 * `vramtrace compare` that aligns the ranks by step (cli/compare_growth.c),
 * from each rank's series collected as its events were read
 * (cli/compare_series.c).
 */
#ifndef VT_CLI_COMPARE_GROWTH_H
#define VT_CLI_COMPARE_GROWTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "snapshot.h"
#include "timeline.h"

/* A rank is flat when it grows at most this much per step (or a thousandth
 * of the ranks' median bytes at their last mark, when that is more); a
 * rank's growth differs from the others' by more than that and 4 x the
 * ranks' median deviation. */
#define VT_GROWTH_FLAT_PER_STEP (64u * 1024u)

/* Bytes of one call site's allocations alive at the marks [a, b). */
typedef struct vt__growth_span {
    uint64_t key;               /* its site: frame index + 1 (0: no stack) while
                                   collected, its number in names once finished */
    uint32_t a, b;              /* the rank's own marks */
    uint64_t size;
} vt__growth_span;

/* One rank's series, collected as its lifetimes go by (compare_series.c):
 * what the growth needs of the rank once its snapshot is let go. */
typedef struct vt__growth_series {
    size_t nmarks;              /* the rank's own marks */
    uint32_t *mark_event;       /* their event indices, in order */
    uint32_t *mark_label;       /* their labels' string indices */
    size_t cap_marks, cap_labels;
    int64_t *total;             /* bytes alive: deltas at marks (nmarks + 1) */
    size_t cap_total;
    vt__growth_span *spans;     /* merged: one per site and marks */
    size_t nspans, cap_spans;
    char **labels;              /* the marks' labels (finished) */
    char **names;               /* the sites' names by number, sorted (finished) */
    size_t nnames;
    int rc;                     /* the first error (-ENOMEM), kept for finish */
} vt__growth_series;

/* An empty series. @return 0 and *out, or -ENOMEM. */
int vt__growth_series_open(vt__growth_series **out);
/* The rank's next mark, in event order: every mark before the release of a
 * lifetime must be told before it. */
void vt__growth_series_mark(vt__growth_series *gs, const vt__tl_mark *m);
/* One lifetime of the rank (of snapshot s), its record final, each once,
 * in any order. */
void vt__growth_series_lifetime(vt__growth_series *gs, const vt__snapshot_data *s,
                                const vt__lifetime *l);
/* After the last lifetime: the labels and the sites' names read from s (as
 * they are: escaped or not, the caller's choice), which the series no
 * longer needs then. @return 0, or -ENOMEM (of this or an earlier call). */
int vt__growth_series_finish(vt__growth_series *gs, const vt__snapshot_data *s);
void vt__growth_series_free(vt__growth_series *gs);

/* One rank as compare read it. */
typedef struct vt__growth_rank {
    int rank;
    const char *label;                 /* what the text calls it ("rank 3", "pid 1234");
                                        * must outlive the growth */
    const vt__growth_series *series;   /* finished; must outlive the growth */
} vt__growth_rank;

typedef struct vt__growth vt__growth;

/* The growth of ranks r[0..n) (in the order to show them): their bytes
 * allocated at each mark, the k-th mark of every rank being the same step;
 * the ranks whose growth per step differs from the rest; and for those the
 * call sites (vt__report_site_frame) whose live bytes grow step over step.
 * Series are judged by vt__check_growth_fit. @return 0 and *out, or
 * -ENOMEM. */
int vt__growth_build(const vt__growth_rank *r, size_t n, vt__growth **out);
/* Whether rank i (of r) differs from the others: its shown sites want
 * their holders (vt__growth_holders). */
bool vt__growth_differs(const vt__growth *g, size_t i);
/* What holds the storages of rank i's shown sites: the checker's findings
 * `rep` on its snapshot s (default rules, names as the series had them),
 * the first one made at a site's line that has a holder. @return 0 or
 * -ENOMEM. */
struct vt__check_report;
int vt__growth_holders(vt__growth *g, size_t i, const vt__snapshot_data *s,
                       const struct vt__check_report *rep);
/* The text section of compare, and its "growth" JSON value; `top` sites per
 * rank at most. */
void vt__growth_print(FILE *f, const vt__growth *g, size_t top);
void vt__growth_json(FILE *f, const vt__growth *g, size_t top);
void vt__growth_free(vt__growth *g);

#endif /* VT_CLI_COMPARE_GROWTH_H */
