/* tests/trace/format_test_util.h - what the .vtsnap tests (test_format*.c,
 * test_event_stream.c) share: a snapshot encoded and decoded in memory,
 * compared field by field, a file expected to be rejected with a message,
 * and a file's sections unpacked and repacked raw (uncompressed, any minor
 * version) or with one section replaced, to craft what the writer would
 * refuse. */
#ifndef VT_TESTS_TRACE_FORMAT_TEST_UTIL_H
#define VT_TESTS_TRACE_FORMAT_TEST_UTIL_H

#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "harness.h"
#include "checksum.h"
#include "snapfile.h"
#include "snapfile_encode.h"
#include "buf.h"
#include "snap_compare.h"
#include "test_format_gen.h"

/* The last error message of the writer or reader, read by the assertions. */
static char err[1024];

static inline void tmpdir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/vt-test-format-XXXXXX");
    ASSERT(mkdtemp(out) != NULL);
}

static inline void *encode(const vt__snapshot_data *s, size_t *size)
{
    void *data;
    int rc = vt__snapfile_encode(s, &data, size, err, sizeof err);
    ASSERT_MSG(rc == 0, "encode failed: %s", err);
    return data;
}

/* gen_small() encoded: for the tests that only need its bytes. */
static inline unsigned char *encode_small(size_t *size)
{
    vt__snapshot_data *s = gen_small();
    unsigned char *data = encode(s, size);
    vt__snapshot_free(s);
    return data;
}

/* The snapshot read back from n bytes at f, which must be accepted. */
static inline vt__snapshot_data *decode_ok(const void *f, size_t n)
{
    vt__snapshot_data *r = NULL;
    ASSERT_MSG(vt__snapfile_decode(f, n, "decoded", &r, err, sizeof err) == 0, "%s", err);
    return r;
}

/* s encoded and decoded again, which must be accepted. */
static inline vt__snapshot_data *round_trip(const vt__snapshot_data *s)
{
    size_t size;
    void *data = encode(s, &size);
    vt__snapshot_data *r = decode_ok(data, size);
    free(data);
    return r;
}

/* ---- field-by-field comparison ------------------------------------------ */

static inline void same_snapshot(const vt__snapshot_data *a, const vt__snapshot_data *b)
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

/* v written little-endian over the 4 bytes at p: a checksum made right. */
static inline void store_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset and size of the stored bytes of section `id` in an encoded file. */
static inline void find_section(const unsigned char *d, uint32_t id, uint64_t *off, uint64_t *len)
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

static inline void expect_reject(const void *d, size_t n, const char *needle)
{
    vt__snapshot_data *r = NULL;
    int rc = vt__snapfile_decode(d, n, "bad.vtsnap", &r, err, sizeof err);
    ASSERT_MSG(rc < 0, "accepted a damaged file (expected: %s)", needle);
    ASSERT(r == NULL);
    ASSERT_STR_CONTAINS(err, "bad.vtsnap: ");
    ASSERT_STR_CONTAINS(err, needle);
    ASSERT(strchr(err, '\n') == NULL);
}

/* Rebuild a file from (id, flags, raw bytes) sections, all stored
 * uncompressed, with a chosen minor version: lets tests craft content that
 * the writer would refuse. */
struct raw_section { uint32_t id; unsigned char *raw; size_t n; uint64_t count; };

/* The sections of an encoded file, however many its table lists. */
static inline size_t unpack_all(const unsigned char *d, struct raw_section *out, size_t max)
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

/* The six sections of a file written without FIRST_LINES (gen_small()'s). */
static inline void unpack(const unsigned char *d, struct raw_section out[6])
{
    ASSERT_EQ(unpack_all(d, out, 6), 6);
}

/* s's file (six sections, as gen_small()'s) unpacked into secs. */
static inline void unpack_snapshot(const vt__snapshot_data *s, struct raw_section secs[6])
{
    size_t size;
    unsigned char *data = encode(s, &size);
    unpack(data, secs);
    free(data);
}

static inline struct raw_section *by_id(struct raw_section *secs, uint32_t id)
{
    for (int i = 0; i < 6; i++)
        if (secs[i].id == id)
            return &secs[i];
    HARNESS_FAIL("no section %u", id);
}

/* A file of header, section table `tab` and sections `body` (`end`: the
 * offset past the last section), every checksum valid; tab and body freed. */
static inline unsigned char *assemble(unsigned major, unsigned minor, uint64_t end,
                                      uint32_t nsec, vt__buf *tab, vt__buf *body, size_t *size)
{
    vt__buf h = { 0 };
    vt__put_bytes(&h, VT_FILE_MAGIC, 8);
    vt__put_le(&h, major, 2);
    vt__put_le(&h, minor, 2);
    vt__put_le(&h, 64, 4);
    vt__put_le(&h, end, 8);
    vt__put_le(&h, 64, 8);
    vt__put_le(&h, nsec, 4);
    vt__put_le(&h, 48, 4);
    vt__put_le(&h, vt__crc32c(0, tab->p, tab->n), 4);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, 0, 8);
    vt__put_le(&h, vt__crc32c(0, h.p, h.n), 4);
    vt__put_bytes(&h, tab->p, tab->n);
    vt__put_bytes(&h, body->p, body->n);
    free(tab->p);
    free(body->p);
    *size = h.n;
    return h.p;
}

static inline unsigned char *repack(struct raw_section *secs, size_t nsec, unsigned minor,
                                    size_t *size)
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
    return assemble(1, minor, off, nsec, &tab, &body, size);
}

/* gen_small() with section `id` replaced by `stored` (zstd-flagged,
 * declaring `raw` decoded bytes and `count` items); every checksum valid. */
static inline unsigned char *file_with_section(uint32_t id, const unsigned char *stored,
                                               size_t nstored, uint64_t raw, uint64_t count,
                                               size_t *size)
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
    free(data);
    vt__snapshot_free(s);
    return assemble(VT_FORMAT_MAJOR, VT_FORMAT_MINOR, off, 6, &tab, &body, size);
}

static inline void free_sections(struct raw_section *secs, size_t nsec)
{
    for (size_t i = 0; i < nsec; i++)
        free(secs[i].raw);
}

/* secs repacked as 1.minor, which must be rejected naming `needle`; the
 * whole message stays in err for the caller's further assertions. */
static inline void expect_repacked_reject(struct raw_section *secs, size_t nsec, unsigned minor,
                                          const char *needle)
{
    size_t n;
    unsigned char *f = repack(secs, nsec, minor, &n);
    expect_reject(f, n, needle);
    free(f);
}

/* One random structural change to t, under the checksums repack will make
 * valid: a byte flipped, the section cut short, or its count moved. */
static inline void mutate_section(struct raw_section *t, uint64_t *rnd)
{
    int what = (int)(gen_rand(rnd) % 4);
    if (t->n && what < 2)
        t->raw[gen_rand(rnd) % t->n] ^= (unsigned char)(1 + gen_rand(rnd) % 255);
    else if (t->n && what == 2)
        t->n = gen_rand(rnd) % t->n;
    else
        t->count += (gen_rand(rnd) % 5) - 2;
}

/* gen_small()'s encoded `data` with one section changed by mutate_section()
 * (section `id`, or 0: one at random), repacked as 1.minor. */
static inline unsigned char *repack_mutated(const unsigned char *data, uint32_t id,
                                            unsigned minor, uint64_t *rnd, size_t *size)
{
    struct raw_section secs[6];
    unpack(data, secs);
    mutate_section(id ? by_id(secs, id) : &secs[gen_rand(rnd) % 6], rnd);
    unsigned char *f = repack(secs, 6, minor, size);
    free_sections(secs, 6);
    return f;
}

/* The snapshot read back from secs repacked as 1.minor, which must be accepted. */
static inline vt__snapshot_data *decode_repacked(struct raw_section *secs, size_t nsec,
                                                 unsigned minor)
{
    size_t n;
    unsigned char *f = repack(secs, nsec, minor, &n);
    vt__snapshot_data *r = decode_ok(f, n);
    free(f);
    return r;
}

#endif /* VT_TESTS_TRACE_FORMAT_TEST_UTIL_H */
