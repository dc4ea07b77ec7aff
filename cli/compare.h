/*
 * cli/compare.h - `vramtrace compare` as parts (cli/cmd_compare.c): the
 * ranks are read one after another, each as a stream of its events, and
 * only their figures kept (peaks, bytes per call site at the peak, the
 * growth series), so that several ranks' snapshots need not fit in memory
 * at once. A test feeds the same parts from whole snapshots.
 */
#ifndef VT_CLI_COMPARE_H
#define VT_CLI_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "compare_growth.h"
#include "snapshot.h"
#include "timeline.h"

typedef struct vt__compare vt__compare;

/* A comparison of `nranks` ranks, shown as JSON or text (names then read
 * from snapshots whose names were made safe: vt__report_text_names).
 * @return 0 and *out, or -ENOMEM. */
int vt__compare_open(size_t nranks, bool json, vt__compare **out);

/* Read the next rank's snapshot `file` (kept: it must outlive c) as a
 * stream and keep its figures. On failure prints one line "vramtrace
 * compare: ..." to stderr. @return 0 or VT_EXIT_FAILURE. */
int vt__compare_read(vt__compare *c, const char *file);

/* The next rank from s, a snapshot without its events, and es, a stream
 * of them (vt__snapshot_open; vt__event_stream_of for a whole one): s's
 * names are escaped for text first. @return 0, or a negative errno with
 * one line in err (a damaged file: the stream's own err says it). */
struct vt__event_stream;
int vt__compare_add_stream(vt__compare *c, const char *file, vt__snapshot_data *s,
                           struct vt__event_stream *es, char *err, size_t errlen);

/* The next rank from its snapshot s (names escaped for text) and a
 * timeline of it, whole (vt__timeline_build) or streamed with the curves
 * (its lifetimes at the allocated peaks are what counts), and its growth
 * series, finished (taken, even on failure). @return 0, -ENOMEM, or
 * -EINVAL past the ranks c was opened for. */
int vt__compare_add(vt__compare *c, const char *file, const vt__snapshot_data *s,
                    const vt__timeline *tl, vt__growth_series *series);

/* The report, every rank added: the ranks by rank, the holders of the
 * growing sites of a rank that differs read again from its file.
 * @return 0 or -ENOMEM (nothing printed). */
int vt__compare_print(vt__compare *c, FILE *out, size_t top);

void vt__compare_free(vt__compare *c);

#endif /* VT_CLI_COMPARE_H */
