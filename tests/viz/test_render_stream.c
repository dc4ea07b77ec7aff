/*
 * tests/viz/test_render_stream.c - the page of a snapshot read as a stream
 * of its events (vt__viz_render_stream, what `vramtrace viz` writes) is the
 * page of the whole snapshot and its timeline (vt__viz_render_page), byte
 * for byte, with and without the checker's findings: on random event
 * streams full of what the timeline's matching reconciles, on a training
 * loop read in chunks small enough to end inside events, and on every shape
 * the viz tests render (tests/viz/gen_snapshot, $VT_GEN). A snapshot with
 * an OOM is the one the streamed page refuses (its explanation replays the
 * whole run).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "page_of_snapshot.h"
#include "check.h"
#include "event_stream.h"
#include "pytorch.h"
#include "render.h"
#include "snapfile.h"
#include "streamed_vs_whole.h"
#include "test_format_gen.h"
#include "timeline.h"

static char err[1024];

/* The checker's options of a page: none (0), the automatic rules (1), all (2). */
static vt__check_options options(int check)
{
    vt__check_options o;
    vt__check_options_init(&o);
    if (check == 2)
        ASSERT_EQ(vt__check_parse_rules("all", &o.rules), 0);
    return o;
}

static char *page_whole(const vt__snapshot_data *s, int check, size_t *n)
{
    vt__check_report *rep = NULL;
    vt__check_options o = options(check);
    if (check)
        ASSERT_MSG(vt__check_run(s, &o, &rep, err, sizeof err) == 0, "%s", err);
    char *p = page_of_snapshot(s, rep, n);
    vt__check_report_free(rep);
    return p;
}

/* @return vt__viz_render_stream's code; the page in *out when 0. */
static int page_streamed(const vt__snapshot_data *h, vt__event_stream *es, int check, char **out,
                         size_t *n)
{
    vt__check_report *rep = NULL;
    vt__check_options o = options(check);
    if (check)
        ASSERT_MSG(vt__check_run_stream(h, es, &o, &rep, err, sizeof err) == 0, "%s", err);
    *out = NULL;
    FILE *f = open_memstream(out, n);
    ASSERT(f);
    int rc = vt__viz_render_stream(f, h, es, rep, NULL, err, sizeof err);
    fclose(f);
    vt__check_report_free(rep);
    return rc;
}

static int has_oom(const vt__snapshot_data *s)
{
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_OOM)
            return 1;
    return 0;
}

/* s's page both ways, its events streamed from memory; check as options(). */
static void same_in_memory(const vt__snapshot_data *s, int check, const char *what)
{
    vt__event_stream *es;
    ASSERT(vt__event_stream_of(s, &es) == 0);
    char *c;
    size_t nc;
    int rc = page_streamed(s, es, check, &c, &nc);
    vt__event_stream_close(es);
    if (has_oom(s)) {
        ASSERT_MSG(rc == -ENOTSUP, "%s: a snapshot with an OOM: %d, not -ENOTSUP", what, rc);
        free(c);
        return;
    }
    ASSERT_MSG(rc == 0, "%s: %d %s", what, rc, err);
    size_t nw;
    char *w = page_whole(s, check, &nw);
    svw_same_bytes(w, nw, c, nc, what, "page");
    free(w);
    free(c);
}

/* The page of the file `path` both ways: read whole, read as a stream in
 * chunks of `chunk` bytes (0: the default). */
static void same_from_file(const char *path, size_t chunk, int check, const char *what)
{
    vt__snapshot_data *s;
    ASSERT_MSG(vt__snapshot_load(path, &s, err, sizeof err) == 0, "%s: %s", path, err);
    vt__snapshot_data *h;
    vt__event_stream *es;
    char serr[1024];
    svw_open_stream(path, chunk, &h, &es, serr, sizeof serr);
    char *c;
    size_t nc;
    int rc = page_streamed(h, es, check, &c, &nc);
    if (has_oom(s)) {
        ASSERT_MSG(rc == -ENOTSUP, "%s: a snapshot with an OOM: %d, not -ENOTSUP", what, rc);
    } else {
        ASSERT_MSG(rc == 0, "%s: %d %s %s", what, rc, err, serr);
        size_t nw;
        char *w = page_whole(s, check, &nw);
        svw_same_bytes(w, nw, c, nc, what, "page");
        free(w);
    }
    free(c);
    vt__event_stream_close(es);
    vt__snapshot_free(h);
    vt__snapshot_free(s);
}

/* Without the checker, with its automatic rules and with all (the page
 * draws its findings), in turn. */
static void random_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what)
{
    int check = k % 3;
    same_in_memory(s, check, what);   /* most hold an OOM: refused */
    /* the same events without their OOMs, which the streamed page draws */
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_OOM)
            s->events[i].kind = VT_EV_MARK;
    same_in_memory(s, check, what);
    if (k % 20 == 0)
        svw_from_own_file(s, "vizstream", same_from_file, 1 + gen_rand(rnd) % 64, check, what);
}

TEST(streamed_page_is_the_whole_page_on_random_event_streams)
{
    svw_each_random(20261129, 300, 300, random_round);
}

TEST(streamed_page_is_the_whole_page_on_a_training_loop_read_in_small_chunks)
{
    svw_training_loop("vizstream", same_from_file, 0, 1, "training loop, checked", same_in_memory);
}

/* Each shape without the checker, with its automatic rules and with all. */
static void same_for_shape(const char *path, const char *kind, size_t k)
{
    (void)k;
    for (int check = 0; check < 3; check++) {
        char what[96];
        snprintf(what, sizeof what, "gen_snapshot %s, check %d", kind, check);
        same_from_file(path, 0, check, what);
    }
}

TEST(streamed_page_is_the_whole_page_on_every_shape_the_viz_tests_render)
{
    svw_each_shape("vizshapes", svw_shapes, SVW_NSHAPES, 200000, same_for_shape);
}

TEST_MAIN()
