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
#include <stddef.h>
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
#include "spill.h"
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
    if (kind == VT_EV_PAUSE)
        return 9;
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
    const vt__snapshot_meta *m = &s->meta;
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
        if (g->pool > VT_POOL_FRAMEWORK_LARGE)
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
        if (e->kind == VT_EV_FREE_REQUESTED && e->aux2 >= nn)
            BAD("event %zu names allocation stack %llu of %zu", i,
                (unsigned long long)e->aux2, nn);
        if (e->str >= ns)
            BAD("event %zu names string %u of %zu", i, e->str, ns);
    }
#undef BAD
    return 0;
}

/* ---- section encoders --------------------------------------------------- */

static void enc_meta(const vt__snapshot_data *s, vt__buf *b)
{
    const vt__snapshot_meta *m = &s->meta;
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

/* A per-frame section of one uint32_t field of vt__frame (first_line,
 * flags), at `off`: written only when a frame has it (any non-zero), as
 * varints in frame order. @return whether it was. */
static bool enc_frame_field(const vt__snapshot_data *s, size_t off, vt__buf *b)
{
    bool any = false;
    for (size_t i = 0; i < s->nframes && !any; i++)
        any = *(const uint32_t *)((const char *)&s->frames[i] + off) != 0;
    for (size_t i = 0; any && i < s->nframes; i++)
        vt__put_varint(b, *(const uint32_t *)((const char *)&s->frames[i] + off));
    return any;
}

static void enc_stacks(const vt__snapshot_data *s, vt__buf *b)
{
    for (size_t i = 1; i < s->nstack_nodes; i++) {
        vt__put_varint(b, i - s->stack_nodes[i].parent);
        vt__put_varint(b, s->stack_nodes[i].frame);
    }
}

/* The segments (and their blocks) of the allocator's state, or with
 * `framework` those of an observed framework allocator (FRAMEWORK_STATE,
 * its pools written as SMALL and LARGE): one encoding for both. */
static size_t nsegments_of(const vt__snapshot_data *s, bool framework, size_t *nblocks)
{
    size_t n = 0, nb = 0;
    for (size_t i = 0; i < s->nsegments; i++)
        if (vt__pool_is_framework(s->segments[i].pool) == framework) {
            n++;
            nb += s->segments[i].nblocks;
        }
    if (nblocks)
        *nblocks = nb;
    return n;
}

static void enc_state(const vt__snapshot_data *s, bool framework, vt__buf *b)
{
    size_t nblocks;
    vt__put_varint(b, nsegments_of(s, framework, &nblocks));
    vt__put_varint(b, nblocks);
    uint64_t end = 0;
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        if (vt__pool_is_framework(g->pool) != framework)
            continue;
        vt__put_svarint(b, (int64_t)(g->addr - end));
        end = g->addr + g->size;
        vt__put_varint(b, g->size);
        vt__put_varint(b, g->stream);
        vt__put_svarint(b, g->device);
        vt__put_u8(b, vt__pool_kind(g->pool));
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

/* SEGMENT_POOLS: the segments' private pools, numbered in file order (STATE's
 * then FRAMEWORK_STATE's, as enc_state writes them). @return the entries. */
static size_t enc_segment_pools(const vt__snapshot_data *s, vt__buf *b)
{
    size_t n = 0;
    uint64_t number = 0, last = 0;
    for (int framework = 0; framework < 2; framework++)
        for (size_t i = 0; i < s->nsegments; i++) {
            const vt__snap_segment *g = &s->segments[i];
            if (vt__pool_is_framework(g->pool) != (framework == 1))
                continue;
            if (g->private_pool) {
                vt__put_varint(b, number - last);
                vt__put_varint(b, g->private_pool);
                last = number;
                n++;
            }
            number++;
        }
    return n;
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

/* What encoding an event needs from the ones before it. */
struct evenc {
    uint64_t next_seq, time;
    uint32_t thread;
    uint64_t streams[VT_MTF_STREAMS], sizes[VT_MTF_SIZES];
    uint64_t last_addr[256];
};

/* Event e's fields onto the ends of the columns. */
static void enc_event(struct evenc *st, const vt__event *e, vt__buf *col)
{
    vt__put_u8(&col[VT_COL_KIND], e->kind);
    vt__put_varint(&col[VT_COL_SEQ], e->seq - st->next_seq);
    st->next_seq = e->seq + 1;
    vt__put_svarint(&col[VT_COL_TIME], (int64_t)(e->time_ns - st->time));
    st->time = e->time_ns;
    vt__put_svarint(&col[VT_COL_THREAD], (int64_t)e->thread - (int64_t)st->thread);
    st->thread = e->thread;
    vt__put_u8(&col[VT_COL_DEVICE], (uint8_t)e->device);
    unsigned p = mtf_encode(st->streams, VT_MTF_STREAMS, e->stream);
    vt__put_u8(&col[VT_COL_STREAM], (uint8_t)p);
    if (p == VT_MTF_STREAMS)
        vt__put_varint(&col[VT_COL_STREAM_LIT], e->stream);
    vt__put_svarint(&col[VT_COL_ADDR], (int64_t)(e->addr - st->last_addr[e->kind]));
    st->last_addr[e->kind] = e->addr;
    p = mtf_encode(st->sizes, VT_MTF_SIZES, e->size);
    vt__put_u8(&col[VT_COL_SIZE], (uint8_t)p);
    if (p == VT_MTF_SIZES)
        vt__put_varint(&col[VT_COL_SIZE_LIT], e->size);
    vt__put_svarint(&col[VT_COL_REQ_SIZE], (int64_t)(e->size - e->req_size));
    vt__put_varint(&col[VT_COL_STACK], e->stack);
    vt__put_varint(&col[VT_COL_AUX], e->aux);
    vt__put_varint(&col[VT_COL_AUX2], e->aux2);
    vt__put_varint(&col[VT_COL_STR], e->str);
}

/* The section's header: n, the column count, each column's length. */
static void enc_events_head(vt__buf *b, uint64_t n, const uint64_t *len)
{
    vt__put_varint(b, n);
    vt__put_varint(b, VT_COL_COUNT);
    for (int c = 0; c < VT_COL_COUNT; c++)
        vt__put_varint(b, len[c]);
}

static int enc_events(const vt__snapshot_data *s, vt__buf *b)
{
    vt__buf col[VT_COL_COUNT];
    memset(col, 0, sizeof col);
    size_t n = s->nevents;
    /* fixed-width columns take n bytes; varint ones start at 2n and grow */
    for (int c = 0; c < VT_COL_COUNT; c++)
        vt__buf_reserve(&col[c], n ? 2 * n : 1);
    struct evenc st = { 0 };
    for (size_t i = 0; i < n; i++)
        enc_event(&st, &s->events[i], col);
    int oom = 0;
    uint64_t len[VT_COL_COUNT];
    for (int c = 0; c < VT_COL_COUNT; c++)
        len[c] = col[c].n;
    enc_events_head(b, n, len);
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
    uint64_t stored_size;
    uint64_t raw_size;       /* raw.n, or a streamed section's */
    uint32_t crc;            /* of the stored bytes */
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
    sec->raw_size = sec->raw.n;
    if (sec->raw.n / VT_MAX_COMPRESSION_RATIO > r) {
        /* Readers refuse a section that claims to inflate more than this
         * (format.h, "Size bounds"): only a perfectly regular trace gets
         * here, and it is stored as it is. */
        free(dst);
        sec->stored = sec->raw.p;
        sec->stored_size = sec->raw.n;
        sec->flags = 0;
    } else {
        sec->stored = dst;
        sec->stored_size = r;
        sec->flags = VT_SECTION_FLAG_ZSTD;
    }
    sec->crc = vt__crc32c(0, sec->stored, sec->stored_size);
    return 0;
}

static ZSTD_CCtx *new_cctx(void)
{
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    if (cctx) {
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, ZSTD_LEVEL);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 0);
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
        /* our own CRC covers the stored bytes; zstd's would be redundant */
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
    }
    return cctx;
}

/* Every section of s but EVENTS (secs[5], left to the caller), encoded and
 * compressed. @return the sections in the file (6, or 7 with FIRST_LINES),
 * or a negative errno. */
/* The sections a file of this version has at most (format.h). */
#define MAX_SECTIONS 10

static int encode_sections(const vt__snapshot_data *s, ZSTD_CCtx *cctx, struct section *secs)
{
    const struct section init[MAX_SECTIONS] = {
        { .id = VT_SECTION_META, .count = 1 },
        { .id = VT_SECTION_STRINGS, .count = nstrings_of(s) },
        { .id = VT_SECTION_FRAMES, .count = s->nframes },
        { .id = VT_SECTION_STACKS, .count = nnodes_of(s) },
        { .id = VT_SECTION_STATE, .count = nsegments_of(s, false, NULL) },
        { .id = VT_SECTION_EVENTS, .count = s->nevents },
    };
    memcpy(secs, init, sizeof init);
    enc_meta(s, &secs[0].raw);
    enc_strings(s, &secs[1].raw);
    enc_frames(s, &secs[2].raw);
    enc_stacks(s, &secs[3].raw);
    enc_state(s, false, &secs[4].raw);
    /* The optional sections last, each only when it says something (format.h):
     * without first lines, frame flags and a framework's state the file is
     * what a 1.3 writer wrote, bar the version. */
    int nsec = 6;
    static const struct { uint32_t id; size_t off; } frame_fields[] = {
        { VT_SECTION_FIRST_LINES, offsetof(vt__frame, first_line) },
        { VT_SECTION_FRAME_FLAGS, offsetof(vt__frame, flags) },
    };
    for (size_t k = 0; k < sizeof frame_fields / sizeof *frame_fields; k++) {
        secs[nsec] = (struct section){ .id = frame_fields[k].id, .count = s->nframes };
        if (enc_frame_field(s, frame_fields[k].off, &secs[nsec].raw))
            nsec++;
    }
    size_t nframework = nsegments_of(s, true, NULL);
    if (nframework) {
        secs[nsec] = (struct section){ .id = VT_SECTION_FRAMEWORK_STATE, .count = nframework };
        enc_state(s, true, &secs[nsec++].raw);
    }
    secs[nsec] = (struct section){ .id = VT_SECTION_SEGMENT_POOLS };
    if ((secs[nsec].count = enc_segment_pools(s, &secs[nsec].raw)))
        nsec++;
    int rc = 0;
    for (int i = 0; i < nsec && !rc; i++) {
        if (i == 5)
            continue;
        rc = secs[i].raw.oom ? -ENOMEM : compress_section(cctx, &secs[i]);
    }
    return rc ? rc : nsec;
}

static void free_sections(struct section *secs)
{
    for (size_t i = 0; i < MAX_SECTIONS; i++) {
        if (secs[i].stored != secs[i].raw.p)
            free(secs[i].stored);
        free(secs[i].raw.p);
    }
}

/* The header and the section table of a file of `total` bytes whose
 * sections follow the table back to back in the order of secs. */
static int file_head(const struct section *secs, size_t nsec, uint64_t total, vt__buf *out)
{
    vt__buf tab = { 0 };
    uint64_t off = VT_FILE_HEADER_SIZE + nsec * VT_FILE_ENTRY_SIZE;
    for (size_t i = 0; i < nsec; i++) {
        vt__put_le(&tab, secs[i].id, 4);
        vt__put_le(&tab, secs[i].flags, 4);
        vt__put_le(&tab, off, 8);
        vt__put_le(&tab, secs[i].stored_size, 8);
        vt__put_le(&tab, secs[i].raw_size, 8);
        vt__put_le(&tab, secs[i].count, 8);
        vt__put_le(&tab, secs[i].crc, 4);
        vt__put_le(&tab, 0, 4);
        off += secs[i].stored_size;
    }
    vt__put_bytes(out, VT_FILE_MAGIC, VT_FILE_MAGIC_SIZE);
    vt__put_le(out, VT_FORMAT_MAJOR, 2);
    vt__put_le(out, VT_FORMAT_MINOR, 2);
    vt__put_le(out, VT_FILE_HEADER_SIZE, 4);
    vt__put_le(out, total, 8);
    vt__put_le(out, VT_FILE_HEADER_SIZE, 8);
    vt__put_le(out, nsec, 4);
    vt__put_le(out, VT_FILE_ENTRY_SIZE, 4);
    vt__put_le(out, vt__crc32c(0, tab.p, tab.n), 4);
    vt__put_le(out, 0, 8);
    vt__put_le(out, 0, 8);
    vt__put_le(out, out->oom ? 0 : vt__crc32c(0, out->p, out->n), 4);
    vt__put_bytes(out, tab.p, tab.n);
    int oom = tab.oom || out->oom;
    free(tab.p);
    return oom ? -ENOMEM : 0;
}

static int encode_failed(int rc, char *err, size_t errlen)
{
    if (rc == -ENOMEM)
        return vt__errf(err, errlen, rc, "snapshot not written: out of memory while encoding");
    return vt__errf(err, errlen, rc, "snapshot not written: zstd compression failed");
}

int vt__snapfile_encode(const vt__snapshot_data *s, void **data, size_t *size, char *err,
                        size_t errlen)
{
    *data = NULL;
    *size = 0;
    int rc = validate(s, err, errlen);
    if (rc)
        return rc;
    struct section secs[MAX_SECTIONS];
    ZSTD_CCtx *cctx = new_cctx();
    int nsec = cctx ? encode_sections(s, cctx, secs) : -ENOMEM;
    if (!cctx)
        memset(secs, 0, sizeof secs);
    rc = nsec < 0 ? nsec : enc_events(s, &secs[5].raw);
    if (!rc)
        rc = compress_section(cctx, &secs[5]);
    ZSTD_freeCCtx(cctx);

    unsigned char *out = NULL;
    uint64_t total = 0;
    vt__buf head = { 0 };
    if (!rc) {
        total = VT_FILE_HEADER_SIZE + (uint64_t)nsec * VT_FILE_ENTRY_SIZE;
        for (int i = 0; i < nsec; i++)
            total += secs[i].stored_size;
        rc = file_head(secs, (size_t)nsec, total, &head);
    }
    if (!rc && !(out = malloc(total)))
        rc = -ENOMEM;
    if (!rc) {
        memcpy(out, head.p, head.n);
        size_t off = head.n;
        for (int i = 0; i < nsec; i++) {
            memcpy(out + off, secs[i].stored, secs[i].stored_size);
            off += secs[i].stored_size;
        }
    }
    free(head.p);
    free_sections(secs);
    if (rc) {
        free(out);
        return encode_failed(rc, err, errlen);
    }
    *data = out;
    *size = total;
    return 0;
}

/* ---- writing a file whose events come one at a time --------------------- */

#define COLUMN_SPILL (1u << 20)    /* a column's bytes go to the file in pieces this big */
#define STREAM_CHUNK (256u << 10)  /* compressed output written at a time */

struct vt__snapwriter {
    const vt__snapshot_data *s;    /* all but the events */
    int fd;
    char *err;
    size_t errlen;
    vt__spill sp;                  /* the columns, until the end */
    vt__spill_chain chain[VT_COL_COUNT];
    vt__buf col[VT_COL_COUNT];     /* each column's newest bytes */
    struct evenc st;
    uint64_t n, last_seq;
    bool plain;                    /* EVENTS stored as it is (VT_SNAPWRITER_PLAIN) */
};

int vt__snapwriter_open(const vt__snapshot_data *s, int fd, unsigned flags, vt__snapwriter **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    if (s->nevents)
        return vt__errf(err, errlen, -EINVAL, "snapshot not written: its events come one by one");
    int rc = validate(s, err, errlen);
    if (rc)
        return rc;
    vt__snapwriter *w = calloc(1, sizeof *w);
    if (!w)
        return vt__errf(err, errlen, -ENOMEM, "snapshot not written: out of memory");
    *w = (vt__snapwriter){ .s = s, .fd = fd, .err = err, .errlen = errlen,
                           .plain = flags & VT_SNAPWRITER_PLAIN };
    if ((rc = vt__spill_open(&w->sp, err, errlen))) {
        free(w);
        return rc;
    }
    for (int c = 0; c < VT_COL_COUNT; c++)
        vt__spill_chain_init(&w->chain[c], &w->sp, COLUMN_SPILL);
    *out = w;
    return 0;
}

static int spill_column(vt__snapwriter *w, int c)
{
    if (w->col[c].oom)
        return -ENOMEM;
    int rc = vt__spill_put(&w->chain[c], w->col[c].p, w->col[c].n);
    w->col[c].n = 0;
    return rc;
}

static int write_failed(vt__snapwriter *w, int rc)
{
    if (rc == -ENOMEM || rc == -EPROTO)   /* EPROTO: zstd's own failure */
        return encode_failed(rc, w->err, w->errlen);
    return vt__errf(w->err, w->errlen, rc, "snapshot not written: %s", strerror(-rc));
}

int vt__snapwriter_event(vt__snapwriter *w, const vt__event *e)
{
    size_t ns = nstrings_of(w->s), nn = nnodes_of(w->s);
#define BAD(...) return vt__errf(w->err, w->errlen, -EINVAL, "snapshot not written: " __VA_ARGS__)
    if (!vt__event_kind_known(e->kind))
        BAD("event %llu has unknown kind %u", (unsigned long long)w->n, e->kind);
    if (w->n && e->seq <= w->last_seq)
        BAD("event %llu: seq %llu does not follow %llu (seq must strictly increase)",
            (unsigned long long)w->n, (unsigned long long)e->seq,
            (unsigned long long)w->last_seq);
    if (e->stack >= nn)
        BAD("event %llu names stack %u of %zu", (unsigned long long)w->n, e->stack, nn);
    if (e->kind == VT_EV_FREE_REQUESTED && e->aux2 >= nn)
        BAD("event %llu names allocation stack %llu of %zu", (unsigned long long)w->n,
            (unsigned long long)e->aux2, nn);
    if (e->str >= ns)
        BAD("event %llu names string %u of %zu", (unsigned long long)w->n, e->str, ns);
#undef BAD
    enc_event(&w->st, e, w->col);
    w->n++;
    w->last_seq = e->seq;
    for (int c = 0; c < VT_COL_COUNT; c++) {
        int rc = w->col[c].n >= COLUMN_SPILL || w->col[c].oom ? spill_column(w, c) : 0;
        if (rc)
            return write_failed(w, rc);
    }
    return 0;
}

/* Compress `len` bytes (the last piece: end the frame) into the file at
 * *at, the stored bytes counted in *stored and *crc. */
static int stream_piece(vt__snapwriter *w, ZSTD_CCtx *cctx, unsigned char *obuf, const void *p,
                        size_t len, int last, uint64_t *at, uint64_t *stored, uint32_t *crc)
{
    ZSTD_inBuffer in = { p, len, 0 };
    for (;;) {
        ZSTD_outBuffer o = { obuf, STREAM_CHUNK, 0 };
        size_t left = ZSTD_compressStream2(cctx, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left))
            return -EPROTO;
        if (o.pos) {
            int rc = vt__write_at(w->fd, obuf, o.pos, *at);
            if (rc)
                return rc;
            *crc = vt__crc32c(*crc, obuf, o.pos);
            *at += o.pos;
            *stored += o.pos;
        }
        if (last ? left == 0 : in.pos == in.size)
            return 0;
    }
}

/* The EVENTS section at `at`: its header, then each column's bytes from the
 * temporary file, as one zstd frame (or stored as they are: asked for, or
 * see compress_section). */
static int write_events(vt__snapwriter *w, ZSTD_CCtx *cctx, struct section *sec, uint64_t at)
{
    uint64_t len[VT_COL_COUNT], raw;
    for (int c = 0; c < VT_COL_COUNT; c++)
        len[c] = w->chain[c].total;
    enc_events_head(&sec->raw, w->n, len);
    if (sec->raw.oom)
        return -ENOMEM;
    raw = sec->raw.n;
    for (int c = 0; c < VT_COL_COUNT; c++)
        raw += len[c];
    sec->raw_size = raw;
    sec->count = w->n;
    unsigned char *obuf = malloc(STREAM_CHUNK);
    if (!obuf)
        return -ENOMEM;
    int rc = 0;
    for (int pass = w->plain ? 1 : 0; pass < 2 && !rc; pass++) {
        /* pass 0 compresses; pass 1 (rare) stores the bytes as they are */
        uint64_t pos = at, stored = 0;
        uint32_t crc = 0;
        int zstd = pass == 0;
        ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
        ZSTD_CCtx_setPledgedSrcSize(cctx, raw);
        rc = zstd ? stream_piece(w, cctx, obuf, sec->raw.p, sec->raw.n, 0, &pos, &stored, &crc)
                  : vt__write_at(w->fd, sec->raw.p, sec->raw.n, pos);
        if (!zstd && !rc) {
            crc = vt__crc32c(0, sec->raw.p, sec->raw.n);
            pos += sec->raw.n;
            stored = sec->raw.n;
        }
        for (int c = 0; c < VT_COL_COUNT && !rc; c++) {
            vt__spill_reader r;
            if ((rc = vt__spill_reader_init(&r, &w->chain[c])))
                break;
            while (!rc && (rc = vt__spill_read_chunk(&r)) == 1) {
                if (zstd) {
                    rc = stream_piece(w, cctx, obuf, r.buf, r.n, 0, &pos, &stored, &crc);
                } else if (!(rc = vt__write_at(w->fd, r.buf, r.n, pos))) {
                    crc = vt__crc32c(crc, r.buf, r.n);
                    pos += r.n;
                    stored += r.n;
                }
            }
            vt__spill_reader_free(&r);
        }
        if (zstd && !rc)
            rc = stream_piece(w, cctx, obuf, "", 0, 1, &pos, &stored, &crc);
        if (rc)
            break;
        sec->stored_size = stored;
        sec->crc = crc;
        sec->flags = zstd ? VT_SECTION_FLAG_ZSTD : 0;
        if (!zstd || raw / VT_MAX_COMPRESSION_RATIO <= stored)
            break;
    }
    free(obuf);
    return rc;
}

int vt__snapwriter_finish(vt__snapwriter *w)
{
    int rc = 0;
    for (int c = 0; c < VT_COL_COUNT && !rc; c++)
        if (!(rc = spill_column(w, c)))
            rc = vt__spill_flush(&w->chain[c]);
    struct section secs[MAX_SECTIONS];
    memset(secs, 0, sizeof secs);
    ZSTD_CCtx *cctx = rc ? NULL : new_cctx();
    int nsec = rc ? rc : cctx ? encode_sections(w->s, cctx, secs) : -ENOMEM;
    rc = nsec < 0 ? nsec : 0;
    uint64_t at = VT_FILE_HEADER_SIZE + (uint64_t)(nsec > 0 ? nsec : 0) * VT_FILE_ENTRY_SIZE;
    for (int i = 0; i < nsec && !rc; i++) {
        if (i == 5)
            rc = write_events(w, cctx, &secs[5], at);
        else
            rc = vt__write_at(w->fd, secs[i].stored, secs[i].stored_size, at);
        at += secs[i].stored_size;
    }
    ZSTD_freeCCtx(cctx);
    vt__buf head = { 0 };
    if (!rc)
        rc = file_head(secs, (size_t)nsec, at, &head);
    if (!rc)
        rc = vt__write_at(w->fd, head.p, head.n, 0);
    if (!rc && ftruncate(w->fd, (off_t)at) != 0)
        rc = -errno;
    free(head.p);
    free_sections(secs);
    return rc ? write_failed(w, rc) : 0;
}

void vt__snapwriter_free(vt__snapwriter *w)
{
    if (!w)
        return;
    for (int c = 0; c < VT_COL_COUNT; c++) {
        vt__spill_chain_free(&w->chain[c]);
        free(w->col[c].p);
    }
    vt__spill_close(&w->sp);
    free(w);
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
