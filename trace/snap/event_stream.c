/*
 * trace/snap/event_stream.c - a snapshot's events one at a time
 * (event_stream.h).
 *
 * The EVENTS section is one zstd frame holding its columns back to back,
 * and one event takes a field from each. So each column gets a decoder of
 * its own over the same frame: it decodes (and drops) what lies before its
 * column once, then keeps a window of the column's next bytes, refilled
 * whenever less than a whole varint is left. Decoding the frame once per
 * column costs time; keeping it whole would cost memory in proportion to
 * the events, which is what the stream is for.
 *
 * The other sections are small next to the events (strings, frames, stacks,
 * the allocator's state) and are read the way vt__snapfile_read() reads
 * them, by the same code (snapfile_reader.h); an event is decoded by the
 * reader's own vt__rd_event().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "checksum.h"
#include "event_stream.h"
#include "snapfile.h"
#include "snapfile_reader.h"

#define DEFAULT_CHUNK (64u << 10)
#define MIN_CHUNK 16          /* more than a varint's 10 bytes */
#define VARINT_MAX 10

/* One decoder over the EVENTS section, serving the section's bytes
 * [start, end) through a window. */
struct column {
    ZSTD_DStream *z;          /* NULL when the section is stored uncompressed */
    unsigned char *in;        /* stored bytes read from the file, not yet decoded */
    size_t in_len, in_at;
    uint64_t file_at;         /* stored bytes read so far */
    unsigned char *win;       /* decoded bytes [win_start, win_start + win_len) */
    size_t win_len, win_cap;
    uint64_t win_start;
    uint64_t produced;        /* decoded bytes so far: the window's end */
    uint64_t start, end;      /* the bytes this decoder serves */
    int frame_done;           /* zstd said the frame is complete */
};

struct vt__event_stream {
    const vt__snapshot_data *mem;   /* a stream over memory: its events */
    size_t next;                   /* ... and the next one's index */

    int fd;                        /* a stream over a file */
    struct rd r;                   /* r.s: the snapshot (the caller's) */
    const struct entry *ev;        /* r.sec[VT_SECTION_EVENTS] */
    size_t chunk;
    struct vt__evcols lay;
    struct column col[VT_COL_COUNT];
    vt__cur cur[VT_COL_COUNT];     /* on each column's window */
    size_t base[VT_COL_COUNT];     /* section offset of each cursor's start */
    struct vt__evstate st;
    size_t i;                      /* events decoded */
    int ended;                     /* the section was checked to its end */
    char *path;
};

#define efail(es, ...) rfail(&(es)->r, __VA_ARGS__)

/* ---- reading the file --------------------------------------------------- */

/* Read exactly len bytes at off. @return 0, or a negative errno with a
 * message (a file that shrank while read is named as such). */
static int read_at(struct vt__event_stream *es, void *buf, uint64_t off, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(es->fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = -errno;
            return vt__errf(es->r.err, es->r.errlen, rc, "%s: read error at byte offset %llu: %s",
                            es->path, (unsigned long long)(off + got), strerror(-rc));
        }
        if (n == 0)
            return vt__errf(es->r.err, es->r.errlen, -EIO, "%s: the file shrank while it was "
                            "read (at byte offset %llu)", es->path,
                            (unsigned long long)(off + got));
        got += (size_t)n;
    }
    return 0;
}

/* The bytes of [off, off + len) that lie in the file, into data + off. */
static int read_part(struct vt__event_stream *es, unsigned char *data, uint64_t off, uint64_t len)
{
    if (off >= es->r.size)
        return 0;
    if (len > es->r.size - off)
        len = es->r.size - off;
    return read_at(es, data + off, off, (size_t)len);
}

/* The header, the section table and every section but EVENTS, each at its
 * offset of a buffer the file's size. The buffer's other pages (the events,
 * most of a file) are never touched, so they never take memory. */
static int read_all_but_events(struct vt__event_stream *es, unsigned char *data)
{
    int rc = read_part(es, data, 0, VT_FILE_HEADER_SIZE);
    if (rc)
        return rc;
    if (es->r.size >= VT_FILE_HEADER_SIZE) {   /* else the header's check says so */
        uint64_t toff = vt__rd_le(data + 24, 8);
        uint64_t tlen = vt__rd_le(data + 32, 4) * vt__rd_le(data + 36, 4);
        if ((rc = read_part(es, data, toff, tlen)))
            return rc;
    }
    if (vt__rd_parse_header(&es->r))
        return -EINVAL;
    for (int id = 1; id <= NKNOWN; id++)
        if (id != VT_SECTION_EVENTS && es->r.sec[id].present &&
            (rc = read_part(es, data, es->r.sec[id].offset, es->r.sec[id].stored)))
            return rc;
    return 0;
}

/* The stored bytes' checksum, read through once. */
static int check_events_crc(struct vt__event_stream *es)
{
    const struct entry *en = es->ev;
    unsigned char *buf = malloc(DEFAULT_CHUNK);
    if (!buf)
        return efail(es, "section 'events': out of memory"), -ENOMEM;
    uint32_t crc = 0;
    int rc = 0;
    for (uint64_t at = 0; at < en->stored && !rc; at += DEFAULT_CHUNK) {
        size_t n = en->stored - at < DEFAULT_CHUNK ? (size_t)(en->stored - at) : DEFAULT_CHUNK;
        if (!(rc = read_at(es, buf, en->offset + at, n)))
            crc = vt__crc32c(crc, buf, n);
    }
    free(buf);
    if (!rc && crc != en->crc && !FUZZING)
        rc = efail(es, "section 'events' at byte offset %llu: checksum mismatch (stored "
                       "0x%08x, computed 0x%08x): the file is corrupt",
                   (unsigned long long)en->offset, en->crc, crc);
    return rc;
}

static int not_one_frame(struct vt__event_stream *es)
{
    return efail(es, "section 'events' at byte offset %llu: not one zstd frame of %llu bytes "
                     "decoding to %llu", (unsigned long long)es->ev->offset,
                 (unsigned long long)es->ev->stored, (unsigned long long)es->ev->raw);
}

/* A compressed section declares its decoded size in its frame header. */
static int check_frame_header(struct vt__event_stream *es)
{
    unsigned char h[18];   /* ZSTD_FRAMEHEADERSIZE_MAX (zstd.h keeps it experimental) */
    size_t n = es->ev->stored < sizeof h ? (size_t)es->ev->stored : sizeof h;
    int rc = read_at(es, h, es->ev->offset, n);
    if (rc)
        return rc;
    unsigned long long fcs = ZSTD_getFrameContentSize(h, n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != es->ev->raw)
        return not_one_frame(es);
    return 0;
}

/* ---- one decoder -------------------------------------------------------- */

static void column_free(struct column *c)
{
    ZSTD_freeDStream(c->z);
    free(c->in);
    free(c->win);
    memset(c, 0, sizeof *c);
}

/* Decode the next `want` bytes of the section into dst. */
static int decode(struct vt__event_stream *es, struct column *c, unsigned char *dst, size_t want)
{
    const struct entry *en = es->ev;
    if (!c->z) {
        int rc = read_at(es, dst, en->offset + c->produced, want);
        if (!rc)
            c->produced += want;
        return rc;
    }
    ZSTD_outBuffer out = { dst, want, 0 };
    while (out.pos < want) {
        if (c->in_at == c->in_len && c->file_at < en->stored) {
            size_t n = en->stored - c->file_at < es->chunk ? (size_t)(en->stored - c->file_at)
                                                           : es->chunk;
            int rc = read_at(es, c->in, en->offset + c->file_at, n);
            if (rc)
                return rc;
            c->file_at += n;
            c->in_len = n;
            c->in_at = 0;
        }
        size_t out0 = out.pos, in0 = c->in_at;
        ZSTD_inBuffer in = { c->in, c->in_len, c->in_at };
        size_t ret = ZSTD_decompressStream(c->z, &out, &in);
        c->in_at = in.pos;
        if (ZSTD_isError(ret))
            return efail(es, "section 'events' at byte offset %llu: zstd: %s",
                         (unsigned long long)en->offset, ZSTD_getErrorName(ret));
        c->frame_done = ret == 0;
        if ((ret == 0 && out.pos < want) ||
            (out.pos == out0 && c->in_at == in0 && c->file_at == en->stored))
            return not_one_frame(es);   /* the frame ends before its declared size */
    }
    c->produced += want;
    return 0;
}

/* Slide the window to start at `keep` and decode up to its capacity, or to
 * the decoder's end. */
static int fill(struct vt__event_stream *es, struct column *c, uint64_t keep)
{
    size_t drop = (size_t)(keep - c->win_start);
    memmove(c->win, c->win + drop, c->win_len - drop);
    c->win_len -= drop;
    c->win_start = keep;
    uint64_t room = c->end - c->produced;
    size_t want = c->win_cap - c->win_len < room ? c->win_cap - c->win_len : (size_t)room;
    if (!want)
        return 0;
    int rc = decode(es, c, c->win + c->win_len, want);
    if (!rc)
        c->win_len += want;
    return rc;
}

/* A decoder of the section's bytes [start, end), its window filled. */
static int column_open(struct vt__event_stream *es, struct column *c, uint64_t start, uint64_t end,
                       size_t cap)
{
    memset(c, 0, sizeof *c);
    c->start = start;
    c->end = end;
    c->win_cap = cap;
    c->win = malloc(cap);
    if (!c->win)
        return efail(es, "section 'events': out of memory"), -ENOMEM;
    if (es->ev->flags & VT_SECTION_FLAG_ZSTD) {
        c->z = ZSTD_createDStream();
        c->in = malloc(es->chunk);
        if (!c->z || !c->in)
            return efail(es, "section 'events': out of memory"), -ENOMEM;
        ZSTD_initDStream(c->z);
        while (c->produced < start) {   /* what lies before: decoded, dropped */
            size_t n = start - c->produced < cap ? (size_t)(start - c->produced) : cap;
            int rc = decode(es, c, c->win, n);
            if (rc)
                return rc;
        }
    } else {
        c->produced = start;
    }
    c->win_start = start;
    return fill(es, c, start);
}

/* After the last event: the frame ends where the section does, no byte
 * after it. The last column's decoder goes on through any columns of a
 * later minor to the frame's end. */
static int check_frame_end(struct vt__event_stream *es)
{
    struct column *c = &es->col[VT_COL_COUNT - 1];
    if (!c->z)
        return 0;
    while (c->produced < es->ev->raw) {
        size_t n = es->ev->raw - c->produced < c->win_cap ? (size_t)(es->ev->raw - c->produced)
                                                          : c->win_cap;
        int rc = decode(es, c, c->win, n);
        if (rc)
            return rc;
    }
    while (!c->frame_done) {   /* the frame's epilogue (its checksum): no output left */
        unsigned char x;
        ZSTD_outBuffer out = { &x, 1, 0 };
        if (c->in_at == c->in_len && c->file_at < es->ev->stored) {
            size_t n = es->ev->stored - c->file_at < es->chunk
                           ? (size_t)(es->ev->stored - c->file_at) : es->chunk;
            int rc = read_at(es, c->in, es->ev->offset + c->file_at, n);
            if (rc)
                return rc;
            c->file_at += n;
            c->in_len = n;
            c->in_at = 0;
        }
        size_t in0 = c->in_at;
        ZSTD_inBuffer in = { c->in, c->in_len, c->in_at };
        size_t ret = ZSTD_decompressStream(c->z, &out, &in);
        c->in_at = in.pos;
        if (ZSTD_isError(ret) || out.pos)
            return not_one_frame(es);
        c->frame_done = ret == 0;
        if (!c->frame_done && c->in_at == in0 && c->file_at == es->ev->stored)
            return not_one_frame(es);
    }
    if (c->in_at != c->in_len || c->file_at != es->ev->stored)
        return not_one_frame(es);   /* bytes after the frame */
    return 0;
}

/* ---- the columns -------------------------------------------------------- */

static void close_columns(struct vt__event_stream *es)
{
    for (int c = 0; c < VT_COL_COUNT; c++)
        column_free(&es->col[c]);
}

static void point_cursor(struct vt__event_stream *es, int c)
{
    struct column *k = &es->col[c];
    es->cur[c] = vt__cur_make(k->win, k->win_len);
    es->base[c] = (size_t)k->win_start;
}

static int open_columns(struct vt__event_stream *es)
{
    es->r.cur_name = vt__section_names[VT_SECTION_EVENTS];
    es->r.cur_offset = es->ev->offset;
    for (int c = 0; c < VT_COL_COUNT; c++) {
        int rc = column_open(es, &es->col[c], es->lay.off[c], es->lay.off[c] + es->lay.len[c],
                             es->chunk);
        if (rc)
            return rc;
        point_cursor(es, c);
    }
    memset(&es->st, 0, sizeof es->st);
    es->i = 0;
    es->ended = 0;
    return 0;
}

/* The section's header (at most VT_MAX_EVENTS_HEADER_BYTES) and its layout. */
static int read_layout(struct vt__event_stream *es)
{
    uint64_t n = es->ev->raw < VT_MAX_EVENTS_HEADER_BYTES ? es->ev->raw
                                                          : VT_MAX_EVENTS_HEADER_BYTES;
    struct column h;
    int rc = column_open(es, &h, 0, n, (size_t)n + 1);
    if (!rc)
        rc = vt__rd_events_layout(&es->r, h.win, h.win_len, (size_t)es->ev->raw, &es->lay);
    column_free(&h);
    return rc;
}

/* ---- public ------------------------------------------------------------- */

int vt__snapfile_open_stream(const char *path, size_t chunk, vt__snapshot_data **s,
                             vt__event_stream **out, char *err, size_t errlen)
{
    *s = NULL;
    *out = NULL;
    int fd = vt__snapfile_open_read(path, err, errlen);
    if (fd < 0)
        return fd;
    return vt__snapfile_open_stream_fd(fd, path, chunk, s, out, err, errlen);
}

int vt__snapfile_open_stream_fd(int fd, const char *path, size_t chunk, vt__snapshot_data **s,
                                vt__event_stream **out, char *err, size_t errlen)
{
    *s = NULL;
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct vt__event_stream *es = calloc(1, sizeof *es);
    char *name = strdup(path);
    if (!es || !name) {
        free(es);
        free(name);
        close(fd);
        return vt__errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    es->path = name;
    es->chunk = chunk ? (chunk < MIN_CHUNK ? MIN_CHUNK : chunk) : DEFAULT_CHUNK;
    es->r = (struct rd){ .name = name, .err = err, .errlen = errlen, .events_streamed = 1 };
    es->fd = fd;
    struct stat st;
    if (fstat(es->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        snprintf(err, errlen, "%s: not a regular file", path);
        vt__event_stream_close(es);
        return rc;
    }
    es->r.size = (size_t)st.st_size;
    unsigned char *data = malloc(es->r.size + 1);
    if (!data) {
        vt__event_stream_close(es);
        return vt__errf(err, errlen, -ENOMEM, "%s: out of memory (%zu bytes)", path,
                        (size_t)st.st_size);
    }
    es->r.data = data;
    int rc = read_all_but_events(es, data);
    if (!rc)
        rc = vt__rd_decode_sections(&es->r);
    free(data);
    es->r.data = NULL;
    if (!rc) {
        es->ev = &es->r.sec[VT_SECTION_EVENTS];
        rc = check_events_crc(es);
    }
    if (!rc)
        rc = vt__rd_check_sizes(&es->r, VT_SECTION_EVENTS);
    if (!rc && (es->ev->flags & VT_SECTION_FLAG_ZSTD))
        rc = check_frame_header(es);
    if (!rc)
        rc = read_layout(es);
    if (!rc)
        rc = open_columns(es);
    if (rc) {
        vt__snapshot_free(es->r.s);
        vt__event_stream_close(es);
        return rc < 0 ? rc : -EINVAL;
    }
    *s = es->r.s;
    *out = es;
    return 0;
}

int vt__event_stream_of(const vt__snapshot_data *s, vt__event_stream **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return -ENOMEM;
    (*out)->mem = s;
    (*out)->fd = -1;
    return 0;
}

size_t vt__event_stream_count(const vt__event_stream *es)
{
    return es->mem ? es->mem->nevents : (size_t)es->lay.n;
}

int vt__event_stream_next(vt__event_stream *es, vt__event *e)
{
    if (es->mem) {
        if (es->next >= es->mem->nevents)
            return 0;
        *e = es->mem->events[es->next++];
        return 1;
    }
    if (es->i == es->lay.n) {
        if (es->ended)
            return 0;
        int rc = vt__rd_events_end(&es->r, es->cur, es->base, &es->lay);
        if (!rc)
            rc = check_frame_end(es);
        if (rc)
            return rc;
        es->ended = 1;
        return 0;
    }
    for (int c = 0; c < VT_COL_COUNT; c++) {
        struct column *k = &es->col[c];
        if (vt__cur_left(&es->cur[c]) < VARINT_MAX && k->produced < k->end && !es->cur[c].bad) {
            int rc = fill(es, k, es->base[c] + vt__cur_off(&es->cur[c]));
            if (rc)
                return rc;
            point_cursor(es, c);
        }
    }
    int rc = vt__rd_event(&es->r, &es->st, es->cur, es->base, es->i, e);
    if (rc)
        return rc;
    es->i++;
    return 1;
}

int vt__event_stream_rewind(vt__event_stream *es)
{
    if (es->mem) {
        es->next = 0;
        return 0;
    }
    if (es->i == 0 && !es->ended)
        return 0;   /* at the start already: decoding up to each column again costs */
    close_columns(es);
    return open_columns(es);
}

void vt__event_stream_close(vt__event_stream *es)
{
    if (!es)
        return;
    if (!es->mem) {
        close_columns(es);
        if (es->fd >= 0)
            close(es->fd);
        free(es->path);
    }
    free(es);
}
