/*
 * viz/render.h - render a snapshot as one self-contained HTML page.
 *
 * The page is viz/template.html with viz/style.css, the timeline's script
 * (viz/timeline_*.js, after ticks.js and sweep.js) and the data inlined
 * (the assets are compiled into the binary by viz/embed.py).
 * Data is columnar: per allocation and per event, unsigned LEB128 varints
 * (deltas where values grow), base64 in one <script type=
 * "application/octet-stream"> tag; strings, frames, marks and findings as
 * JSON. The page makes no network request.
 */
#ifndef VT_VIZ_RENDER_H
#define VT_VIZ_RENDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "snapshot.h"
#include "timeline.h"

/* What a render produced (for messages and benchmarks). */
typedef struct vt__viz_stats {
    size_t html_bytes;     /* bytes written */
    size_t data_bytes;     /* binary data before base64 */
    size_t meta_bytes;     /* JSON metadata */
    size_t nlifetimes;     /* allocations drawn */
    size_t nexternal;      /* external storages drawn (a CPU tensor's, ...) */
    size_t naxis;          /* events on the x axis */
    size_t nfindings;      /* findings shown (checker + FINDING events) */
} vt__viz_stats;

/* Write the page for snapshot `s` (with its timeline `tl`, built by
 * vt__timeline_build) to `out`. `report` (may be NULL) adds the checker's
 * findings; VT_EV_FINDING events of the snapshot are always shown.
 * @return 0, or a negative errno (-ENOMEM, -EIO) with a one-line message in
 *         err. `stats` may be NULL. */
int vt__viz_render(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                   const vt__check_report *report, vt__viz_stats *stats,
                   char *err, size_t errlen);

/* A curve drawn over the recorded reserved bytes: what a replay of the
 * same events under other settings reserved (`vramtrace viz --replay`),
 * as points after the events where it changed. */
typedef struct vt__viz_overlay {
    const char *label;          /* legend: the settings replayed, the outcome */
    size_t npoints;
    const uint32_t *event;      /* per point: index into s->events */
    const uint64_t *reserved;   /* per point: bytes reserved after that event */
    const int8_t *device;       /* per point: device ordinal */
    int64_t oom_event;          /* index into s->events where it ran out of memory,
                                   -1: it did not (the curve ends there) */
} vt__viz_overlay;

/* vt__viz_render with an overlay curve (NULL: none). */
int vt__viz_render_overlay(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                           const vt__check_report *report, const vt__viz_overlay *overlay,
                           vt__viz_stats *stats, char *err, size_t errlen);

/* An OOM of the snapshot explained: `vramtrace oom --json`'s document and
 * the index in s->events of the OOM it explains. */
typedef struct vt__viz_oom {
    const char *json;
    size_t event;
} vt__viz_oom;

/* The same with, besides, an OOM explained (NULL: none): the page marks the
 * OOM on the timeline and shows the explanation in a panel. */
int vt__viz_render_page(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                        const vt__check_report *report, const vt__viz_overlay *overlay,
                        const vt__viz_oom *oom, vt__viz_stats *stats, char *err,
                        size_t errlen);

/* The page of a snapshot whose events are read as a stream (s holds every
 * section but the events, es reads them: vt__snapshot_open), the same bytes
 * as vt__viz_render_page's without an overlay, in memory that follows what
 * is alive at once plus a few bytes per event and per allocation: the
 * events are read four or five times (viz/render_stream.c). `report` as
 * vt__viz_render's (vt__check_run_stream gives it in the same memory).
 * @return 0; -ENOTSUP, nothing written, for a snapshot with an OOM event
 *         (its explanation replays the run, which needs the whole snapshot:
 *         vt__viz_render_page); or a negative errno with one line in err
 *         (a damaged file's in the stream's own err). */
struct vt__event_stream;
int vt__viz_render_stream(FILE *out, const vt__snapshot_data *s, struct vt__event_stream *es,
                          const vt__check_report *report, vt__viz_stats *stats, char *err,
                          size_t errlen);

/* One rank's snapshot in the page of several ranks. */
typedef struct vt__viz_rank {
    int rank;                         /* its rank (the snapshot's, else its place) */
    const char *file;                 /* the snapshot's path: the selector and messages name it */
    const vt__snapshot_data *s;
    const vt__timeline *tl;            /* built by vt__timeline_build */
    const vt__check_report *report;    /* NULL: the snapshot's own findings only */
} vt__viz_rank;

/* Write the page of several ranks (viz/render_ranks.c) to `out`: each rank's
 * own page (vt__viz_render) behind a selector, in the order given, and an
 * overview of every rank's allocated bytes on one time axis.
 * @return 0, or a negative errno with a one-line message in err (a rank's
 *         own failure names its file). */
int vt__viz_render_ranks(FILE *out, const vt__viz_rank *ranks, size_t n, char *err, size_t errlen);

/* Writes a whole page to `out`. @return 0, or a negative errno with one
 * line in err. */
typedef int (*vt__viz_page_writer)(FILE *out, void *ctx, char *err, size_t errlen);

/* Write a page to the file `path` through the one checked output writer
 * (trace/snap/outfile.h: a temporary file next to it, renamed over a regular
 * file or none, never a half-written page): `write` writes it.
 * @return 0, or a negative errno with one line in err: write's own, or the
 *         output file's (naming its path). */
int vt__viz_write_file(const char *path, vt__viz_page_writer write, void *ctx, char *err,
                       size_t errlen);

#endif /* VT_VIZ_RENDER_H */
