/*
 * tests/interop/test_compare_stream.c - `vramtrace compare` reads its ranks
 * one after another as streams of their events (vt__compare_read), and its
 * report is the one the whole snapshots and their whole timelines give, byte
 * for byte, text and JSON: on random event streams as several ranks, on
 * training loops where one rank leaks a little every step, read in chunks
 * small enough to end inside events, and on the shapes the viz tests
 * render, side by side as ranks (tests/viz/gen_snapshot, $VT_GEN). And
 * how a site is named (its source line, as compare and oom print it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "compare.h"
#include "event_stream.h"
#include "pytorch.h"
#include "report_util.h"
#include "snapfile.h"
#include "streamed_vs_whole.h"
#include "test_format_gen.h"
#include "timeline.h"

static char err[1024];

/* A rank from its whole snapshot and whole timeline: every mark, then every
 * lifetime, told to its series. */
static void add_whole(vt__compare *c, const char *path, bool json)
{
    vt__snapshot_data *s;
    ASSERT_MSG(vt__snapshot_load(path, &s, err, sizeof err) == 0, "%s: %s", path, err);
    if (!json)
        ASSERT(vt__report_text_names(s) == 0);
    vt__timeline *tl;
    ASSERT_MSG(vt__timeline_build(s, &tl, err, sizeof err) == 0, "%s", err);
    vt__growth_series *gs;
    ASSERT(vt__growth_series_open(&gs) == 0);
    for (size_t k = 0; k < tl->nmarks; k++)
        vt__growth_series_mark(gs, &tl->marks[k]);
    for (size_t k = 0; k < tl->nlifetimes; k++)
        vt__growth_series_lifetime(gs, s, &tl->lifetimes[k]);
    ASSERT(vt__growth_series_finish(gs, s) == 0);
    ASSERT(vt__compare_add(c, path, s, tl, gs) == 0);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
}

/* A rank read as a stream in chunks of `chunk` bytes (0: the default). */
static void add_streamed(vt__compare *c, const char *path, size_t chunk)
{
    vt__snapshot_data *s;
    vt__event_stream *es;
    char serr[1024];
    svw_open_stream(path, chunk, &s, &es, serr, sizeof serr);
    ASSERT_MSG(vt__compare_add_stream(c, path, s, es, err, sizeof err) == 0, "%s: %s %s", path,
               err, serr);
    vt__event_stream_close(es);
    vt__snapshot_free(s);
}

static char *report(vt__compare *c, size_t top, size_t *n)
{
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    ASSERT(f);
    ASSERT(vt__compare_print(c, f, top) == 0);
    fclose(f);
    vt__compare_free(c);
    return p;
}

/* The ranks files[0..n) both ways, text and JSON; the text report returned
 * (the caller's to free) for a test to read. */
static char *same_both_ways(char *const *files, size_t n, size_t chunk, size_t top,
                            const char *what)
{
    char *text = NULL;
    for (int json = 0; json < 2; json++) {
        vt__compare *cw, *cs;
        ASSERT(vt__compare_open(n, json, &cw) == 0);
        ASSERT(vt__compare_open(n, json, &cs) == 0);
        for (size_t i = 0; i < n; i++) {
            add_whole(cw, files[i], json);
            add_streamed(cs, files[i], chunk);
        }
        size_t nw, ns;
        char *w = report(cw, top, &nw), *s = report(cs, top, &ns);
        char desc[160];
        snprintf(desc, sizeof desc, "%s (%s)", what, json ? "json" : "text");
        svw_same_bytes(w, nw, s, ns, desc, "report");
        free(w);
        if (json)
            free(s);
        else
            text = s;
    }
    return text;
}

static void write_snapshot(const vt__snapshot_data *s, const char *dir, size_t i, char **path)
{
    *path = malloc(256);
    ASSERT(*path);
    snprintf(*path, 256, "%s/rank%zu.vtsnap", dir, i);
    ASSERT_MSG(vt__snapfile_write(s, *path, err, sizeof err) == 0, "%s", err);
}

static void remove_files(char **files, size_t n, const char *dir)
{
    for (size_t i = 0; i < n; i++) {
        unlink(files[i]);
        free(files[i]);
    }
    rmdir(dir);
}

/* Ranks numbered or not (then by their place), one rank twice. */
/* A site is named by its source line as the file reads now (compare's and
 * oom's names), without its trailing comment: a `#` outside a string, not
 * one inside it, nor an escaped quote's; a line all comment names the
 * function instead. */
TEST(a_site_is_named_by_its_line_without_its_comment)
{
    char path[] = "/tmp/vt_site_nameXXXXXX.py";
    int fd = mkstemps(path, 3);
    ASSERT(fd >= 0);
    static const char src[] =
        "out = model(x)   # the forward\n"
        "tag = f\"step #{i}\"  # a '#' in a string stays\n"
        "msg = 'it\\'s # here' + \"#\"\n"
        "    # all comment\n";
    ASSERT_EQ(write(fd, src, sizeof src - 1), (ssize_t)(sizeof src - 1));
    close(fd);
    char blob[512];
    int n = snprintf(blob, sizeof blob, "%c%s%cfn%c", 0, path, 0, 0);
    uint32_t offs[3] = { 0, 1, (uint32_t)(strlen(path) + 2) };
    vt__snapshot_data s;
    memset(&s, 0, sizeof s);
    s.strings_blob = blob;
    s.strings_blob_size = (size_t)n;
    s.string_offsets = offs;
    s.nstrings = 3;
    const char *base = strrchr(path, '/') + 1;
    static const char *const want[] = { "out = model(x)", "tag = f\"step #{i}\"",
                                        "msg = 'it\\'s # here' + \"#\"", NULL };
    char got[256], expect[256];
    for (unsigned line = 1; line <= 4; line++) {
        vt__frame f = { .function = 2, .file = 1, .line = line };
        vt__report_site_name(&s, &f, got, sizeof got);
        if (want[line - 1])
            snprintf(expect, sizeof expect, "%s (%s:%u)", want[line - 1], base, line);
        else
            snprintf(expect, sizeof expect, "fn %s:%u", base, line);
        ASSERT_STR_EQ(got, expect);
    }
    unlink(path);
}

TEST(streamed_compare_is_the_whole_compare_on_random_ranks)
{
    uint64_t rnd = 20261129;
    for (int k = 0; k < 120; k++) {
        char dir[] = "/tmp/vt-test-cmpstream-XXXXXX";
        ASSERT(mkdtemp(dir) != NULL);
        size_t n = 1 + gen_rand(&rnd) % 4;
        char *files[4];
        for (size_t i = 0; i < n; i++) {
            vt__snapshot_data *s = gen_random(&rnd, 1 + gen_rand(&rnd) % 400);
            s->meta.rank = k % 3 == 0 ? -1 : (int)(gen_rand(&rnd) % 4);
            write_snapshot(s, dir, i, &files[i]);
            vt__snapshot_free(s);
        }
        char what[64];
        snprintf(what, sizeof what, "random ranks %d", k);
        free(same_both_ways(files, n, 1 + gen_rand(&rnd) % 64, gen_rand(&rnd) % 12, what));
        remove_files(files, n, dir);
    }
}

/* gen_training's loop with, after each of its marks, one more allocation
 * that is never freed (at an address of its own, from the stack of the
 * loop's first allocation): a rank that grows `leak` bytes per step. */
static vt__snapshot_data *training_rank(size_t nev, uint64_t seed, int rank, uint64_t leak)
{
    vt__snapshot_data *s = gen_training(nev, seed);
    s->meta.rank = rank;
    if (!leak)
        return s;
    size_t nmarks = 0;
    for (size_t i = 0; i < s->nevents; i++)
        nmarks += s->events[i].kind == VT_EV_MARK;
    vt__event *ev = calloc(s->nevents + nmarks, sizeof *ev);
    ASSERT(ev);
    uint32_t stack = 0;
    for (size_t i = 0; i < s->nevents && !stack; i++)
        if (s->events[i].kind == VT_EV_ALLOC)
            stack = s->events[i].stack;
    size_t n = 0, step = 0;
    uint64_t seq = s->events[0].seq;
    for (size_t i = 0; i < s->nevents; i++) {
        ev[n] = s->events[i];
        ev[n++].seq = seq++;
        if (s->events[i].kind != VT_EV_MARK)
            continue;
        vt__event *a = &ev[n++];
        *a = (vt__event){ .kind = VT_EV_ALLOC, .seq = seq++, .time_ns = s->events[i].time_ns,
                          .addr = 0x7e0000000000ull + step++ * leak, .size = leak,
                          .req_size = leak, .stream = 0x5602a8f3c0e0ull,
                          .stack = stack, .device = 0 };
    }
    free(s->events);
    s->events = ev;
    s->nevents = n;
    s->meta.events_recorded = n;
    return s;
}

TEST(streamed_compare_is_the_whole_compare_on_training_ranks_read_in_small_chunks)
{
    char dir[] = "/tmp/vt-test-cmptrain-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char *files[4];
    for (size_t i = 0; i < 4; i++) {
        vt__snapshot_data *s = training_rank(30000, 7 + i, (int)(3 - i), i == 2 ? MiB : 0);
        write_snapshot(s, dir, i, &files[i]);
        vt__snapshot_free(s);
    }
    char *text = same_both_ways(files, 4, 16, 10, "training ranks, 16-byte chunks");
    /* and the comparison says what it should: the leaking rank grows */
    ASSERT_MSG(strstr(text, "rank 1 grows 1 MiB per step"), "%s", text);
    free(text);
    free(same_both_ways(files, 4, 0, 3, "training ranks, top 3"));
    remove_files(files, 4, dir);
}

TEST(streamed_compare_is_the_whole_compare_on_the_viz_shapes_as_ranks)
{
    const char *const *kinds = svw_shapes;
    enum { NK = SVW_NSHAPES };
    char dir[] = "/tmp/vt-test-cmpshapes-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char *files[NK];
    for (size_t k = 0; k < NK; k++) {
        files[k] = malloc(256);
        ASSERT(files[k]);
        snprintf(files[k], 256, "%s/%s.vtsnap", dir, kinds[k]);
        svw_gen_shape(kinds[k], files[k], 200000);
    }
    for (size_t k = 0; k < NK; k++) {
        char what[96];
        snprintf(what, sizeof what, "gen_snapshot %s alone", kinds[k]);
        free(same_both_ways(&files[k], 1, 0, 10, what));
    }
    /* side by side: the big loop that grows, with every other shape */
    for (size_t k = 0; k + 1 < NK; k++) {
        char *pair[] = { files[NK - 1], files[k] };
        char what[96];
        snprintf(what, sizeof what, "gen_snapshot big and %s", kinds[k]);
        free(same_both_ways(pair, 2, 0, 10, what));
    }
    char *text = same_both_ways(files, NK, 4096, 5, "every gen_snapshot shape");
    free(text);
    /* the run's holders, read again for the rank that differs */
    char *pair[] = { files[NK - 1], files[7] };
    text = same_both_ways(pair, 2, 0, 10, "big and run");
    ASSERT_MSG(strstr(text, "held by: "), "%s", text);
    free(text);
    remove_files(files, NK, dir);
}

TEST_MAIN()
