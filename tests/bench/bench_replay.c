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
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "replay.h"
#include "bench_util.h"

#define NEVENTS 1000000
#define PER_STEP 40
#define REPS 5

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) { return bench_xorshift64(&rng); }

static vt_snapshot_data *make_trace(void)
{
    vt_snapshot_data *s = calloc(1, sizeof *s);
    vt_event *ev = calloc(NEVENTS + 4 * PER_STEP, sizeof *ev);
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
#define PUSH(k, a, sz, st, x) ev[n] = (vt_event){ .seq = n + 1, .time_ns = 1000 * (n + 1), \
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

int main(void)
{
    vt_snapshot_data *s = make_trace();
    if (!s) {
        fprintf(stderr, "bench_replay: out of memory\n");
        return 1;
    }
    double secs[REPS];
    vt_replay_result first;
    memset(&first, 0, sizeof first);
    for (int rep = 0; rep < REPS; rep++) {
        int fds[2];
        if (pipe(fds))
            return 1;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            vt_replay_result r;
            char err[256];
            double t0 = now_s();
            int rc = vt_replay_run(s, NULL, &r, err, sizeof err);
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
        vt_replay_result r;
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
    return 0;
}
