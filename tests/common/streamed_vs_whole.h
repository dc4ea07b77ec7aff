/* tests/common/streamed_vs_whole.h - what the tests of a view read as a
 * stream share (tests/viz/test_render_stream.c, tests/interop/
 * test_export_stream.c and test_compare_stream.c, tests/replay/
 * test_replay_stream.c, tests/trace/test_timeline_stream.c): each runs its
 * view on random event streams, writes its snapshots to a file of its own
 * and opens them as streams, makes gen_snapshot's shapes, and asks that the
 * streamed output be the whole snapshot's byte for byte. Its includer has
 * tests/trace on its include path (test_format_gen.h). */
#ifndef VT_TESTS_STREAMED_VS_WHOLE_H
#define VT_TESTS_STREAMED_VS_WHOLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "event_stream.h"
#include "snapfile.h"
#include "test_format_gen.h"

/* s written to DIR/s.vtsnap in a new directory /tmp/vt-test-TAG-XXXXXX
 * (dir: 64 bytes); the caller removes both (svw_remove). */
static inline void svw_write_snapshot(const vt__snapshot_data *s, const char *tag, char *dir,
                                      char *path, size_t len)
{
    char err[512];
    snprintf(dir, 64, "/tmp/vt-test-%s-XXXXXX", tag);
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, len, "%s/s.vtsnap", dir);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
}

/* svw_write_snapshot's file and its directory removed. */
static inline void svw_remove(const char *dir, const char *path)
{
    unlink(path);
    rmdir(dir);
}

/* The file `path` opened as a stream in chunks of `chunk` bytes (0: the
 * default): its head in *h, its events in *es; serr (len bytes) is where
 * the stream says a damaged file. */
static inline void svw_open_stream(const char *path, size_t chunk, vt__snapshot_data **h,
                                   vt__event_stream **es, char *serr, size_t len)
{
    ASSERT_MSG(vt__snapfile_open_stream(path, chunk, h, es, serr, len) == 0, "%s", serr);
}

/* One round of a test on random event streams: its snapshot s (the round
 * may change it), its index k, the generator for the round's own draws and
 * its name, "random snapshot K". */
typedef void svw_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what);

/* `rounds` random snapshots from `seed` (gen_random, 1 to max_events events
 * each), each given to `round` and freed after: the loop every test on
 * random event streams runs, its draws in the order they always were. */
static inline void svw_each_random(uint64_t seed, int rounds, uint64_t max_events,
                                   svw_round *round)
{
    uint64_t rnd = seed;
    for (int k = 0; k < rounds; k++) {
        vt__snapshot_data *s = gen_random(&rnd, 1 + gen_rand(&rnd) % max_events);
        char what[64];
        snprintf(what, sizeof what, "random snapshot %d", k);
        round(s, k, &rnd, what);
        vt__snapshot_free(s);
    }
}

/* A view's two checks, each of a snapshot both ways (whole, streamed) with
 * one of the view's variants (its options), named `what`: of s, its events
 * streamed from memory; of the file `path`, read in chunks of `chunk` bytes
 * (0: the default). */
typedef void svw_in_memory(const vt__snapshot_data *s, int variant, const char *what);
typedef void svw_from_file(const char *path, size_t chunk, int variant, const char *what);

/* s written to a file of its own (svw_write_snapshot, TAG), checked by
 * from_file reading it in chunks of `chunk` bytes with `variant`, removed. */
static inline void svw_from_own_file(const vt__snapshot_data *s, const char *tag,
                                     svw_from_file *from_file, size_t chunk, int variant,
                                     const char *what)
{
    char dir[64], path[96];
    svw_write_snapshot(s, tag, dir, path, sizeof path);
    from_file(path, chunk, variant, what);
    svw_remove(dir, path);
}

/* A view's test on a training loop read in small chunks: gen_training's
 * loop (100000 events, seed 7) written to a file of its own (TAG) and read
 * in 16-byte chunks with variant v16, then in the default ones with v0
 * (named what0); gen_small from memory with variant 1. */
static inline void svw_training_loop(const char *tag, svw_from_file *from_file, int v16, int v0,
                                     const char *what0, svw_in_memory *in_memory)
{
    vt__snapshot_data *s = gen_training(100000, 7);
    char dir[64], path[96];
    svw_write_snapshot(s, tag, dir, path, sizeof path);
    from_file(path, 16, v16, "training loop, 16-byte chunks");
    from_file(path, 0, v0, what0);
    svw_remove(dir, path);
    vt__snapshot_free(s);
    s = gen_small();
    in_memory(s, 1, "gen_small");
    vt__snapshot_free(s);
}

/* The shapes gen_snapshot makes that the viz tests render: "run" holds
 * holders, "paused" the tool's pauses; "big", last, is a loop that grows. */
static const char *const svw_shapes[] = { "small", "many", "empty", "one", "marks", "huge",
                                          "python", "run", "oom", "observed", "by_hand",
                                          "paused", "big" };
enum { SVW_NSHAPES = sizeof svw_shapes / sizeof *svw_shapes };

/* gen_snapshot (VT_GEN, set by meson test) writes shape `kind` to path; the
 * "big" shape with `big` events. */
static inline void svw_gen_shape(const char *kind, const char *path, unsigned long big)
{
    const char *gen = getenv("VT_GEN");
    ASSERT_MSG(gen && gen[0], "VT_GEN is not set (run through meson test)");
    char cmd[512], n[32] = "";
    if (!strcmp(kind, "big"))
        snprintf(n, sizeof n, "%lu", big);
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s >/dev/null", gen, kind, path, n);
    ASSERT_MSG(system(cmd) == 0, "%s", cmd);
}

/* Each of kinds[0..n) (svw_shapes, or a few of them) in turn: made
 * (svw_gen_shape, "big" with `big` events) in a new directory
 * /tmp/vt-test-TAG-XXXXXX, given to `use` with its kind and index k, and
 * removed; the directory too. */
static inline void svw_each_shape(const char *tag, const char *const *kinds, size_t n,
                                  unsigned long big,
                                  void (*use)(const char *path, const char *kind, size_t k))
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/vt-test-%s-XXXXXX", tag);
    ASSERT(mkdtemp(dir) != NULL);
    for (size_t k = 0; k < n; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s.vtsnap", dir, kinds[k]);
        svw_gen_shape(kinds[k], path, big);
        use(path, kinds[k], k);
        unlink(path);
    }
    rmdir(dir);
}

/* The whole snapshot's output w and the streamed one c, byte for byte;
 * else where they part, with some of either around it. `thing`: what they
 * are ("page", "export", "report"). */
static inline void svw_same_bytes(const char *w, size_t nw, const char *c, size_t nc,
                                  const char *what, const char *thing)
{
    size_t i = 0;
    while (i < nw && i < nc && w[i] == c[i])
        i++;
    if (i == nw && i == nc)
        return;
    size_t from = i > 120 ? i - 120 : 0;
    ASSERT_MSG(0, "%s: the streamed %s parts from the whole one at byte %zu of %zu/%zu\n"
               "--- whole:    %.400s\n--- streamed: %.400s", what, thing, i, nw, nc, w + from,
               c + from);
}

#endif /* VT_TESTS_STREAMED_VS_WHOLE_H */
