/*
 * trace/snap/snapfile.h - reading and writing .vtsnap files.
 *
 * The only code that knows the on-disk encoding (documented in
 * include/vramtrace/format.h). Writer and reader are pure functions of a
 * vt__snapshot_data (trace/snapshot.h); neither needs the allocator.
 */
#ifndef VT_TRACE_SNAPFILE_H
#define VT_TRACE_SNAPFILE_H

#include <stddef.h>

#include "snapshot.h"

/* Write `s` to `path`: encoded to `path`.tmp.<pid>, fsync'ed, then renamed
 * over `path`, so a reader never sees a half-written file. Only a regular
 * file is ever replaced (trace/outfile.h: a device, FIFO, directory or
 * symbolic link at `path` is refused).
 * @return 0, or a negative errno; on failure a one-line message naming the
 *         path is written to err (if errlen > 0) and no file is left behind. */
int vt__snapfile_write(const vt__snapshot_data *s, const char *path, char *err, size_t errlen);
/* The same; flags VT_OUTFILE_NO_REPLACE (outfile.h): -EEXIST instead of
 * replacing an existing file. */
int vt__snapfile_write_flags(const vt__snapshot_data *s, const char *path, int flags, char *err,
                             size_t errlen);

/* A .vtsnap written to `fd` (an empty regular file open for writing and
 * reading) whose events are given one at a time: they are encoded into
 * their columns as they come and the columns kept in a temporary file
 * (spill.h) until the end, so that memory stays a few MiB whatever their
 * number. `s` holds everything but the events (s->nevents 0), complete, and
 * outlives the writer. The file is the one vt__snapfile_write() writes of
 * `s` with those events, but for how zstd cut the EVENTS frame: it decodes
 * to the same bytes. With VT_SNAPWRITER_PLAIN the EVENTS section is stored
 * as it is, not compressed: for a file read back at once and thrown away,
 * where zstd would cost time on the way in and on every reading out.
 * @return 0, or a negative errno with one line in err (the snapshot refused
 *         as vt__snapfile_write refuses it, or an error of the files). */
typedef struct vt__snapwriter vt__snapwriter;
#define VT_SNAPWRITER_PLAIN 1u
int vt__snapwriter_open(const vt__snapshot_data *s, int fd, unsigned flags, vt__snapwriter **w,
                        char *err, size_t errlen);
/* The next event, in seq order. @return 0 or a negative errno (err). */
int vt__snapwriter_event(vt__snapwriter *w, const vt__event *e);
/* Write the file whole. @return 0 or a negative errno (err). */
int vt__snapwriter_finish(vt__snapwriter *w);
/* Free the writer (the file is the caller's). NULL is fine. */
void vt__snapwriter_free(vt__snapwriter *w);

/* Read and validate `path` (magic, version, bounds, checksums, every index).
 * @return 0 and *out (free with vt__snapshot_free), or a negative errno with a
 *         one-line message in err naming the file, the section and the byte
 *         offset of the problem. Never crashes on any input. */
int vt__snapfile_read(const char *path, vt__snapshot_data **out, char *err, size_t errlen);

/* The same on a memory buffer (fuzzing, tests); `name` is used in messages. */
int vt__snapfile_decode(const void *data, size_t size, const char *name,
                       vt__snapshot_data **out, char *err, size_t errlen);

/* What turns a whole file's bytes into a snapshot: vt__snapfile_decode, the
 * PyTorch importer, or a loader's choice between them. */
typedef int vt__snap_decoder(const void *data, size_t size, const char *name,
                             vt__snapshot_data **out, char *err, size_t errlen);
/* vt__snapfile_read with another decoder: `path` (a regular file) read whole
 * (what is there, if it shrank while read), then decoded. */
int vt__snapfile_read_with(const char *path, vt__snap_decoder *decode, vt__snapshot_data **out,
                           char *err, size_t errlen);

/* `path` opened read-only: its descriptor, or -errno with "PATH: cannot
 * open: ..." in `err`; where it is not there, followed by the files beside
 * it named as a run names each process's snapshot (PATH's name with a pid,
 * rank or reason tag: snapfile_missing.c). */
int vt__snapfile_open_read(const char *path, char *err, size_t errlen);

#endif /* VT_TRACE_SNAPFILE_H */
