/*
 * trace/interop/pytorch_write.h - the parts of a PyTorch snapshot pickle,
 * one function each (pytorch_export.c), so that the export of a whole
 * snapshot and the one of a stream of its events (pytorch_stream.c) write
 * the same bytes in the same order:
 *
 *   head (segments, the opening of the device traces), per device trace
 *   its events, middle (allocator settings, the opening of the
 *   annotations), the marks as annotations, tail.
 */
#ifndef VT_TRACE_PYTORCH_WRITE_H
#define VT_TRACE_PYTORCH_WRITE_H

#include "pickle.h"
#include "snapshot.h"

/* Is e in device `device`'s trace? (Device 0's takes the events of none.) */
int vt__pt_in_trace(const vt__event *e, int device);
/* The entries of event e of a device trace. `plain_completion`: e is the
 * FREE_COMPLETED of a free that needed no wait, written with that free. */
void vt__pt_event(vt__pickle_writer *w, const vt__snapshot_data *s, const vt__event *e,
                  int plain_completion);
/* A MARK as an external annotation. */
void vt__pt_annotation(vt__pickle_writer *w, const vt__snapshot_data *s, const vt__event *e);
/* The pickle up to the first device trace. */
void vt__pt_head(vt__pickle_writer *w, const vt__snapshot_data *s);
/* From the end of the device traces to the first annotation. */
void vt__pt_middle(vt__pickle_writer *w);
/* The end of the annotations and of the pickle. */
void vt__pt_tail(vt__pickle_writer *w);

#endif /* VT_TRACE_PYTORCH_WRITE_H */
