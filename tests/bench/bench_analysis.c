/*
 * tests/bench/bench_analysis.c - what reading a big snapshot costs: seconds
 * and peak resident memory of `vramtrace summary`, `leaks`, `check` and
 * `viz` (with and without --check) on generated snapshots
 * (tests/viz/gen_snapshot big) of 1M and 10M events, and, side by side in
 * the same build, the timeline built from the whole snapshot
 * (vt__snapshot_load + vt__timeline_build: what every view did before the
 * events were streamed, and what json still does) against the one built
 * from a stream of its events (vt__timeline_build_stream, what summary,
 * leaks and check use), and the page rendered from the whole snapshot
 * (vt__viz_render_page, what viz did before, and does for --replay or a run
 * with an OOM) against `vramtrace viz` (vt__viz_render_stream);
 * `vramtrace compare` of one rank and of four (the same file four times:
 * the ranks are read one after another) and `vramtrace replay`; and
 * `vramtrace export --format perfetto`, `export --format torch` and `vramtrace
 * json` (which read the events as a stream) against the same output written
 * from the whole snapshot in the same build (what they did before).
 *
 *   bench_analysis --cli build/cli/vramtrace --gen build/tests/viz/gen_snapshot
 *                  [--events 1000000,10000000] [--dir /tmp]
 *                  [--only timeline,summary,leaks,check,viz,compare,replay,export,torch,json]
 *
 * --only measures the parts named (default: all); the RESULT line then has
 * only their figures.
 *
 * Each figure is one run in a child process of its own: its wall time, its
 * CPU time (user + system: what a shared machine's load does not inflate)
 * and its peak resident set (wait4's ru_maxrss). The whole-snapshot build is
 * left out above 20M events (it needs about 250 bytes per event). Prints a
 * table, then one RESULT line (sizes in MB, times in s). --cli may name
 * another build's vramtrace (an older one, to compare).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "check.h"
#include "event_stream.h"
#include "json_doc.h"
#include "perfetto.h"
#include "pytorch.h"
#include "render.h"
#include "timeline.h"

#define WHOLE_LIMIT 20000000ul

struct cost {
    double seconds;
    double cpu;              /* user + system seconds: steadier on a shared machine */
    double mb;               /* peak resident, MiB */
    int status;              /* the child's exit status */
};

/* Run fn(arg) or argv in a child; its time and peak memory. */
static struct cost measure(int (*fn)(const char *), const char *arg, char *const argv[])
{
    struct cost c = { 0 };
    uint64_t t0 = bench_now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        if (fn)
            _exit(fn(arg));
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
        ;
    c.seconds = (double)(bench_now_ns() - t0) * 1e-9;
    c.mb = (double)ru.ru_maxrss / 1024.0;
    c.cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return c;
}

static int build_whole(const char *path)
{
    char err[1024];
    vt__snapshot_data *s;
    vt__timeline *tl;
    if (vt__snapshot_load(path, &s, err, sizeof err) || vt__timeline_build(s, &tl, err, sizeof err)) {
        fprintf(stderr, "bench_analysis: %s\n", err);
        return 1;
    }
    return 0;   /* the process ends: nothing to free */
}

/* Where every figure of a view "before it streamed" starts: /dev/null
 * opened, path's whole snapshot loaded, its timeline built (with
 * WHOLE_TIMELINE) and the checker's report over it (with WHOLE_CHECK, else
 * rep NULL). The process ends after: nothing is freed. */
enum { WHOLE_TIMELINE = 1, WHOLE_CHECK = 2 };
struct whole {
    FILE *f;
    vt__snapshot_data *s;
    vt__timeline *tl;
    vt__check_report *rep;
    char err[1024];   /* why, on failure */
};

/* @return nonzero on failure. */
static int load_whole(const char *path, unsigned what, struct whole *w)
{
    vt__check_options opt;
    vt__check_options_init(&opt);
    w->rep = NULL;
    w->f = fopen("/dev/null", "w");
    return !w->f || vt__snapshot_load(path, &w->s, w->err, sizeof w->err) ||
           ((what & WHOLE_TIMELINE) && vt__timeline_build(w->s, &w->tl, w->err, sizeof w->err)) ||
           ((what & WHOLE_CHECK) && vt__check_run(w->s, &opt, &w->rep, w->err, sizeof w->err));
}

/* A measured view's exit status: 1 after saying why when it failed. */
static int whole_status(int failed, const struct whole *w)
{
    if (failed)
        fprintf(stderr, "bench_analysis: %s\n", w->err);
    return failed != 0;
}

/* The page as viz wrote it before it streamed: the whole snapshot, its
 * timeline (and the checker's report over it), rendered to /dev/null. */
static int viz_whole(const char *path, int check)
{
    struct whole w;
    return whole_status(load_whole(path, WHOLE_TIMELINE | (check ? WHOLE_CHECK : 0), &w) ||
                        vt__viz_render_page(w.f, w.s, w.tl, w.rep, NULL, NULL, NULL, w.err,
                                            sizeof w.err), &w);
}

static int viz_whole_plain(const char *path) { return viz_whole(path, 0); }
static int viz_whole_checked(const char *path) { return viz_whole(path, 1); }

/* The Perfetto export as `vramtrace export` wrote it before it streamed:
 * the whole snapshot, its timeline and the checker's report over it (the
 * findings' few instants left out), written to /dev/null. */
static int perfetto_whole(const char *path)
{
    struct whole w;
    return whole_status(load_whole(path, WHOLE_TIMELINE | WHOLE_CHECK, &w) ||
                        vt__perfetto_export(w.f, w.s, w.tl, NULL), &w);
}

/* The JSON document and the PyTorch pickle as json and export wrote them
 * before they streamed: from the whole snapshot, to /dev/null. */
static int json_whole(const char *path)
{
    struct whole w;
    return whole_status(load_whole(path, WHOLE_TIMELINE, &w) ||
                        vt__json_doc_write(w.f, path, w.s, w.tl, false), &w);
}

static int torch_whole(const char *path)
{
    struct whole w;
    return whole_status(load_whole(path, 0, &w) ||
                        vt__pytorch_export(w.s, w.f, w.err, sizeof w.err), &w);
}

static int build_streamed(const char *path, unsigned what)
{
    char err[1024], tlerr[1024];
    vt__snapshot_data *s;
    vt__event_stream *es;
    vt__timeline *tl;
    if (vt__snapshot_open(path, &s, &es, err, sizeof err) ||
        vt__timeline_build_stream(s, es, what, &tl, tlerr, sizeof tlerr)) {
        fprintf(stderr, "bench_analysis: %s %s\n", err, tlerr);
        return 1;
    }
    return 0;
}

static int build_streamed_end(const char *path) { return build_streamed(path, 0); }
static int build_streamed_curves(const char *path)
{
    return build_streamed(path, VT_TL_STREAM_CURVES);
}

static void row(size_t n, const char *what, struct cost c)
{
    printf("%11zu  %-38s %8.2f s %8.2f s %9.1f MB %7.1f B/event%s\n", n, what, c.seconds,
           c.cpu, c.mb, c.mb * 1048576.0 / (double)n,
           c.status == 0 || c.status == 1 ? "" : "  (FAILED)");
}

/* Is `part` among the comma-separated `only` (NULL: every part)? */
static int want(const char *only, const char *part)
{
    if (!only)
        return 1;
    size_t n = strlen(part);
    for (const char *p = only;;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, part, n))
            return 1;
        if (!p[k])
            return 0;
        p += k + 1;
    }
}

/* " key_NM_cpu_s=.. key_NM_mb=.." onto the RESULT line. */
static void put(char *result, size_t len, const char *key, size_t u, const char *m, struct cost c)
{
    char part[256];
    snprintf(part, sizeof part, " %s_%zu%s_cpu_s=%.2f %s_%zu%s_mb=%.0f", key, u, m, c.cpu, key, u,
             m, c.mb);
    strncat(result, part, len - strlen(result) - 1);
}

/* One row of the table and its RESULT keys: fn(path) in a child, or the
 * command argv (fn NULL). */
static void measured(char *result, size_t len, size_t n, size_t u, const char *m,
                     const char *what, const char *key, int (*fn)(const char *),
                     const char *path, char *const argv[])
{
    struct cost c = measure(fn, path, argv);
    row(n, what, c);
    put(result, len, key, u, m, c);
}

int main(int argc, char **argv)
{
    const char *cli = NULL, *gen = NULL, *dir = "/tmp", *list = "1000000,10000000";
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cli"))
            cli = argv[i + 1];
        else if (!strcmp(argv[i], "--gen"))
            gen = argv[i + 1];
        else if (!strcmp(argv[i], "--events"))
            list = argv[i + 1];
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
    }
    if (!cli || !gen) {
        fprintf(stderr, "usage: bench_analysis --cli VRAMTRACE --gen GEN_SNAPSHOT "
                        "[--events N,N,...] [--dir DIR] [--only PARTS]\n");
        return 2;
    }
    printf("%11s  %-38s %10s %10s %12s %13s\n", "events", "what", "wall", "cpu", "peak RSS",
           "per event");
    char result[8192] = "RESULT";
    char *copy = strdup(list);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        size_t n = strtoul(tok, NULL, 10);
        char path[512], count[32];
        snprintf(path, sizeof path, "%s/bench-analysis-%d-%zu.vtsnap", dir, (int)getpid(), n);
        snprintf(count, sizeof count, "%zu", n);
        char *genv[] = { (char *)gen, "big", path, count, NULL };
        struct cost g = measure(NULL, NULL, genv);
        struct stat st;
        if (g.status || stat(path, &st)) {
            fprintf(stderr, "bench_analysis: generating %zu events failed\n", n);
            return 1;
        }
        printf("%11zu  %-38s %8.2f s   (%lld bytes on disk)\n", n, "generate", g.seconds,
               (long long)st.st_size);
        const char *m = n >= 1000000 ? "M" : "";
        size_t u = n >= 1000000 ? n / 1000000 : n;
        char html[600], json[600];
        snprintf(html, sizeof html, "%s.html", path);
        snprintf(json, sizeof json, "%s.json", path);
        if (want(only, "timeline")) {
            if (n <= WHOLE_LIMIT)
                measured(result, sizeof result, n, u, m, "timeline, whole snapshot", "whole",
                         build_whole, path, NULL);
            else
                printf("%11zu  %-38s (left out: about %.0f GB)\n", n, "timeline, whole snapshot",
                       (double)n * 250 / 1e9);
            row(n, "timeline, streamed (leaks)", measure(build_streamed_end, path, NULL));
            row(n, "timeline, streamed + curves (summary)",
                measure(build_streamed_curves, path, NULL));
        }
        static const char *const cmds[] = { "summary", "leaks", "check", "viz", "viz" };
        static const char *const keys[] = { "summary", "leaks", "check", "viz", "vizcheck" };
        for (int k = 0; k < 5; k++) {
            if (!want(only, cmds[k]))
                continue;
            char *av[] = { (char *)cli, (char *)cmds[k], path, "-o", html,
                           k == 4 ? "--check" : NULL, NULL };
            if (k < 3)
                av[3] = NULL;
            char what[64];
            snprintf(what, sizeof what, "vramtrace %s%s", cmds[k], k == 4 ? " --check" : "");
            measured(result, sizeof result, n, u, m, what, keys[k], NULL, NULL, av);
        }
        if (want(only, "compare")) {
            /* one rank, then four (the same file: the ranks are read one
             * after another) */
            char *cav[] = { (char *)cli, "compare", path, NULL, path, path, path, NULL };
            measured(result, sizeof result, n, u, m, "vramtrace compare (1 rank)", "compare",
                     NULL, NULL, cav);
            cav[3] = path;
            measured(result, sizeof result, n, u, m, "vramtrace compare (4 ranks)", "compare4",
                     NULL, NULL, cav);
        }
        if (want(only, "replay")) {
            char *rav[] = { (char *)cli, "replay", path, NULL };
            measured(result, sizeof result, n, u, m, "vramtrace replay", "replay", NULL, NULL,
                     rav);
        }
        if (want(only, "viz") && n <= WHOLE_LIMIT) {
            measured(result, sizeof result, n, u, m, "viz, whole snapshot", "vizwhole",
                     viz_whole_plain, path, NULL);
            measured(result, sizeof result, n, u, m, "viz --check, whole snapshot",
                     "vizwholecheck", viz_whole_checked, path, NULL);
        }
        /* the exports and json, streamed by the CLI, and written from the
         * whole snapshot in this build (what they did before) */
        static const struct {
            const char *part, *format, *what, *whole_what, *whole_key;
            int (*whole)(const char *);
        } outs[] = {
            { "export", "perfetto", "vramtrace export --format perfetto",
              "perfetto, whole snapshot", "exportwhole", perfetto_whole },
            { "torch", "torch", "vramtrace export --format torch", "torch, whole snapshot",
              "torchwhole", torch_whole },
            { "json", NULL, "vramtrace json", "json, whole snapshot", "jsonwhole", json_whole },
        };
        for (size_t k = 0; k < sizeof outs / sizeof *outs; k++) {
            if (!want(only, outs[k].part))
                continue;
            char *eav[] = { (char *)cli, "export", "--format", (char *)outs[k].format, path,
                            "-o", json, NULL };
            char *jav[] = { (char *)cli, "json", path, NULL };
            measured(result, sizeof result, n, u, m, outs[k].what, outs[k].part, NULL, NULL,
                     outs[k].format ? eav : jav);
            if (n <= WHOLE_LIMIT)
                measured(result, sizeof result, n, u, m, outs[k].whole_what, outs[k].whole_key,
                         outs[k].whole, path, NULL);
        }
        unlink(html);
        unlink(json);
        unlink(path);
        fflush(stdout);
    }
    free(copy);
    puts(result);
    return 0;
}
