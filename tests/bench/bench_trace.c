/*
 * tests/bench/bench_trace.c - what tracing costs, next to heaptrack.
 *
 *   bench_trace [--pairs N] [--runs R] [--heaptrack PATH] [--host PATH]
 *
 * Run on the simulated device (meson: `meson test --benchmark bench_trace`,
 * which sets the simulator's environment). Every measurement runs in a fresh
 * child process of this same program, because the configuration is read
 * once per process:
 *  1. vt_malloc/vt_free pairs through the caching allocator, called at the
 *     bottom of a synthetic recursive call chain of depth 16, 32 and 64,
 *     with trace:0 and with tracing on (stack_depth large enough for the
 *     whole stack), R runs each (default 5): the difference of the medians
 *     is what tracing adds.
 *  2. The same workload on host malloc/free (bench_trace_host), plain and
 *     under heaptrack, depth 32.
 *  3. A training-like loop (forward allocations from a few layers, backward
 *     frees and gradients, marks) recorded until the ring holds 1M events:
 *     vt_snapshot() to a file, then vt__snapfile_read, vt__timeline_build and
 *     vt__snapfile_write of that file, R times each, and the bytes per event
 *     on disk. The first read and write of the process are reported apart:
 *     they pay the page faults of buffers the later ones reuse.
 * Every figure is the median of its runs, with the range (min-max) after it.
 * The last line is the machine-readable summary (medians).
 */
#include "snapfile.h"
#include "timeline.h"
#include "vramtrace.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_ALLOC(size) vt_malloc((ssize_t)(size), 0, NULL)
#define BENCH_FREE(p, size) vt_free((p), (ssize_t)(size), 0, NULL)
#include "bench_pairs.h"

/* ---- children ------------------------------------------------------------ */

static int child_pairs(long pairs, int depth)
{
    /* Warm up: the allocator's cache, and one full lap of the 1M-event ring,
     * so that its pages are faulted in (a one-time cost per process, about
     * 85 MB; reported apart) and the numbers are the steady state. */
    recurse(depth / 2, 400000);
    printf("loop_ns=%llu\n", (unsigned long long)recurse(depth, pairs));
    return 0;
}

/* A few "layers", each its own call site, as in a model's forward pass. */
#define LAYERS 24
static const ssize_t act_size[LAYERS] = {
    8 << 20, 2 << 20, 512 << 10, 8 << 20, 2 << 20, 64 << 10, 8 << 20, 2 << 20,
    512 << 10, 8 << 20, 2 << 20, 64 << 10, 8 << 20, 2 << 20, 512 << 10, 8 << 20,
    2 << 20, 64 << 10, 4 << 20, 1 << 20, 256 << 10, 4 << 20, 4096, 4096,
};

__attribute__((noinline)) static void *linear(ssize_t n) { return vt_malloc(n, 0, NULL); }
__attribute__((noinline)) static void *attention(ssize_t n)
{
    void *p = vt_malloc(n, 0, NULL);
    sink += 1;
    return p;
}
__attribute__((noinline)) static void *norm(ssize_t n)
{
    void *p = vt_malloc(n, 0, NULL);
    sink += 2;
    return p;
}
__attribute__((noinline)) static void *grad(ssize_t n)
{
    void *p = vt_malloc(n, 0, NULL);
    sink += 3;
    return p;
}

/* Modules nest: each layer allocates from its own depth of the model. */
__attribute__((noinline)) static void *module(int nest, int l)
{
    if (nest > 0) {
        void *p = module(nest - 1, l);
        sink += (uintptr_t)nest;
        return p;
    }
    return (l % 3 == 0 ? linear : l % 3 == 1 ? attention : norm)(act_size[l]);
}

static int child_train(const char *out, long steps)
{
    void *act[LAYERS];
    for (long s = 0; s < steps; s++) {
        for (int l = 0; l < LAYERS; l++)
            act[l] = module(8 + l % 6, l);
        for (int l = LAYERS - 1; l >= 0; l--) {
            void *g = grad(act_size[l]);
            vt_free(act[l], act_size[l], 0, NULL);
            vt_free(g, act_size[l], 0, NULL);
        }
        if (s % 100 == 0) {
            char label[32];
            snprintf(label, sizeof label, "step %ld", s);
            vt_mark(label);
        }
    }
    uint64_t t0 = bench_now_ns();
    int rc = vt_snapshot(out);
    printf("snapshot_ns=%llu rc=%d\n", (unsigned long long)(bench_now_ns() - t0), rc);
    return rc != 0;
}

/* ---- the parent ---------------------------------------------------------- */

/* Run argv with `conf` as VRAMTRACE_CONF, capture stdout, find "key=<n>". */
static int run_child(char *const argv[], const char *conf, const char *key, uint64_t *value)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (conf)
            setenv("VRAMTRACE_CONF", conf, 1);
        unsetenv("VRAMTRACE_OUT");
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    char buf[16384];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(fd[0]);
    buf[n] = '\0';
    int status;
    waitpid(pid, &status, 0);
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *p = strstr(buf, pat);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !p) {
        fprintf(stderr, "bench_trace: %s failed (status %d): %s\n", argv[0], status, buf);
        return -1;
    }
    *value = strtoull(p + strlen(pat), NULL, 10);
    return 0;
}

/* The median of n values and their range. */
typedef struct spread { double med, lo, hi; } spread;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static spread spread_of(double *v, int n)
{
    if (n <= 0)
        return (spread){ -1, -1, -1 };
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (spread){ med, v[0], v[n - 1] };
}

#define MAX_RUNS 64

static spread ns_per_pair(char *const argv[], const char *conf, long pairs, int runs)
{
    double v[MAX_RUNS];
    int n = 0;
    uint64_t ns;
    for (int i = 0; i < runs && i < MAX_RUNS; i++)
        if (run_child(argv, conf, "loop_ns", &ns) == 0)
            v[n++] = (double)ns / (double)pairs;
    return spread_of(v, n);
}

/* "12.3 (11.9-13.0)" */
static const char *fmt_spread(spread s, const char *fmt, char *buf, size_t len)
{
    char a[24], b[24], c[24];
    snprintf(a, sizeof a, fmt, s.med);
    snprintf(b, sizeof b, fmt, s.lo);
    snprintf(c, sizeof c, fmt, s.hi);
    snprintf(buf, len, "%s (%s-%s)", a, b, c);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--child-pairs"))
        return child_pairs(atol(argv[2]), atoi(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "--child-train"))
        return child_train(argv[2], atol(argv[3]));

    long pairs = 200000;
    int runs = 5;
    const char *heaptrack = "/usr/bin/heaptrack", *host = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--pairs"))
            pairs = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heaptrack"))
            heaptrack = argv[i + 1];
        else if (!strcmp(argv[i], "--host"))
            host = argv[i + 1];
    }
    if (argc >= 3 && !strcmp(argv[1], "--child-firstlap")) {
        /* Cold ring: what the first lap's page faults add. */
        printf("loop_ns=%llu\n", (unsigned long long)recurse(32, atol(argv[2])));
        return 0;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';
    char pairs_s[32];
    snprintf(pairs_s, sizeof pairs_s, "%ld", pairs);

    if (runs < 1 || runs > MAX_RUNS)
        runs = 5;
    char b1[96], b2[96];
    printf("bench_trace: %ld vt_malloc/vt_free pairs through the caching allocator "
           "(simulated device); median (min-max) of %d runs each\n", pairs, runs);
    printf("%-6s %24s %24s %14s\n", "depth", "off ns/pair", "on ns/pair", "added ns/pair");
    const int depths[] = { 16, 32, 64 };
    double added_d32 = 0;
    for (int i = 0; i < 3; i++) {
        char d[16], conf[64];
        snprintf(d, sizeof d, "%d", depths[i]);
        /* Deep enough for the whole stack: chain + loop + main + libc. */
        snprintf(conf, sizeof conf, "trace:1,stack_depth:%d", depths[i] + 8);
        char *cargv[] = { self, "--child-pairs", pairs_s, d, NULL };
        spread off = ns_per_pair(cargv, "trace:0", pairs, runs);
        spread on = ns_per_pair(cargv, conf, pairs, runs);
        printf("%-6d %24s %24s %14.1f\n", depths[i], fmt_spread(off, "%.1f", b1, sizeof b1),
               fmt_spread(on, "%.1f", b2, sizeof b2), on.med - off.med);
        if (depths[i] == 32)
            added_d32 = on.med - off.med;
    }

    {
        char *cargv[] = { self, "--child-firstlap", pairs_s, NULL };
        spread off = ns_per_pair(cargv, "trace:0", pairs, runs);
        spread on = ns_per_pair(cargv, "trace:1,stack_depth:40", pairs, runs);
        printf("first lap of a fresh ring (page faults included), depth 32: "
               "added %.1f ns/pair (medians)\n", on.med - off.med);
    }

    double ht_added = -1;
    if (host && access(heaptrack, X_OK) == 0) {
        char dir[] = "/tmp/vt-bench-ht-XXXXXX";
        if (mkdtemp(dir)) {
            char outp[128];
            snprintf(outp, sizeof outp, "%s/ht", dir);
            char *plain[] = { (char *)host, pairs_s, "32", NULL };
            char *traced[] = { (char *)heaptrack, "-o", outp, (char *)host, pairs_s, "32", NULL };
            spread p = ns_per_pair(plain, NULL, pairs, runs);
            spread h = ns_per_pair(traced, NULL, pairs, runs);
            ht_added = h.med - p.med;
            printf("heaptrack (host malloc/free, depth 32): plain %s ns/pair, heaptrack %s "
                   "ns/pair, added %.1f ns/pair\n", fmt_spread(p, "%.1f", b1, sizeof b1),
                   fmt_spread(h, "%.1f", b2, sizeof b2), ht_added);
            char cmd[256];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "bench_trace: could not remove %s\n", dir);
        }
    } else {
        printf("heaptrack: not run (need --host and %s)\n", heaptrack);
    }
    double ratio = ht_added > 0 ? added_d32 / ht_added : -1;
    printf("tracing cost at depth 32 relative to heaptrack: %.3f (target <= 0.5)\n", ratio);

    /* Training-like loop: 96 events a step; 11000 steps overflow a 1M ring.
     * snap_ns: its dump, a full ring (issue #34: at most 1 s per rank). */
    uint64_t snap_ns = 0;
    char dir[] = "/tmp/vt-bench-snap-XXXXXX";
    double bpe = -1;
    spread w = { -1, -1, -1 }, rd = { -1, -1, -1 }, tlb = { -1, -1, -1 };
    if (mkdtemp(dir)) {
        char path[128], path2[128];
        snprintf(path, sizeof path, "%s/train.vtsnap", dir);
        snprintf(path2, sizeof path2, "%s/rewrite.vtsnap", dir);
        char *targv[] = { self, "--child-train", path, "11000", NULL };
        if (run_child(targv, "trace:1,max_events:1000000", "snapshot_ns", &snap_ns) == 0) {
            struct stat st;
            double rv[MAX_RUNS], wv[MAX_RUNS], tv[MAX_RUNS];
            int n = 0;
            char err[512] = "";
            size_t nev = 0, nodes = 0, frames = 0;
            uint64_t rec = 0, over = 0;
            for (int i = 0; i < runs; i++) {
                vt__snapshot_data *s = NULL;
                uint64_t t0 = bench_now_ns();
                if (vt__snapfile_read(path, &s, err, sizeof err) != 0)
                    break;
                uint64_t t1 = bench_now_ns();
                vt__timeline *tl = NULL;
                int trc = vt__timeline_build(s, &tl, err, sizeof err);
                uint64_t t2 = bench_now_ns();
                vt__timeline_free(tl);
                uint64_t t3 = bench_now_ns();
                int wrc = vt__snapfile_write(s, path2, err, sizeof err);
                uint64_t t4 = bench_now_ns();
                nev = s->nevents, nodes = s->nstack_nodes, frames = s->nframes;
                rec = s->meta.events_recorded, over = s->meta.events_overwritten;
                vt__snapshot_free(s);
                if (trc != 0 || wrc != 0)
                    break;
                rv[n] = (double)(t1 - t0) / 1e9;
                tv[n] = (double)(t2 - t1) / 1e9;
                wv[n] = (double)(t4 - t3) / 1e9;
                n++;
            }
            if (n > 0 && stat(path, &st) == 0) {
                double first_r = rv[0], first_w = wv[0];
                bpe = (double)st.st_size / (double)nev;
                rd = spread_of(rv, n);
                tlb = spread_of(tv, n);
                w = spread_of(wv, n);
                char b3[96];
                printf("training-like loop: %zu events (%llu recorded, %llu overwritten), "
                       "%zu stack nodes, %zu frames; file %lld bytes = %.2f bytes/event\n",
                       nev, (unsigned long long)rec, (unsigned long long)over, nodes, frames,
                       (long long)st.st_size, bpe);
                printf("vt_snapshot() in the process: %.3f s (ring copy, symbolization, "
                       "write, one run)\n", (double)snap_ns / 1e9);
                printf("1M events, %d runs, seconds: vt__snapfile_read %s, vt__timeline_build %s, "
                       "vt__snapfile_write %s\n", n, fmt_spread(rd, "%.3f", b1, sizeof b1),
                       fmt_spread(tlb, "%.3f", b2, sizeof b2), fmt_spread(w, "%.3f", b3, sizeof b3));
                printf("first run of the process: read %.3f s, write %.3f s\n", first_r, first_w);
            } else {
                printf("training-like loop: reading the snapshot failed: %s\n", err);
            }
        }
        unlink(path);
        unlink(path2);
        rmdir(dir);
    }
    printf("RESULT added_ns_d32=%.1f vs_heaptrack=%.3f bytes_per_event=%.2f "
           "write_1m_s=%.3f read_1m_s=%.3f timeline_1m_s=%.3f dump_full_ring_s=%.3f\n",
           added_d32, ratio, bpe, w.med, rd.med, tlb.med, (double)snap_ns / 1e9);
    return 0;
}
