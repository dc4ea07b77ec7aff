/* tests/bench/bench_alloc.c - the caching allocator against cub and cudaMalloc.
 *
 * One training-like workload, replayed through three allocators on the
 * simulated device in one run:
 *   - vramtrace (vt_malloc / vt_free), tracing off (trace:0) and, in a child
 *     process forked before any CUDA call, on (trace:1);
 *   - cub::CachingDeviceAllocator from the toolkit (bench_alloc_cub.cpp);
 *   - raw cudaMalloc / cudaFree.
 * The workload: 8 steps of a 16-layer forward/backward pattern (activations
 * kept until backward, gradients until the step ends, temporaries, sizes
 * 512 B .. 64 MiB) interleaved with a random log-uniform mix (512 B .. 64 MiB,
 * random lifetimes). Each thread replays it on its own stream.
 *
 * Reported: ns per alloc+free pair (median of repeats, 1 and 4 threads),
 * backend calls (simcuda counters, whole run incl. the cold first pass),
 * peak device bytes (simcuda high-water mark), and ratios. Not a test: run
 * it by hand (LD_LIBRARY_PATH=<build>/tests/sim SIMCUDA_MEM=64G). On a real
 * driver (scripts/gpu-check) the simulator's counters are absent: the times
 * are reported, backend calls and peaks are not.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simcuda.h"
#include "vramtrace.h"

#define BENCH_OPS
#include "bench_util.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* ---- the workload ------------------------------------------------------- */

static size_t nslots;   /* slots the workload uses: 1 + the highest */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) { return bench_xorshift64(&rng_state); }

static void push_op(uint32_t slot, uint64_t size)
{
    push(slot, size);
    if (slot + 1 > nslots)
        nslots = slot + 1;
}

static uint64_t log_uniform(void)
{
    double u = (double)(rng() % 1000000) / 1e6;
    return (uint64_t)(512.0 * pow(131072.0, u));   /* 512 B .. 64 MiB */
}

enum { LAYERS = 16, STEPS = 8, MIX = 64 };
/* slots: [0, LAYERS) activations, [LAYERS, 2L) layer extras,
 * [2L, 3L) gradients, 3L temp, [3L+1, 3L+1+MIX) random mix */

static void build_workload(void)
{
    static const uint64_t sizes[] = { 512, 2 * KiB, 24 * KiB, 192 * KiB, MiB,
                                      3 * MiB + 512 * KiB, 12 * MiB, 40 * MiB, 64 * MiB };
    const int ns = (int)(sizeof sizes / sizeof *sizes);
    const uint32_t TEMP = 3 * LAYERS, MIX0 = 3 * LAYERS + 1;
    bool live[MIX] = { 0 };
    for (int step = 0; step < STEPS; step++) {
        for (int l = 0; l < LAYERS; l++) {   /* forward */
            push_op((uint32_t)l, sizes[l % ns] + 256 * (uint64_t)(l & 3));
            push_op(LAYERS + (uint32_t)l, sizes[(l * 5) % 4]);
            push_op(TEMP, sizes[(l + 4) % ns]);
            push_op(TEMP, 0);
            for (int k = 0; k < 4; k++) {   /* the random mix, interleaved */
                uint32_t m = (uint32_t)(rng() % MIX);
                push_op(MIX0 + m, live[m] ? 0 : log_uniform());
                live[m] = !live[m];
            }
        }
        for (int l = LAYERS - 1; l >= 0; l--) {   /* backward */
            push_op(2 * LAYERS + (uint32_t)l, sizes[l % ns]);
            push_op(TEMP, sizes[(l + 2) % ns]);
            push_op(TEMP, 0);
            push_op((uint32_t)l, 0);
            push_op(LAYERS + (uint32_t)l, 0);
        }
        for (int l = 0; l < LAYERS; l++)   /* optimizer step: grads go */
            push_op(2 * LAYERS + (uint32_t)l, 0);
    }
    for (uint32_t m = 0; m < MIX; m++)
        if (live[m])
            push_op(MIX0 + m, 0);
}

/* ---- the allocators ----------------------------------------------------- */

void bench_cub_init(void);
void *bench_cub_alloc(size_t size, cudaStream_t stream);
void bench_cub_free(void *p, cudaStream_t stream);
void bench_cub_release(void);
const char *bench_cub_config(void);

typedef struct allocator {
    const char *name;
    void *(*alloc)(size_t, cudaStream_t);
    void (*free)(void *, size_t, cudaStream_t);
    void (*release)(void);
    int replays;        /* replays per timed repeat */
} allocator;

static void *vram_a(size_t n, cudaStream_t s) { return vt_malloc((ssize_t)n, 0, s); }
static void vram_f(void *p, size_t n, cudaStream_t s) { vt_free(p, (ssize_t)n, 0, s); }
static void vram_r(void) { vt_empty_cache(-1); }
static void *cub_a(size_t n, cudaStream_t s) { return bench_cub_alloc(n, s); }
static void cub_f(void *p, size_t n, cudaStream_t s) { (void)n; bench_cub_free(p, s); }
static void *raw_a(size_t n, cudaStream_t s)
{
    void *p = NULL;
    (void)s;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}
static void raw_f(void *p, size_t n, cudaStream_t s) { (void)n; (void)s; cudaFree(p); }
static void raw_r(void) {}

/* ---- running ------------------------------------------------------------ */

typedef struct job {
    const allocator *a;
    cudaStream_t stream;
    int replays;
    int failed;
} job;

static void replay(job *j)
{
    void **slot = calloc(nslots, sizeof *slot);
    uint64_t *size = calloc(nslots, sizeof *size);
    for (int r = 0; r < j->replays; r++)
        for (size_t i = 0; i < nops; i++) {
            const op *o = &ops[i];
            if (o->size) {
                slot[o->slot] = j->a->alloc(o->size, j->stream);
                size[o->slot] = o->size;
                j->failed += !slot[o->slot];
            } else {
                j->a->free(slot[o->slot], size[o->slot], j->stream);
                slot[o->slot] = NULL;
            }
        }
    free(slot);
    free(size);
}

static void *replay_thread(void *arg)
{
    replay(arg);
    return NULL;
}


static cudaStream_t streams[4];

/* The range of the last measure(): min and max over its repeats. */
static double last_lo, last_hi;

/* ns per pair: median over `repeats` of (wall time / pairs) with n threads
 * (the range of the repeats in last_lo/last_hi). */
static double measure(const allocator *a, int nthreads, int repeats)
{
    double t[64];
    for (int r = 0; r < repeats; r++) {
        job j[4];
        pthread_t th[4];
        double t0 = (double)bench_now_ns();
        for (int i = 0; i < nthreads; i++) {
            j[i] = (job){ a, streams[i], a->replays, 0 };
            pthread_create(&th[i], NULL, replay_thread, &j[i]);
        }
        for (int i = 0; i < nthreads; i++)
            pthread_join(th[i], NULL);
        double dt = (double)bench_now_ns() - t0;
        for (int i = 0; i < nthreads; i++)
            if (j[i].failed) {
                fprintf(stderr, "bench_alloc: %s: %d allocations failed\n", a->name, j[i].failed);
                exit(1);
            }
        t[r] = dt / ((double)npairs * a->replays * nthreads);
    }
    qsort(t, (size_t)repeats, sizeof *t, bench_cmp_double);
    last_lo = t[0];
    last_hi = t[repeats - 1];
    return t[repeats / 2];
}

typedef struct result {
    double ns1, ns4;
    double ns1_lo, ns1_hi, ns4_lo, ns4_hi;   /* ranges of the repeats */
    uint64_t backend_calls, peak;
    uint64_t pairs;
} result;

/* The simulator's counters, looked up in the driver the runtime loaded (a
 * real libcuda has none): call after the first CUDA call. */
static int (*sim_stats)(int, simcuda_counters *);
static void (*sim_reset)(void);

static void find_sim_counters(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *stats = h ? dlsym(h, "simcuda_stats") : NULL;
    void *reset = h ? dlsym(h, "simcuda_reset_counters") : NULL;
    if (stats && reset) {
        memcpy(&sim_stats, &stats, sizeof stats);
        memcpy(&sim_reset, &reset, sizeof reset);
    }
}

static result run(const allocator *a, int repeats)
{
    result r = { 0 };
    simcuda_counters c = { 0 };
    if (sim_reset)
        sim_reset();
    /* cold pass: fills the cache, counted in backend calls and peak */
    job cold = { a, streams[0], 1, 0 };
    replay(&cold);
    r.ns1 = measure(a, 1, repeats);
    r.ns1_lo = last_lo, r.ns1_hi = last_hi;
    r.ns4 = measure(a, 4, repeats);
    r.ns4_lo = last_lo, r.ns4_hi = last_hi;
    if (sim_stats)
        sim_stats(0, &c);
    r.backend_calls = c.mem_alloc_calls + c.mem_free_calls;
    r.peak = c.peak_bytes;
    r.pairs = npairs * (1 + (uint64_t)a->replays * (uint64_t)repeats * 5);
    a->release();
    cudaDeviceSynchronize();
    return r;
}

static const allocator vram_alloc = { "vramtrace", vram_a, vram_f, vram_r, 20 };
static const allocator cub_alloc = { "cub", cub_a, cub_f, NULL, 20 };
static const allocator raw_alloc = { "cudaMalloc", raw_a, raw_f, raw_r, 1 };

static void setup_streams(void)
{
    for (int i = 0; i < 4; i++)
        cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
}

/* The recorder reads VRAMTRACE_CONF once, in its constructor, before main:
 * so each tracing setting runs in a process of its own, this program
 * executed again with the variable set. @return the child's ns per pair. */
static double run_self(const char *conf)
{
    char cmd[4200];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "VRAMTRACE_CONF=%s BENCH_VT_ONLY=1 '%s'", conf, self);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    double ns = -1;
    if (fscanf(f, "vramtrace ns_per_pair %lf", &ns) != 1)
        ns = -1;
    pclose(f);
    return ns;
}

int main(void)
{
    build_workload();
    const int repeats = 7;
    allocator cub = cub_alloc;
    cub.release = bench_cub_release;

    if (getenv("BENCH_VT_ONLY")) {   /* vramtrace alone, 1 thread (also for profiling) */
        setup_streams();
        job cold = { &vram_alloc, streams[0], 1, 0 };
        replay(&cold);
        printf("vramtrace ns_per_pair %.1f\n", measure(&vram_alloc, 1, 3 * repeats));
        return 0;
    }
    if (!getenv("BENCH_ALLOC_MAIN")) {   /* rerun with tracing off */
        setenv("VRAMTRACE_CONF", "trace:0", 1);
        setenv("BENCH_ALLOC_MAIN", "1", 1);
        execl("/proc/self/exe", "bench_alloc", (char *)NULL);
        perror("bench_alloc: exec");
        return 1;
    }
    double traced = run_self("trace:1");
    setup_streams();
    find_sim_counters();
    bench_cub_init();

    result v = run(&vram_alloc, repeats);
    result c = run(&cub, repeats);
    result r = run(&raw_alloc, 3);

    struct cudaDeviceProp prop;
    const char *device = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "?";
    printf("bench_alloc: %zu alloc+free pairs per replay (16-layer fwd/bwd x %d steps + "
           "log-uniform mix), sizes 512 B .. 64 MiB, device: %s\n", npairs, STEPS, device);
    if (!sim_stats)
        printf("(not the simulated device: backend calls and peaks are not counted, shown as 0)\n");
    printf("cub config: %s\n", bench_cub_config());
    printf("%-22s %12s %12s %14s %12s %14s\n", "allocator", "ns/pair 1T", "ns/pair 4T",
           "backend calls", "pairs", "peak MiB");
    const result *rs[] = { &v, &c, &r };
    const char *names[] = { "vramtrace (trace:0)", "cub", "cudaMalloc/cudaFree" };
    for (int i = 0; i < 3; i++)
        printf("%-22s %12.1f %12.1f %14llu %12llu %14.1f\n", names[i], rs[i]->ns1, rs[i]->ns4,
               (unsigned long long)rs[i]->backend_calls, (unsigned long long)rs[i]->pairs,
               (double)rs[i]->peak / (double)MiB);
    if (traced > 0)
        printf("%-22s %12.1f %12s\n", "vramtrace (trace:1)", traced, "-");
    printf("ns/pair are medians of the repeats (%d for vramtrace and cub, 3 for cudaMalloc); "
           "their ranges (min-max):\n", repeats);
    for (int i = 0; i < 3; i++)
        printf("%-22s 1T %.1f-%.1f, 4T %.1f-%.1f\n", names[i], rs[i]->ns1_lo, rs[i]->ns1_hi,
               rs[i]->ns4_lo, rs[i]->ns4_hi);
    printf("ratios: cub/vramtrace %.2fx (1T) %.2fx (4T); cudaMalloc/vramtrace %.1fx (1T); "
           "peak vramtrace/cub %.3f\n", c.ns1 / v.ns1, c.ns4 / v.ns4, r.ns1 / v.ns1,
           (double)v.peak / (double)c.peak);
    printf("RESULT ns_per_pair=%.1f vs_cub=%.2f vs_raw=%.1f reserved_vs_cub=%.3f\n", v.ns1,
           c.ns1 / v.ns1, r.ns1 / v.ns1, (double)v.peak / (double)c.peak);
    return 0;
}
