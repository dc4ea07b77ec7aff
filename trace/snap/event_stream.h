/*
 * trace/snap/event_stream.h - a snapshot's events one at a time, in seq
 * order, without holding them all: what lets a view's memory follow what is
 * alive at once rather than how many events a file holds.
 *
 * A stream of a .vtsnap file decodes its EVENTS section column by column
 * (zstd streaming decompression, one decoder per column: the columns lie
 * back to back, and one event takes a field of each), a few KiB of each at
 * a time. It validates exactly what vt__snapfile_read() validates, with the
 * same messages; the checks that need a whole column (the bytes left over
 * at its end, the zstd frame's own size) are made when the last event has
 * been read, so a view reports a bad file only after reading it through.
 * A stream over an in-memory snapshot (a PyTorch import) hands out its
 * events array.
 */
#ifndef VT_TRACE_EVENT_STREAM_H
#define VT_TRACE_EVENT_STREAM_H

#include <stddef.h>

#include "snapshot.h"

typedef struct vt__event_stream vt__event_stream;

/* Read `path` (a .vtsnap) into *s, every section but EVENTS (s->events is
 * NULL, s->nevents 0), and open *es on its events. `chunk` is how many
 * bytes of file and of each column are decoded at a time (0: the default,
 * 64 KiB; tests make it tiny so that chunks end inside events). `err` must
 * outlive the stream: its errors are written there too.
 * @return 0, or a negative errno with one line in err (as vt__snapfile_read). */
int vt__snapfile_open_stream(const char *path, size_t chunk, vt__snapshot_data **s,
                             vt__event_stream **es, char *err, size_t errlen);

/* The same on an open descriptor (the stream owns it from here, also on
 * failure); `path` names the file in messages. */
int vt__snapfile_open_stream_fd(int fd, const char *path, size_t chunk, vt__snapshot_data **s,
                                vt__event_stream **es, char *err, size_t errlen);

/* A stream over s->events (s must outlive it). @return 0 or -ENOMEM. */
int vt__event_stream_of(const vt__snapshot_data *s, vt__event_stream **es);

/* How many events the stream holds (the section's count). */
size_t vt__event_stream_count(const vt__event_stream *es);

/* The next event into *e. @return 1, 0 after the last one (the section then
 * checked to its end), or a negative errno with one line in the stream's
 * err (the file's problem, named as vt__snapfile_read names it). */
int vt__event_stream_next(vt__event_stream *es, vt__event *e);

/* Back to the first event (a view that reads the events more than once).
 * @return 0 or a negative errno with one line in err. */
int vt__event_stream_rewind(vt__event_stream *es);

/* Close the stream. NULL is fine. */
void vt__event_stream_close(vt__event_stream *es);

#endif /* VT_TRACE_EVENT_STREAM_H */
