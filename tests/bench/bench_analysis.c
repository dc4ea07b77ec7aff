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
 * with an OOM) against `vramtrace viz` (vt__viz_render_stream); and
 * `vramtrace compare` of one rank and of four (the same file four times:
 * the ranks are read one after another) and `vramtrace replay`.
 *
 *   bench_analysis --cli build/cli/vramtrace --gen build/tests/viz/gen_snapshot
 *                  [--events 1000000,10000000] [--dir /tmp]
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

/* The page as viz wrote it before it streamed: the whole snapshot, its
 * timeline (and the checker's report over it), rendered to /dev/null. */
static int viz_whole(const char *path, int check)
{
    char err[1024];
    vt__snapshot_data *s;
    vt__timeline *tl;
    vt__check_report *rep = NULL;
    vt__check_options opt;
    vt__check_options_init(&opt);
    FILE *f = fopen("/dev/null", "w");
    if (!f || vt__snapshot_load(path, &s, err, sizeof err) ||
        vt__timeline_build(s, &tl, err, sizeof err) ||
        (check && vt__check_run(s, &opt, &rep, err, sizeof err)) ||
        vt__viz_render_page(f, s, tl, rep, NULL, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_analysis: %s\n", err);
        return 1;
    }
    return 0;
}

static int viz_whole_plain(const char *path) { return viz_whole(path, 0); }
static int viz_whole_checked(const char *path) { return viz_whole(path, 1); }

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

int main(int argc, char **argv)
{
    const char *cli = NULL, *gen = NULL, *dir = "/tmp", *list = "1000000,10000000";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cli"))
            cli = argv[i + 1];
        else if (!strcmp(argv[i], "--gen"))
            gen = argv[i + 1];
        else if (!strcmp(argv[i], "--events"))
            list = argv[i + 1];
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
    }
    if (!cli || !gen) {
        fprintf(stderr, "usage: bench_analysis --cli VRAMTRACE --gen GEN_SNAPSHOT "
                        "[--events N,N,...] [--dir DIR]\n");
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
        struct cost whole = { 0 }, se, sc;
        if (n <= WHOLE_LIMIT) {
            whole = measure(build_whole, path, NULL);
            row(n, "timeline, whole snapshot", whole);
        } else {
            printf("%11zu  %-38s (left out: about %.0f GB)\n", n, "timeline, whole snapshot",
                   (double)n * 250 / 1e9);
        }
        se = measure(build_streamed_end, path, NULL);
        row(n, "timeline, streamed (leaks)", se);
        sc = measure(build_streamed_curves, path, NULL);
        row(n, "timeline, streamed + curves (summary)", sc);
        static const char *const cmds[] = { "summary", "leaks", "check", "viz", "viz" };
        struct cost cc[5];
        char html[600];
        snprintf(html, sizeof html, "%s.html", path);
        for (int k = 0; k < 5; k++) {
            char *av[] = { (char *)cli, (char *)cmds[k], path, "-o", html,
                           k == 4 ? "--check" : NULL, NULL };
            if (k < 3)
                av[3] = NULL;
            char what[64];
            cc[k] = measure(NULL, NULL, av);
            snprintf(what, sizeof what, "vramtrace %s%s", cmds[k], k == 4 ? " --check" : "");
            row(n, what, cc[k]);
        }
        /* compare: one rank, then four; replay */
        char *cav[] = { (char *)cli, "compare", path, path, path, path, NULL };
        struct cost cmp1, cmp4, rep;
        cav[3] = NULL;
        cmp1 = measure(NULL, NULL, cav);
        row(n, "vramtrace compare (1 rank)", cmp1);
        cav[3] = path;
        cmp4 = measure(NULL, NULL, cav);
        row(n, "vramtrace compare (4 ranks)", cmp4);
        char *rav[] = { (char *)cli, "replay", path, NULL };
        rep = measure(NULL, NULL, rav);
        row(n, "vramtrace replay", rep);
        struct cost vw = { 0 }, vwc = { 0 };
        if (n <= WHOLE_LIMIT) {
            vw = measure(viz_whole_plain, path, NULL);
            row(n, "viz, whole snapshot", vw);
            vwc = measure(viz_whole_checked, path, NULL);
            row(n, "viz --check, whole snapshot", vwc);
        }
        unlink(html);
        unlink(path);
        char part[512];
        const char *m = n >= 1000000 ? "M" : "";
        size_t u = n >= 1000000 ? n / 1000000 : n;
        snprintf(part, sizeof part,
                 " summary_%zu%s_cpu_s=%.2f summary_%zu%s_mb=%.0f leaks_%zu%s_cpu_s=%.2f "
                 "leaks_%zu%s_mb=%.0f check_%zu%s_cpu_s=%.2f check_%zu%s_mb=%.0f "
                 "whole_%zu%s_cpu_s=%.2f whole_%zu%s_mb=%.0f viz_%zu%s_cpu_s=%.2f viz_%zu%s_mb=%.0f "
                 "vizcheck_%zu%s_cpu_s=%.2f vizcheck_%zu%s_mb=%.0f vizwhole_%zu%s_cpu_s=%.2f "
                 "vizwhole_%zu%s_mb=%.0f vizwholecheck_%zu%s_cpu_s=%.2f vizwholecheck_%zu%s_mb=%.0f",
                 u, m, cc[0].cpu, u, m, cc[0].mb, u, m, cc[1].cpu, u, m, cc[1].mb, u, m,
                 cc[2].cpu, u, m, cc[2].mb, u, m, whole.cpu, u, m, whole.mb, u, m, cc[3].cpu, u,
                 m, cc[3].mb, u, m, cc[4].cpu, u, m, cc[4].mb, u, m, vw.cpu, u, m, vw.mb, u, m,
                 vwc.cpu, u, m, vwc.mb);
        strncat(result, part, sizeof result - strlen(result) - 1);
        snprintf(part, sizeof part,
                 " compare_%zu%s_cpu_s=%.2f compare_%zu%s_mb=%.0f compare4_%zu%s_cpu_s=%.2f "
                 "compare4_%zu%s_mb=%.0f replay_%zu%s_cpu_s=%.2f replay_%zu%s_mb=%.0f",
                 u, m, cmp1.cpu, u, m, cmp1.mb, u, m, cmp4.cpu, u, m, cmp4.mb, u, m, rep.cpu, u,
                 m, rep.mb);
        strncat(result, part, sizeof result - strlen(result) - 1);
        fflush(stdout);
    }
    free(copy);
    puts(result);
    return 0;
}
