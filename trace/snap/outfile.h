/*
 * trace/snap/outfile.h - writing an output file safely: a temporary file next to
 * the target, renamed over it only when the target is a regular file or
 * absent.
 *
 * Every file vramtrace writes goes through here (snapshots, `import -o`,
 * `export -o`, `viz -o` of one rank or several), under these rules:
 *  - the target must be absent or a regular file; a device (`/dev/null`), a
 *    FIFO, a socket or a directory is refused with one line and left as it is;
 *  - a symbolic link as the last component is refused, never followed and
 *    never replaced (an output path in a shared directory cannot be redirected
 *    onto another file); links in the directories above it are followed;
 *  - the file is created 0600: it carries the command line (secrets passed
 *    as flags), the host name and absolute paths, so only its owner reads it
 *    (as with core files);
 *  - the temporary file is `TARGET.tmp.PID`, created exclusively (never
 *    through a symbolic link planted under that name); before
 *    creating it, temporaries of the same target left by processes that no
 *    longer exist (killed during a write) and older than a minute are removed.
 */
#ifndef VT_TRACE_OUTFILE_H
#define VT_TRACE_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

/* Fail instead of replacing an existing target (vt__outfile_commit). */
#define VT_OUTFILE_NO_REPLACE 1

/* Check that `path` may be written: absent, or a regular file.
 * @return 0, or a negative errno with one line in err (naming the path). */
int vt__outfile_check(const char *path, char *err, size_t errlen);

/* Check `path`, sweep stale temporaries of it, and create its temporary file
 * (name in tmp). @return an open descriptor, or a negative errno with one line
 * in err. */
int vt__outfile_create(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen);

/* Move the finished temporary file `tmp` to `path` (checked again), then make
 * the rename durable. With VT_OUTFILE_NO_REPLACE an existing target gives
 * -EEXIST. On failure `tmp` is removed. @return 0, or a negative errno with
 * one line in err. */
int vt__outfile_commit(const char *tmp, const char *path, int flags, char *err, size_t errlen);

/* vt__outfile_create as a fully buffered stdio stream, for writers that
 * print. @return the stream, or NULL with one line in err. */
FILE *vt__outfile_open(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen);

/* Close the stream of vt__outfile_open and, when the writer succeeded (`ok`)
 * and no write failed, commit it (vt__outfile_commit); otherwise remove the
 * temporary file. @return 0, or a negative errno with one line in err
 * (a failed write: "cannot write PATH: ..."; when not `ok`, err is left to
 * the writer's own message). */
int vt__outfile_close(FILE *f, int ok, const char *tmp, const char *path, int flags, char *err,
                      size_t errlen);

#endif /* VT_TRACE_OUTFILE_H */
