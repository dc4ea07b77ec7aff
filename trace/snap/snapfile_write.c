/*
 * trace/snap/snapfile_write.c - encode a vt__snapshot_data into the .vtsnap format
 * (layout: include/vramtrace/format.h) and write it atomically.
 *
 * The input is validated first (the same rules the reader enforces), so a
 * file we write is always one we can read back; a broken snapshot is refused
 * with a message naming the first bad item instead of producing a file that
 * the reader would reject later.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "errbuf.h"
#include "checksum.h"
#include "outfile.h"
#include "snapfile.h"
#include "snapfile_encode.h"
#include "buf.h"

#define ZSTD_LEVEL 3

/* ---- input validation --------------------------------------------------- */

int vt__event_kind_minor(unsigned kind)
{
    if (kind >= VT_EV_ALLOC && kind <= VT_EV_PASSTHROUGH)
        return 0;
    if (kind >= VT_EV_TENSOR_NEW && kind <= VT_EV_FINDING)
        return 0;
    if (kind == VT_EV_TENSOR_NAME)
        return 1;
    if (kind == VT_EV_FORK)
        return 2;
    if (kind == VT_EV_STREAM_DESTROY || kind == VT_EV_EMPTY_CACHE)
        return 5;
    return -1;
}

int vt__event_kind_known(unsigned kind)
{
    return vt__event_kind_minor(kind) >= 0;
}

static size_t nstrings_of(const vt__snapshot_data *s) { return s->nstrings ? s->nstrings : 1; }
static size_t nnodes_of(const vt__snapshot_data *s) { return s->nstack_nodes ? s->nstack_nodes : 1; }

static int validate(const vt__snapshot_data *s, char *err, size_t errlen)
{
    size_t ns = nstrings_of(s), nn = nnodes_of(s);
#define BAD(...) return vt__errf(err, errlen, -EINVAL, "snapshot not written: " __VA_ARGS__)
    if (s->nstrings) {
        if (!s->string_offsets || !s->strings_blob)
            BAD("%zu strings but no string table", s->nstrings);
        for (size_t i = 0; i < s->nstrings; i++) {
            uint32_t off = s->string_offsets[i];
            if (off >= s->strings_blob_size ||
                !memchr(s->strings_blob + off, 0, s->strings_blob_size - off))
                BAD("string %zu is outside the string blob", i);
        }
        if (s->strings_blob[s->string_offsets[0]] != 0)
            BAD("string 0 is not the empty string");
    }
    const vt_snapshot_meta *m = &s->meta;
    if (m->host >= ns || m->command_line >= ns || m->config >= ns || m->library_version >= ns)
        BAD("metadata names a string beyond the %zu strings", ns);
    for (size_t i = 0; i < s->ndevices; i++)
        if (s->devices[i].name >= ns)
            BAD("device %zu names string %u of %zu", i, s->devices[i].name, ns);
    for (size_t i = 0; i < s->nframes; i++) {
        const vt__frame *f = &s->frames[i];
        if (f->module >= ns || f->build_id >= ns || f->function >= ns || f->file >= ns)
            BAD("frame %zu names a string beyond the %zu strings", i, ns);
        if (f->first_line > INT32_MAX)
            BAD("frame %zu: first line %u out of range", i, f->first_line);
    }
    for (size_t i = 1; i < s->nstack_nodes; i++) {
        const vt__stack_node *nd = &s->stack_nodes[i];
        if (nd->parent >= i)
            BAD("stack node %zu has parent %u (parents must precede children)", i, nd->parent);
        if (nd->frame >= s->nframes)
            BAD("stack node %zu names frame %u of %zu", i, nd->frame, s->nframes);
    }
    size_t nb = 0;
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        if (g->first_block != nb || g->nblocks > s->nblocks - nb)
            BAD("segment %zu: blocks %u..+%u do not follow the previous segment's (%zu of %zu)",
                i, g->first_block, g->nblocks, nb, s->nblocks);
        if (g->pool > VT_POOL_UNCACHED)
            BAD("segment %zu has unknown pool %u", i, g->pool);
        if (g->addr + g->size < g->addr)
            BAD("segment %zu wraps around the address space", i);
        uint64_t at = g->addr;
        for (size_t k = 0; k < g->nblocks; k++) {
            const vt__snap_block *b = &s->blocks[nb + k];
            if (b->addr != at || b->size == 0 || b->size > g->addr + g->size - at)
                BAD("segment %zu (0x%llx, %llu bytes): block %zu (0x%llx, %llu bytes) does not "
                    "tile it", i, (unsigned long long)g->addr, (unsigned long long)g->size,
                    nb + k, (unsigned long long)b->addr, (unsigned long long)b->size);
            if (b->state > VT_BLOCK_INACTIVE)
                BAD("block %zu has unknown state %u", nb + k, b->state);
            if (b->stack >= nn)
                BAD("block %zu names stack %u of %zu", nb + k, b->stack, nn);
            at += b->size;
        }
        if (at != g->addr + g->size)
            BAD("segment %zu (0x%llx, %llu bytes): its blocks cover only %llu bytes", i,
                (unsigned long long)g->addr, (unsigned long long)g->size,
                (unsigned long long)(at - g->addr));
        nb += g->nblocks;
    }
    if (nb != s->nblocks)
        BAD("%zu blocks belong to no segment", s->nblocks - nb);
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (!vt__event_kind_known(e->kind))
            BAD("event %zu has unknown kind %u", i, e->kind);
        if (i && e->seq <= s->events[i - 1].seq)
            BAD("event %zu: seq %llu does not follow %llu (seq must strictly increase)", i,
                (unsigned long long)e->seq, (unsigned long long)s->events[i - 1].seq);
        if (e->stack >= nn)
            BAD("event %zu names stack %u of %zu", i, e->stack, nn);
        if (e->str >= ns)
            BAD("event %zu names string %u of %zu", i, e->str, ns);
    }
#undef BAD
    return 0;
}

/* ---- section encoders --------------------------------------------------- */

static void enc_meta(const vt__snapshot_data *s, vt__buf *b)
{
    const vt_snapshot_meta *m = &s->meta;
    vt__put_svarint(b, m->pid);
    vt__put_svarint(b, m->rank);
    vt__put_varint(b, m->host);
    vt__put_varint(b, m->command_line);
    vt__put_varint(b, m->config);
    vt__put_varint(b, m->library_version);
    vt__put_varint(b, m->clock_base_monotonic_ns);
    vt__put_varint(b, m->clock_base_realtime_ns);
    vt__put_varint(b, m->snapshot_time_ns);
    vt__put_varint(b, m->events_recorded);
    vt__put_varint(b, m->events_overwritten);
    vt__put_varint(b, m->stacks_dropped);
    vt__put_varint(b, s->ndevices);
    for (size_t i = 0; i < s->ndevices; i++) {
        vt__put_svarint(b, s->devices[i].ordinal);
        vt__put_varint(b, s->devices[i].name);
        vt__put_varint(b, s->devices[i].total_bytes);
    }
    vt__put_varint(b, m->stacks_truncated);      /* 1.2 */
    vt__put_varint(b, s->meta.flags);
    if (s->meta.flags & VT_META_DEVICE_PEAKS)
        for (size_t i = 0; i < s->ndevices; i++) {
            vt__put_varint(b, s->devices[i].peak_allocated);
            vt__put_varint(b, s->devices[i].peak_reserved);
            vt__put_varint(b, s->devices[i].peak_active);
        }
    if (s->meta.flags & VT_META_FRAMEWORK_SETTINGS)      /* 1.7 */
        vt__put_varint(b, m->framework_settings);
}

static void enc_strings(const vt__snapshot_data *s, vt__buf *b)
{
    for (size_t i = 1; i < s->nstrings; i++) {
        const char *str = s->strings_blob + s->string_offsets[i];
        size_t len = strlen(str);
        vt__put_varint(b, len);
        vt__put_bytes(b, str, len);
    }
}

static void enc_frames(const vt__snapshot_data *s, vt__buf *b)
{
    uint64_t ip = 0, mo = 0;
    for (size_t i = 0; i < s->nframes; i++) {
        const vt__frame *f = &s->frames[i];
        vt__put_svarint(b, (int64_t)(f->ip - ip));
        vt__put_svarint(b, (int64_t)(f->module_offset - mo));
        ip = f->ip;
        mo = f->module_offset;
        vt__put_varint(b, f->module);
        vt__put_varint(b, f->build_id);
        vt__put_varint(b, f->function);
        vt__put_varint(b, f->file);
        vt__put_varint(b, f->line);
    }
}

/* Whether any frame has a first line: FIRST_LINES is written only then. */
static bool any_first_line(const vt__snapshot_data *s)
{
    for (size_t i = 0; i < s->nframes; i++)
        if (s->frames[i].first_line)
            return true;
    return false;
}

static void enc_first_lines(const vt__snapshot_data *s, vt__buf *b)
{
    for (size_t i = 0; i < s->nframes; i++)
        vt__put_varint(b, s->frames[i].first_line);
}

/* Whether any frame has a flag: FRAME_FLAGS is written only then. */
static bool any_frame_flags(const vt__snapshot_data *s)
{
    for (size_t i = 0; i < s->nframes; i++)
        if (s->frames[i].flags)
            return true;
    return false;
}

static void enc_frame_flags(const vt__snapshot_data *s, vt__buf *b)
{
    for (size_t i = 0; i < s->nframes; i++)
        vt__put_varint(b, s->frames[i].flags);
}

static void enc_stacks(const vt__snapshot_data *s, vt__buf *b)
{
    for (size_t i = 1; i < s->nstack_nodes; i++) {
        vt__put_varint(b, i - s->stack_nodes[i].parent);
        vt__put_varint(b, s->stack_nodes[i].frame);
    }
}

static void enc_state(const vt__snapshot_data *s, vt__buf *b)
{
    vt__put_varint(b, s->nsegments);
    vt__put_varint(b, s->nblocks);
    uint64_t end = 0;
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        vt__put_svarint(b, (int64_t)(g->addr - end));
        end = g->addr + g->size;
        vt__put_varint(b, g->size);
        vt__put_varint(b, g->stream);
        vt__put_svarint(b, g->device);
        vt__put_u8(b, g->pool);
        vt__put_varint(b, g->nblocks);
        for (size_t k = 0; k < g->nblocks; k++) {
            const vt__snap_block *bl = &s->blocks[g->first_block + k];
            vt__put_varint(b, bl->size);
            vt__put_varint(b, bl->req_size);
            vt__put_svarint(b, (int64_t)(bl->stream - g->stream));
            vt__put_varint(b, bl->alloc_seq);
            vt__put_varint(b, bl->stack);
            vt__put_u8(b, bl->state);
        }
    }
}

/* Move-to-front: the position of v (moved to the front), or `n` when it was
 * not in the list (then inserted at the front, the last one dropped). The
 * reader mirrors this exactly (vt__mtf_* in snapfile_encode.h). */
static unsigned mtf_encode(uint64_t *list, unsigned n, uint64_t v)
{
    unsigned i = 0;
    while (i < n && list[i] != v)
        i++;
    unsigned pos = i;
    if (i == n)
        i = n - 1;
    memmove(list + 1, list, i * sizeof *list);
    list[0] = v;
    return pos;
}

static int enc_events(const vt__snapshot_data *s, vt__buf *b)
{
    vt__buf col[VT_COL_COUNT];
    memset(col, 0, sizeof col);
    size_t n = s->nevents;
    /* fixed-width columns take n bytes; varint ones start at 2n and grow */
    for (int c = 0; c < VT_COL_COUNT; c++)
        vt__buf_reserve(&col[c], n ? 2 * n : 1);
    uint64_t next_seq = 0, time = 0;
    uint32_t thread = 0;
    uint64_t streams[VT_MTF_STREAMS] = { 0 }, sizes[VT_MTF_SIZES] = { 0 };
    uint64_t last_addr[256] = { 0 };
    for (size_t i = 0; i < n; i++) {
        const vt__event *e = &s->events[i];
        vt__put_u8(&col[VT_COL_KIND], e->kind);
        vt__put_varint(&col[VT_COL_SEQ], e->seq - next_seq);
        next_seq = e->seq + 1;
        vt__put_svarint(&col[VT_COL_TIME], (int64_t)(e->time_ns - time));
        time = e->time_ns;
        vt__put_svarint(&col[VT_COL_THREAD], (int64_t)e->thread - (int64_t)thread);
        thread = e->thread;
        vt__put_u8(&col[VT_COL_DEVICE], (uint8_t)e->device);
        unsigned p = mtf_encode(streams, VT_MTF_STREAMS, e->stream);
        vt__put_u8(&col[VT_COL_STREAM], (uint8_t)p);
        if (p == VT_MTF_STREAMS)
            vt__put_varint(&col[VT_COL_STREAM_LIT], e->stream);
        vt__put_svarint(&col[VT_COL_ADDR], (int64_t)(e->addr - last_addr[e->kind]));
        last_addr[e->kind] = e->addr;
        p = mtf_encode(sizes, VT_MTF_SIZES, e->size);
        vt__put_u8(&col[VT_COL_SIZE], (uint8_t)p);
        if (p == VT_MTF_SIZES)
            vt__put_varint(&col[VT_COL_SIZE_LIT], e->size);
        vt__put_svarint(&col[VT_COL_REQ_SIZE], (int64_t)(e->size - e->req_size));
        vt__put_varint(&col[VT_COL_STACK], e->stack);
        vt__put_varint(&col[VT_COL_AUX], e->aux);
        vt__put_varint(&col[VT_COL_AUX2], e->aux2);
        vt__put_varint(&col[VT_COL_STR], e->str);
    }
    int oom = 0;
    vt__put_varint(b, n);
    vt__put_varint(b, VT_COL_COUNT);
    for (int c = 0; c < VT_COL_COUNT; c++)
        vt__put_varint(b, col[c].n);
    for (int c = 0; c < VT_COL_COUNT; c++) {
        oom |= col[c].oom;
        vt__put_bytes(b, col[c].p, col[c].n);
        free(col[c].p);
    }
    return oom ? -ENOMEM : 0;
}

/* ---- assembling the file ------------------------------------------------ */

struct section {
    uint32_t id;
    uint32_t flags;
    uint64_t count;
    vt__buf raw;
    void *stored;            /* compressed bytes (or raw.p) */
    size_t stored_size;
};

static int compress_section(ZSTD_CCtx *cctx, struct section *sec)
{
    size_t bound = ZSTD_compressBound(sec->raw.n);
    void *dst = malloc(bound ? bound : 1);
    if (!dst)
        return -ENOMEM;
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(cctx, sec->raw.n);
    size_t r = ZSTD_compress2(cctx, dst, bound, sec->raw.p ? sec->raw.p : (void *)"", sec->raw.n);
    if (ZSTD_isError(r)) {
        free(dst);
        return -EIO;
    }
    if (sec->raw.n / VT_MAX_COMPRESSION_RATIO > r) {
        /* Readers refuse a section that claims to inflate more than this
         * (format.h, "Size bounds"): only a perfectly regular trace gets
         * here, and it is stored as it is. */
        free(dst);
        sec->stored = sec->raw.p;
        sec->stored_size = sec->raw.n;
        sec->flags = 0;
        return 0;
    }
    sec->stored = dst;
    sec->stored_size = r;
    sec->flags = VT_SECTION_FLAG_ZSTD;
    return 0;
}

int vt__snapfile_encode(const vt__snapshot_data *s, void **data, size_t *size, char *err,
                        size_t errlen)
{
    *data = NULL;
    *size = 0;
    int rc = validate(s, err, errlen);
    if (rc)
        return rc;
    struct section secs[8] = {
        { .id = VT_SECTION_META, .count = 1 },
        { .id = VT_SECTION_STRINGS, .count = nstrings_of(s) },
        { .id = VT_SECTION_FRAMES, .count = s->nframes },
        { .id = VT_SECTION_STACKS, .count = nnodes_of(s) },
        { .id = VT_SECTION_STATE, .count = s->nsegments },
        { .id = VT_SECTION_EVENTS, .count = s->nevents },
    };
    enc_meta(s, &secs[0].raw);
    enc_strings(s, &secs[1].raw);
    enc_frames(s, &secs[2].raw);
    enc_stacks(s, &secs[3].raw);
    enc_state(s, &secs[4].raw);
    rc = enc_events(s, &secs[5].raw);
    /* The optional sections last, each only when it says something (format.h):
     * without first lines and flags the file is what a 1.3 writer wrote, bar
     * the version. */
    size_t nsec = 6;
    if (any_first_line(s)) {
        secs[nsec] = (struct section){ .id = VT_SECTION_FIRST_LINES, .count = s->nframes };
        enc_first_lines(s, &secs[nsec++].raw);
    }
    if (any_frame_flags(s)) {
        secs[nsec] = (struct section){ .id = VT_SECTION_FRAME_FLAGS, .count = s->nframes };
        enc_frame_flags(s, &secs[nsec++].raw);
    }

    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (!cctx)
        rc = -ENOMEM;
    else {
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_LEVEL);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 0);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
        /* our own CRC covers the stored bytes; zstd's would be redundant */
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
    }
    for (size_t i = 0; i < nsec && !rc; i++) {
        if (secs[i].raw.oom)
            rc = -ENOMEM;
        else
            rc = compress_section(cctx, &secs[i]);
    }
    ZSTD_freeCCtx(cctx);

    unsigned char *out = NULL;
    size_t total = VT_FILE_HEADER_SIZE + nsec * VT_FILE_ENTRY_SIZE;
    if (!rc) {
        for (size_t i = 0; i < nsec; i++)
            total += secs[i].stored_size;
        out = malloc(total);
        if (!out)
            rc = -ENOMEM;
    }
    if (!rc) {
        vt__buf tab = { 0 };
        uint64_t off = VT_FILE_HEADER_SIZE + nsec * VT_FILE_ENTRY_SIZE;
        for (size_t i = 0; i < nsec; i++) {
            vt__put_le(&tab, secs[i].id, 4);
            vt__put_le(&tab, secs[i].flags, 4);
            vt__put_le(&tab, off, 8);
            vt__put_le(&tab, secs[i].stored_size, 8);
            vt__put_le(&tab, secs[i].raw.n, 8);
            vt__put_le(&tab, secs[i].count, 8);
            vt__put_le(&tab, vt__crc32c(0, secs[i].stored, secs[i].stored_size), 4);
            vt__put_le(&tab, 0, 4);
            memcpy(out + off, secs[i].stored, secs[i].stored_size);
            off += secs[i].stored_size;
        }
        vt__buf hdr = { 0 };
        vt__put_bytes(&hdr, VT_FILE_MAGIC, VT_FILE_MAGIC_SIZE);
        vt__put_le(&hdr, VT_FORMAT_MAJOR, 2);
        vt__put_le(&hdr, VT_FORMAT_MINOR, 2);
        vt__put_le(&hdr, VT_FILE_HEADER_SIZE, 4);
        vt__put_le(&hdr, total, 8);
        vt__put_le(&hdr, VT_FILE_HEADER_SIZE, 8);
        vt__put_le(&hdr, nsec, 4);
        vt__put_le(&hdr, VT_FILE_ENTRY_SIZE, 4);
        vt__put_le(&hdr, vt__crc32c(0, tab.p, tab.n), 4);
        vt__put_le(&hdr, 0, 8);
        vt__put_le(&hdr, 0, 8);
        vt__put_le(&hdr, vt__crc32c(0, hdr.p, hdr.n), 4);
        if (hdr.oom || tab.oom) {
            rc = -ENOMEM;
        } else {
            memcpy(out, hdr.p, VT_FILE_HEADER_SIZE);
            memcpy(out + VT_FILE_HEADER_SIZE, tab.p, tab.n);
        }
        free(hdr.p);
        free(tab.p);
    }
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        if (secs[i].stored != secs[i].raw.p)
            free(secs[i].stored);
        free(secs[i].raw.p);
    }
    if (rc) {
        free(out);
        if (rc == -ENOMEM)
            return vt__errf(err, errlen, rc, "snapshot not written: out of memory while encoding");
        return vt__errf(err, errlen, rc, "snapshot not written: zstd compression failed");
    }
    *data = out;
    *size = total;
    return 0;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int vt__snapfile_write_flags(const vt__snapshot_data *s, const char *path, int flags, char *err,
                             size_t errlen)
{
    if (errlen)
        err[0] = 0;
    if (!s || !path)
        return vt__errf(err, errlen, -EINVAL, "snapshot not written: no snapshot or no path");
    /* Refuse a special file before the work of encoding. */
    int rc = vt__outfile_check(path, err, errlen);
    if (rc)
        return rc;
    void *data;
    size_t size;
    rc = vt__snapfile_encode(s, &data, &size, err, errlen);
    if (rc) {
        /* The encoder's reason, with the file it was meant for. */
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        vt__errf(err, errlen, rc, "%s: %s", path, why);
        return rc;
    }
    char tmp[PATH_MAX];
    int fd = vt__outfile_create(path, tmp, sizeof tmp, err, errlen);
    if (fd < 0) {
        free(data);
        return fd;
    }
    rc = write_all(fd, data, size);
    free(data);
    if (!rc && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return vt__errf(err, errlen, rc, "cannot write snapshot %s: %s", path, strerror(-rc));
    }
    return vt__outfile_commit(tmp, path, flags, err, errlen);
}

int vt__snapfile_write(const vt__snapshot_data *s, const char *path, char *err, size_t errlen)
{
    return vt__snapfile_write_flags(s, path, 0, err, errlen);
}
