/*
 * tests/bench/bench_strings.c - what unique vt_mark labels cost in time and
 * memory, with and without snapshots taken meanwhile.
 *
 *   bench_strings [--marks N] [--runs R]
 *
 * Two threads each call vt_mark() N/2 times with a new label every time
 * ("epoch 3 step <n>"), timing every call. Once alone, once while a third
 * thread writes snapshots back to back (vt_snapshot to a temporary file).
 * Per run: the median, 99.9th percentile and largest vt_mark latency, and the
 * process's resident memory growth; R runs (default 3), each in this process
 * (the ring is the configured one, VRAMTRACE_CONF; it is filled once with one
 * repeated label first, so that its own pages are not counted as growth). Printed: every run, then
 * the median over runs with the spread (min..max) of each figure. The last
 * line is the machine-readable summary: the ratio of the largest latency with
 * snapshots to without tells whether marks wait for snapshots.
 */
#include "vramtrace.h"
#include "bench_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 2

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct marker {
    unsigned id, n;
    uint64_t base;             /* label numbers continue across runs: all unique */
    uint64_t *lat;
} marker;

static void *mark_thread(void *arg)
{
    marker *m = arg;
    char label[64];
    for (unsigned i = 0; i < m->n; i++) {
        snprintf(label, sizeof label, "epoch 3 step %u.%llu", m->id,
                 (unsigned long long)(m->base + i));
        uint64_t t0 = bench_now_ns();
        vt_mark(label);
        m->lat[i] = bench_now_ns() - t0;
    }
    return NULL;
}

static atomic_bool snapping;
static atomic_uint snapshots;
static char snap_path[64];

static void *snapshot_thread(void *arg)
{
    (void)arg;
    while (atomic_load(&snapping)) {
        if (vt_snapshot(snap_path) == 0)
            atomic_fetch_add(&snapshots, 1);
    }
    return NULL;
}

typedef struct figures { double median_ns, p999_us, max_us, rss_mib; unsigned snaps; } figures;

static figures run(unsigned n, uint64_t base, int with_snapshots)
{
    marker m[THREADS];
    pthread_t t[THREADS], s;
    long rss0 = rss_kib();
    atomic_store(&snapshots, 0);
    atomic_store(&snapping, true);
    if (with_snapshots)
        pthread_create(&s, NULL, snapshot_thread, NULL);
    for (unsigned i = 0; i < THREADS; i++) {
        m[i] = (marker){ .id = i, .n = n / THREADS, .base = base,
                         .lat = malloc(n / THREADS * sizeof(uint64_t)) };
        pthread_create(&t[i], NULL, mark_thread, &m[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&snapping, false);
    if (with_snapshots)
        pthread_join(s, NULL);
    size_t total = (size_t)(n / THREADS) * THREADS;
    uint64_t *all = malloc(total * sizeof *all);
    for (unsigned i = 0; i < THREADS; i++) {
        memcpy(all + (size_t)i * (n / THREADS), m[i].lat, n / THREADS * sizeof *all);
        free(m[i].lat);
    }
    qsort(all, total, sizeof *all, cmp_u64);
    figures f = {
        .median_ns = (double)all[total / 2],
        .p999_us = (double)all[total - 1 - total / 1000] / 1e3,
        .max_us = (double)all[total - 1] / 1e3,
        .rss_mib = (double)(rss_kib() - rss0) / 1024.0,
        .snaps = atomic_load(&snapshots),
    };
    free(all);
    return f;
}

static void spread(const char *name, double *v, int n, double *median)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *median = v[n / 2];
    printf("  %-28s median %10.2f  (%.2f .. %.2f)\n", name, v[n / 2], v[0], v[n - 1]);
}

int main(int argc, char **argv)
{
    unsigned marks = 4000000;
    int runs = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--marks"))
            marks = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
    }
    if (runs < 1 || runs > 32 || marks < THREADS * 1000) {
        fprintf(stderr, "bench_strings: bad arguments\n");
        return 2;
    }
    snprintf(snap_path, sizeof snap_path, "/tmp/bench-strings-%d.vtsnap", (int)getpid());
    double alone_max[32], snap_max[32], alone_med[32], snap_med[32], alone_rss[32],
        snap_rss[32], snap_p999[32], alone_p999[32];
    uint64_t base = 0;
    for (unsigned i = 0; i < 2000000; i++)   /* the default ring, 1M events, twice over */
        vt_mark("warm-up");
    printf("bench_strings: %u unique vt_mark labels per run from %d threads, %d runs\n",
           marks, THREADS, runs);
    for (int r = 0; r < runs; r++) {
        figures a = run(marks, base, 0);
        base += marks;
        figures b = run(marks, base, 1);
        base += marks;
        printf("run %d: alone median %.0f ns, p99.9 %.1f us, max %.1f us, rss +%.1f MiB | "
               "with %u snapshots: median %.0f ns, p99.9 %.1f us, max %.1f us, rss +%.1f MiB\n",
               r + 1, a.median_ns, a.p999_us, a.max_us, a.rss_mib, b.snaps, b.median_ns,
               b.p999_us, b.max_us, b.rss_mib);
        alone_max[r] = a.max_us; snap_max[r] = b.max_us;
        alone_med[r] = a.median_ns; snap_med[r] = b.median_ns;
        alone_p999[r] = a.p999_us; snap_p999[r] = b.p999_us;
        alone_rss[r] = a.rss_mib; snap_rss[r] = b.rss_mib;
    }
    unlink(snap_path);
    double am, sm, amed, smed, ap, sp, ar, sr;
    printf("median over %d runs (min .. max):\n", runs);
    spread("mark median ns, alone", alone_med, runs, &amed);
    spread("mark median ns, snapshots", snap_med, runs, &smed);
    spread("mark p99.9 us, alone", alone_p999, runs, &ap);
    spread("mark p99.9 us, snapshots", snap_p999, runs, &sp);
    spread("mark max us, alone", alone_max, runs, &am);
    spread("mark max us, snapshots", snap_max, runs, &sm);
    spread("rss growth MiB, alone", alone_rss, runs, &ar);
    spread("rss growth MiB, snapshots", snap_rss, runs, &sr);
    printf("RESULT mark_ns=%.0f mark_p999_us=%.1f mark_max_us=%.1f "
           "mark_max_us_with_snapshots=%.1f max_ratio=%.2f rss_growth_mib=%.1f\n",
           amed, ap, am, sm, am > 0 ? sm / am : 0.0, ar > sr ? ar : sr);
    return 0;
}
