/*
 * tests/replay/test_replay_stream.c - a replay that reads the events as a
 * stream (vt__replay_run_stream, what `vramtrace replay` does) is the replay
 * of the whole snapshot (vt__replay_run): when each free's block came back,
 * against the whole recording's arrays as the replay computed them before it
 * streamed, on random event streams; and every figure of the result, the
 * reserved curve included, on random snapshots, training loops read in
 * chunks small enough to end inside events, and the viz tests' shapes
 * (tests/viz/gen_snapshot, $VT_GEN), capacities that fit and that do not,
 * and frees moved earlier; a sweep of the file against the whole snapshot's.
 * Under PyTorch's rules too: which events are PyTorch's, read forward from
 * a stream, against the whole snapshot read back and forth; every figure on
 * random snapshots (observed or imported), training loops, the viz shapes
 * and PyTorch's own pickle ($VT_TORCH_PICKLE), out of memory or not.
 * vramtrace's allocator replays once per process: each replay runs in a
 * child of its own and writes its result down.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "event_stream.h"
#include "free_match.h"
#include "pytorch.h"
#include "replay_dump.h"
#include "torch_classify_whole.h"
#include "replay_internal.h"
#include "snapfile.h"
#include "streamed_vs_whole.h"
#include "test_format_gen.h"
#include "torch_model.h"

static char err[1024];

/* ---- completions --------------------------------------------------------- */

static bool allocator_event(uint8_t kind)
{
    return kind == VT_EV_ALLOC || kind == VT_EV_FREE_REQUESTED || kind == VT_EV_FREE_COMPLETED
           || kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE || kind == VT_EV_STREAM_USE
           || kind == VT_EV_STREAM_DESTROY || kind == VT_EV_EMPTY_CACHE;
}

/* The arrays the replay made of the whole recording before it streamed: per
 * FREE_REQUESTED, completed at once, else its FREE_COMPLETED. */
static void whole_completions(const vt__snapshot_data *s, uint64_t *completion, uint8_t *immediate)
{
    vt__free_match frees;
    ASSERT(vt__free_match_init(&frees) == 0);
    size_t last[VT_REPLAY_MAX_DEVICES];
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        last[d] = SIZE_MAX;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        uint32_t request;
        ASSERT(vt__free_match_event(&frees, e, (uint32_t)i, &request) == 0);
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES || !allocator_event(e->kind))
            continue;
        if (e->kind == VT_EV_FREE_REQUESTED) {
            completion[i] = UINT64_MAX;
            immediate[i] = e->aux == 0;
        } else if (request != VT__FREE_MATCH_NONE) {
            completion[request] = i;
            if (last[e->device] == request)
                immediate[request] = 1;
        }
        last[e->device] = i;
    }
    vt__free_match_free(&frees);
}

/* Frees checked that waited for their completion, and of those that came
 * back at once by it: a test that saw none proved nothing. */
static size_t npending, ncompleted_at_once;

static void same_completions(const vt__snapshot_data *s, vt__event_stream *es, const char *what)
{
    vt__completions c;
    ASSERT_MSG(vt__replay_completions(es, &c) == 0, "%s", what);
    uint64_t *completion = calloc(s->nevents + 1, sizeof *completion);
    uint8_t *immediate = calloc(s->nevents + 1, 1);
    ASSERT(completion && immediate);
    whole_completions(s, completion, immediate);
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind != VT_EV_FREE_REQUESTED || e->device < 0 ||
            e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        uint64_t done;
        bool at_once = vt__completed_at_once(&c, i, e, &done);
        ASSERT_MSG(at_once == (immediate[i] != 0), "%s: free %zu: at once %d, the whole %d",
                   what, i, at_once, immediate[i]);
        ncompleted_at_once += at_once && e->aux;
        if (!at_once) {
            npending += done != UINT64_MAX;
            ASSERT_MSG(done == completion[i], "%s: free %zu completes at %" PRIu64
                       ", the whole recording says %" PRIu64, what, i, done, completion[i]);
        }
    }
    vt__completions_free(&c);
    free(completion);
    free(immediate);
}

static void completions_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what)
{
    vt__event_stream *es;
    ASSERT(vt__event_stream_of(s, &es) == 0);
    same_completions(s, es, what);
    vt__event_stream_close(es);
    if (k % 10 == 0) {
        char dir[64], path[96], serr[1024];
        svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
        vt__snapshot_data *h;
        svw_open_stream(path, 1 + gen_rand(rnd) % 32, &h, &es, serr, sizeof serr);
        same_completions(s, es, what);
        vt__event_stream_close(es);
        vt__snapshot_free(h);
        svw_remove(dir, path);
    }
}

TEST(completions_read_as_a_stream_are_the_whole_recordings_on_random_event_streams)
{
    svw_each_random(20261129, 300, 400, completions_round);
    ASSERT_MSG(npending > 100 && ncompleted_at_once > 20, "%zu pending, %zu at once",
               npending, ncompleted_at_once);
}

/* ---- whole replays ------------------------------------------------------- */

/* One replay in a child: the whole snapshot at `path` (chunk 0), its
 * events streamed in chunks of `chunk` bytes, or (OPENED) as `vramtrace
 * replay` opens it (a pickle converted, then streamed); its dump returned. */
#define OPENED SIZE_MAX
static char *replay_in_child(const char *path, size_t chunk, const vt__replay_options *opt)
{
    int fd[2];
    ASSERT(pipe(fd) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        FILE *f = fdopen(fd[1], "w");
        vt__snapshot_data *s;
        vt__event_stream *es = NULL;
        char serr[1024];
        int rc;
        vt__replay_result r;
        if (!chunk) {
            if (vt__snapshot_load(path, &s, serr, sizeof serr))
                _exit(3);
            rc = vt__replay_run(s, opt, &r, err, sizeof err);
        } else if (chunk == OPENED) {
            if (vt__snapshot_open(path, &s, &es, serr, sizeof serr))
                _exit(3);
            rc = vt__replay_run_stream(s, es, opt, &r, err, sizeof err);
        } else {
            if (vt__snapfile_open_stream(path, chunk, &s, &es, serr, sizeof serr))
                _exit(3);
            rc = vt__replay_run_stream(s, es, opt, &r, err, sizeof err);
        }
        replay_dump(f, rc, err, &r);
        fclose(f);
        _exit(0);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char *out = NULL;
    size_t cap = 0, n = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (n + got + 1 > cap) {
            cap = (n + got + 1) * 2;
            ASSERT((out = realloc(out, cap)) != NULL);
        }
        memcpy(out + n, buf, got);
        n += got;
    }
    fclose(f);
    int st;
    ASSERT(waitpid(pid, &st, 0) == pid);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child ended with %d", path, st);
    if (!out)
        ASSERT((out = calloc(1, 1)) != NULL);
    out[n] = 0;
    return out;
}

static void same_replay(const char *path, size_t chunk, const vt__replay_options *opt,
                        const char *what)
{
    char *w = replay_in_child(path, 0, opt), *s = replay_in_child(path, chunk, opt);
    size_t i = 0;
    while (w[i] && w[i] == s[i])
        i++;
    ASSERT_MSG(!w[i] && !s[i], "%s: the streamed replay parts from the whole one at byte %zu\n"
               "--- whole:\n%.600s\n--- streamed:\n%.600s", what, i, w + (i > 200 ? i - 200 : 0),
               s + (i > 200 ? i - 200 : 0));
    ASSERT_MSG(strncmp(w, "rc 0", 4) == 0 || strstr(what, "random"), "%s: %s", what, w);
    free(w);
    free(s);
}

/* same_replay under each of opts[0..n) ("WHAT, LABEL K"). */
static void same_replay_each(const char *path, size_t chunk, const vt__replay_options *opts,
                             size_t n, const char *what, const char *label)
{
    for (size_t k = 0; k < n; k++) {
        char w[160];
        snprintf(w, sizeof w, "%s, %s %zu", what, label, k);
        same_replay(path, chunk, &opts[k], w);
    }
}

/* same_replay of snapshot s written to a file of its own (then removed). */
static void same_replay_of(const vt__snapshot_data *s, size_t chunk, const vt__replay_options *opt,
                           const char *what)
{
    char dir[64], path[96];
    svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
    same_replay(path, chunk, opt, what);
    svw_remove(dir, path);
}

/* Unlimited, the recorded device, and a capacity it may not fit, with the
 * curve; frees moved earlier (the first ALLOCs, right after themselves). */
static void same_replays(const char *path, size_t chunk, const char *what)
{
    vt__replay_free_at early[] = { { 0, 0 }, { 1, 5 }, { 3, 3 }, { 7, 40 }, { 20, 21 } };
    const vt__replay_options opts[] = {
        { .capacity = VT_REPLAY_UNLIMITED, .curve = true,
          .rules = VT_REPLAY_RULES_VRAMTRACE },
        { .rules = VT_REPLAY_RULES_VRAMTRACE },
        { .capacity = 48ull << 20, .curve = true, .rules = VT_REPLAY_RULES_VRAMTRACE },
        { .conf = "expandable_segments:1", .rules = VT_REPLAY_RULES_VRAMTRACE,
          .free_at = early, .nfree_at = sizeof early / sizeof *early },
    };
    same_replay_each(path, chunk, opts, sizeof opts / sizeof *opts, what, "options");
}

static void replay_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what)
{
    vt__replay_options o = { .capacity = k % 2 ? 1ull << 20 : 0, .curve = true,
                             .rules = VT_REPLAY_RULES_VRAMTRACE };
    same_replay_of(s, 1 + gen_rand(rnd) % 48, &o, what);
}

TEST(streamed_replay_is_the_whole_replay_on_random_snapshots_and_training_loops)
{
    svw_each_random(777, 40, 300, replay_round);
    vt__snapshot_data *s = gen_training(60000, 3);
    char dir[64], path[96];
    svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
    same_replays(path, 16, "training loop, 16-byte chunks");
    svw_remove(dir, path);
    vt__snapshot_free(s);
}

/* A shape read whole, and as a stream in 4096-byte chunks or the default. */
static void same_replays_of_shape(const char *path, const char *kind, size_t k)
{
    char what[96];
    snprintf(what, sizeof what, "gen_snapshot %s", kind);
    same_replays(path, k % 2 ? 0 : 4096, what);
}

TEST(streamed_replay_is_the_whole_replay_on_the_viz_shapes)
{
    static const char *const kinds[] = { "small", "many", "one", "huge", "python", "run",
                                         "oom", "big" };
    svw_each_shape("replayshapes", kinds, sizeof kinds / sizeof *kinds, 100000,
                   same_replays_of_shape);
}

/* One setting's result of a sweep (its status, error and figures) as
 * replay_dump writes it: the text two sweeps are compared by. */
static char *sweep_dump(int status, const char *error, const vt__replay_result *r)
{
    char *p = NULL;
    size_t n;
    FILE *f = open_memstream(&p, &n);
    ASSERT(f);
    replay_dump(f, status, error, r);
    fclose(f);
    return p;
}

/* The settings a sweep below tries: the last names no key, so its child
 * fails (and must fail the same way whatever the sweep read). */
static const char *const sweep_confs[] = {
    "", "expandable_segments:1", "max_split_size_mb:32", "garbage_collection_threshold:0.6",
    "garbage_collection_threshold:0.6,roundup_power2_divisions:4", "no_such_key:1"
};
enum { NCONFS = sizeof sweep_confs / sizeof *sweep_confs };

/* What a sweep gives back, a setting each. */
typedef struct {
    vt__replay_result r[NCONFS];
    int status[NCONFS];
    char err[NCONFS][256];
} sweep;

/* Sweep b (of `how`: the file, the stream) is sweep a of the whole
 * snapshot, setting by setting: each setting but the last succeeded. */
static void assert_same_sweeps(const sweep *a, const sweep *b, const char *what, const char *how)
{
    for (size_t k = 0; k < NCONFS; k++) {
        char *x = sweep_dump(a->status[k], a->err[k], &a->r[k]);
        char *y = sweep_dump(b->status[k], b->err[k], &b->r[k]);
        ASSERT_MSG((a->status[k] == 0) == (k + 1 < NCONFS) && !strcmp(x, y),
                   "%s, setting '%s':\n--- whole:\n%s\n--- %s:\n%s", what, sweep_confs[k], x, how,
                   y);
        free(x);
        free(y);
    }
}

/* A sweep whose children read the file as streams of their own is the
 * sweep of the whole snapshot, setting by setting. */
TEST(sweep_of_a_file_is_the_sweep_of_the_whole_snapshot)
{
    vt__snapshot_data *s = gen_training(20000, 9);
    char dir[64], path[96];
    svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
    vt__snapshot_free(s);
    ASSERT_MSG(vt__snapshot_load(path, &s, err, sizeof err) == 0, "%s", err);
    vt__replay_options base = { .capacity = 1ull << 30, .rules = VT_REPLAY_RULES_VRAMTRACE };
    sweep w, f;
    ASSERT_EQ(vt__replay_sweep_confs(s, sweep_confs, NCONFS, &base, 2, w.r, w.status, w.err), 0);
    ASSERT_EQ(vt__replay_sweep_confs_file(path, sweep_confs, NCONFS, &base, 2, f.r, f.status,
                                          f.err), 0);
    assert_same_sweeps(&w, &f, "training loop", "file");
    /* a file that is not there: every child says so */
    ASSERT_EQ(vt__replay_sweep_confs_file("/nonexistent/x.vtsnap", sweep_confs, 1, &base, 1, f.r,
                                          f.status, f.err), 0);
    ASSERT_MSG(f.status[0] < 0 && strstr(f.err[0], "x.vtsnap"), "%d %s", f.status[0], f.err[0]);
    svw_remove(dir, path);
    vt__snapshot_free(s);
}

/* The sweep of whole snapshot w and that of h's events read from es, each
 * child its own copy of the stream, setting by setting. */
static void same_sweeps(const vt__snapshot_data *w, const vt__snapshot_data *h,
                        vt__event_stream *es, char *serr, vt__replay_rules rules,
                        const char *what)
{
    vt__replay_options base = { .capacity = 1ull << 30, .rules = rules };
    sweep a, b;
    ASSERT_EQ(vt__replay_sweep_confs(w, sweep_confs, NCONFS, &base, 2, a.r, a.status, a.err), 0);
    ASSERT_EQ(vt__replay_sweep_confs_stream(h, es, serr, sweep_confs, NCONFS, &base, 2, b.r,
                                            b.status, b.err), 0);
    assert_same_sweeps(&a, &b, what, "stream");
}

/* A sweep whose children each read the parent's stream on their own
 * (forked: a stream of a file moves no shared offset) is the sweep of the
 * whole snapshot, under either rules: a .vtsnap read in small chunks, and
 * PyTorch's own pickle converted once by the parent. */
TEST(sweep_of_a_stream_is_the_sweep_of_the_whole_snapshot)
{
    vt__snapshot_data *s = gen_training(20000, 9);
    char dir[64], path[96], serr[1024];
    svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
    for (int torch = 0; torch < 2; torch++) {
        vt__snapshot_data *h;
        vt__event_stream *es;
        svw_open_stream(path, 13, &h, &es, serr, sizeof serr);
        same_sweeps(s, h, es, serr, torch ? VT_REPLAY_RULES_PYTORCH : VT_REPLAY_RULES_VRAMTRACE,
                    torch ? "training loop, PyTorch's rules" : "training loop");
        vt__event_stream_close(es);
        vt__snapshot_free(h);
    }
    svw_remove(dir, path);
    vt__snapshot_free(s);
    const char *pickle = getenv("VT_TORCH_PICKLE");
    ASSERT_MSG(pickle && pickle[0], "VT_TORCH_PICKLE is not set (run through meson test)");
    ASSERT_MSG(vt__snapshot_load(pickle, &s, err, sizeof err) == 0, "%s", err);
    vt__snapshot_data *h;
    vt__event_stream *es;
    ASSERT_MSG(vt__snapshot_open(pickle, &h, &es, serr, sizeof serr) == 0, "%s", serr);
    ASSERT_MSG(h->nevents == 0, "the pickle was not converted: its events are held");
    same_sweeps(s, h, es, serr, VT_REPLAY_RULES_AUTO, "the PyTorch pickle");
    vt__event_stream_close(es);
    vt__snapshot_free(h);
    vt__snapshot_free(s);
}

/* ---- PyTorch's rules ----------------------------------------------------- */

/* s as `vramtrace import` leaves a PyTorch snapshot: its library "pytorch". */
static void make_imported(vt__snapshot_data *s)
{
    static const char name[] = "pytorch";
    char *blob = realloc(s->strings_blob, s->strings_blob_size + sizeof name);
    ASSERT(blob);
    s->strings_blob = blob;
    memcpy(blob + s->strings_blob_size, name, sizeof name);
    uint32_t *offs = realloc(s->string_offsets, (s->nstrings + 1) * sizeof *offs);
    ASSERT(offs);
    s->string_offsets = offs;
    offs[s->nstrings] = (uint32_t)s->strings_blob_size;
    s->strings_blob_size += sizeof name;
    s->meta.library_version = (uint32_t)s->nstrings++;
}

/* Classes of each kind seen: a test that saw none proved nothing. */
static size_t nclass_outside, nclass_emptied, nclass_pool;

static void same_classes(const vt__snapshot_data *s, vt__event_stream *es, bool gc,
                         const char *what)
{
    size_t n = s->nevents;
    uint8_t *w = calloc(n + 1, 1), *c = malloc(n + 1);
    ASSERT(w && c);
    memset(c, 0xee, n + 1);   /* every byte must be written */
    ASSERT_EQ(tm_classify(s, gc, w), 0);
    ASSERT_EQ(tm_classify_stream(s, es, gc, c), 0);
    for (size_t i = 0; i < n; i++) {
        ASSERT_MSG(w[i] == c[i], "%s (gc %d): event %zu (kind %d, device %d): class %d read "
                   "as a stream, %d from the whole snapshot", what, gc, i, s->events[i].kind,
                   s->events[i].device, c[i], w[i]);
        nclass_outside += (w[i] & TM_OUTSIDE) != 0;
        nclass_emptied += (w[i] & TM_EMPTIED) != 0;
        nclass_pool += (w[i] & TM_POOL) != 0;
    }
    free(w);
    free(c);
}

/* Which events are PyTorch's (whose each segment is, where an imported
 * snapshot's cache was emptied) read forward from a stream, in chunks of
 * any size, is what the whole snapshot read back and forth says: on random
 * snapshots observed or not, imported or not, with and without a recorded
 * garbage collection threshold. */
/* Round k's name, " (imported)" after it when k is odd: made so then. */
static const char *imported_if_odd(vt__snapshot_data *s, int k, const char *what, char *buf,
                                   size_t len)
{
    if (k % 2)
        make_imported(s);
    snprintf(buf, len, "%s%s", what, k % 2 ? " (imported)" : "");
    return buf;
}

static void classes_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *name)
{
    char buf[96];
    const char *what = imported_if_odd(s, k, name, buf, sizeof buf);
    vt__event_stream *es;
    ASSERT(vt__event_stream_of(s, &es) == 0);
    same_classes(s, es, false, what);
    same_classes(s, es, true, what);
    vt__event_stream_close(es);
    if (k % 10 < 2) {
        char dir[64], path[96], serr[1024];
        svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
        vt__snapshot_data *h;
        svw_open_stream(path, 1 + gen_rand(rnd) % 32, &h, &es, serr, sizeof serr);
        same_classes(s, es, k % 4 < 2, what);
        vt__event_stream_close(es);
        vt__snapshot_free(h);
        svw_remove(dir, path);
    }
}

TEST(pytorch_classes_read_as_a_stream_are_the_whole_snapshots)
{
    svw_each_random(4711, 400, 400, classes_round);
    ASSERT_MSG(nclass_outside > 200 && nclass_emptied > 200 && nclass_pool > 1000,
               "%zu outside, %zu emptied, %zu pool", nclass_outside, nclass_emptied,
               nclass_pool);
}

/* Under PyTorch's rules: the recorded settings, others, a capacity the run
 * may not fit, the curve, frees moved earlier. */
static void same_torch_replays(const char *path, size_t chunk, uint64_t tight,
                               const char *what)
{
    vt__replay_free_at early[] = { { 0, 0 }, { 1, 5 }, { 3, 3 }, { 7, 40 }, { 20, 21 } };
    const vt__replay_options opts[] = {
        { .capacity = VT_REPLAY_UNLIMITED, .curve = true, .rules = VT_REPLAY_RULES_PYTORCH },
        { .rules = VT_REPLAY_RULES_PYTORCH },
        { .capacity = tight, .curve = true, .rules = VT_REPLAY_RULES_PYTORCH },
        { .conf = "expandable_segments:True,garbage_collection_threshold:0.5",
          .capacity = tight * 2, .rules = VT_REPLAY_RULES_PYTORCH, .free_at = early,
          .nfree_at = sizeof early / sizeof *early },
        { .conf = "max_split_size_mb:32,roundup_power2_divisions:4", .curve = true,
          .rules = VT_REPLAY_RULES_PYTORCH },
    };
    same_replay_each(path, chunk, opts, sizeof opts / sizeof *opts, what, "pytorch options");
}

/* A PyTorch-rules replay that reads the events as a stream (a byte per
 * event held) is the whole snapshot's, figure for figure: random
 * snapshots observed or not, imported or not (emptied caches inferred),
 * training loops and the viz shapes, read in chunks that end inside
 * events. */
static void torch_replay_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *name)
{
    char buf[96];
    const char *what = imported_if_odd(s, k, name, buf, sizeof buf);
    vt__replay_options o = { .capacity = k % 3 ? 6ull << 20 : 0, .curve = true,
                             .rules = VT_REPLAY_RULES_PYTORCH };
    same_replay_of(s, 1 + gen_rand(rnd) % 48, &o, what);
}

/* A shape under PyTorch's rules, as same_replays_of_shape. */
static void same_torch_replays_of_shape(const char *path, const char *kind, size_t k)
{
    char what[96];
    snprintf(what, sizeof what, "gen_snapshot %s", kind);
    same_torch_replays(path, k % 2 ? 0 : 4096, 64ull << 20, what);
}

TEST(streamed_replay_under_pytorchs_rules_is_the_whole_replay)
{
    svw_each_random(31337, 60, 300, torch_replay_round);
    for (int imported = 0; imported < 2; imported++) {
        vt__snapshot_data *s = gen_training(30000, 3);
        if (imported)
            make_imported(s);
        char dir[64], path[96];
        svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
        same_torch_replays(path, 16, 256ull << 20, imported ? "imported training loop"
                                                           : "training loop");
        svw_remove(dir, path);
        vt__snapshot_free(s);
    }
    static const char *const kinds[] = { "small", "many", "python", "run", "oom" };
    svw_each_shape("replayshapes", kinds, sizeof kinds / sizeof *kinds, 100000,
                   same_torch_replays_of_shape);
}

/* PyTorch's own snapshot of a small MLP ($VT_TORCH_PICKLE): replayed as
 * `vramtrace replay` reads it (converted, then streamed) and from its
 * events in 7-byte chunks, it is the whole import's replay, also where a
 * smaller device makes it run out of memory. */
TEST(pytorch_pickle_replayed_from_its_stream_is_the_whole_import)
{
    const char *pickle = getenv("VT_TORCH_PICKLE");
    ASSERT_MSG(pickle && pickle[0], "VT_TORCH_PICKLE is not set (run through meson test)");
    vt__snapshot_data *s;
    ASSERT_MSG(vt__snapshot_load(pickle, &s, err, sizeof err) == 0, "%s", err);
    vt__replay_options o = { .curve = true };
    vt__replay_result r;
    ASSERT_MSG(vt__replay_run(s, &o, &r, err, sizeof err) == 0, "%s", err);
    ASSERT_EQ(r.rules, VT_REPLAY_RULES_PYTORCH);
    uint64_t peak = vt__replay_peak_reserved(&r);
    ASSERT(peak > 0);
    vt__replay_result_free(&r);
    const vt__replay_options opts[] = {
        { .curve = true },
        { .capacity = peak / 2, .curve = true },
        { .conf = "expandable_segments:True", .curve = true },
    };
    char dir[64], path[96];
    svw_write_snapshot(s, "replaystream", dir, path, sizeof path);
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
        char what[96];
        snprintf(what, sizeof what, "the PyTorch pickle, options %zu", k);
        same_replay(pickle, OPENED, &opts[k], what);
        snprintf(what, sizeof what, "the PyTorch pickle as a .vtsnap, options %zu", k);
        same_replay(path, 7, &opts[k], what);
    }
    vt__replay_options tight = opts[1];
    ASSERT_MSG(vt__replay_run(s, &tight, &r, err, sizeof err) == 0, "%s", err);
    ASSERT_MSG(r.oom.happened, "a device of half the peak reserved fits");
    vt__replay_result_free(&r);
    svw_remove(dir, path);
    vt__snapshot_free(s);
}

TEST_MAIN()
