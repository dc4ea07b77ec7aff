/*
 * trace/interop/perfetto_write.h - the records of a Trace Event Format
 * file, one function each (perfetto_export.c), so that the export of a
 * whole snapshot and the one of a stream of its events
 * (perfetto_stream.c) write the same bytes in the same order:
 *
 *   begin (header, one process per device), point (the memory counter,
 *   each device's curve in turn), slice (one per lifetime, in the
 *   timeline's order), instant (events in event order), end (the
 *   findings, the thread names, the trailer).
 */
#ifndef VT_TRACE_PERFETTO_WRITE_H
#define VT_TRACE_PERFETTO_WRITE_H

#include <stdio.h>

#include "perfetto.h"

typedef struct vt__pf {
    FILE *o;
    const vt__snapshot_data *s;
    const vt__perfetto_options *opt;
    const vt__timeline *tl;  /* only its window and its devices are read */
    int first;               /* no record written yet: no separator */
    uint64_t *streams;       /* thread ids: streams in order of first appearance */
    size_t nstreams, cap_streams;
    size_t nslices;          /* slices written: the next one's id - 1 */
} vt__pf;

/* The header and the process names of tl's devices. */
void vt__pf_begin(vt__pf *w, FILE *o, const vt__snapshot_data *s, const vt__timeline *tl,
                  const vt__perfetto_options *opt);
/* A point of the curve of device index d (tl->devices[d]). */
void vt__pf_point(vt__pf *w, size_t d, const vt__tl_point *pt);
/* The next lifetime's slice (its begin and its end). */
void vt__pf_slice(vt__pf *w, const vt__lifetime *l);
/* An event, if it is one drawn as an instant. */
void vt__pf_instant(vt__pf *w, const vt__event *e);
/* The findings, the thread names, the trailer; releases w's memory.
 * @return 0, or -EIO on a write error. */
int vt__pf_end(vt__pf *w);

#endif /* VT_TRACE_PERFETTO_WRITE_H */
