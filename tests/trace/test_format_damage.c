/*
 * tests/trace/test_format_damage.c - damaged .vtsnap files: every kind of
 * damage (flipped bytes, truncation, hostile sizes, decompression bombs,
 * broken indexes, random mutations) rejected with one line naming the
 * section, never a crash. Long because a file can be damaged in many ways:
 * one short test each.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/resource.h>

#include "harness.h"
#include "test_format_gen.h"
#include "format_test_util.h"

/* ---- damage ------------------------------------------------------------- */

TEST(flipped_byte_in_every_section_is_rejected_naming_it)
{
    size_t size;
    unsigned char *data = encode_small(&size);
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
}

TEST(truncated_file_is_rejected)
{
    size_t size;
    unsigned char *data = encode_small(&size);
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
}

TEST(future_major_version_is_rejected)
{
    size_t size;
    unsigned char *data = encode_small(&size);
    data[8] = 2;
    data[9] = 0;
    expect_reject(data, size, "written by a newer vramtrace (format 2.x); this reader "
                              "understands 1.x");
    free(data);
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

/* A reader asked for no message (err NULL, errlen 0: errbuf.h's
 * convention) still gets the error code for a file that is not there, in a
 * folder that is (where the hint of a run's files beside it reads the
 * message it would append to: it read a NULL one). */
TEST(missing_file_without_an_error_buffer_is_enoent)
{
    vt__snapshot_data *r = NULL;
    ASSERT(vt__snapfile_read("/tmp/vt-no-such-snapshot-here.vtsnap", &r, NULL, 0) == -ENOENT);
    ASSERT(r == NULL);
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

TEST(flipped_major_version_byte_reads_as_corrupt)
{
    size_t size;
    unsigned char *data = encode_small(&size);
    data[9] ^= 0x10;                      /* major 1 -> 4097 */
    char want[128];
    snprintf(want, sizeof want, "format 4097.%d with a header that does not check out: the file "
                                "is corrupt", VT_FORMAT_MINOR);
    expect_reject(data, size, want);
    ASSERT(strstr(err, "newer") == NULL);
    /* a genuine header of a later major (checksum right) is "newer" */
    data[9] = 0;
    data[8] = 3;
    store_le32(data + 60, vt__crc32c(0, data, 60));
    expect_reject(data, size, "written by a newer vramtrace (format 3.x)");
    free(data);
}

TEST(over_long_varint_is_named_as_such)
{
    size_t size;
    unsigned char *data = encode_small(&size);
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
    expect_repacked_reject(secs, 6, VT_FORMAT_MINOR, "section 'strings'");
    ASSERT_STR_CONTAINS(err, "string 1: its length has a varint longer than 10 bytes "
                             "(malformed)");
    ASSERT(strstr(err, "length 0") == NULL);
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
    expect_repacked_reject(secs, 6, VT_FORMAT_MINOR, "section 'events'");
    ASSERT_STR_CONTAINS(err, "has a varint longer than 10 bytes (malformed)");
    free_sections(secs, 6);
    free(data);
}

/* Damage inside a section whose checksum is right: index checks catch it. */
TEST(bad_indexes_are_rejected_naming_section)
{
    size_t size;
    unsigned char *data = encode_small(&size);
    struct raw_section secs[6];

    /* a stack node whose parent comes after it: first node encodes i - parent
     * = 1; make it 0 */
    unpack(data, secs);
    by_id(secs, VT_SECTION_STACKS)->raw[0] = 0;
    expect_repacked_reject(secs, 6, 0, "section 'stacks'");
    ASSERT_STR_CONTAINS(err, "does not precede it");
    free_sections(secs, 6);

    /* an event of unknown kind (kind column starts after n, ncols, 15 lengths) */
    unpack(data, secs);
    struct raw_section *ev = by_id(secs, VT_SECTION_EVENTS);
    vt__cur c = vt__cur_make(ev->raw, ev->n);
    for (int i = 0; i < 2 + VT_COL_COUNT; i++)
        vt__get_varint(&c);
    ev->raw[vt__cur_off(&c) + 2] = 14; /* reserved kind */
    expect_repacked_reject(secs, 6, 0, "section 'events'");
    ASSERT_STR_CONTAINS(err, "unknown kind 14");
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
    expect_repacked_reject(secs, 6, 0, "section 'state'");
    ASSERT_STR_CONTAINS(err, "cover");
    free_sections(secs, 6);

    /* a frame naming a string that does not exist: count strings down by
     * removing the last ones from the table's count */
    unpack(data, secs);
    by_id(secs, VT_SECTION_STRINGS)->count = 3;
    expect_repacked_reject(secs, 6, 0, "section 'strings'");
    free_sections(secs, 6);

    free(data);
}

/* Every single-byte flip and every truncation of a small file is rejected
 * (everything is under a CRC) and never crashes; run under ASan/UBSan too. */
TEST(mutations_at_every_offset_are_rejected_without_crash)
{
    size_t size;
    unsigned char *data = encode_small(&size);
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
}

/* Structural mutation of decoded content under valid CRCs: the decoders'
 * own bounds and index checks, not the checksums, must stop these. */
TEST(mutations_inside_sections_never_crash)
{
    size_t size;
    unsigned char *data = encode_small(&size);
    uint64_t rnd = 777;
    int rejected = 0;
    for (int k = 0; k < 3000; k++) {
        size_t n2;
        unsigned char *f = repack_mutated(data, 0, 0, &rnd, &n2);
        vt__snapshot_data *r = NULL;
        if (vt__snapfile_decode(f, n2, "m", &r, err, sizeof err) == 0)
            vt__snapshot_free(r);
        else
            rejected++;
        free(f);
    }
    ASSERT_GT(rejected, 1000);
    free(data);
}

TEST_MAIN()
