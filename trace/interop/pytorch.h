/*
 * trace/interop/pytorch.h - PyTorch memory snapshots (torch.cuda.memory._snapshot(),
 * the pickle `_dump_snapshot` writes) in and out of vramtrace's snapshot
 * model (snapshot.h). Both directions go through the safe pickle code of
 * pickle.h; no Python is involved.
 *
 * Import maps (PyTorch 2.x field names, also the 2.0-era forms):
 *   segments[]            -> segments + blocks (state, requested_size, frames;
 *                            blocks without `address` are laid out in order,
 *                            gaps become inactive blocks; old `history`
 *                            entries give the stack and requested size)
 *   device_traces[d][]    -> events of device d, merged across devices by
 *                            time_us: alloc, free_requested (pending until its
 *                            free_completed, as PyTorch's stats count it),
 *                            free_completed, segment_alloc/free, segment_map/
 *                            unmap (reserved bytes of expandable segments),
 *                            oom (device_free), snapshot and annotate (marks)
 *   frames [{filename, line, name}] (innermost first) -> interned stacks
 *   external_annotations  -> marks "NAME START" / "NAME END"
 *   allocator_settings    -> meta.config ("key=value,..." text)
 *   user_metadata         -> the event's string (annotate: the mark label)
 *   time_us (Unix time)   -> time_ns, with clock bases that make wall = time
 * A bare list at the top is a legacy snapshot: segments only.
 * Trace sizes are PyTorch's requested sizes; the block size of an allocation
 * is the state's block when it is still alive, else the request rounded up
 * to PyTorch's 512-byte granule.
 */
#ifndef VT_TRACE_PYTORCH_H
#define VT_TRACE_PYTORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "snapshot.h"

/* Decode a PyTorch snapshot pickle held in memory.
 * @return 0 and *out (free with vt__snapshot_free), or a negative errno with
 *         one line in err naming `name` and what is wrong. */
int vt__pytorch_import(const void *data, size_t size, const char *name, vt__snapshot_data **out,
                       char *err, size_t errlen);

/* One of the two ways vt__pytorch_import goes, named (tests compare them).
 * `stream`: the trace entries are read into events as each batch of them
 * is parsed and dropped from the value graph (pickle.h's sink); @return 1
 * where the pickle is not shaped for that (vt__pytorch_import then takes
 * the other way). Else the whole value graph is built first: the reference
 * for what is accepted and for every message.
 * @return as vt__pytorch_import, or 1. */
int vt__pytorch_import_path(const void *data, size_t size, const char *name, bool stream,
                            vt__snapshot_data **out, char *err, size_t errlen);

/* Convert a PyTorch snapshot pickle held in memory into a .vtsnap written
 * to `fd` (an empty file open for reading and writing), in memory that does
 * not grow with its trace entries: they are streamed (as by the streamed
 * import) into records in a temporary file (spill.h), merged by time and
 * written through vt__snapwriter. The file holds the snapshot
 * vt__pytorch_import makes of the same bytes. `opts` may be NULL.
 * @return 0; 1 where the pickle is not shaped for that, or the temporary
 *         files failed (the caller then imports it whole: the reference for
 *         what is accepted); or a negative errno with one line in err naming
 *         `name`, the message the whole import gives for the same input. */
typedef struct vt__pytorch_convert_opts {
    bool mapped;          /* data is a private read-only file mapping: its pages
                             may be dropped once parsed */
    bool plain;           /* events stored uncompressed (VT_SNAPWRITER_PLAIN) */
    size_t drop_every;    /* 0: the defaults (pickle.h's sink: passed_every, */
    size_t collect_min;   /* collect_min); tests make them small */
} vt__pytorch_convert_opts;
int vt__pytorch_convert(const void *data, size_t size, const char *name,
                        const vt__pytorch_convert_opts *opts, int fd, char *err, size_t errlen);

/* Encode `s` as a PyTorch snapshot pickle (protocol 4, plain containers) that
 * torch.cuda._memory_viz and MemoryViz.js read.
 * @return 0, or a negative errno with one line in err. */
int vt__pytorch_export(const vt__snapshot_data *s, FILE *out, char *err, size_t errlen);

/* The same bytes from `s` read as a stream of its events (s holds every
 * section but the events, as vt__snapfile_open_stream gives it; or a whole
 * snapshot with vt__event_stream_of), written as they are made. A damaged
 * file's message is the stream's (the err it was opened with).
 * @return 0, or a negative errno with one line in err (-EIO: a write error). */
struct vt__event_stream;
int vt__pytorch_export_stream(const vt__snapshot_data *s, struct vt__event_stream *es, FILE *out,
                              char *err, size_t errlen);

/* Read a snapshot file of either kind: a .vtsnap, or a PyTorch pickle
 * (recognized by its content: the PROTO opcode, not by its name).
 * @return as vt__snapfile_read(). */
int vt__snapshot_load(const char *path, vt__snapshot_data **out, char *err, size_t errlen);

/* The same, its events left to a stream (event_stream.h: a .vtsnap's read
 * as they are needed; a pickle converted by vt__pytorch_convert into an
 * unlinked temporary .vtsnap first, read the same way; one it cannot take,
 * imported whole, its events handed out one by one): *out holds every
 * other part. `err` must outlive *es (the stream writes
 * its errors there). Close *es before freeing *out.
 * @return as vt__snapfile_read(). */
int vt__snapshot_open(const char *path, vt__snapshot_data **out, struct vt__event_stream **es,
                      char *err, size_t errlen);

#endif /* VT_TRACE_PYTORCH_H */
