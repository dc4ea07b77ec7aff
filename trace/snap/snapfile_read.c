/*
 * trace/snap/snapfile_read.c - decode and validate a .vtsnap file
 * (layout: include/vramtrace/format.h).
 *
 * Trust nothing: every length is checked against what is left before it is
 * used, every count against the bytes that could hold it before anything is
 * allocated, every index against the table it points into. The first problem
 * ends decoding with one message naming the file, the part of it (header,
 * section table, section 'x') and the byte offset.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "errbuf.h"
#include "checksum.h"
#include "snapfile.h"
#include "snapfile_encode.h"
#include "buf.h"
#include "snapfile_reader.h"

const char *const vt__section_names[NKNOWN + 1] = {
    "?", "meta", "strings", "frames", "stacks", "state", "events", "first lines", "frame flags",
    "framework state", "segment pools",
};
/* Sections a file may leave out (format.h): FIRST_LINES, FRAME_FLAGS,
 * FRAMEWORK_STATE, SEGMENT_POOLS. */
#define OPTIONAL_SECTION(id) ((id) == VT_SECTION_FIRST_LINES || (id) == VT_SECTION_FRAME_FLAGS || \
                              (id) == VT_SECTION_FRAMEWORK_STATE || \
                              (id) == VT_SECTION_SEGMENT_POOLS)

/* ---- header and table --------------------------------------------------- */

/* A major version other than ours: a file of another version, or a damaged
 * one? Believe the version only when the rest of the header says so: its
 * checksum holds (a later major keeps the header's first 64 bytes, so this is
 * the common case), or, failing that, the version is small and the header
 * gives this file's exact size. A flipped version byte fails both. */
static int plausible_other_version(const struct rd *r)
{
    const unsigned char *d = r->data;
    if (r->size < VT_FILE_HEADER_SIZE || r->major == 0)
        return 0;
    if (vt__crc32c(0, d, 60) == (uint32_t)vt__rd_le(d + 60, 4))
        return 1;
    return r->major <= 64 && r->minor <= 1024 && vt__rd_le(d + 16, 8) == r->size &&
           vt__rd_le(d + 12, 4) >= VT_FILE_HEADER_SIZE;
}

int vt__rd_parse_header(struct rd *r)
{
    const unsigned char *d = r->data;
    if (r->size == 0)
        return rfail(r, "not a vramtrace snapshot (the file is empty)");
    if (r->size < VT_FILE_MAGIC_SIZE || memcmp(d, VT_FILE_MAGIC, VT_FILE_MAGIC_SIZE) != 0)
        return rfail(r, "not a vramtrace snapshot (no \\x89VTSNAP magic at byte offset 0)");
    if (r->size < 12)
        return rfail(r, "header at byte offset 8: the file is truncated (%zu bytes)", r->size);
    r->major = (unsigned)vt__rd_le(d + 8, 2);
    r->minor = (unsigned)vt__rd_le(d + 10, 2);
    if (r->major != VT_FORMAT_MAJOR && !plausible_other_version(r))
        return rfail(r, "header at byte offset 8: format %u.%u with a header that does not "
                        "check out: the file is corrupt", r->major, r->minor);
    if (r->major > VT_FORMAT_MAJOR)
        return rfail(r, "header at byte offset 8: written by a newer vramtrace (format %u.x); "
                        "this reader understands %u.x", r->major, VT_FORMAT_MAJOR);
    if (r->major != VT_FORMAT_MAJOR)
        return rfail(r, "header at byte offset 8: format %u.x is not supported; this reader "
                        "understands %u.x", r->major, VT_FORMAT_MAJOR);
    if (r->size < VT_FILE_HEADER_SIZE)
        return rfail(r, "header at byte offset %zu: the file is truncated (%zu bytes, the "
                        "header alone needs %d)", r->size, r->size, VT_FILE_HEADER_SIZE);
    uint32_t crc = (uint32_t)vt__rd_le(d + 60, 4);
    if (vt__crc32c(0, d, 60) != crc && !FUZZING)
        return rfail(r, "header at byte offset 0: checksum mismatch (stored 0x%08x, computed "
                        "0x%08x): the file is corrupt", crc, vt__crc32c(0, d, 60));
    uint64_t hsize = vt__rd_le(d + 12, 4);
    uint64_t fsize = vt__rd_le(d + 16, 8);
    if (fsize > r->size)
        return rfail(r, "header at byte offset 16: the file is truncated (%zu bytes, the "
                        "header says %llu)", r->size, (unsigned long long)fsize);
    if (fsize < r->size)
        return rfail(r, "header at byte offset 16: %zu unexpected bytes after the end of the "
                        "snapshot (%llu bytes)", r->size - (size_t)fsize,
                     (unsigned long long)fsize);
    if (hsize < VT_FILE_HEADER_SIZE || hsize > r->size)
        return rfail(r, "header at byte offset 12: bad header size %llu",
                     (unsigned long long)hsize);
    uint64_t toff = vt__rd_le(d + 24, 8);
    uint64_t nsec = vt__rd_le(d + 32, 4);
    uint64_t esize = vt__rd_le(d + 36, 4);
    uint32_t tcrc = (uint32_t)vt__rd_le(d + 40, 4);
    if (esize < VT_FILE_ENTRY_SIZE || esize > 4096)
        return rfail(r, "header at byte offset 36: bad section table entry size %llu",
                     (unsigned long long)esize);
    if (toff < hsize || toff > r->size || nsec > (r->size - toff) / esize)
        return rfail(r, "section table at byte offset %llu: %llu entries of %llu bytes do not "
                        "fit in the file (%zu bytes)", (unsigned long long)toff,
                     (unsigned long long)nsec, (unsigned long long)esize, r->size);
    if (vt__crc32c(0, d + toff, nsec * esize) != tcrc && !FUZZING)
        return rfail(r, "section table at byte offset %llu: checksum mismatch: the file is "
                        "corrupt", (unsigned long long)toff);
    for (uint64_t i = 0; i < nsec; i++) {
        const unsigned char *e = d + toff + i * esize;
        uint64_t eoff = toff + i * esize;
        struct entry en = {
            .id = (uint32_t)vt__rd_le(e, 4),
            .flags = (uint32_t)vt__rd_le(e + 4, 4),
            .offset = vt__rd_le(e + 8, 8),
            .stored = vt__rd_le(e + 16, 8),
            .raw = vt__rd_le(e + 24, 8),
            .count = vt__rd_le(e + 32, 8),
            .crc = (uint32_t)vt__rd_le(e + 40, 4),
            .present = 1,
        };
        if (en.offset > r->size || en.stored > r->size - en.offset)
            return rfail(r, "section table at byte offset %llu: section %u (offset %llu, %llu "
                            "bytes) lies outside the file (%zu bytes)",
                         (unsigned long long)eoff, en.id, (unsigned long long)en.offset,
                         (unsigned long long)en.stored, r->size);
        if (en.id == 0 || en.id > NKNOWN)
            continue; /* a later minor version's section: skip */
        if ((en.id == VT_SECTION_FIRST_LINES && r->minor < 4) ||
            (en.id == VT_SECTION_FRAME_FLAGS && r->minor < 8) ||
            (en.id == VT_SECTION_FRAMEWORK_STATE && r->minor < 10) ||
            (en.id == VT_SECTION_SEGMENT_POOLS && r->minor < 14))
            continue; /* not of this file's version: what an older reader does */
        if (r->sec[en.id].present)
            return rfail(r, "section table at byte offset %llu: section '%s' appears twice",
                         (unsigned long long)eoff, vt__section_names[en.id]);
        r->sec[en.id] = en;
    }
    for (int id = 1; id <= NKNOWN; id++)
        if (!r->sec[id].present && !OPTIONAL_SECTION(id))
            return rfail(r, "section table at byte offset %llu: section '%s' is missing",
                         (unsigned long long)toff, vt__section_names[id]);
    return 0;
}

/* The most raw bytes `count` items of section `id` can take (format.h,
 * "Size bounds"); UINT64_MAX where the count does not bound the section. */
static uint64_t raw_bound(int id, uint64_t count)
{
    const uint64_t big = UINT64_MAX / VT_MAX_EVENT_BYTES;   /* keeps products exact */
    switch (id) {
    case VT_SECTION_META:
        return VT_MAX_META_BYTES;
    case VT_SECTION_FRAMES:
        return count > big ? UINT64_MAX : count * VT_MAX_FRAME_BYTES;
    case VT_SECTION_FIRST_LINES:
        return count > big ? UINT64_MAX : count * VT_MAX_FIRST_LINE_BYTES;
    case VT_SECTION_FRAME_FLAGS:
        return count > big ? UINT64_MAX : count * VT_MAX_FRAME_FLAG_BYTES;
    case VT_SECTION_STACKS:
        return count > big ? UINT64_MAX : (count ? count - 1 : 0) * VT_MAX_STACK_NODE_BYTES;
    case VT_SECTION_SEGMENT_POOLS:
        return count > big ? UINT64_MAX : count * VT_MAX_SEGMENT_POOL_BYTES;
    case VT_SECTION_EVENTS:
        return count > big ? UINT64_MAX
                           : VT_MAX_EVENTS_HEADER_BYTES + count * VT_MAX_EVENT_BYTES;
    default:
        return UINT64_MAX;
    }
}

/* Check and decompress section `id` into *raw (malloc'ed, *raw_size bytes).
 * The declared raw size is checked against what the section's count can
 * need and against the compression ratio before anything is allocated, so a
 * small file cannot make the reader allocate (or inflate) gigabytes. */
int vt__rd_check_sizes(struct rd *r, int id)
{
    const struct entry *en = &r->sec[id];
    r->cur_name = vt__section_names[id];
    r->cur_offset = en->offset;
    uint64_t need = raw_bound(id, en->count);
    if (en->raw > need)
        return rfail(r, "section '%s' at byte offset %llu: declares %llu decoded bytes, more "
                        "than its %llu items can take (at most %llu): the file is corrupt or "
                        "hostile", r->cur_name, (unsigned long long)en->offset,
                     (unsigned long long)en->raw, (unsigned long long)en->count,
                     (unsigned long long)need);
    if ((en->flags & VT_SECTION_FLAG_ZSTD) &&
        en->raw / VT_MAX_COMPRESSION_RATIO > en->stored)
        return rfail(r, "section '%s' at byte offset %llu: declares %llu decoded bytes for %llu "
                        "stored bytes, beyond the format's %dx compression ratio: the file is "
                        "corrupt or hostile", r->cur_name, (unsigned long long)en->offset,
                     (unsigned long long)en->raw, (unsigned long long)en->stored,
                     VT_MAX_COMPRESSION_RATIO);
    if (!(en->flags & VT_SECTION_FLAG_ZSTD) && en->raw != en->stored)
        return rfail(r, "section '%s' at byte offset %llu: uncompressed but its sizes "
                        "differ (%llu vs %llu)", r->cur_name, (unsigned long long)en->offset,
                     (unsigned long long)en->raw, (unsigned long long)en->stored);
    if ((en->flags & VT_SECTION_FLAG_ZSTD) && en->raw > ((uint64_t)1 << 40))
        return rfail(r, "section '%s' at byte offset %llu: implausible decoded size %llu for "
                        "%llu stored bytes", r->cur_name, (unsigned long long)en->offset,
                     (unsigned long long)en->raw, (unsigned long long)en->stored);
    return 0;
}

/* Check and decompress section `id` into *raw (malloc'ed, *raw_size bytes).
 * The declared raw size is checked against what the section's count can
 * need and against the compression ratio before anything is allocated, so a
 * small file cannot make the reader allocate (or inflate) gigabytes. */
static int load_section(struct rd *r, int id, unsigned char **raw)
{
    const struct entry *en = &r->sec[id];
    const unsigned char *p = r->data + en->offset;
    r->cur_name = vt__section_names[id];
    r->cur_offset = en->offset;
    *raw = NULL;
    uint32_t crc = vt__crc32c(0, p, en->stored);
    if (crc != en->crc && !FUZZING)
        return rfail(r, "section '%s' at byte offset %llu: checksum mismatch (stored 0x%08x, "
                        "computed 0x%08x): the file is corrupt", r->cur_name,
                     (unsigned long long)en->offset, en->crc, crc);
    int rc = vt__rd_check_sizes(r, id);
    if (rc)
        return rc;
    if (!(en->flags & VT_SECTION_FLAG_ZSTD)) {
        *raw = malloc(en->raw + 1);
        if (!*raw)
            return rfail(r, "section '%s': out of memory", r->cur_name), -ENOMEM;
        memcpy(*raw, p, en->raw);
        return 0;
    }
    unsigned long long fcs = ZSTD_getFrameContentSize(p, en->stored);
    size_t fsz = ZSTD_findFrameCompressedSize(p, en->stored);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != en->raw ||
        ZSTD_isError(fsz) || fsz != en->stored)
        return rfail(r, "section '%s' at byte offset %llu: not one zstd frame of %llu bytes "
                        "decoding to %llu", r->cur_name, (unsigned long long)en->offset,
                     (unsigned long long)en->stored, (unsigned long long)en->raw);
    *raw = malloc(en->raw + 1);
    if (!*raw)
        return rfail(r, "section '%s': out of memory (%llu bytes)", r->cur_name,
                     (unsigned long long)en->raw), -ENOMEM;
    size_t got = ZSTD_decompress(*raw, en->raw, p, en->stored);
    if (ZSTD_isError(got) || got != en->raw) {
        free(*raw);
        *raw = NULL;
        return rfail(r, "section '%s' at byte offset %llu: zstd: %s", r->cur_name,
                     (unsigned long long)en->offset,
                     ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
    }
    return 0;
}

/* ---- sections ----------------------------------------------------------- */

#define NEED(c, what)                                                                   \
    do {                                                                                \
        if ((c)->bad)                                                                   \
            return SFAIL(r, vt__cur_off(c), "%s %s", what, vt__cur_why(c));            \
    } while (0)

static int check_str(struct rd *r, size_t off, uint64_t idx, const char *what)
{
    if (idx >= r->s->nstrings)
        return SFAIL(r, off, "%s names string %llu of %zu", what, (unsigned long long)idx,
                     r->s->nstrings);
    return 0;
}

static int dec_strings(struct rd *r, const unsigned char *raw, size_t n)
{
    vt__snapshot_data *s = r->s;
    uint64_t count = r->sec[VT_SECTION_STRINGS].count;
    if (count == 0 || count - 1 > n)
        return SFAIL(r, (size_t)0, "%llu strings cannot fit in %zu bytes",
                     (unsigned long long)count, n);
    s->string_offsets = malloc(count * sizeof *s->string_offsets);
    /* each string's length prefix becomes its NUL, plus string 0 */
    s->strings_blob = malloc(n + 1);
    if (!s->string_offsets || !s->strings_blob)
        return rfail(r, "strings: out of memory"), -ENOMEM;
    if (n + 1 > UINT32_MAX)
        return SFAIL(r, (size_t)0, "string table too large (%zu bytes)", n);
    s->nstrings = count;
    s->strings_blob[0] = 0;
    s->string_offsets[0] = 0;
    size_t at = 1;
    vt__cur c = vt__cur_make(raw, n);
    for (uint64_t i = 1; i < count; i++) {
        size_t off = vt__cur_off(&c);
        uint64_t len = vt__get_varint(&c);
        if (c.bad)
            return SFAIL(r, off, "string %llu: its length %s", (unsigned long long)i,
                         vt__cur_why(&c));
        if (len > vt__cur_left(&c))
            return SFAIL(r, off, "string %llu: length %llu exceeds the section",
                         (unsigned long long)i, (unsigned long long)len);
        if (memchr(c.p, 0, len))
            return SFAIL(r, off, "string %llu contains a NUL byte", (unsigned long long)i);
        s->string_offsets[i] = (uint32_t)at;
        memcpy(s->strings_blob + at, c.p, len);
        at += len;
        s->strings_blob[at++] = 0;
        c.p += len;
    }
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last string", vt__cur_left(&c));
    s->strings_blob_size = at;
    return 0;
}

static int dec_meta(struct rd *r, const unsigned char *raw, size_t n)
{
    vt__snapshot_data *s = r->s;
    vt__snapshot_meta *m = &s->meta;
    vt__cur c = vt__cur_make(raw, n);
    m->format_version = (r->major << 16) | r->minor;
    int64_t pid = vt__get_svarint(&c), rank = vt__get_svarint(&c);
    m->pid = (int32_t)pid;
    m->rank = (int32_t)rank;
    size_t off = vt__cur_off(&c);
    uint64_t host = vt__get_varint(&c), cmd = vt__get_varint(&c);
    uint64_t conf = vt__get_varint(&c), ver = vt__get_varint(&c);
    NEED(&c, "metadata");
    if (pid != m->pid || rank != m->rank)
        return SFAIL(r, (size_t)0, "pid %lld / rank %lld out of range", (long long)pid,
                     (long long)rank);
    int rc;
    if ((rc = check_str(r, off, host, "host")) || (rc = check_str(r, off, cmd, "command line")) ||
        (rc = check_str(r, off, conf, "config")) || (rc = check_str(r, off, ver, "version")))
        return rc;
    m->host = (uint32_t)host;
    m->command_line = (uint32_t)cmd;
    m->config = (uint32_t)conf;
    m->library_version = (uint32_t)ver;
    m->clock_base_monotonic_ns = vt__get_varint(&c);
    m->clock_base_realtime_ns = vt__get_varint(&c);
    m->snapshot_time_ns = vt__get_varint(&c);
    m->events_recorded = vt__get_varint(&c);
    m->events_overwritten = vt__get_varint(&c);
    m->stacks_dropped = vt__get_varint(&c);
    off = vt__cur_off(&c);
    uint64_t nd = vt__get_varint(&c);
    NEED(&c, "metadata");
    if (nd > vt__cur_left(&c) / 3)
        return SFAIL(r, off, "%llu devices cannot fit in %zu bytes", (unsigned long long)nd,
                     vt__cur_left(&c));
    s->devices = calloc(nd + 1, sizeof *s->devices);
    if (!s->devices)
        return rfail(r, "meta: out of memory"), -ENOMEM;
    s->ndevices = nd;
    for (uint64_t i = 0; i < nd; i++) {
        off = vt__cur_off(&c);
        int64_t ord = vt__get_svarint(&c);
        uint64_t name = vt__get_varint(&c);
        s->devices[i].total_bytes = vt__get_varint(&c);
        NEED(&c, "device list");
        if (ord < INT32_MIN || ord > INT32_MAX)
            return SFAIL(r, off, "device %llu: ordinal %lld out of range",
                         (unsigned long long)i, (long long)ord);
        if ((rc = check_str(r, off, name, "device name")))
            return rc;
        s->devices[i].ordinal = (int32_t)ord;
        s->devices[i].name = (uint32_t)name;
    }
    /* 1.2 appends stacks_truncated, then a flags word and the true peaks;
     * a 1.0/1.1 file has none of them (0). */
    if (r->minor < 2)
        return 0;
    m->stacks_truncated = vt__get_varint(&c);
    NEED(&c, "metadata");
    uint64_t flags = vt__get_varint(&c);
    NEED(&c, "metadata flags");
    m->flags = (uint32_t)(flags & (VT_META_STATE_COMPLETE | VT_META_DEVICE_PEAKS |
                                   VT_META_IPC_SAFE | VT_META_POOL_OBSERVED |
                                   VT_META_POOL_UNSEEN | VT_META_FRAMEWORK_SETTINGS));
    if (flags & VT_META_DEVICE_PEAKS)
        for (uint64_t i = 0; i < nd; i++) {
            s->devices[i].peak_allocated = vt__get_varint(&c);
            s->devices[i].peak_reserved = vt__get_varint(&c);
            s->devices[i].peak_active = vt__get_varint(&c);
            NEED(&c, "device peaks");
        }
    if (flags & VT_META_FRAMEWORK_SETTINGS) {   /* 1.7 */
        off = vt__cur_off(&c);
        uint64_t fw = vt__get_varint(&c);
        NEED(&c, "framework settings");
        if ((rc = check_str(r, off, fw, "framework settings")))
            return rc;
        m->framework_settings = (uint32_t)fw;
    }
    /* trailing bytes: fields appended by a later minor version */
    return 0;
}

static int dec_frames(struct rd *r, const unsigned char *raw, size_t n)
{
    vt__snapshot_data *s = r->s;
    uint64_t count = r->sec[VT_SECTION_FRAMES].count;
    if (count > n / 7)
        return SFAIL(r, (size_t)0, "%llu frames cannot fit in %zu bytes",
                     (unsigned long long)count, n);
    s->frames = calloc(count + 1, sizeof *s->frames);
    if (!s->frames)
        return rfail(r, "frames: out of memory"), -ENOMEM;
    s->nframes = count;
    vt__cur c = vt__cur_make(raw, n);
    uint64_t ip = 0, mo = 0;
    int rc;
    for (uint64_t i = 0; i < count; i++) {
        vt__frame *f = &s->frames[i];
        size_t off = vt__cur_off(&c);
        ip += (uint64_t)vt__get_svarint(&c);
        mo += (uint64_t)vt__get_svarint(&c);
        uint64_t mod = vt__get_varint(&c), bid = vt__get_varint(&c);
        uint64_t fn = vt__get_varint(&c), file = vt__get_varint(&c);
        uint64_t line = vt__get_varint(&c);
        NEED(&c, "frame");
        if ((rc = check_str(r, off, mod, "frame module")) ||
            (rc = check_str(r, off, bid, "frame build id")) ||
            (rc = check_str(r, off, fn, "frame function")) ||
            (rc = check_str(r, off, file, "frame file")))
            return rc;
        if (line > UINT32_MAX)
            return SFAIL(r, off, "frame %llu: line %llu out of range", (unsigned long long)i,
                         (unsigned long long)line);
        *f = (vt__frame){ ip, mo, (uint32_t)mod, (uint32_t)bid, (uint32_t)fn, (uint32_t)file,
                         (uint32_t)line, 0, 0 };
    }
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last frame", vt__cur_left(&c));
    return 0;
}

/* A section of one varint per frame, in the order of FRAMES (FIRST_LINES,
 * FRAME_FLAGS): its count, each value's bound, the field it fills, and the
 * words its messages name it by. */
struct per_frame {
    int id;
    const char *items;   /* "first lines": "%llu first lines for %zu frames" */
    const char *item;    /* "first line": "frame 3: first line 9 out of range" */
    const char *last;    /* "first line": "bytes after the last first line" */
    uint64_t max;
    size_t field;        /* offsetof(vt__frame, ...), a uint32_t */
};

static int dec_per_frame(struct rd *r, const unsigned char *raw, size_t n,
                         const struct per_frame *pf)
{
    vt__snapshot_data *s = r->s;
    uint64_t count = r->sec[pf->id].count;
    if (count != s->nframes)
        return SFAIL(r, (size_t)0, "%llu %s for %zu frames", (unsigned long long)count,
                     pf->items, s->nframes);
    vt__cur c = vt__cur_make(raw, n);
    for (uint64_t i = 0; i < count; i++) {
        size_t off = vt__cur_off(&c);
        uint64_t v = vt__get_varint(&c);
        NEED(&c, pf->item);
        if (v > pf->max)
            return SFAIL(r, off, "frame %llu: %s %llu out of range", (unsigned long long)i,
                         pf->item, (unsigned long long)v);
        uint32_t v32 = (uint32_t)v;
        memcpy((char *)&s->frames[i] + pf->field, &v32, sizeof v32);
    }
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last %s", vt__cur_left(&c),
                     pf->last);
    return 0;
}

static int dec_first_lines(struct rd *r, const unsigned char *raw, size_t n)
{
    static const struct per_frame pf = { VT_SECTION_FIRST_LINES, "first lines", "first line",
                                         "first line", INT32_MAX,
                                         offsetof(vt__frame, first_line) };
    return dec_per_frame(r, raw, n, &pf);
}

/* Bits a later minor may add are kept as they are: views ask only for the
 * ones they know. */
static int dec_frame_flags(struct rd *r, const unsigned char *raw, size_t n)
{
    static const struct per_frame pf = { VT_SECTION_FRAME_FLAGS, "frame flags", "flags",
                                         "frame's flags", UINT32_MAX,
                                         offsetof(vt__frame, flags) };
    return dec_per_frame(r, raw, n, &pf);
}

static int dec_stacks(struct rd *r, const unsigned char *raw, size_t n)
{
    vt__snapshot_data *s = r->s;
    uint64_t count = r->sec[VT_SECTION_STACKS].count;
    if (count == 0 || count - 1 > n / 2 || count > UINT32_MAX)
        return SFAIL(r, (size_t)0, "%llu stack nodes cannot fit in %zu bytes",
                     (unsigned long long)count, n);
    s->stack_nodes = calloc(count, sizeof *s->stack_nodes);
    if (!s->stack_nodes)
        return rfail(r, "stacks: out of memory"), -ENOMEM;
    s->nstack_nodes = count;
    vt__cur c = vt__cur_make(raw, n);
    for (uint64_t i = 1; i < count; i++) {
        size_t off = vt__cur_off(&c);
        uint64_t up = vt__get_varint(&c), frame = vt__get_varint(&c);
        NEED(&c, "stack node");
        if (up == 0 || up > i)
            return SFAIL(r, off, "stack node %llu: parent %lld does not precede it",
                         (unsigned long long)i, (long long)(i - up));
        if (frame >= s->nframes)
            return SFAIL(r, off, "stack node %llu names frame %llu of %zu",
                         (unsigned long long)i, (unsigned long long)frame, s->nframes);
        s->stack_nodes[i] = (vt__stack_node){ (uint32_t)(i - up), (uint32_t)frame };
    }
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last node", vt__cur_left(&c));
    return 0;
}

/* STATE, or FRAMEWORK_STATE (`framework`: its segments come after STATE's,
 * their pools the framework's). One encoding for both. */
static int dec_segments(struct rd *r, const unsigned char *raw, size_t n, bool framework)
{
    vt__snapshot_data *s = r->s;
    vt__cur c = vt__cur_make(raw, n);
    uint64_t nseg = vt__get_varint(&c), nblk = vt__get_varint(&c);
    uint64_t want = r->sec[framework ? VT_SECTION_FRAMEWORK_STATE : VT_SECTION_STATE].count;
    NEED(&c, "state header");
    if (nseg != want)
        return SFAIL(r, (size_t)0, "%llu segments, but the section table says %llu",
                     (unsigned long long)nseg, (unsigned long long)want);
    if (nseg > n / 6 || nblk > n / 6 || nblk > UINT32_MAX - s->nblocks)
        return SFAIL(r, (size_t)0, "%llu segments / %llu blocks cannot fit in %zu bytes",
                     (unsigned long long)nseg, (unsigned long long)nblk, n);
    size_t seg0 = s->nsegments, blk0 = s->nblocks;
    vt__snap_segment *segs = realloc(s->segments, (seg0 + nseg + 1) * sizeof *segs);
    if (segs)
        s->segments = segs;
    vt__snap_block *blks = realloc(s->blocks, (blk0 + nblk + 1) * sizeof *blks);
    if (blks)
        s->blocks = blks;
    if (!segs || !blks)
        return rfail(r, "state: out of memory"), -ENOMEM;
    memset(segs + seg0, 0, (nseg + 1) * sizeof *segs);
    memset(blks + blk0, 0, (nblk + 1) * sizeof *blks);
    s->nsegments = seg0 + nseg;
    uint64_t end = 0, nb = blk0;
    nblk += blk0;
    for (uint64_t i = seg0; i < seg0 + nseg; i++) {
        vt__snap_segment *g = &s->segments[i];
        size_t off = vt__cur_off(&c);
        g->addr = end + (uint64_t)vt__get_svarint(&c);
        g->size = vt__get_varint(&c);
        g->stream = vt__get_varint(&c);
        int64_t dev = vt__get_svarint(&c);
        g->pool = vt__get_u8(&c);
        uint64_t k = vt__get_varint(&c);
        NEED(&c, "segment");
        if (dev < INT8_MIN || dev > INT8_MAX)
            return SFAIL(r, off, "segment %llu: device %lld out of range",
                         (unsigned long long)i, (long long)dev);
        if (g->pool > (framework ? VT_POOL_LARGE : VT_POOL_UNCACHED))
            return SFAIL(r, off, "segment %llu: unknown pool %u", (unsigned long long)(i - seg0),
                         g->pool);
        if (framework)   /* in memory: the framework's (vt__pool_kind undoes it) */
            g->pool = g->pool == VT_POOL_SMALL ? VT_POOL_FRAMEWORK_SMALL : VT_POOL_FRAMEWORK_LARGE;
        if (g->addr + g->size < g->addr)
            return SFAIL(r, off, "segment %llu wraps around the address space",
                         (unsigned long long)i);
        if (k > nblk - nb)
            return SFAIL(r, off, "segment %llu: %llu blocks, but only %llu remain",
                         (unsigned long long)i, (unsigned long long)k,
                         (unsigned long long)(nblk - nb));
        g->device = (int8_t)dev;
        g->first_block = (uint32_t)nb;
        g->nblocks = (uint32_t)k;
        end = g->addr + g->size;
        uint64_t at = g->addr;
        for (uint64_t j = 0; j < k; j++, nb++) {
            vt__snap_block *b = &s->blocks[nb];
            off = vt__cur_off(&c);
            b->addr = at;
            b->size = vt__get_varint(&c);
            b->req_size = vt__get_varint(&c);
            b->stream = g->stream + (uint64_t)vt__get_svarint(&c);
            b->alloc_seq = vt__get_varint(&c);
            uint64_t stack = vt__get_varint(&c);
            b->state = vt__get_u8(&c);
            NEED(&c, "block");
            if (b->size == 0 || b->size > end - at)
                return SFAIL(r, off, "block %llu (%llu bytes at 0x%llx) does not fit in its "
                                     "segment %llu (0x%llx, %llu bytes)", (unsigned long long)nb,
                             (unsigned long long)b->size, (unsigned long long)at,
                             (unsigned long long)i, (unsigned long long)g->addr,
                             (unsigned long long)g->size);
            if (stack >= s->nstack_nodes)
                return SFAIL(r, off, "block %llu names stack %llu of %zu",
                             (unsigned long long)nb, (unsigned long long)stack,
                             s->nstack_nodes);
            if (b->state > VT_BLOCK_INACTIVE)
                return SFAIL(r, off, "block %llu: unknown state %u", (unsigned long long)nb,
                             b->state);
            b->stack = (uint32_t)stack;
            at += b->size;
        }
        if (at != end)
            return SFAIL(r, vt__cur_off(&c), "segment %llu (0x%llx, %llu bytes): its blocks "
                                            "cover %llu bytes, not all of it",
                         (unsigned long long)i, (unsigned long long)g->addr,
                         (unsigned long long)g->size, (unsigned long long)(at - g->addr));
    }
    if (nb != nblk)
        return SFAIL(r, vt__cur_off(&c), "%llu blocks announced, %llu found",
                     (unsigned long long)(nblk - blk0), (unsigned long long)(nb - blk0));
    s->nblocks = nblk;
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last segment", vt__cur_left(&c));
    return 0;
}

static int dec_state(struct rd *r, const unsigned char *raw, size_t n)
{
    return dec_segments(r, raw, n, false);
}

static int dec_framework_state(struct rd *r, const unsigned char *raw, size_t n)
{
    return dec_segments(r, raw, n, true);
}

/* SEGMENT_POOLS (1.14): the private pools of the segments the states listed. */
static int dec_segment_pools(struct rd *r, const unsigned char *raw, size_t n)
{
    vt__snapshot_data *s = r->s;
    vt__cur c = vt__cur_make(raw, n);
    uint64_t want = r->sec[VT_SECTION_SEGMENT_POOLS].count, at = 0;
    for (uint64_t i = 0; i < want; i++) {
        size_t off = vt__cur_off(&c);
        uint64_t step = vt__get_varint(&c), id = vt__get_varint(&c);
        NEED(&c, "entry");
        /* after the previous entry's segment (the first: from segment 0), and
         * before the last segment's end */
        if ((i && !step) || step >= s->nsegments - at)
            return SFAIL(r, off, "entry %llu names segment %llu+%llu of %zu",
                         (unsigned long long)i, (unsigned long long)at,
                         (unsigned long long)step, s->nsegments);
        at += step;
        if (!id)
            return SFAIL(r, off, "entry %llu: pool id 0", (unsigned long long)i);
        s->segments[at].private_pool = id;
    }
    if (vt__cur_left(&c))
        return SFAIL(r, vt__cur_off(&c), "%zu bytes after the last entry", vt__cur_left(&c));
    return 0;
}

static inline void mtf_front(uint64_t *list, unsigned pos, uint64_t v)
{
    /* a loop, not memmove: pos is mostly 0 or 1, and the call would cost
     * more than the move (every event has two such codes) */
    for (; pos > 0; pos--)
        list[pos] = list[pos - 1];
    list[0] = v;
}

/* One move-to-front code (format.h): a position in list[0..n), or n for a
 * literal read from `lit`; the value moves to the front. @return false for
 * a code past n. */
static inline bool mtf_decode(uint64_t *list, unsigned n, unsigned code, vt__cur *lit,
                              uint64_t *v)
{
    if (code > n)
        return false;
    *v = code < n ? list[code] : vt__get_varint(lit);
    mtf_front(list, code < n ? code : n - 1, *v);
    return true;
}

int vt__rd_events_layout(struct rd *r, const unsigned char *head, size_t nhead, size_t n,
                         struct vt__evcols *out)
{
    vt__cur h = vt__cur_make(head, nhead);
    uint64_t ne = vt__get_varint(&h), ncol = vt__get_varint(&h);
    NEED(&h, "events header");
    if (ne != r->sec[VT_SECTION_EVENTS].count)
        return SFAIL(r, (size_t)0, "%llu events, but the section table says %llu",
                     (unsigned long long)ne, (unsigned long long)r->sec[VT_SECTION_EVENTS].count);
    if (ne > n || ne > UINT32_MAX)
        return SFAIL(r, (size_t)0, "%llu events cannot fit in %zu bytes",
                     (unsigned long long)ne, n);
    if (ncol < VT_COL_COUNT || ncol > 1024)
        return SFAIL(r, vt__cur_off(&h), "%llu event columns (this reader needs %d)",
                     (unsigned long long)ncol, VT_COL_COUNT);
    uint64_t total = 0;
    for (uint64_t c = 0; c < ncol; c++) {
        uint64_t len = vt__get_varint(&h);
        NEED(&h, "column table");
        if (len > n)
            return SFAIL(r, vt__cur_off(&h), "column %llu: length %llu exceeds the section",
                         (unsigned long long)c, (unsigned long long)len);
        if (c < VT_COL_COUNT)
            out->len[c] = len;
        total += len;
    }
    size_t header = vt__cur_off(&h);
    if (total != n - header)
        return SFAIL(r, header, "columns add up to %llu bytes, the section holds %zu",
                     (unsigned long long)total, n - header);
    size_t at = header;
    for (int c = 0; c < VT_COL_COUNT; c++) {
        out->off[c] = at;
        at += out->len[c];
    }
    static const int fixed[] = { VT_COL_KIND, VT_COL_DEVICE, VT_COL_STREAM, VT_COL_SIZE };
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        if (out->len[fixed[k]] != ne)
            return SFAIL(r, out->off[fixed[k]], "column %d holds %llu bytes for %llu events",
                         fixed[k], (unsigned long long)out->len[fixed[k]],
                         (unsigned long long)ne);
    out->n = ne;
    return 0;
}

int vt__rd_event(struct rd *r, struct vt__evstate *st, vt__cur *col, const size_t *base,
                 size_t i, vt__event *e)
{
    const int newer = r->minor > VT_FORMAT_MINOR;
    const size_t nn = r->s->nstack_nodes, ns = r->s->nstrings;
    /* A kind newer than the file's own minor cannot be in it, even if we
     * know it; a kind we do not know is fine only in a newer file. */
    size_t at = base[VT_COL_KIND] + vt__cur_off(&col[VT_COL_KIND]);
    uint8_t kind = vt__get_u8(&col[VT_COL_KIND]);
    int since = vt__event_kind_minor(kind);
    if (since < 0 && !(newer && kind != 0))
        return SFAIL(r, at, "event %zu has unknown kind %u", i, kind);
    if (since > 0 && (unsigned)since > r->minor)
        return SFAIL(r, at, "event %zu has kind %u, which format "
                     "%u.%d introduced, in a file of format %u.%u", i, kind, r->major, since,
                     r->major, r->minor);
    e->kind = kind;
    uint64_t d = vt__get_varint(&col[VT_COL_SEQ]);
    if ((i && st->next_seq == 0) || d > UINT64_MAX - st->next_seq)
        return SFAIL(r, base[VT_COL_SEQ] + vt__cur_off(&col[VT_COL_SEQ]),
                     "event %zu: sequence number overflows", i);
    e->seq = st->next_seq + d;
    st->next_seq = e->seq + 1;
    st->time += (uint64_t)vt__get_svarint(&col[VT_COL_TIME]);
    e->time_ns = st->time;
    st->thread += vt__get_svarint(&col[VT_COL_THREAD]);
    e->thread = (uint32_t)st->thread;
    e->device = (int8_t)vt__get_u8(&col[VT_COL_DEVICE]);
    at = base[VT_COL_STREAM] + vt__cur_off(&col[VT_COL_STREAM]);
    unsigned sc = vt__get_u8(&col[VT_COL_STREAM]);
    if (!mtf_decode(st->streams, VT_MTF_STREAMS, sc, &col[VT_COL_STREAM_LIT], &e->stream))
        return SFAIL(r, at, "event %zu: bad stream code %u", i, sc);
    st->last_addr[kind] += (uint64_t)vt__get_svarint(&col[VT_COL_ADDR]);
    e->addr = st->last_addr[kind];
    at = base[VT_COL_SIZE] + vt__cur_off(&col[VT_COL_SIZE]);
    unsigned zc = vt__get_u8(&col[VT_COL_SIZE]);
    if (!mtf_decode(st->sizes, VT_MTF_SIZES, zc, &col[VT_COL_SIZE_LIT], &e->size))
        return SFAIL(r, at, "event %zu: bad size code %u", i, zc);
    e->req_size = e->size - (uint64_t)vt__get_svarint(&col[VT_COL_REQ_SIZE]);
    uint64_t stack = vt__get_varint(&col[VT_COL_STACK]);
    e->aux = vt__get_varint(&col[VT_COL_AUX]);
    size_t at_aux2 = base[VT_COL_AUX2] + vt__cur_off(&col[VT_COL_AUX2]);
    e->aux2 = vt__get_varint(&col[VT_COL_AUX2]);
    uint64_t str = vt__get_varint(&col[VT_COL_STR]);
    if (stack >= nn)
        return SFAIL(r, base[VT_COL_STACK] + vt__cur_off(&col[VT_COL_STACK]),
                     "event %zu (seq %llu) names stack %llu of %zu", i,
                     (unsigned long long)e->seq, (unsigned long long)stack, nn);
    /* a free's allocation stack (format 1.12; meaningless before: 0) */
    if (kind == VT_EV_FREE_REQUESTED && r->minor < 12)
        e->aux2 = 0;
    else if (kind == VT_EV_FREE_REQUESTED && e->aux2 >= nn)
        return SFAIL(r, at_aux2, "event %zu (seq %llu) names allocation stack %llu of %zu", i,
                     (unsigned long long)e->seq, (unsigned long long)e->aux2, nn);
    if (str >= ns)
        return SFAIL(r, base[VT_COL_STR] + vt__cur_off(&col[VT_COL_STR]),
                     "event %zu (seq %llu) names string %llu of %zu", i,
                     (unsigned long long)e->seq, (unsigned long long)str, ns);
    e->stack = (uint32_t)stack;
    e->str = (uint32_t)str;
    if (st->thread < 0 || st->thread > UINT32_MAX)
        return SFAIL(r, base[VT_COL_THREAD] + vt__cur_off(&col[VT_COL_THREAD]),
                     "event %zu: thread %lld out of range", i, (long long)st->thread);
    return 0;
}

int vt__rd_events_end(struct rd *r, const vt__cur *col, const size_t *base,
                      const struct vt__evcols *lay)
{
    for (int c = 0; c < VT_COL_COUNT; c++) {
        size_t at = base[c] + vt__cur_off(&col[c]);
        if (col[c].bad)
            return SFAIL(r, at, "event column %d %s", c, vt__cur_why(&col[c]));
        if (at < lay->off[c] + lay->len[c])
            return SFAIL(r, at, "event column %d has %zu bytes left over", c,
                         (size_t)(lay->off[c] + lay->len[c] - at));
    }
    return 0;
}

static int dec_events(struct rd *r, const unsigned char *raw, size_t n)
{
    struct vt__evcols lay;
    int rc = vt__rd_events_layout(r, raw, n, n, &lay);
    if (rc)
        return rc;
    vt__cur col[VT_COL_COUNT];
    for (int c = 0; c < VT_COL_COUNT; c++)
        col[c] = vt__cur_make(raw + lay.off[c], lay.len[c]);
    vt__snapshot_data *s = r->s;
    s->events = malloc((lay.n + 1) * sizeof *s->events);
    if (!s->events)
        return rfail(r, "events: out of memory (%llu events)", (unsigned long long)lay.n),
               -ENOMEM;
    s->nevents = lay.n;
    struct vt__evstate st = { 0 };
    for (size_t i = 0; i < lay.n; i++)
        if ((rc = vt__rd_event(r, &st, col, lay.off, i, &s->events[i])))
            return rc;
    return vt__rd_events_end(r, col, lay.off, &lay);
}

/* ---- entry points ------------------------------------------------------- */

int vt__rd_decode_sections(struct rd *r)
{
    r->s = calloc(1, sizeof *r->s);
    if (!r->s)
        return rfail(r, "out of memory"), -ENOMEM;
    /* decoding order: what is referenced before what refers to it */
    static const struct {
        int id;
        int (*fn)(struct rd *, const unsigned char *, size_t);
    } order[] = {
        { VT_SECTION_STRINGS, dec_strings }, { VT_SECTION_META, dec_meta },
        { VT_SECTION_FRAMES, dec_frames },   { VT_SECTION_FIRST_LINES, dec_first_lines },
        { VT_SECTION_FRAME_FLAGS, dec_frame_flags },
        { VT_SECTION_STACKS, dec_stacks },   { VT_SECTION_STATE, dec_state },
        { VT_SECTION_FRAMEWORK_STATE, dec_framework_state },
        { VT_SECTION_SEGMENT_POOLS, dec_segment_pools }, { VT_SECTION_EVENTS, dec_events },
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0] && !rc; i++) {
        if (!r->sec[order[i].id].present)
            continue;   /* an optional section the file leaves out */
        if (order[i].id == VT_SECTION_EVENTS && r->events_streamed)
            continue;
        unsigned char *raw;
        rc = load_section(r, order[i].id, &raw);
        if (!rc)
            rc = order[i].fn(r, raw, r->sec[order[i].id].raw);
        free(raw);
    }
    if (rc) {
        vt__snapshot_free(r->s);
        r->s = NULL;
    }
    return rc;
}

int vt__snapfile_decode(const void *data, size_t size, const char *name, vt__snapshot_data **out,
                        char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct rd r = { .name = name ? name : "(memory)", .err = err, .errlen = errlen,
                    .data = data, .size = size };
    int rc = vt__rd_parse_header(&r);
    if (!rc)
        rc = vt__rd_decode_sections(&r);
    if (!rc)
        *out = r.s;
    return rc;
}

int vt__snapfile_read_with(const char *path, vt__snap_decoder *decode, vt__snapshot_data **out,
                           char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    int fd = vt__snapfile_open_read(path, err, errlen);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return rc;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "%s: out of memory (%zu bytes)", path, size);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = -errno;
            snprintf(err, errlen, "%s: read error at byte offset %zu: %s", path, got,
                     strerror(-rc));
            free(buf);
            close(fd);
            return rc;
        }
        if (n == 0)
            break; /* shrank under us: decode what is there */
        got += (size_t)n;
    }
    close(fd);
    int rc = decode(buf, got, path, out, err, errlen);
    free(buf);
    return rc;
}

int vt__snapfile_read(const char *path, vt__snapshot_data **out, char *err, size_t errlen)
{
    return vt__snapfile_read_with(path, vt__snapfile_decode, out, err, errlen);
}
