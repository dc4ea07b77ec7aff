/*
 * tests/bench/bench_replay.c - replay speed: events per second through the
 * allocator on the host-only device, for a 1M-event trace.
 *
 * The trace is a training loop made in memory: each step allocates 40
 * activations (sizes drawn from 512 B to 64 MiB, a quarter of them on a
 * second stream) and frees them in reverse order; one free in eight is
 * pending (a cross-stream free, completed 30 events later), the rest
 * complete at once. That is ALLOC + FREE_REQUESTED + FREE_COMPLETED per
 * allocation, about 333k allocations for 1M events. Each repetition runs in
 * a child process (the allocator is one per process); the best and the
 * median of 5 are printed, then
 *   RESULT replay_events_per_s=<median> events=<n> median_s=<s> goal_s=1.0
 * The goal (a million events in under a second) is reported, never asserted.
 *
 * With the path of the `vramtrace` command as argv[1] (meson passes it), the
 * same trace ends with an out-of-memory (a request larger than a device the
 * size of the replayed peak) and is written to a .vtsnap; `vramtrace oom
 * FILE --json` then checks every candidate by replaying the million events
 * (the settings, the recorded ones at the capacity and unlimited, and the
 * search for the smallest device that fits). Its wall time, whole command
 * (reading, timeline, checker, every replay; 3 runs, median), is printed as
 *   RESULT oom_check_s=<median> replays=<n> events=<n> goal_s=5.0
 * also reported, never asserted.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "replay.h"
#include "snapfile.h"

#define NEVENTS 1000000
#define PER_STEP 40
#define REPS 5

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) { return bench_xorshift64(&rng); }

static vt__snapshot_data *make_trace(void)
{
    vt__snapshot_data *s = calloc(1, sizeof *s);
    vt__event *ev = calloc(NEVENTS + 4 * PER_STEP, sizeof *ev);
    static char blob[1] = "";
    static uint32_t offs[1] = { 0 };
    if (!s || !ev)
        return NULL;
    s->events = ev;
    s->strings_blob = blob;
    s->strings_blob_size = 1;
    s->string_offsets = offs;
    s->nstrings = 1;
    size_t n = 0;
    uint64_t addr = 0x100000;
    struct { uint64_t addr, size, stream; } live[PER_STEP];
    struct { uint64_t addr, size; size_t due; } pend[4096];
    size_t npend = 0;
#define PUSH(k, a, sz, st, x) ev[n] = (vt__event){ .seq = n + 1, .time_ns = 1000 * (n + 1), \
        .kind = (k), .addr = (a), .req_size = (sz), .size = (sz), .stream = (st), .aux = (x), \
        .device = 0, .thread = 1 }, n++
    while (n + 3 * PER_STEP + npend < NEVENTS) {
        for (int i = 0; i < PER_STEP; i++) {
            /* log-uniform sizes: many small, some large */
            unsigned shift = 9 + (unsigned)(next_rand() % 18);   /* 512 B .. 64 MiB */
            uint64_t size = (1ull << shift) + (next_rand() % (1ull << shift));
            uint64_t stream = next_rand() % 4 == 0 ? 0x7f0000001000 : 0x7f0000002000;
            live[i].addr = addr;
            live[i].size = size;
            live[i].stream = stream;
            addr += 0x100000000ull;   /* recorded addresses are only names */
            PUSH(VT_EV_ALLOC, live[i].addr, size, stream, 0);
            for (size_t k = 0; k < npend;)   /* completions that are due */
                if (pend[k].due <= n) {
                    PUSH(VT_EV_FREE_COMPLETED, pend[k].addr, pend[k].size, 0, 0);
                    pend[k] = pend[--npend];
                } else {
                    k++;
                }
        }
        for (int i = PER_STEP - 1; i >= 0; i--) {
            bool pending = next_rand() % 8 == 0 && npend < 4096;
            uint64_t fstream = pending ? 0x7f0000003000 : live[i].stream;
            PUSH(VT_EV_FREE_REQUESTED, live[i].addr, live[i].size, fstream, pending);
            if (pending)
                pend[npend++] = (typeof(pend[0])){ live[i].addr, live[i].size, n + 30 };
            else
                PUSH(VT_EV_FREE_COMPLETED, live[i].addr, live[i].size, fstream, 0);
        }
    }
    for (size_t k = 0; k < npend; k++)
        PUSH(VT_EV_FREE_COMPLETED, pend[k].addr, pend[k].size, 0, 0);
    s->nevents = n;
    return s;
}

static double now_s(void) { return (double)bench_now_ns() / 1e9; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* `vramtrace oom` on the trace ended by an OOM on a device of `capacity`. */
static int bench_oom(const char *cli, vt__snapshot_data *s, uint64_t capacity)
{
    vt__snap_device dev = { .ordinal = 0, .total_bytes = capacity };
    vt__stack_node root = { 0, 0 };
    s->devices = &dev;
    s->ndevices = 1;
    s->stack_nodes = &root;
    s->nstack_nodes = 1;
    vt__event *last = &s->events[s->nevents - 1];
    s->events[s->nevents] = (vt__event){ .seq = last->seq + 1, .time_ns = last->time_ns + 1000,
                                        .kind = VT_EV_OOM, .req_size = 2 * capacity,
                                        .size = 2 * capacity, .aux = capacity, .device = 0,
                                        .thread = 1 };
    s->nevents++;
    char path[] = "/tmp/vt-bench-oom-XXXXXX.vtsnap";
    int fd = mkstemps(path, 7);
    if (fd < 0)
        return 1;
    close(fd);
    char err[512];
    if (vt__snapfile_write(s, path, err, sizeof err)) {
        fprintf(stderr, "bench_replay: %s\n", err);
        unlink(path);
        return 1;
    }
    double secs[3];
    int replays = 0;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' oom '%s' --json", cli, path);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        FILE *p = popen(cmd, "r");
        if (!p)
            break;
        static char out[1 << 16];
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        int st = pclose(p);
        secs[rep] = now_s() - t0;
        if (st != 0 || !strstr(out, "\"fixes\"")) {
            fprintf(stderr, "bench_replay: vramtrace oom failed (status %d)\n", st);
            unlink(path);
            return 1;
        }
        const char *q = strstr(out, "\"replays\": ");
        replays = q ? atoi(q + 11) : 0;
        printf("oom check %d: %.3f s\n", rep + 1, secs[rep]);
    }
    /* the same without the replays: reading, timeline, checker */
    snprintf(cmd, sizeof cmd, "'%s' oom '%s' --json --no-replay >/dev/null", cli, path);
    double t0 = now_s();
    int st = system(cmd);
    double explain_only = now_s() - t0;
    unlink(path);
    qsort(secs, 3, sizeof *secs, cmp_double);
    if (st == 0)
        printf("without the replays (--no-replay): %.3f s\n", explain_only);
    printf("vramtrace oom on %zu events: median %.3f s for the explanation and %d replays of the "
           "whole trace (goal: < 5 s: %s)\n", s->nevents, secs[1], replays,
           secs[1] < 5.0 ? "met" : "NOT met");
    printf("RESULT oom_check_s=%.3f replays=%d events=%zu goal_s=5.0\n", secs[1], replays,
           s->nevents);
    return 0;
}

int main(int argc, char **argv)
{
    vt__snapshot_data *s = make_trace();
    if (!s) {
        fprintf(stderr, "bench_replay: out of memory\n");
        return 1;
    }
    double secs[REPS];
    vt__replay_result first;
    memset(&first, 0, sizeof first);
    for (int rep = 0; rep < REPS; rep++) {
        int fds[2];
        if (pipe(fds))
            return 1;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            vt__replay_result r;
            char err[256];
            double t0 = now_s();
            int rc = vt__replay_run(s, NULL, &r, err, sizeof err);
            double dt = now_s() - t0;
            if (rc) {
                fprintf(stderr, "bench_replay: %s\n", err);
                _exit(1);
            }
            ssize_t w1 = write(fds[1], &dt, sizeof dt);
            ssize_t w2 = write(fds[1], &r, sizeof r);
            _exit(w1 == sizeof dt && w2 == sizeof r ? 0 : 1);
        }
        close(fds[1]);
        vt__replay_result r;
        ssize_t r1 = read(fds[0], &secs[rep], sizeof secs[rep]);
        ssize_t r2 = read(fds[0], &r, sizeof r);
        close(fds[0]);
        int st;
        waitpid(pid, &st, 0);
        if (r1 != sizeof secs[rep] || r2 != sizeof r || !WIFEXITED(st) || WEXITSTATUS(st))
            return 1;
        if (rep == 0)
            first = r;
        printf("run %d: %.3f s\n", rep + 1, secs[rep]);
    }
    qsort(secs, REPS, sizeof *secs, cmp_double);
    double med = secs[REPS / 2];
    printf("trace: %zu events, %zu allocator calls; replay peak reserved %.1f MiB, "
           "%" PRIu64 " segments, %" PRIu64 " fence events\n",
           s->nevents, first.replayed, (double)first.devices[0].peak_reserved / (1 << 20),
           first.devices[0].segment_allocs, first.devices[0].fence_events);
    printf("best %.3f s, median %.3f s: %.2f M events/s (goal: 1M events in < 1 s: %s)\n",
           secs[0], med, (double)s->nevents / med / 1e6, med < 1.0 ? "met" : "NOT met");
    printf("RESULT replay_events_per_s=%.0f events=%zu median_s=%.3f goal_s=1.0\n",
           (double)s->nevents / med, s->nevents, med);
    if (argc > 1)
        return bench_oom(argv[1], s, first.devices[0].peak_reserved);
    return 0;
}
