/*
 * trace/interop/perfetto.h - a snapshot's timeline in the Trace Event
 * Format (JSON) that Perfetto UI and chrome://tracing load
 * (perfetto_export.c). The reader has no checker: what it found comes in as
 * plain instants, and so does the choice of the frame that names an
 * allocation.
 */
#ifndef VT_TRACE_PERFETTO_H
#define VT_TRACE_PERFETTO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "snapshot.h"
#include "timeline.h"

/* One finding of a checker, drawn as an instant. */
typedef struct vt__perfetto_finding {
    const char *rule;          /* the rule's name */
    uint64_t time_ns;          /* when it became one; 0: the first event */
    int device;
    uint64_t bytes, addr;
    uint32_t nallocs;          /* allocations it covers */
    bool freed;
    bool minor;                /* a minor one: its cause under the checker's floor */
    uint32_t stack;            /* where it was allocated */
} vt__perfetto_finding;

typedef struct vt__perfetto_options {
    const vt__perfetto_finding *findings;
    size_t nfindings;
    /* The frame that names an allocation's slice (NULL: the stack's
     * innermost frame). */
    const vt__frame *(*site_frame)(const vt__snapshot_data *s, uint32_t stack);
} vt__perfetto_options;

/* Write s's timeline tl to `out`; `opt` may be NULL. @return 0, or -EIO on
 * a write error. */
int vt__perfetto_export(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                        const vt__perfetto_options *opt);

/* The same bytes from a snapshot read as a stream of its events (s holds
 * every section but the events, as vt__snapfile_open_stream gives it; or a
 * whole snapshot with vt__event_stream_of), in memory that follows what is
 * alive at once plus 32 bytes per allocation the events settle
 * (perfetto_stream.c). A damaged file's message is the stream's (the err
 * it was opened with).
 * @return 0, or a negative errno with one line in err (-EIO: a write error). */
struct vt__event_stream;
int vt__perfetto_export_stream(FILE *out, const vt__snapshot_data *s, struct vt__event_stream *es,
                               const vt__perfetto_options *opt, char *err, size_t errlen);

#endif /* VT_TRACE_PERFETTO_H */
