/* tests/bench/bench_expandable.c - expandable segments against fixed ones.
 *
 * Two workloads on the simulated device, each run through vramtrace with
 * expandable_segments:0 and :1 (trace:0, each in a process of its own: the
 * configuration is read once) and through plain cudaMalloc/cudaFree:
 *   - mix: a random log-uniform mix of sizes (512 B .. 64 MiB) with random
 *     lifetimes, 64 slots, one stream: the steady state of a cache;
 *   - batches: a training loop whose batch size changes every step (sizes
 *     scale with 1..8 x a base), activations kept until the step ends, one
 *     small statistic per step kept for 4 steps: the pattern that pins fixed
 *     segments.
 * Reported per workload and setting: ns per alloc+free pair on the first
 * (cold) pass, where the cache grows, and on later (warm) passes (median of
 * 5), the peak reserved bytes (the allocator's), the device's peak bytes
 * (simulated device high-water mark), and device calls (cuMemAlloc +
 * cuMemCreate). Not a test: `meson test -C BUILD --benchmark bench_expandable -v`.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simcuda.h"
#include "vramtrace.h"

#define BENCH_OPS
#include "bench_util.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) { return bench_xorshift64(&rng_state); }

#define SLOTS 4096

static void build_mix(void)
{
    bool live[64] = { false };
    for (int i = 0; i < 100000; i++) {
        uint32_t s = (uint32_t)(rng() % 64);
        if (live[s]) {
            push(s, 0);
            live[s] = false;
        } else {
            double e = (double)(rng() % 10000) / 10000.0;   /* log-uniform 512 B .. 64 MiB */
            push(s, (uint64_t)(512.0 * pow(2.0, e * 17.0)));
            live[s] = true;
        }
    }
    for (uint32_t s = 0; s < 64; s++)
        if (live[s])
            push(s, 0);
}

static void build_batches(void)
{
    uint32_t stat_slot[4] = { 0 };
    bool stat_live[4] = { false };
    for (int step = 0; step < 64; step++) {
        uint64_t batch = 1 + rng() % 8;
        uint32_t base = 100;
        for (uint32_t l = 0; l < 24; l++)     /* activations, kept to the step's end */
            push(base + l, batch * (3 * MiB + (l % 5) * MiB / 2));
        for (uint32_t l = 0; l < 24; l++) {   /* a temporary per layer in backward */
            push(200, batch * 2 * MiB);
            push(200, 0);
        }
        int k = step % 4;                     /* a statistic kept for 4 steps */
        if (stat_live[k])
            push(stat_slot[k], 0);
        stat_slot[k] = 300 + (uint32_t)k;
        push(stat_slot[k], 256 * KiB + batch * 64 * KiB);
        stat_live[k] = true;
        for (uint32_t l = 0; l < 24; l++)
            push(base + l, 0);
    }
    for (int k = 0; k < 4; k++)
        if (stat_live[k])
            push(stat_slot[k], 0);
}

static void *slots[SLOTS];
static bool use_raw;

static int replay(void)
{
    for (size_t i = 0; i < nops; i++) {
        const op *o = &ops[i];
        if (o->size) {
            void *p = NULL;
            if (use_raw) {
                if (cudaMalloc(&p, o->size) != cudaSuccess)
                    p = NULL;
            } else {
                p = vt_malloc((ssize_t)o->size, 0, 0);
            }
            if (!p)
                return -1;
            slots[o->slot] = p;
        } else {
            if (use_raw)
                cudaFree(slots[o->slot]);
            else
                vt_free(slots[o->slot], 0, 0, 0);
            slots[o->slot] = NULL;
        }
    }
    return 0;
}


/* One setting in this process: prints one line the parent reads. */
static int run_one(const char *workload)
{
    if (!strcmp(workload, "mix"))
        build_mix();
    else
        build_batches();
    cudaFree(NULL);
    simcuda_reset_counters();
    double t0 = (double)bench_now_ns();
    if (replay())
        return 1;
    double cold = ((double)bench_now_ns() - t0) / (double)npairs;
    double warm[5];
    for (int r = 0; r < 5; r++) {
        t0 = (double)bench_now_ns();
        if (replay())
            return 1;
        warm[r] = ((double)bench_now_ns() - t0) / (double)npairs;
    }
    qsort(warm, 5, sizeof *warm, bench_cmp_double);
    simcuda_counters c;
    simcuda_stats(0, &c);
    vt_stats s;
    uint64_t peak_reserved = 0;
    if (!use_raw && vt_get_stats(0, &s) == 0)
        peak_reserved = (uint64_t)s.reserved_bytes[VT_STAT_ALL].peak;
    printf("%.1f %.1f %llu %llu %llu %zu\n", cold, warm[2], (unsigned long long)peak_reserved,
           (unsigned long long)c.peak_bytes,
           (unsigned long long)(c.mem_alloc_calls + c.vmm_create_calls), npairs);
    return 0;
}

typedef struct row { double cold, warm; unsigned long long reserved, peak, calls; size_t pairs; } row;

static int run_child(const char *self, const char *workload, const char *conf, row *out)
{
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "VRAMTRACE_CONF=trace:0,%s BENCH_EXP_CHILD=%s '%s'", conf, workload,
             self);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    int n = fscanf(f, "%lf %lf %llu %llu %llu %zu", &out->cold, &out->warm, &out->reserved,
                   &out->peak, &out->calls, &out->pairs);
    int rc = pclose(f);
    return n == 6 && rc == 0 ? 0 : -1;
}

int main(void)
{
    const char *child = getenv("BENCH_EXP_CHILD");
    if (child) {
        use_raw = getenv("BENCH_EXP_RAW") != NULL;
        return run_one(child);
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = 0;
    const char *workloads[] = { "mix", "batches" };
    const char *confs[] = { "expandable_segments:0", "expandable_segments:1" };
    double ratio_warm[2] = { 0 }, ratio_peak[2] = { 0 };
    printf("bench_expandable: simulated device, one stream, trace:0\n");
    printf("%-8s %-22s %10s %10s %14s %14s %10s\n", "workload", "allocator", "cold ns", "warm ns",
           "peak reserved", "device peak", "dev calls");
    for (int w = 0; w < 2; w++) {
        row r[3];
        for (int c = 0; c < 2; c++)
            if (run_child(self, workloads[w], confs[c], &r[c])) {
                fprintf(stderr, "bench_expandable: %s with %s failed\n", workloads[w], confs[c]);
                return 1;
            }
        setenv("BENCH_EXP_RAW", "1", 1);
        if (run_child(self, workloads[w], "cache:0", &r[2])) {
            fprintf(stderr, "bench_expandable: %s with cudaMalloc failed\n", workloads[w]);
            return 1;
        }
        unsetenv("BENCH_EXP_RAW");
        const char *names[] = { "vramtrace fixed", "vramtrace expandable", "cudaMalloc" };
        for (int c = 0; c < 3; c++)
            printf("%-8s %-22s %10.1f %10.1f %10.1f MiB %10.1f MiB %10llu\n", workloads[w],
                   names[c], r[c].cold, r[c].warm, (double)r[c].reserved / (double)MiB,
                   (double)r[c].peak / (double)MiB, r[c].calls);
        printf("%-8s %zu alloc+free pairs per pass\n", workloads[w], r[0].pairs);
        ratio_warm[w] = r[1].warm / r[0].warm;
        ratio_peak[w] = (double)r[1].peak / (double)r[0].peak;
    }
    printf("RESULT mix_warm_ratio=%.2f mix_peak_ratio=%.3f batches_warm_ratio=%.2f "
           "batches_peak_ratio=%.3f (expandable / fixed)\n",
           ratio_warm[0], ratio_peak[0], ratio_warm[1], ratio_peak[1]);
    return 0;
}
