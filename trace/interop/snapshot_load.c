/*
 * trace/interop/snapshot_load.c - the one entry point of every reading view: a
 * snapshot file of either kind, told apart by its content (a .vtsnap starts
 * with its magic, a PyTorch pickle with the PROTO opcode), never by its name.
 * C++ function names still mangled in the file (a process whose libstdc++
 * the recorder could not reach, an older vramtrace) are demangled here.
 * A view opens a pickle as a .vtsnap it converted first (open_converted), so
 * that its memory follows neither the file nor the number of entries.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "demangle.h"
#include "event_stream.h"
#include "grow.h"
#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"
#include "spill.h"

/* A PyTorch pickle starts with the PROTO opcode, a .vtsnap with its magic. */
static int decode_either(const void *data, size_t size, const char *name, vt__snapshot_data **out,
                         char *err, size_t errlen)
{
    if (size >= 2 && vt__pickle_sniff(data, 2))
        return vt__pytorch_import(data, size, name, out, err, errlen);
    return vt__snapfile_decode(data, size, name, out, err, errlen);
}

/* Append `str` to the string table. @return its index, 0 on no memory. */
static uint32_t add_string(vt__snapshot_data *s, const char *str, size_t *cap_offsets)
{
    size_t len = strlen(str) + 1;
    if (s->nstrings >= UINT32_MAX || s->strings_blob_size + len > UINT32_MAX)
        return 0;
    char *blob = realloc(s->strings_blob, s->strings_blob_size + len);
    if (!blob)
        return 0;
    s->strings_blob = blob;
    if (vt__grow_from((void **)&s->string_offsets, cap_offsets, s->nstrings + 1,
                      sizeof *s->string_offsets, 64))
        return 0;
    memcpy(blob + s->strings_blob_size, str, len);
    s->string_offsets[s->nstrings] = (uint32_t)s->strings_blob_size;
    s->strings_blob_size += len;
    return (uint32_t)s->nstrings++;
}

/* Every frame whose function is a mangled C++ name gets the demangled one
 * (each distinct string demangled once). Without libstdc++ they stay. */
static void demangle_frames(vt__snapshot_data *s)
{
    vt__demangle_fn fn = NULL;
    uint32_t *done = NULL;   /* old string index -> new one (0: not a mangled name) */
    size_t nold = s->nstrings, cap = s->nstrings;
    for (size_t i = 0; i < s->nframes; i++) {
        uint32_t idx = s->frames[i].function;
        const char *name = vt__snapshot_string(s, idx);
        if (idx == 0 || idx >= nold || name[0] != '_' || name[1] != 'Z')
            continue;
        if (!done) {
            fn = vt__demangler(true);
            done = fn ? calloc(nold, sizeof *done) : NULL;
            if (!done)
                return;
        }
        if (!done[idx]) {
            char *d = vt__demangle(fn, name);
            done[idx] = d ? add_string(s, d, &cap) : 0;
            free(d);
            if (!done[idx])
                done[idx] = idx;   /* not demangled: keep it, never try again */
        }
        s->frames[i].function = done[idx];
    }
    free(done);
}

int vt__snapshot_load(const char *path, vt__snapshot_data **out, char *err, size_t errlen)
{
    int rc = vt__snapfile_read_with(path, decode_either, out, err, errlen);
    if (rc >= 0 && *out)
        demangle_frames(*out);
    return rc;
}

/* Does the file start as a PyTorch pickle? (A file that cannot be read, or
 * is no regular file, is left to the .vtsnap reader to say so.) */
static int is_pickle(const char *path)
{
    unsigned char head[2];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
              vt__pickle_sniff(head, sizeof head);
    close(fd);
    return yes;
}

/* A pickle converted into a .vtsnap in an unlinked temporary file, then
 * streamed from there like any .vtsnap: the pickle mapped, not read, and
 * its pages let go behind the parse, so that memory follows neither the
 * file nor its entries (vt__pytorch_convert). @return as
 * vt__snapfile_read(), or 1 where the pickle must be imported whole. */
static int open_converted(const char *path, vt__snapshot_data **out, vt__event_stream **es,
                          char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 1;
    char terr[256];
    int tmp = vt__tmpfile(terr, sizeof terr);
    /* read back now and thrown away: compressing it would only cost time */
    const vt__pytorch_convert_opts opts = { .mapped = true, .plain = true };
    int rc = tmp < 0 ? 1 : vt__pytorch_convert(map, (size_t)st.st_size, path, &opts, tmp, err,
                                               errlen);
    munmap(map, (size_t)st.st_size);
    if (rc != 0) {
        if (tmp >= 0)
            close(tmp);
        return rc;
    }
    rc = vt__snapfile_open_stream_fd(tmp, path, 0, out, es, err, errlen);
    if (rc == 0)
        demangle_frames(*out);
    return rc;
}

int vt__snapshot_open(const char *path, vt__snapshot_data **out, vt__event_stream **es, char *err,
                      size_t errlen)
{
    *es = NULL;
    *out = NULL;
    int rc;
    if (is_pickle(path)) {
        if ((rc = open_converted(path, out, es, err, errlen)) != 1)
            return rc;
        /* not shaped for converting: imported whole, as before */
        rc = vt__snapshot_load(path, out, err, errlen);
        if (rc == 0 && (rc = vt__event_stream_of(*out, es)) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            vt__snapshot_free(*out);
            *out = NULL;
        }
        return rc;
    }
    rc = vt__snapfile_open_stream(path, 0, out, es, err, errlen);
    if (rc == 0)
        demangle_frames(*out);
    return rc;
}
