/*
 * tests/interop/test_export_stream.c - what the exports write from a
 * snapshot read as a stream of its events is what they write from the
 * whole snapshot and its timeline, byte for byte:
 *  - the Perfetto export (vt__perfetto_export_stream, what `vramtrace
 *    export --format perfetto` writes, against vt__perfetto_export), with
 *    and without findings;
 *  - the JSON document (vt__json_doc_write_stream, what `vramtrace json`
 *    prints, against vt__json_doc_write), with and without --events;
 *  - the PyTorch pickle (vt__pytorch_export_stream, what `vramtrace export
 *    --format torch` writes, against vt__pytorch_export);
 * on random event streams full of what the timeline's matching reconciles
 * (gaps, lost frees, pending frees, forks, stream uses, a state that
 * disagrees, two devices), on a training loop read in chunks small enough
 * to end inside events, and on every shape tests/viz/gen_snapshot makes
 * ($VT_GEN).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "event_stream.h"
#include "json_doc.h"
#include "perfetto.h"
#include "pytorch.h"
#include "snapfile.h"
#include "streamed_vs_whole.h"
#include "test_format_gen.h"
#include "timeline.h"

static char err[1024];

/* Two findings, one on a stack, one on none: their instants close the file. */
static const vt__perfetto_finding findings[] = {
    { .rule = "linger", .time_ns = 2000, .device = 0, .bytes = 4096, .addr = 0x10000,
      .nallocs = 1, .freed = false, .stack = 1 },
    { .rule = "pinned", .time_ns = 0, .device = 1, .bytes = 1 << 20, .addr = 0x20000,
      .nallocs = 3, .freed = true, .stack = 0 },
};

static vt__perfetto_options options(int with_findings)
{
    vt__perfetto_options o = { 0 };
    if (with_findings) {
        o.findings = findings;
        o.nfindings = sizeof findings / sizeof *findings;
    }
    return o;
}

/* An export both ways; `variant` picks its option (findings, --events). */
struct format {
    const char *name;
    int (*whole)(FILE *f, const vt__snapshot_data *s, const vt__timeline *tl, int variant);
    int (*streamed)(FILE *f, const vt__snapshot_data *h, vt__event_stream *es, int variant);
};

static int perfetto_whole(FILE *f, const vt__snapshot_data *s, const vt__timeline *tl, int variant)
{
    vt__perfetto_options o = options(variant);
    return vt__perfetto_export(f, s, tl, &o);
}

static int perfetto_streamed(FILE *f, const vt__snapshot_data *h, vt__event_stream *es, int variant)
{
    vt__perfetto_options o = options(variant);
    return vt__perfetto_export_stream(f, h, es, &o, err, sizeof err);
}

static int json_whole(FILE *f, const vt__snapshot_data *s, const vt__timeline *tl, int variant)
{
    return vt__json_doc_write(f, "s.vtsnap", s, tl, variant);
}

static int json_streamed(FILE *f, const vt__snapshot_data *h, vt__event_stream *es, int variant)
{
    return vt__json_doc_write_stream(f, "s.vtsnap", h, es, variant, err, sizeof err);
}

static int torch_whole(FILE *f, const vt__snapshot_data *s, const vt__timeline *tl, int variant)
{
    (void)tl, (void)variant;
    return vt__pytorch_export(s, f, err, sizeof err);
}

static int torch_streamed(FILE *f, const vt__snapshot_data *h, vt__event_stream *es, int variant)
{
    (void)variant;
    return vt__pytorch_export_stream(h, es, f, err, sizeof err);
}

static const struct format formats[] = {
    { "perfetto", perfetto_whole, perfetto_streamed },
    { "json", json_whole, json_streamed },
    { "torch", torch_whole, torch_streamed },
};
#define NFORMATS (sizeof formats / sizeof *formats)

static char *export_whole(const struct format *x, const vt__snapshot_data *s, int variant,
                          size_t *n)
{
    vt__timeline *tl;
    ASSERT_MSG(vt__timeline_build(s, &tl, err, sizeof err) == 0, "%s", err);
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    ASSERT(f);
    ASSERT(x->whole(f, s, tl, variant) == 0);
    fclose(f);
    vt__timeline_free(tl);
    return p;
}

static char *export_streamed(const struct format *x, const vt__snapshot_data *h,
                             vt__event_stream *es, int variant, size_t *n)
{
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    ASSERT(f);
    int rc = x->streamed(f, h, es, variant);
    fclose(f);
    ASSERT_MSG(rc == 0, "%s: %d %s", x->name, rc, err);
    return p;
}

/* One format's two outputs of the same snapshot, s whole and h with its
 * events in es, byte for byte. */
static void same_exports(const struct format *x, const vt__snapshot_data *s,
                         const vt__snapshot_data *h, vt__event_stream *es, int variant,
                         const char *what)
{
    size_t nc, nw;
    char *c = export_streamed(x, h, es, variant, &nc);
    char *w = export_whole(x, s, variant, &nw);
    char name[160];
    snprintf(name, sizeof name, "%s, %s", x->name, what);
    svw_same_bytes(w, nw, c, nc, name, "export");
    free(w);
    free(c);
}

/* Every format, s's events streamed from memory. */
static void same_in_memory(const vt__snapshot_data *s, int variant, const char *what)
{
    for (size_t k = 0; k < NFORMATS; k++) {
        vt__event_stream *es;
        ASSERT(vt__event_stream_of(s, &es) == 0);
        same_exports(&formats[k], s, s, es, variant, what);
        vt__event_stream_close(es);
    }
}

/* The file `path` both ways in every format: read whole, read as a stream
 * in chunks of `chunk` bytes (0: the default). */
static void same_from_file(const char *path, size_t chunk, int variant, const char *what)
{
    vt__snapshot_data *s, *h;
    ASSERT_MSG(vt__snapshot_load(path, &s, err, sizeof err) == 0, "%s: %s", path, err);
    for (size_t k = 0; k < NFORMATS; k++) {
        vt__event_stream *es;
        char serr[1024];
        svw_open_stream(path, chunk, &h, &es, serr, sizeof serr);
        same_exports(&formats[k], s, h, es, variant, what);
        vt__event_stream_close(es);
        vt__snapshot_free(h);
    }
    vt__snapshot_free(s);
}

static void random_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what)
{
    same_in_memory(s, k % 2, what);
    if (k % 20 == 0)
        svw_from_own_file(s, "exportstream", same_from_file, 1 + gen_rand(rnd) % 64, k % 2, what);
}

TEST(streamed_exports_are_the_whole_exports_on_random_event_streams)
{
    svw_each_random(20261129, 400, 300, random_round);
}

TEST(streamed_exports_are_the_whole_exports_on_a_training_loop_read_in_small_chunks)
{
    svw_training_loop("exportstream", same_from_file, 1, 0, "training loop", same_in_memory);
}

/* Each shape in both variants, the second read in 7-byte chunks. */
static void same_for_shape(const char *path, const char *kind, size_t k)
{
    (void)k;
    for (int variant = 0; variant < 2; variant++) {
        char what[96];
        snprintf(what, sizeof what, "gen_snapshot %s, variant %d", kind, variant);
        same_from_file(path, variant ? 7 : 0, variant, what);
    }
}

TEST(streamed_exports_are_the_whole_exports_on_every_generated_shape)
{
    svw_each_shape("exportshapes", svw_shapes, SVW_NSHAPES, 200000, same_for_shape);
}

/* The tool's pauses (gen_snapshot "paused": 40 and 20 ms after marks 2 and
 * 4) are slices of their own in Perfetto, as long as they lasted: the
 * allocations' time around them was not the program's. */
TEST(perfetto_shows_the_tools_pauses_as_slices)
{
    char dir[] = "/tmp/vt-test-pauses-XXXXXX", path[64];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/paused.vtsnap", dir);
    svw_gen_shape("paused", path, 0);
    vt__snapshot_data *s;
    ASSERT_MSG(vt__snapshot_load(path, &s, err, sizeof err) == 0, "%s", err);
    size_t n;
    char *out = export_whole(&formats[0], s, 0, &n);
    const char *slice = "\"ph\":\"X\",\"cat\":\"vramtrace\",\"pid\":2,\"tid\":0,\"ts\":";
    size_t found = 0;
    for (const char *p = out; (p = strstr(p, slice)); p++)
        found++;
    ASSERT_MSG(found == 2, "%zu pause slices in\n%s", found, out);
    ASSERT_STR_CONTAINS(out, "\"dur\":40000.000,\"name\":\"vramtrace paused (not the program's time)\"");
    ASSERT_STR_CONTAINS(out, "\"dur\":20000.000,\"name\":\"vramtrace paused (not the program's time)\"");
    free(out);
    vt__snapshot_free(s);
    unlink(path);
    rmdir(dir);
}

TEST_MAIN()
