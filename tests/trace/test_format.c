/*
 * tests/trace/test_format.c - the .vtsnap writer and reader: round trips,
 * every kind of damage rejected with a message naming the section, version
 * rules, and the size/speed targets on a training-like loop.
 * Long because a file can be damaged in many ways: one short test each.
 */
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <zstd.h>

#include "harness.h"
#include "checksum.h"
#include "event_stream.h"
#include "snapfile.h"
#include "snapfile_encode.h"
#include "buf.h"
#include "snap_compare.h"
#include "test_format_gen.h"

static char err[1024];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void tmpdir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/vt-test-format-XXXXXX");
    ASSERT(mkdtemp(out) != NULL);
}

static void *encode(const vt__snapshot_data *s, size_t *size)
{
    void *data;
    int rc = vt__snapfile_encode(s, &data, size, err, sizeof err);
    ASSERT_MSG(rc == 0, "encode failed: %s", err);
    return data;
}

/* The snapshot read back from n bytes at f, which must be accepted. */
static vt__snapshot_data *decode_ok(const void *f, size_t n)
{
    vt__snapshot_data *r = NULL;
    ASSERT_MSG(vt__snapfile_decode(f, n, "decoded", &r, err, sizeof err) == 0, "%s", err);
    return r;
}

/* ---- field-by-field comparison ------------------------------------------ */

static void same_snapshot(const vt__snapshot_data *a, const vt__snapshot_data *b)
{
    ASSERT_EQ(b->meta.format_version, VT_FORMAT_VERSION);
    ASSERT_STR_EQ(vt__snapshot_string(a, a->meta.host), vt__snapshot_string(b, b->meta.host));
    snap_same_meta(a, b, SNAP_STRINGS_BY_ID);
    snap_same_strings(a, b);
    snap_same_devices(a, b, SNAP_STRINGS_BY_ID);
    snap_same_frames(a, b, SNAP_STRINGS_BY_ID);
    snap_same_stack_nodes(a, b);
    snap_same_segments(a, b);
    snap_same_blocks(a, b);
    snap_same_events(a, b, SNAP_STRINGS_BY_ID);
}

TEST(crc32c_matches_the_standard_check_value)
{
    ASSERT_EQ(vt__crc32c(0, "123456789", 9), 0xE3069283u);
    ASSERT_EQ(vt__crc32c(vt__crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

TEST(round_trip_small_snapshot_keeps_every_field)
{
    vt__snapshot_data *s = gen_small();
    char dir[64], path[128];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/small.vtsnap", dir);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_data *r;
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    same_snapshot(s, r);
    /* stack accessor: innermost first */
    const vt_frame *fr[8];
    size_t n = vt__snapshot_stack_frames(r, r->events[3].stack, fr, 8);
    ASSERT_EQ(n, 3);
    ASSERT_STR_EQ(vt__snapshot_string(r, fr[0]->function), "cudaMalloc");
    ASSERT_STR_EQ(vt__snapshot_string(r, fr[1]->function), "forward");
    ASSERT_STR_EQ(vt__snapshot_string(r, fr[2]->function), "main");
    ASSERT_STR_EQ(vt__snapshot_string(r, 999999), "");
    /* no temporary file left behind */
    DIR *d = opendir(dir);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            files++;
            ASSERT(strstr(de->d_name, ".tmp") == NULL);
        }
    closedir(d);
    ASSERT_EQ(files, 1);
    unlink(path);
    rmdir(dir);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

TEST(round_trip_empty_snapshot)
{
    vt__snapshot_data *s = calloc(1, sizeof *s);
    size_t size;
    void *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->nstrings, 1);       /* string 0 always exists */
    ASSERT_EQ(r->nstack_nodes, 1);   /* so does the root */
    ASSERT_EQ(r->nevents, 0);
    ASSERT_STR_EQ(vt__snapshot_string(r, 0), "");
    free(data);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

TEST(round_trip_training_loop_with_extreme_values)
{
    vt__snapshot_data *s = gen_training(20000, 7);
    /* edge values every encoder must survive */
    vt_event *e = &s->events[5];
    e->addr = UINT64_MAX; e->size = UINT64_MAX; e->req_size = 0; e->time_ns = 0;
    e->stream = UINT64_MAX - 1; e->aux = UINT64_MAX; e->aux2 = 1ull << 63;
    e->thread = UINT32_MAX; e->device = -1;
    s->events[6].time_ns = UINT64_MAX;
    s->events[s->nevents - 1].seq = UINT64_MAX;
    size_t size;
    void *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    same_snapshot(s, r);
    free(data);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* What a reader of a file older than 1.2 sees of `s`. */
static void without_1_2_fields(vt__snapshot_data *s)
{
    s->meta.flags = 0;
    for (size_t i = 0; i < s->ndevices; i++)
        s->devices[i].peak_allocated = s->devices[i].peak_reserved =
            s->devices[i].peak_active = 0;
}

/* ---- damage ------------------------------------------------------------- */

/* Offset and size of the stored bytes of section `id` in an encoded file. */
static void find_section(const unsigned char *d, uint32_t id, uint64_t *off, uint64_t *len)
{
    uint64_t toff = vt__rd_le(d + 24, 8);
    uint32_t n = (uint32_t)vt__rd_le(d + 32, 4);
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *e = d + toff + 48 * i;
        if (vt__rd_le(e, 4) == id) {
            *off = vt__rd_le(e + 8, 8);
            *len = vt__rd_le(e + 16, 8);
            return;
        }
    }
    HARNESS_FAIL("no section %u", id);
}

static void expect_reject(const void *d, size_t n, const char *needle)
{
    vt__snapshot_data *r = NULL;
    int rc = vt__snapfile_decode(d, n, "bad.vtsnap", &r, err, sizeof err);
    ASSERT_MSG(rc < 0, "accepted a damaged file (expected: %s)", needle);
    ASSERT(r == NULL);
    ASSERT_STR_CONTAINS(err, "bad.vtsnap: ");
    ASSERT_STR_CONTAINS(err, needle);
    ASSERT(strchr(err, '\n') == NULL);
}

TEST(flipped_byte_in_every_section_is_rejected_naming_it)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    static const char *names[] = { "", "meta", "strings", "frames", "stacks", "state", "events" };
    for (uint32_t id = 1; id <= 6; id++) {
        uint64_t off, len;
        find_section(data, id, &off, &len);
        ASSERT_GT(len, 0);
        size_t at = (size_t)(off + len / 2);
        data[at] ^= 0x10;
        char want[64];
        snprintf(want, sizeof want, "section '%s' at byte offset %llu: checksum mismatch",
                 names[id], (unsigned long long)off);
        expect_reject(data, size, want);
        data[at] ^= 0x10;
    }
    /* header and table too */
    data[20] ^= 1;
    expect_reject(data, size, "header at byte offset 0: checksum mismatch");
    data[20] ^= 1;
    data[64 + 5] ^= 1;
    expect_reject(data, size, "section table at byte offset 64: checksum mismatch");
    data[64 + 5] ^= 1;
    vt__snapshot_data *r;
    ASSERT(vt__snapfile_decode(data, size, "ok", &r, err, sizeof err) == 0);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);
}

TEST(truncated_file_is_rejected)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    expect_reject(data, size - 1, "the file is truncated");
    expect_reject(data, 40, "the file is truncated");
    expect_reject(data, 10, "the file is truncated");
    expect_reject(data, 0, "not a vramtrace snapshot");
    /* a file on disk cut short */
    char dir[64], path[128];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/cut.vtsnap", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    ASSERT(write(fd, data, size / 2) == (ssize_t)(size / 2));
    close(fd);
    vt__snapshot_data *r;
    ASSERT(vt__snapfile_read(path, &r, err, sizeof err) < 0);
    ASSERT_STR_CONTAINS(err, path);
    ASSERT_STR_CONTAINS(err, "truncated");
    unlink(path);
    rmdir(dir);
    free(data);
    vt__snapshot_free(s);
}

TEST(future_major_version_is_rejected)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    data[8] = 2;
    data[9] = 0;
    expect_reject(data, size, "written by a newer vramtrace (format 2.x); this reader "
                              "understands 1.x");
    free(data);
    vt__snapshot_free(s);
}

TEST(file_that_is_not_a_snapshot_is_rejected)
{
    const char *text = "{\"this\": \"is json\"}\n";
    expect_reject(text, strlen(text), "not a vramtrace snapshot");
    vt__snapshot_data *r;
    ASSERT(vt__snapfile_read("/nonexistent/x.vtsnap", &r, err, sizeof err) == -ENOENT);
    ASSERT_STR_CONTAINS(err, "/nonexistent/x.vtsnap: cannot open");
    ASSERT(vt__snapfile_read("/tmp", &r, err, sizeof err) < 0);
    ASSERT_STR_CONTAINS(err, "not a regular file");
}

/* Rebuild a file from (id, flags, raw bytes) sections, all stored
 * uncompressed, with a chosen minor version: lets tests craft content that
 * the writer would refuse. */
struct raw_section { uint32_t id; unsigned char *raw; size_t n; uint64_t count; };

static void unpack(const unsigned char *d, struct raw_section out[6])
{
    uint64_t toff = vt__rd_le(d + 24, 8);
    for (uint32_t i = 0; i < 6; i++) {
        const unsigned char *e = d + toff + 48 * i;
        out[i].id = (uint32_t)vt__rd_le(e, 4);
        uint64_t off = vt__rd_le(e + 8, 8), st = vt__rd_le(e + 16, 8);
        out[i].n = (size_t)vt__rd_le(e + 24, 8);
        out[i].count = vt__rd_le(e + 32, 8);
        out[i].raw = malloc(out[i].n + 1);
        ASSERT_EQ(ZSTD_decompress(out[i].raw, out[i].n, d + off, st), out[i].n);
    }
}

static unsigned char *repack(struct raw_section *secs, size_t nsec, unsigned minor, size_t *size)
{
    vt__buf tab = { 0 }, body = { 0 };
    uint64_t off = 64 + 48 * nsec;
    for (size_t i = 0; i < nsec; i++) {
        vt__put_le(&tab, secs[i].id, 4);
        vt__put_le(&tab, 0, 4);
        vt__put_le(&tab, off, 8);
        vt__put_le(&tab, secs[i].n, 8);
        vt__put_le(&tab, secs[i].n, 8);
        vt__put_le(&tab, secs[i].count, 8);
        vt__put_le(&tab, vt__crc32c(0, secs[i].raw, secs[i].n), 4);
        vt__put_le(&tab, 0, 4);
        vt__put_bytes(&body, secs[i].raw, secs[i].n);
        off += secs[i].n;
    }
    vt__buf h = { 0 };
    vt__put_bytes(&h, VT_FILE_MAGIC, 8);
    vt__put_le(&h, 1, 2);
    vt__put_le(&h, minor, 2);
    vt__put_le(&h, 64, 4);
    vt__put_le(&h, off, 8);
    vt__put_le(&h, 64, 8);
    vt__put_le(&h, nsec, 4);
    vt__put_le(&h, 48, 4);
    vt__put_le(&h, vt__crc32c(0, tab.p, tab.n), 4);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, vt__crc32c(0, h.p, h.n), 4);
    vt__put_bytes(&h, tab.p, tab.n);
    vt__put_bytes(&h, body.p, body.n);
    free(tab.p);
    free(body.p);
    *size = h.n;
    return h.p;
}

static void free_sections(struct raw_section *secs, size_t nsec)
{
    for (size_t i = 0; i < nsec; i++)
        free(secs[i].raw);
}

/* The snapshot read back from secs repacked as 1.minor, which must be accepted. */
static vt__snapshot_data *decode_repacked(struct raw_section *secs, size_t nsec, unsigned minor)
{
    size_t n;
    unsigned char *f = repack(secs, nsec, minor, &n);
    vt__snapshot_data *r = decode_ok(f, n);
    free(f);
    return r;
}

static struct raw_section *by_id(struct raw_section *secs, uint32_t id)
{
    for (int i = 0; i < 6; i++)
        if (secs[i].id == id)
            return &secs[i];
    HARNESS_FAIL("no section %u", id);
}

TEST(newer_minor_version_unknown_section_is_skipped)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[7];
    unpack(data, secs);
    secs[6] = (struct raw_section){ 99, (unsigned char *)strdup("future stuff"), 12, 1 };
    /* trailing metadata bytes are future fields too */
    struct raw_section *m = by_id(secs, VT_SECTION_META);
    m->raw = realloc(m->raw, m->n + 3);
    memcpy(m->raw + m->n, "\x01\x02\x03", 3);
    m->n += 3;
    vt__snapshot_data *r = decode_repacked(secs, 7, VT_FORMAT_MINOR + 1);
    ASSERT_EQ(r->meta.format_version, (1u << 16) | (VT_FORMAT_MINOR + 1));
    r->meta.format_version = VT_FORMAT_VERSION;
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free_sections(secs, 7);
    free(data);
    vt__snapshot_free(s);
}

/* ---- hostile sizes and damaged headers --------------------------------- */

/* A zstd frame of `raw` zero bytes made of RLE blocks (3-byte header + 1
 * byte per 128 KiB), with its content size: a few bytes per decoded
 * 128 KiB, as a decompression bomb would be built. */
static unsigned char *zero_bomb_frame(uint64_t raw, size_t *n)
{
    const uint64_t blk = 128 << 10;
    size_t nblocks = (size_t)((raw + blk - 1) / blk);
    unsigned char *f = malloc(13 + 4 * nblocks);
    ASSERT(f);
    size_t k = 0;
    vt__buf b = { 0 };
    vt__put_le(&b, 0xFD2FB528u, 4);   /* magic */
    vt__put_u8(&b, 0xE0);             /* 8-byte content size, single segment */
    vt__put_le(&b, raw, 8);
    memcpy(f, b.p, b.n);
    k = b.n;
    free(b.p);
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t sz = i + 1 < nblocks ? blk : raw - blk * (nblocks - 1);
        uint32_t hdr = (uint32_t)(sz << 3) | (1u << 1) | (i + 1 == nblocks);
        f[k++] = (unsigned char)hdr;
        f[k++] = (unsigned char)(hdr >> 8);
        f[k++] = (unsigned char)(hdr >> 16);
        f[k++] = 0;
    }
    *n = k;
    return f;
}

/* gen_small() with section `id` replaced by `stored` (zstd-flagged,
 * declaring `raw` decoded bytes and `count` items); every checksum valid. */
static unsigned char *file_with_section(uint32_t id, const unsigned char *stored, size_t nstored,
                                        uint64_t raw, uint64_t count, size_t *size)
{
    vt__snapshot_data *s = gen_small();
    size_t n0;
    unsigned char *data = encode(s, &n0);
    struct raw_section secs[6];
    unpack(data, secs);
    vt__buf tab = { 0 }, body = { 0 };
    uint64_t off = 64 + 48 * 6;
    for (size_t i = 0; i < 6; i++) {
        int mine = secs[i].id == id;
        const unsigned char *p = mine ? stored : secs[i].raw;
        size_t np = mine ? nstored : secs[i].n;
        vt__put_le(&tab, secs[i].id, 4);
        vt__put_le(&tab, mine ? VT_SECTION_FLAG_ZSTD : 0, 4);
        vt__put_le(&tab, off, 8);
        vt__put_le(&tab, np, 8);
        vt__put_le(&tab, mine ? raw : secs[i].n, 8);
        vt__put_le(&tab, mine ? count : secs[i].count, 8);
        vt__put_le(&tab, vt__crc32c(0, p, np), 4);
        vt__put_le(&tab, 0, 4);
        vt__put_bytes(&body, p, np);
        off += np;
        free(secs[i].raw);
    }
    vt__buf h = { 0 };
    vt__put_bytes(&h, VT_FILE_MAGIC, 8);
    vt__put_le(&h, VT_FORMAT_MAJOR, 2);
    vt__put_le(&h, VT_FORMAT_MINOR, 2);
    vt__put_le(&h, 64, 4);
    vt__put_le(&h, off, 8);
    vt__put_le(&h, 64, 8);
    vt__put_le(&h, 6, 4);
    vt__put_le(&h, 48, 4);
    vt__put_le(&h, vt__crc32c(0, tab.p, tab.n), 4);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, vt__crc32c(0, h.p, h.n), 4);
    vt__put_bytes(&h, tab.p, tab.n);
    vt__put_bytes(&h, body.p, body.n);
    free(tab.p);
    free(body.p);
    free(data);
    vt__snapshot_free(s);
    *size = h.n;
    return h.p;
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

TEST(decompression_bomb_is_rejected_before_allocating)
{
    /* Without sanitizers (whose shadow memory needs a huge address space),
     * the process may not even map 1 GiB more than it has: a reader that
     * allocated the declared 2 GiB would fail with "out of memory" instead
     * of the message below. Either way its peak RSS must not grow. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    struct rlimit rl = { (rlim_t)1 << 30, (rlim_t)1 << 30 };
    ASSERT_EQ(setrlimit(RLIMIT_AS, &rl), 0);
#endif
    const uint64_t raw = (uint64_t)2 << 30;
    size_t nf, size;
    unsigned char *frame = zero_bomb_frame(raw, &nf);
    ASSERT_LT(nf, 70000);           /* a 2 GiB section in under 70 KB */
    long rss0 = max_rss_kib();

    /* the count (a handful of events) cannot need 2 GiB */
    unsigned char *f = file_with_section(VT_SECTION_EVENTS, frame, nf, raw, 18, &size);
    expect_reject(f, size, "section 'events'");
    ASSERT_STR_CONTAINS(err, "declares 2147483648 decoded bytes, more than its 18 items can "
                             "take");
    free(f);

    /* a count that could need it: the compression ratio gives it away */
    f = file_with_section(VT_SECTION_EVENTS, frame, nf, raw, raw / 100, &size);
    expect_reject(f, size, "section 'events'");
    ASSERT_STR_CONTAINS(err, "beyond the format's 1024x compression ratio");
    free(f);

    /* sections whose count does not bound them: the ratio alone */
    f = file_with_section(VT_SECTION_STRINGS, frame, nf, raw, 40, &size);
    expect_reject(f, size, "section 'strings'");
    ASSERT_STR_CONTAINS(err, "compression ratio");
    free(f);
    f = file_with_section(VT_SECTION_STATE, frame, nf, raw, 2, &size);
    expect_reject(f, size, "section 'state'");
    ASSERT_STR_CONTAINS(err, "compression ratio");
    free(f);
    free(frame);
    long grew = max_rss_kib() - rss0;
    ASSERT_MSG(grew < 64 * 1024, "peak RSS grew by %ld KiB", grew);
}

TEST(writer_stores_a_section_that_would_inflate_too_much_uncompressed)
{
    /* 400k identical alloc/free pairs with a constant clock compress far
     * beyond the format's ratio: the writer must store them plainly, so
     * that its own reader accepts the file. */
    struct snap_builder g = { .s = calloc(1, sizeof *g.s) };
    gen_str(&g, "");
    gen_node(&g, 0, 0);
    for (uint64_t i = 0; i < 800000; i++) {
        vt_event *e = gen_ev(&g, (i & 1) ? VT_EV_FREE_REQUESTED : VT_EV_ALLOC, i + 1, i * 1000);
        e->addr = 0x7000000;
        e->size = e->req_size = 512;
    }
    size_t size;
    unsigned char *data = encode(g.s, &size);
    uint64_t off, len;
    find_section(data, VT_SECTION_EVENTS, &off, &len);
    const unsigned char *e = data + 64;
    while (vt__rd_le(e, 4) != VT_SECTION_EVENTS)
        e += 48;
    ASSERT_EQ(vt__rd_le(e + 4, 4) & VT_SECTION_FLAG_ZSTD, 0);
    ASSERT_EQ(vt__rd_le(e + 16, 8), vt__rd_le(e + 24, 8));
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->nevents, 800000);
    ASSERT_EQ(r->events[799999].seq, 800000);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(g.s);
}

TEST(flipped_major_version_byte_reads_as_corrupt)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    data[9] ^= 0x10;                      /* major 1 -> 4097 */
    char want[128];
    snprintf(want, sizeof want, "format 4097.%d with a header that does not check out: the file "
                                "is corrupt", VT_FORMAT_MINOR);
    expect_reject(data, size, want);
    ASSERT(strstr(err, "newer") == NULL);
    /* a genuine header of a later major (checksum right) is "newer" */
    data[9] = 0;
    data[8] = 3;
    uint32_t crc = vt__crc32c(0, data, 60);
    for (int i = 0; i < 4; i++)
        data[60 + i] = (unsigned char)(crc >> (8 * i));
    expect_reject(data, size, "written by a newer vramtrace (format 3.x)");
    free(data);
    vt__snapshot_free(s);
}

TEST(over_long_varint_is_named_as_such)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[6];
    unpack(data, secs);
    /* the first string's length: 11 bytes of "more follows" */
    struct raw_section *st = by_id(secs, VT_SECTION_STRINGS);
    unsigned char *p = malloc(st->n + 11);
    memset(p, 0x80, 11);
    memcpy(p + 11, st->raw, st->n);
    free(st->raw);
    st->raw = p;
    st->n += 11;
    size_t n2;
    unsigned char *f = repack(secs, 6, VT_FORMAT_MINOR, &n2);
    expect_reject(f, n2, "section 'strings'");
    ASSERT_STR_CONTAINS(err, "string 1: its length has a varint longer than 10 bytes "
                             "(malformed)");
    ASSERT(strstr(err, "length 0") == NULL);
    free(f);
    free_sections(secs, 6);
    unpack(data, secs);
    /* an event column: the seq column's first varint made over-long */
    struct raw_section *ev = by_id(secs, VT_SECTION_EVENTS);
    vt__cur c = vt__cur_make(ev->raw, ev->n);
    uint64_t ne = vt__get_varint(&c), ncol = vt__get_varint(&c);
    uint64_t len[VT_COL_COUNT];
    for (uint64_t i = 0; i < ncol; i++)
        len[i] = vt__get_varint(&c);
    ASSERT(!c.bad && ne > 0);
    size_t seq_at = vt__cur_off(&c) + (size_t)len[VT_COL_KIND];
    /* rewrite: same header, seq column starts with 11 continuation bytes
     * and is 11 bytes longer */
    vt__buf b = { 0 };
    vt__put_varint(&b, ne);
    vt__put_varint(&b, ncol);
    for (uint64_t i = 0; i < ncol; i++)
        vt__put_varint(&b, len[i] + (i == VT_COL_SEQ ? 11 : 0));
    vt__put_bytes(&b, ev->raw + vt__cur_off(&c), seq_at - vt__cur_off(&c));
    for (int i = 0; i < 11; i++)
        vt__put_u8(&b, 0x80);
    vt__put_bytes(&b, ev->raw + seq_at, ev->n - seq_at);
    free(ev->raw);
    ev->raw = b.p;
    ev->n = b.n;
    f = repack(secs, 6, VT_FORMAT_MINOR, &n2);
    expect_reject(f, n2, "section 'events'");
    ASSERT_STR_CONTAINS(err, "has a varint longer than 10 bytes (malformed)");
    free(f);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

TEST(format_1_1_file_reads_without_true_peaks)
{
    /* A 1.1 writer wrote META without the 1.2 flags and peaks: strip them
     * (they are META's last bytes) and label the file 1.1. */
    vt__snapshot_data *s = gen_small();
    ASSERT(s->meta.flags & VT_META_DEVICE_PEAKS);
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[6];
    unpack(data, secs);
    struct raw_section *m = by_id(secs, VT_SECTION_META);
    vt__buf tail = { 0 };
    vt__put_varint(&tail, s->meta.flags);
    for (size_t i = 0; i < s->ndevices; i++) {
        vt__put_varint(&tail, s->devices[i].peak_allocated);
        vt__put_varint(&tail, s->devices[i].peak_reserved);
        vt__put_varint(&tail, s->devices[i].peak_active);
    }
    ASSERT(m->n > tail.n && memcmp(m->raw + m->n - tail.n, tail.p, tail.n) == 0);
    m->n -= tail.n;
    free(tail.p);
    vt__snapshot_data *r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    ASSERT_EQ(r->meta.flags, 0);
    ASSERT_EQ(r->devices[0].peak_allocated, 0);
    ASSERT_EQ(r->nevents, s->nevents);
    ASSERT_EQ(r->nblocks, s->nblocks);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

/* Damage inside a section whose checksum is right: index checks catch it. */
TEST(bad_indexes_are_rejected_naming_section)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[6];
    size_t n2;
    unsigned char *f;

    /* a stack node whose parent comes after it: first node encodes i - parent
     * = 1; make it 0 */
    unpack(data, secs);
    by_id(secs, VT_SECTION_STACKS)->raw[0] = 0;
    f = repack(secs, 6, 0, &n2);
    expect_reject(f, n2, "section 'stacks'");
    ASSERT_STR_CONTAINS(err, "does not precede it");
    free(f);
    free_sections(secs, 6);

    /* an event of unknown kind (kind column starts after n, ncols, 15 lengths) */
    unpack(data, secs);
    struct raw_section *ev = by_id(secs, VT_SECTION_EVENTS);
    vt__cur c = vt__cur_make(ev->raw, ev->n);
    for (int i = 0; i < 2 + VT_COL_COUNT; i++)
        vt__get_varint(&c);
    ev->raw[vt__cur_off(&c) + 2] = 14; /* reserved kind */
    f = repack(secs, 6, 0, &n2);
    expect_reject(f, n2, "section 'events'");
    ASSERT_STR_CONTAINS(err, "unknown kind 14");
    free(f);
    /* the same kind in a file of a newer minor version is accepted */
    vt__snapshot_data *r = decode_repacked(secs, 6, VT_FORMAT_MINOR + 1);
    ASSERT_EQ(r->events[2].kind, 14);
    vt__snapshot_free(r);
    free_sections(secs, 6);

    /* blocks not tiling their segment: first segment's first block size is at
     * a known place: after nseg, nblk, addr delta, size, stream, device, pool,
     * nblocks */
    unpack(data, secs);
    struct raw_section *st = by_id(secs, VT_SECTION_STATE);
    c = vt__cur_make(st->raw, st->n);
    for (int i = 0; i < 6; i++)
        vt__get_varint(&c);
    vt__get_u8(&c);
    vt__get_varint(&c);
    /* first block size is 8 MiB = varint 80 80 80 04; make it 4 MiB */
    ASSERT_EQ(st->raw[vt__cur_off(&c) + 3], 4);
    st->raw[vt__cur_off(&c) + 3] = 2;
    f = repack(secs, 6, 0, &n2);
    expect_reject(f, n2, "section 'state'");
    ASSERT_STR_CONTAINS(err, "cover");
    free(f);
    free_sections(secs, 6);

    /* a frame naming a string that does not exist: count strings down by
     * removing the last ones from the table's count */
    unpack(data, secs);
    by_id(secs, VT_SECTION_STRINGS)->count = 3;
    f = repack(secs, 6, 0, &n2);
    expect_reject(f, n2, "section 'strings'");
    free(f);
    free_sections(secs, 6);

    free(data);
    vt__snapshot_free(s);
}

/* A gen over an existing snapshot, to append to it. */
static struct snap_builder gen_reopen(vt__snapshot_data *s)
{
    return (struct snap_builder){ .s = s, .cap_blob = s->strings_blob_size, .cap_str = s->nstrings,
                         .cap_ev = s->nevents, .cap_node = s->nstack_nodes,
                         .cap_frame = s->nframes, .cap_seg = s->nsegments,
                         .cap_blk = s->nblocks, .cap_dev = s->ndevices };
}

/* gen_small() plus a TENSOR_NAME (format 1.1) of its tensor 7. */
static vt__snapshot_data *gen_small_renamed(void)
{
    vt__snapshot_data *s = gen_small();
    struct snap_builder g = gen_reopen(s);
    uint64_t t = s->events[s->nevents - 1].time_ns;
    vt_event *e = gen_ev(&g, VT_EV_TENSOR_NAME, 25, t + 5);
    e->aux = 7;
    e->str = gen_str(&g, "fc2 out");
    e->device = -1;
    return s;
}

TEST(tensor_name_round_trips_in_a_format_1_1_file)
{
    ASSERT_EQ(VT_FORMAT_MAJOR, 1);
    ASSERT_GE(VT_FORMAT_MINOR, 1);
    ASSERT_EQ(VT_EV_TENSOR_NAME, 25);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_TENSOR_NAME), 1);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_FINDING), 0);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_KIND_COUNT), -1);
    ASSERT_EQ(vt__event_kind_minor(14), -1);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_STREAM_DESTROY), 5);
    ASSERT_EQ(vt__event_kind_minor(VT_EV_EMPTY_CACHE), 5);
    vt__snapshot_data *s = gen_small_renamed();
    size_t size;
    unsigned char *data = encode(s, &size);
    ASSERT_EQ(vt__rd_le(data + 8, 2), 1);      /* written as the current 1.x */
    ASSERT_EQ(vt__rd_le(data + 10, 2), VT_FORMAT_MINOR);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->meta.format_version, (uint32_t)VT_FORMAT_VERSION);
    same_snapshot(s, r);
    const vt_event *e = &r->events[r->nevents - 1];
    ASSERT_EQ(e->kind, VT_EV_TENSOR_NAME);
    ASSERT_EQ(e->aux, 7);
    ASSERT_EQ(e->device, -1);
    ASSERT_STR_EQ(vt__snapshot_string(r, e->str), "fc2 out");
    vt__snapshot_free(r);

    /* a file of a newer minor holds it too */
    struct raw_section secs[6];
    unpack(data, secs);
    r = decode_repacked(secs, 6, VT_FORMAT_MINOR + 1);
    ASSERT_EQ(r->events[r->nevents - 1].kind, VT_EV_TENSOR_NAME);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

/* format.h: 1.2 appends stacks_truncated to META; a 1.1 file (no such
 * field) reads as 0, and a 1.1 reader skips it as trailing bytes. */
TEST(stacks_truncated_round_trips_and_is_zero_in_a_format_1_1_file)
{
    vt__snapshot_data *s = gen_small();
    s->meta.stacks_truncated = 5;
    size_t size;
    unsigned char *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->meta.stacks_truncated, 5);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
    free(data);

    /* The same bytes claiming 1.1: the field is trailing bytes to ignore. */
    s = gen_small();
    s->meta.stacks_truncated = 5;
    data = encode(s, &size);
    struct raw_section secs[6];
    unpack(data, secs);
    r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    ASSERT_EQ(r->meta.stacks_truncated, 0);
    ASSERT_EQ(r->meta.stacks_dropped, s->meta.stacks_dropped);
    ASSERT_EQ(r->nevents, s->nevents);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

/* gen_small() with two Python frames (ip 0, module "python"), as the
 * recorder writes them: where forward and backward are defined. */
static vt__snapshot_data *gen_small_with_first_lines(void)
{
    vt__snapshot_data *s = gen_small();
    ASSERT_GE(s->nframes, 3);
    for (size_t i = 1; i <= 2; i++) {
        s->frames[i].ip = s->frames[i].module_offset = 0;
        s->frames[i].first_line = 30 + (uint32_t)i;
    }
    return s;
}

/* The sections of an encoded file, however many its table lists. */
static size_t unpack_all(const unsigned char *d, struct raw_section *out, size_t max)
{
    size_t n = (size_t)vt__rd_le(d + 32, 4);
    ASSERT(n <= max);
    uint64_t toff = vt__rd_le(d + 24, 8);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *e = d + toff + 48 * i;
        out[i].id = (uint32_t)vt__rd_le(e, 4);
        uint64_t off = vt__rd_le(e + 8, 8), st = vt__rd_le(e + 16, 8);
        out[i].n = (size_t)vt__rd_le(e + 24, 8);
        out[i].count = vt__rd_le(e + 32, 8);
        out[i].raw = malloc(out[i].n + 1);
        if (vt__rd_le(e + 4, 4) & VT_SECTION_FLAG_ZSTD)
            ASSERT_EQ(ZSTD_decompress(out[i].raw, out[i].n, d + off, st), out[i].n);
        else
            memcpy(out[i].raw, d + off, out[i].n);
    }
    return n;
}

/* format.h, 1.4: FIRST_LINES holds each frame's first line; a writer leaves
 * it out when no frame has one (the file is then a 1.3 writer's, bar the
 * version). */
TEST(first_lines_round_trip_and_are_left_out_when_none)
{
    vt__snapshot_data *s = gen_small_with_first_lines();
    size_t size;
    unsigned char *data = encode(s, &size);
    ASSERT_EQ(vt__rd_le(data + 32, 4), 7);
    uint64_t off, len;
    find_section(data, VT_SECTION_FIRST_LINES, &off, &len);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT_EQ(r->frames[1].first_line, 31);
    ASSERT_EQ(r->frames[2].first_line, 32);
    ASSERT_EQ(r->frames[0].first_line, 0);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);

    s = gen_small();
    data = encode(s, &size);
    ASSERT_EQ(vt__rd_le(data + 32, 4), 6);
    r = decode_ok(data, size);
    for (size_t i = 0; i < r->nframes; i++)
        ASSERT_EQ(r->frames[i].first_line, 0);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);
}

TEST(framework_settings_round_trip_in_meta)
{
    vt__snapshot_data *s = gen_small();
    s->meta.flags |= VT_META_FRAMEWORK_SETTINGS;
    s->meta.framework_settings = s->meta.host;     /* any string of the table */
    size_t size;
    unsigned char *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    ASSERT(r->meta.flags & VT_META_FRAMEWORK_SETTINGS);
    ASSERT_STR_EQ(vt__snapshot_string(r, r->meta.framework_settings),
                  vt__snapshot_string(s, s->meta.host));
    vt__snapshot_free(r);
    free(data);
    vt__snapshot_free(s);
}

/* A 1.3 file (no FIRST_LINES) reads whole, every first line 0; and a
 * FIRST_LINES section in a file claiming 1.3 is ignored, as a 1.3 reader
 * ignores it (it never knew the section). */
TEST(format_1_3_file_reads_with_no_first_lines)
{
    vt__snapshot_data *s = gen_small_with_first_lines();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[7];
    size_t nsec = unpack_all(data, secs, 7);
    ASSERT_EQ(nsec, 7);
    ASSERT_EQ(secs[6].id, VT_SECTION_FIRST_LINES);
    for (size_t with = 6; with <= 7; with++) {
        vt__snapshot_data *r = decode_repacked(secs, with, 3);
        ASSERT_EQ(r->meta.format_version, 0x10003u);
        ASSERT_EQ(r->nframes, s->nframes);
        for (size_t i = 0; i < r->nframes; i++) {
            ASSERT_EQ(r->frames[i].first_line, 0);
            ASSERT_EQ(r->frames[i].line, s->frames[i].line);
            ASSERT_EQ(r->frames[i].function, s->frames[i].function);
        }
        ASSERT_EQ(r->nevents, s->nevents);
        ASSERT_EQ(r->nstack_nodes, s->nstack_nodes);
        vt__snapshot_free(r);
    }
    free_sections(secs, nsec);
    free(data);
    vt__snapshot_free(s);
}

TEST(bad_first_lines_are_rejected_naming_the_section)
{
    vt__snapshot_data *s = gen_small_with_first_lines();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[7];
    size_t nsec = unpack_all(data, secs, 7), n2;
    struct raw_section *fl = &secs[6];
    ASSERT_EQ(fl->id, VT_SECTION_FIRST_LINES);
    /* a count that is not the frames' */
    fl->count--;
    unsigned char *f = repack(secs, nsec, VT_FORMAT_MINOR, &n2);
    expect_reject(f, n2, "section 'first lines'");
    ASSERT_STR_CONTAINS(err, "first lines for");
    free(f);
    fl->count++;
    /* a first line beyond 2^31 - 1: the last frame's varint made 2^31 */
    ASSERT_EQ(fl->raw[fl->n - 1], 0);
    fl->raw = realloc(fl->raw, fl->n + 4);
    memcpy(fl->raw + fl->n - 1, "\x80\x80\x80\x80\x08", 5);
    fl->n += 4;
    f = repack(secs, nsec, VT_FORMAT_MINOR, &n2);
    expect_reject(f, n2, "section 'first lines'");
    ASSERT_STR_CONTAINS(err, "out of range");
    free(f);
    /* bytes left over */
    memcpy(fl->raw + fl->n - 5, "\x00\x01\x02\x03\x04", 5);
    f = repack(secs, nsec, VT_FORMAT_MINOR, &n2);
    expect_reject(f, n2, "after the last first line");
    free(f);
    free_sections(secs, nsec);
    free(data);
    /* the writer refuses what the reader would */
    s->frames[1].first_line = (uint32_t)INT32_MAX + 1;
    void *out;
    ASSERT(vt__snapfile_encode(s, &out, &size, err, sizeof err) < 0);
    ASSERT_STR_CONTAINS(err, "first line");
    vt__snapshot_free(s);
}

/* format.h: a kind belongs to the minor that introduced it; a 1.0 file
 * cannot hold TENSOR_NAME (a 1.0 reader would reject it as unknown in a file
 * of its own minor, and so does this one). */
TEST(tensor_name_in_a_file_claiming_format_1_0_is_rejected)
{
    vt__snapshot_data *s = gen_small_renamed();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[6];
    unpack(data, secs);
    size_t n2;
    unsigned char *f = repack(secs, 6, 0, &n2);
    expect_reject(f, n2, "section 'events'");
    ASSERT_STR_CONTAINS(err, "event 15 has kind 25, which format 1.1 introduced, in a file "
                             "of format 1.0");
    free(f);
    /* the same bytes as 1.1 are fine: only the claimed version changed (a
     * 1.1 file has no META flags and true peaks: those bytes are skipped) */
    vt__snapshot_data *r = decode_repacked(secs, 6, 1);
    ASSERT_EQ(r->meta.format_version, 0x10001u);
    r->meta.format_version = VT_FORMAT_VERSION;
    without_1_2_fields(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    /* and a 1.0 file without it is still read (as 1.0) */
    vt__snapshot_free(s);
    s = gen_small();
    free(data);
    data = encode(s, &size);
    free_sections(secs, 6);
    unpack(data, secs);
    r = decode_repacked(secs, 6, 0);
    ASSERT_EQ(r->meta.format_version, 0x10000u);
    r->meta.format_version = VT_FORMAT_VERSION;
    without_1_2_fields(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    free_sections(secs, 6);
    free(data);
    vt__snapshot_free(s);
}

TEST(writer_refuses_inconsistent_snapshots)
{
    vt__snapshot_data *s = gen_small();
    void *d;
    size_t n;
    s->events[3].stack = 1000;
    ASSERT(vt__snapfile_encode(s, &d, &n, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "event 3 names stack 1000");
    s->events[3].stack = 0;
    s->blocks[0].size -= 1;
    ASSERT(vt__snapfile_encode(s, &d, &n, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "does not tile");
    s->blocks[0].size += 1;
    s->events[4].seq = s->events[3].seq;
    ASSERT(vt__snapfile_encode(s, &d, &n, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "strictly increase");
    ASSERT(vt__snapfile_write(s, "/tmp/vt-no-such-dir/x.vtsnap", err, sizeof err) == -EINVAL);
    s->events[4].seq = s->events[3].seq + 1;
    ASSERT(vt__snapfile_write(s, "/tmp/vt-no-such-dir/x.vtsnap", err, sizeof err) == -ENOENT);
    ASSERT_STR_CONTAINS(err, "cannot create");
    vt__snapshot_free(s);
}

/* Every single-byte flip and every truncation of a small file is rejected
 * (everything is under a CRC) and never crashes; run under ASan/UBSan too. */
TEST(mutations_at_every_offset_are_rejected_without_crash)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    unsigned char *copy = malloc(size);
    uint64_t rnd = 12345;
    for (size_t off = 0; off < size; off++) {
        memcpy(copy, data, size);
        copy[off] ^= (unsigned char)(1u << (gen_rand(&rnd) % 8));
        vt__snapshot_data *r = NULL;
        int rc = vt__snapfile_decode(copy, size, "m", &r, err, sizeof err);
        ASSERT_MSG(rc < 0, "flip at %zu accepted", off);
        ASSERT(err[0] != 0);
        copy[off] = data[off];
        r = NULL;
        rc = vt__snapfile_decode(copy, off, "m", &r, err, sizeof err);
        ASSERT_MSG(rc < 0, "truncation to %zu accepted", off);
    }
    /* random multi-byte garbage after a valid header */
    for (int k = 0; k < 2000; k++) {
        memcpy(copy, data, size);
        for (int j = 0; j < 4; j++)
            copy[64 + gen_rand(&rnd) % (size - 64)] = (unsigned char)gen_rand(&rnd);
        vt__snapshot_data *r = NULL;
        if (vt__snapfile_decode(copy, size, "m", &r, err, sizeof err) == 0)
            vt__snapshot_free(r);
    }
    free(copy);
    free(data);
    vt__snapshot_free(s);
}

/* Structural mutation of decoded content under valid CRCs: the decoders'
 * own bounds and index checks, not the checksums, must stop these. */
TEST(mutations_inside_sections_never_crash)
{
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    uint64_t rnd = 777;
    int rejected = 0;
    for (int k = 0; k < 3000; k++) {
        struct raw_section secs[6];
        unpack(data, secs);
        struct raw_section *t = &secs[gen_rand(&rnd) % 6];
        int what = (int)(gen_rand(&rnd) % 4);
        if (t->n && what < 2)
            t->raw[gen_rand(&rnd) % t->n] ^= (unsigned char)(1 + gen_rand(&rnd) % 255);
        else if (t->n && what == 2)
            t->n = gen_rand(&rnd) % t->n;
        else
            t->count += (gen_rand(&rnd) % 5) - 2;
        size_t n2;
        unsigned char *f = repack(secs, 6, 0, &n2);
        vt__snapshot_data *r = NULL;
        if (vt__snapfile_decode(f, n2, "m", &r, err, sizeof err) == 0)
            vt__snapshot_free(r);
        else
            rejected++;
        free(f);
        free_sections(secs, 6);
    }
    ASSERT_GT(rejected, 1000);
    free(data);
    vt__snapshot_free(s);
}


/* ---- the event stream (event_stream.h) ---------------------------------- */

static void same_event(const vt_event *a, const vt_event *b, size_t i)
{
    ASSERT_MSG(a->seq == b->seq && a->time_ns == b->time_ns && a->stream == b->stream &&
               a->addr == b->addr && a->req_size == b->req_size && a->size == b->size &&
               a->aux == b->aux && a->aux2 == b->aux2 && a->thread == b->thread &&
               a->stack == b->stack && a->str == b->str && a->kind == b->kind &&
               a->device == b->device, "event %zu differs", i);
}

/* The stream of `path` in chunks of `chunk` bytes gives r's events, twice
 * (rewound), and every other section as the reader does. */
static void stream_matches(const char *path, size_t chunk, const vt__snapshot_data *r)
{
    vt__snapshot_data *s;
    vt_event_stream *es;
    ASSERT_MSG(vt__snapfile_open_stream(path, chunk, &s, &es, err, sizeof err) == 0, "%s", err);
    ASSERT(s->events == NULL && s->nevents == 0);
    ASSERT_EQ(vt__event_stream_count(es), r->nevents);
    ASSERT_EQ(s->nstrings, r->nstrings);
    ASSERT_EQ(s->nframes, r->nframes);
    ASSERT_EQ(s->nstack_nodes, r->nstack_nodes);
    ASSERT_EQ(s->nblocks, r->nblocks);
    ASSERT_EQ(s->nsegments, r->nsegments);
    ASSERT_EQ(s->meta.events_recorded, r->meta.events_recorded);
    for (int pass = 0; pass < 2; pass++) {
        vt_event e;
        size_t i = 0;
        int rc;
        while ((rc = vt__event_stream_next(es, &e)) == 1) {
            ASSERT(i < r->nevents);
            same_event(&e, &r->events[i], i);
            i++;
        }
        ASSERT_MSG(rc == 0, "%s", err);
        ASSERT_EQ(i, r->nevents);
        ASSERT_EQ(vt__event_stream_next(es, &e), 0);
        ASSERT(vt__event_stream_rewind(es) == 0);
    }
    vt__event_stream_close(es);
    vt__snapshot_free(s);
}

TEST(event_stream_gives_the_readers_events_in_chunks_of_any_size)
{
    char dir[64], path[128];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.vtsnap", dir);
    /* compressed: the writer's own file */
    vt__snapshot_data *s = gen_training(200000, 5);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_data *r;
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    static const size_t chunks[] = { 0, 1, 16, 17, 101, 4096 };  /* 1: the smallest, 16 */
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++)
        stream_matches(path, chunks[k], r);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
    /* uncompressed sections, and a later minor's extra columns and section */
    s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    struct raw_section secs[7];
    unpack(data, secs);
    secs[6] = (struct raw_section){ 99, (unsigned char *)strdup("future stuff"), 12, 1 };
    size_t n;
    unsigned char *f = repack(secs, 7, VT_FORMAT_MINOR + 1, &n);
    int fd = open(path, O_WRONLY | O_TRUNC, 0600);
    ASSERT(fd >= 0 && write(fd, f, n) == (ssize_t)n);
    close(fd);
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    ASSERT_GT(r->nevents, 0);
    stream_matches(path, 16, r);
    stream_matches(path, 0, r);
    vt__snapshot_free(r);
    free(f);
    free_sections(secs, 7);
    free(data);
    vt__snapshot_free(s);
    unlink(path);
    rmdir(dir);
}

/* The stream's verdict on `path`: 0 accepted, else its message in msg. */
static int stream_verdict(const char *path, size_t chunk, char *msg, size_t len)
{
    vt__snapshot_data *s;
    vt_event_stream *es;
    int rc = vt__snapfile_open_stream(path, chunk, &s, &es, msg, len);
    if (rc)
        return rc;
    vt_event e;
    while ((rc = vt__event_stream_next(es, &e)) == 1)
        ;
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

TEST(event_stream_rejects_what_the_reader_rejects_with_its_message)
{
    char dir[64], path[128], msg[1024];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.vtsnap", dir);
    vt__snapshot_data *s = gen_small();
    size_t size;
    unsigned char *data = encode(s, &size);
    uint64_t rnd = 4242;
    int rejected = 0;
    for (int k = 0; k < 600; k++) {
        struct raw_section secs[6];
        unpack(data, secs);
        /* mostly the events: the section the stream decodes its own way */
        struct raw_section *t = k % 3 ? by_id(secs, VT_SECTION_EVENTS)
                                      : &secs[gen_rand(&rnd) % 6];
        int what = (int)(gen_rand(&rnd) % 4);
        if (t->n && what < 2)
            t->raw[gen_rand(&rnd) % t->n] ^= (unsigned char)(1 + gen_rand(&rnd) % 255);
        else if (t->n && what == 2)
            t->n = gen_rand(&rnd) % t->n;
        else
            t->count += (gen_rand(&rnd) % 5) - 2;
        size_t n;
        unsigned char *f = repack(secs, 6, VT_FORMAT_MINOR, &n);
        if (k % 5 == 4)
            n = gen_rand(&rnd) % n;   /* and files cut short */
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ASSERT(fd >= 0 && write(fd, f, n) == (ssize_t)n);
        close(fd);
        vt__snapshot_data *r = NULL;
        int want = vt__snapfile_read(path, &r, err, sizeof err);
        vt__snapshot_free(r);
        int got = stream_verdict(path, 1 + gen_rand(&rnd) % 40, msg, sizeof msg);
        ASSERT_MSG((want == 0) == (got == 0), "mutation %d: reader %d (%s), stream %d (%s)", k,
                   want, want ? err : "", got, got ? msg : "");
        if (want) {
            ASSERT_STR_EQ(msg, err);
            rejected++;
        }
        free(f);
        free_sections(secs, 6);
    }
    ASSERT_GT(rejected, 200);
    /* a compressed section damaged inside its frame, checksum made right */
    unsigned char *d2 = malloc(size);
    for (int k = 0; k < 200; k++) {
        memcpy(d2, data, size);
        uint64_t off, len;
        find_section(d2, VT_SECTION_EVENTS, &off, &len);
        d2[off + gen_rand(&rnd) % len] ^= (unsigned char)(1 + gen_rand(&rnd) % 255);
        uint64_t toff = vt__rd_le(d2 + 24, 8);
        for (uint32_t i = 0; i < 6; i++) {
            unsigned char *e = d2 + toff + 48 * i;
            if (vt__rd_le(e, 4) != VT_SECTION_EVENTS)
                continue;
            uint32_t c = vt__crc32c(0, d2 + off, len);
            for (int b = 0; b < 4; b++)
                e[40 + b] = (unsigned char)(c >> (8 * b));
        }
        uint32_t tc = vt__crc32c(0, d2 + toff, 6 * 48);
        for (int b = 0; b < 4; b++)
            d2[40 + b] = (unsigned char)(tc >> (8 * b));
        uint32_t hc = vt__crc32c(0, d2, 60);
        for (int b = 0; b < 4; b++)
            d2[60 + b] = (unsigned char)(hc >> (8 * b));
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ASSERT(fd >= 0 && write(fd, d2, size) == (ssize_t)size);
        close(fd);
        vt__snapshot_data *r = NULL;
        int want = vt__snapfile_read(path, &r, err, sizeof err);
        vt__snapshot_free(r);
        int got = stream_verdict(path, 1 + gen_rand(&rnd) % 40, msg, sizeof msg);
        /* zstd may find the damage at another point of the frame: both
         * reject, each naming the events section */
        ASSERT_MSG((want == 0) == (got == 0), "frame damage %d: reader %d (%s), stream %d (%s)",
                   k, want, want ? err : "", got, got ? msg : "");
        if (got)
            ASSERT_STR_CONTAINS(msg, "section 'events'");
    }
    free(d2);
    free(data);
    vt__snapshot_free(s);
    unlink(path);
    rmdir(dir);
}

/* ---- size and speed ----------------------------------------------------- */

TEST(one_million_training_events_round_trip_small)
{
    const size_t N = 1000000;
    vt__snapshot_data *s = gen_training(N, 99);
    char dir[64], path[128];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.vtsnap", dir);
    double t0 = now_s();
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    double t1 = now_s();
    vt__snapshot_data *r;
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    double t2 = now_s();
    struct stat st;
    ASSERT(stat(path, &st) == 0);
    double bpe = (double)st.st_size / (double)s->nevents;
    printf("%zu events: %lld bytes (%.2f bytes/event), write %.3f s, read %.3f s\n",
           s->nevents, (long long)st.st_size, bpe, t1 - t0, t2 - t1);
    ASSERT_EQ(r->nevents, s->nevents);
    for (size_t i = 0; i < N; i += 997)
        ASSERT(r->events[i].addr == s->events[i].addr && r->events[i].time_ns == s->events[i].time_ns);
    ASSERT_MSG(bpe <= 8.0, "%.2f bytes per event", bpe);
    /* speed is measured side by side in tests/bench/bench_trace.c, not here */
    unlink(path);
    rmdir(dir);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

TEST_MAIN()
