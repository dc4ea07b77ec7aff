/*
 * tests/trace/test_event_stream.c - the events of a .vtsnap read as a
 * stream (trace/snap/event_stream.c), in chunks of any size: the same
 * events as the whole reader, and the same verdict and message on damaged
 * files.
 */
#include <fcntl.h>
#include <unistd.h>

#include "harness.h"
#include "event_stream.h"
#include "test_format_gen.h"
#include "format_test_util.h"

/* ---- the event stream (event_stream.h) ---------------------------------- */

static void same_event(const vt__event *a, const vt__event *b, size_t i)
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
    vt__event_stream *es;
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
        vt__event e;
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
    size_t size;
    unsigned char *data = encode_small(&size);
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
    unlink(path);
    rmdir(dir);
}

/* The stream's verdict on `path`: 0 accepted, else its message in msg. */
static int stream_verdict(const char *path, size_t chunk, char *msg, size_t len)
{
    vt__snapshot_data *s;
    vt__event_stream *es;
    int rc = vt__snapfile_open_stream(path, chunk, &s, &es, msg, len);
    if (rc)
        return rc;
    vt__event e;
    while ((rc = vt__event_stream_next(es, &e)) == 1)
        ;
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

/* n bytes at f written to path; the reader's verdict on it (its message in
 * err) in *want, the stream's (its message in msg) in *got. */
static void verdicts(const char *path, const void *f, size_t n, size_t chunk, char *msg,
                     size_t len, int *want, int *got)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT(fd >= 0 && write(fd, f, n) == (ssize_t)n);
    close(fd);
    vt__snapshot_data *r = NULL;
    *want = vt__snapfile_read(path, &r, err, sizeof err);
    vt__snapshot_free(r);
    *got = stream_verdict(path, chunk, msg, len);
}

TEST(event_stream_rejects_what_the_reader_rejects_with_its_message)
{
    char dir[64], path[128], msg[1024];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.vtsnap", dir);
    size_t size;
    unsigned char *data = encode_small(&size);
    uint64_t rnd = 4242;
    int rejected = 0;
    for (int k = 0; k < 600; k++) {
        /* mostly the events: the section the stream decodes its own way */
        size_t n;
        unsigned char *f = repack_mutated(data, k % 3 ? VT_SECTION_EVENTS : 0, VT_FORMAT_MINOR,
                                          &rnd, &n);
        if (k % 5 == 4)
            n = gen_rand(&rnd) % n;   /* and files cut short */
        int want, got;
        verdicts(path, f, n, 1 + gen_rand(&rnd) % 40, msg, sizeof msg, &want, &got);
        ASSERT_MSG((want == 0) == (got == 0), "mutation %d: reader %d (%s), stream %d (%s)", k,
                   want, want ? err : "", got, got ? msg : "");
        if (want) {
            ASSERT_STR_EQ(msg, err);
            rejected++;
        }
        free(f);
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
            store_le32(e + 40, vt__crc32c(0, d2 + off, len));
        }
        store_le32(d2 + 40, vt__crc32c(0, d2 + toff, 6 * 48));
        store_le32(d2 + 60, vt__crc32c(0, d2, 60));
        int want, got;
        verdicts(path, d2, size, 1 + gen_rand(&rnd) % 40, msg, sizeof msg, &want, &got);
        /* zstd may find the damage at another point of the frame: both
         * reject, each naming the events section */
        ASSERT_MSG((want == 0) == (got == 0), "frame damage %d: reader %d (%s), stream %d (%s)",
                   k, want, want ? err : "", got, got ? msg : "");
        if (got)
            ASSERT_STR_CONTAINS(msg, "section 'events'");
    }
    free(d2);
    free(data);
    unlink(path);
    rmdir(dir);
}

TEST_MAIN()
