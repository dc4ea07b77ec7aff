/*
 * tests/trace/test_format.c - the .vtsnap writer and reader: round trips of
 * every field, what the writer refuses or stores plainly, and the size
 * target on a training-like loop. Damaged files are test_format_damage.c's,
 * older and newer versions test_format_versions.c's.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>

#include "harness.h"
#include "test_format_gen.h"
#include "format_test_util.h"
#include "spill.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    const vt__frame *fr[8];
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
    vt__snapshot_data *r = round_trip(s);
    ASSERT_EQ(r->nstrings, 1);       /* string 0 always exists */
    ASSERT_EQ(r->nstack_nodes, 1);   /* so does the root */
    ASSERT_EQ(r->nevents, 0);
    ASSERT_STR_EQ(vt__snapshot_string(r, 0), "");
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

TEST(round_trip_training_loop_with_extreme_values)
{
    vt__snapshot_data *s = gen_training(20000, 7);
    /* edge values every encoder must survive */
    vt__event *e = &s->events[5];
    e->addr = UINT64_MAX; e->size = UINT64_MAX; e->req_size = 0; e->time_ns = 0;
    e->stream = UINT64_MAX - 1; e->aux = UINT64_MAX; e->aux2 = 1ull << 63;
    e->thread = UINT32_MAX; e->device = -1;
    s->events[6].time_ns = UINT64_MAX;
    s->events[s->nevents - 1].seq = UINT64_MAX;
    vt__snapshot_data *r = round_trip(s);
    same_snapshot(s, r);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* 400k identical alloc/free pairs (800000 events) of 512 bytes at one
 * address, a clock of constant steps: they compress far beyond the
 * format's ratio, so a writer must store their section plainly. */
static vt__snapshot_data *gen_too_compressible(void)
{
    struct snap_builder g = { .s = calloc(1, sizeof *g.s) };
    gen_str(&g, "");
    gen_node(&g, 0, 0);
    for (uint64_t i = 0; i < 800000; i++) {
        vt__event *e = gen_ev(&g, (i & 1) ? VT_EV_FREE_REQUESTED : VT_EV_ALLOC, i + 1, i * 1000);
        e->addr = 0x7000000;
        e->size = e->req_size = 512;
    }
    return g.s;
}

TEST(writer_stores_a_section_that_would_inflate_too_much_uncompressed)
{
    /* the writer must store them plainly, so that its own reader accepts
     * the file */
    vt__snapshot_data *s = gen_too_compressible();
    size_t size;
    unsigned char *data = encode(s, &size);
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
    s->events[0].aux2 = s->nstack_nodes;   /* a free naming a stack it does not have */
    ASSERT(vt__snapfile_encode(s, &d, &n, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "names allocation stack");
    s->events[0].aux2 = 0;
    s->events[4].seq = s->events[3].seq;
    ASSERT(vt__snapfile_encode(s, &d, &n, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "strictly increase");
    ASSERT(vt__snapfile_write(s, "/tmp/vt-no-such-dir/x.vtsnap", err, sizeof err) == -EINVAL);
    s->events[4].seq = s->events[3].seq + 1;
    ASSERT(vt__snapfile_write(s, "/tmp/vt-no-such-dir/x.vtsnap", err, sizeof err) == -ENOENT);
    ASSERT_STR_CONTAINS(err, "cannot create");
    vt__snapshot_free(s);
}

/* s written by vt__snapwriter (its events given one at a time) into an
 * unlinked temporary file, read back; *events_flags: the EVENTS section's
 * table flags. */
static vt__snapshot_data *written_one_by_one(const vt__snapshot_data *s, unsigned flags,
                                             uint32_t *events_flags)
{
    vt__snapshot_data head = *s;
    head.events = NULL;
    head.nevents = 0;
    int fd = vt__tmpfile(err, sizeof err);
    ASSERT_MSG(fd >= 0, "%s", err);
    vt__snapwriter *w = NULL;
    ASSERT_MSG(vt__snapwriter_open(&head, fd, flags, &w, err, sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < s->nevents; i++)
        ASSERT_MSG(vt__snapwriter_event(w, &s->events[i]) == 0, "%s", err);
    ASSERT_MSG(vt__snapwriter_finish(w) == 0, "%s", err);
    vt__snapwriter_free(w);
    off_t size = lseek(fd, 0, SEEK_END);
    unsigned char *data = malloc((size_t)size);
    ASSERT(data && pread(fd, data, (size_t)size, 0) == size);
    close(fd);
    const unsigned char *e = data + 64;
    while (vt__rd_le(e, 4) != VT_SECTION_EVENTS)
        e += 48;
    *events_flags = (uint32_t)vt__rd_le(e + 4, 4);
    vt__snapshot_data *r = decode_ok(data, (size_t)size);
    free(data);
    return r;
}

TEST(writer_of_events_one_by_one_writes_what_the_whole_writer_does)
{
    /* every field, extreme values, many events (columns spilled to the
     * temporary file in pieces), none; and a section that would inflate
     * too much is stored plainly, as the whole writer stores it; each
     * also stored plainly when asked */
    vt__snapshot_data *small = gen_small(), *big = gen_training(300000, 7);
    vt__snapshot_data *none = calloc(1, sizeof *none);
    vt__event *e = &big->events[5];
    e->addr = UINT64_MAX; e->size = UINT64_MAX; e->req_size = 0; e->time_ns = 0;
    e->stream = UINT64_MAX - 1; e->aux = UINT64_MAX; e->aux2 = 1ull << 63;
    e->thread = UINT32_MAX; e->device = -1;
    vt__snapshot_data *flat = gen_too_compressible();
    const vt__snapshot_data *all[] = { small, big, none, flat };
    for (size_t k = 0; k < 2 * sizeof all / sizeof all[0]; k++) {
        const vt__snapshot_data *s = all[k / 2];
        unsigned plain = k % 2 ? VT_SNAPWRITER_PLAIN : 0;   /* asked to store plainly */
        uint32_t flags;
        vt__snapshot_data *r = written_one_by_one(s, plain, &flags);
        vt__snapshot_data *whole = round_trip(s);
        same_snapshot(whole, r);
        vt__snapshot_free(whole);
        ASSERT_EQ(flags & VT_SECTION_FLAG_ZSTD, s == flat || plain ? 0u : VT_SECTION_FLAG_ZSTD);
        vt__snapshot_free(r);
    }
    /* what the whole writer refuses, it refuses with the same words */
    int fd = vt__tmpfile(err, sizeof err);
    vt__snapwriter *w = NULL;
    vt__snapshot_data head = *small;
    head.events = NULL;
    head.nevents = 0;
    ASSERT_OK(vt__snapwriter_open(&head, fd, 0, &w, err, sizeof err));
    vt__event bad = small->events[3];
    bad.stack = 1000;
    ASSERT(vt__snapwriter_event(w, &bad) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "event 0 names stack 1000");
    ASSERT_OK(vt__snapwriter_event(w, &small->events[3]));
    ASSERT(vt__snapwriter_event(w, &small->events[3]) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "strictly increase");
    vt__snapwriter_free(w);
    close(fd);
    head.blocks[0].size -= 1;
    ASSERT(vt__snapwriter_open(&head, fd, 0, &w, err, sizeof err) == -EINVAL);
    ASSERT_STR_CONTAINS(err, "does not tile");
    head.blocks[0].size += 1;
    vt__snapshot_free(small);
    vt__snapshot_free(big);
    vt__snapshot_free(none);
    vt__snapshot_free(flat);
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
