/* tests/hooks/prog_streams.c - stream-ordered frees and reuse across streams.
 *
 *   prog_streams shapes       each way a block freed in stream order can come
 *                             back too early: the freeing stream still has
 *                             queued reads of it (held back by a slow host
 *                             function) when a cudaMalloc'd block is written
 *                             on a non-blocking stream; every read must see
 *                             the data written before the free
 *   prog_streams churn SEED   a random, correctly ordered program over the
 *                             legacy, per-thread, blocking and non-blocking
 *                             streams: plain and stream-ordered allocations
 *                             and frees, slow host functions, memsets and
 *                             copies; every read is checked against the value
 *                             program order says it must have
 *   prog_streams freewait     relies on cudaFree waiting for the device: reads
 *                             pinned host memory an async copy fills, after a
 *                             cudaFree and no synchronization of its own (the
 *                             one behaviour vramtrace changes, unless
 *                             free_sync:1)
 *   prog_streams dead         stream-ordered calls on a destroyed stream: the
 *                             error codes, and nothing allocated or freed.
 *                             Undefined behaviour in CUDA: on an NVIDIA H200
 *                             (driver 580.159.04, CUDA 13.0) the plain
 *                             program crashed (SIGSEGV); the simulator's
 *                             cudaErrorInvalidResourceHandle is its choice
 *                             (tests/sim/README.md), and vramtrace must
 *                             answer as the simulator does
 * A correct program on real CUDA (but for the calls on a dead stream): output (corrupted bytes, a hash of what was
 * read) must be identical with and without libvramtrace preloaded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "hk_check.h"
#include "hk_stats.h"

#define CK(x) HK_CHECK(cudaError_t, cudaSuccess, x, exit(1))

static long allocs;

/* ---- shapes --------------------------------------------------------------- */

enum alloc_kind { PLAIN, ASYNC_ON_FREE_STREAM };

/* Fill a block with 0xAA, queue a slow read of it on `rs` (a copy into
 * `copy`), free it with cudaFreeAsync on `fs`, then cudaMalloc a block of the
 * same size and write 0x55 into it on a non-blocking stream at once. The read
 * must still see 0xAA. @return corrupted bytes. */
static long one_shape(size_t n, enum alloc_kind kind, cudaStream_t rs, cudaStream_t fs,
                      cudaStream_t other, unsigned char *copy, unsigned char *h)
{
    void *p = NULL, *b = NULL;
    if (kind == PLAIN)
        CK(cudaMalloc(&p, n));
    else
        CK(cudaMallocAsync(&p, n, fs));
    allocs++;
    CK(cudaMemsetAsync(p, 0xAA, n, rs));
    CK(cudaLaunchHostFunc(rs, hk_sleep_ms, (void *)(intptr_t)40));
    CK(cudaMemcpyAsync(copy, p, n, cudaMemcpyDeviceToDevice, rs));
    CK(cudaFreeAsync(p, fs));
    CK(cudaMalloc(&b, n));
    allocs++;
    CK(cudaMemsetAsync(b, 0x55, n, other));
    CK(cudaStreamSynchronize(other));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, copy, n, cudaMemcpyDeviceToHost));
    long bad = hk_count_not(h, n, 0xAA);
    CK(cudaMemcpy(h, b, n, cudaMemcpyDeviceToHost));
    bad += hk_count_not(h, n, 0x55);
    CK(cudaFree(b));
    return bad;
}

static int shapes(void)
{
    const size_t sizes[] = { 64 << 10, 3 << 20, 12 << 20 };   /* small, large, own segment */
    const size_t nmax = 12 << 20;
    unsigned char *h = malloc(nmax), *copy = NULL;
    cudaStream_t nb, blk;
    CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&blk));
    CK(cudaMalloc((void **)&copy, nmax));
    allocs++;
    const cudaStream_t legacy = 0, ptds = cudaStreamPerThread;
    struct {
        const char *name;
        enum alloc_kind kind;
        cudaStream_t rs, fs;
    } cases[] = {
        { "cudaMalloc, read on legacy, cudaFreeAsync on legacy", PLAIN, legacy, legacy },
        { "cudaMallocAsync+cudaFreeAsync on legacy", ASYNC_ON_FREE_STREAM, legacy, legacy },
        { "cudaMalloc, read on legacy, cudaFreeAsync on a blocking stream", PLAIN, legacy, blk },
        { "cudaMalloc, read on a blocking stream, cudaFreeAsync on legacy", PLAIN, blk, legacy },
        { "cudaMallocAsync+cudaFreeAsync on a blocking stream", ASYNC_ON_FREE_STREAM, blk, blk },
        { "cudaMalloc, cudaFreeAsync on a non-blocking stream", PLAIN, nb, nb },
        { "cudaMallocAsync+cudaFreeAsync on a non-blocking stream", ASYNC_ON_FREE_STREAM, nb, nb },
        { "cudaMallocAsync+cudaFreeAsync on the per-thread stream", ASYNC_ON_FREE_STREAM, ptds,
          ptds },
    };
    cudaStream_t other;
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        long bad = 0;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (int round = 0; round < 2; round++)
                bad += one_shape(sizes[k], cases[c].kind, cases[c].rs, cases[c].fs, other, copy,
                                 h);
        printf("%s: corrupted bytes=%ld\n", cases[c].name, bad);
    }
    CK(cudaFree(copy));
    CK(cudaStreamDestroy(nb));
    CK(cudaStreamDestroy(blk));
    CK(cudaStreamDestroy(other));
    hk_report_stats(allocs);
    free(h);
    return 0;
}

/* ---- churn ---------------------------------------------------------------- */

#define NSTREAMS 6
#define NSLOTS 24
#define NREADS 400
#define PROBE 256           /* bytes read back from each end of a buffer */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;   /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static unsigned rnd_below(unsigned n) { return (unsigned)(rnd() % n); }

enum { S_LEGACY, S_PTDS, S_BLOCKING1, S_BLOCKING2, S_NONBLOCKING1, S_NONBLOCKING2 };

static int is_blocking(int s) { return s <= S_BLOCKING2; }

struct slot {
    unsigned char *p;
    size_t n;
    int owner;              /* every use is on this stream */
    int async;              /* from cudaMallocAsync */
    unsigned char value;    /* what the last memset wrote, in program order */
};

static int churn(uint64_t seed)
{
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    cudaStream_t st[NSTREAMS];
    st[S_LEGACY] = 0;
    st[S_PTDS] = cudaStreamPerThread;
    CK(cudaStreamCreate(&st[S_BLOCKING1]));
    CK(cudaStreamCreateWithFlags(&st[S_BLOCKING2], cudaStreamDefault));
    CK(cudaStreamCreateWithFlags(&st[S_NONBLOCKING1], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&st[S_NONBLOCKING2], cudaStreamNonBlocking));
    /* Each read copies PROBE bytes from each end of a buffer into its own
     * place here; checked at the end against what program order says. */
    unsigned char *reads = NULL, *expect = calloc(NREADS, 2 * PROBE);
    unsigned char *h = malloc((size_t)NREADS * 2 * PROBE);
    CK(cudaMalloc((void **)&reads, (size_t)NREADS * 2 * PROBE));
    allocs++;
    CK(cudaMemset(reads, 0, (size_t)NREADS * 2 * PROBE));
    CK(cudaDeviceSynchronize());
    struct slot slots[NSLOTS] = { { 0 } };
    static const size_t sizes[] = { 512, 4000, 64 << 10, 700 << 10, 1 << 20, (1 << 20) + 512,
                                    3 << 20, 7 << 20, 11 << 20 };
    int nread = 0, op = 0;
    while (nread < NREADS) {
        struct slot *sl = &slots[rnd_below(NSLOTS)];
        op++;
        if (!sl->p) {
            sl->n = sizes[rnd_below(sizeof sizes / sizeof sizes[0])] + rnd_below(4) * 512;
            sl->owner = (int)rnd_below(NSTREAMS);
            sl->async = (int)rnd_below(2);
            if (!sl->async)
                CK(cudaMalloc((void **)&sl->p, sl->n));       /* any stream, at once */
            else
                CK(cudaMallocAsync((void **)&sl->p, sl->n, st[sl->owner]));
            allocs++;
            sl->value = (unsigned char)(1 + rnd_below(250));
            CK(cudaMemsetAsync(sl->p, sl->value, sl->n, st[sl->owner]));
            continue;
        }
        cudaStream_t s = st[sl->owner];
        switch (rnd_below(6)) {
        case 0:   /* a slow "kernel" before whatever comes next */
            CK(cudaLaunchHostFunc(s, hk_sleep_ms, (void *)(intptr_t)(1 + rnd_below(3))));
            break;
        case 1:   /* rewrite */
            sl->value = (unsigned char)(1 + rnd_below(250));
            CK(cudaMemsetAsync(sl->p, sl->value, sl->n, s));
            break;
        case 2:
        case 3: { /* read both ends */
            unsigned char *dst = reads + (size_t)nread * 2 * PROBE;
            size_t k = sl->n < PROBE ? sl->n : PROBE;
            if (rnd_below(2))   /* often still queued when the block is freed */
                CK(cudaLaunchHostFunc(s, hk_sleep_ms, (void *)(intptr_t)1));
            CK(cudaMemcpyAsync(dst, sl->p, k, cudaMemcpyDeviceToDevice, s));
            CK(cudaMemcpyAsync(dst + PROBE, sl->p + sl->n - k, k, cudaMemcpyDeviceToDevice, s));
            memset(expect + (size_t)nread * 2 * PROBE, sl->value, k);
            memset(expect + (size_t)nread * 2 * PROBE + PROBE, sl->value, k);
            nread++;
            break;
        }
        default: { /* free: on its stream, or where legacy rules order it */
            unsigned how = rnd_below(4);
            if (how == 0) {
                /* cudaFree synchronizes the device, except for a
                 * stream-ordered allocation: its stream is waited for first */
                if (sl->async)
                    CK(cudaStreamSynchronize(s));
                CK(cudaFree(sl->p));
            } else {
                int fs = sl->owner;
                if (how == 3 && is_blocking(sl->owner)) {
                    /* the legacy stream waits for blocking streams' earlier
                     * work, blocking streams wait for the legacy stream's */
                    fs = sl->owner == S_LEGACY ? S_BLOCKING1 + (int)rnd_below(2) : S_LEGACY;
                }
                CK(cudaFreeAsync(sl->p, st[fs]));
            }
            sl->p = NULL;
            break;
        }
        }
    }
    for (int i = 0; i < NSLOTS; i++)
        if (slots[i].p)
            CK(cudaFreeAsync(slots[i].p, st[slots[i].owner]));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, reads, (size_t)NREADS * 2 * PROBE, cudaMemcpyDeviceToHost));
    long bad = 0;
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)NREADS * 2 * PROBE; i++) {
        bad += h[i] != expect[i];
        hash = (hash ^ h[i]) * 1099511628211ull;
    }
    printf("churn seed %llu: %d ops, %d reads, corrupted bytes=%ld, hash=%016llx\n",
           (unsigned long long)seed, op, nread, bad, (unsigned long long)hash);
    CK(cudaFree(reads));
    for (int i = S_BLOCKING1; i < NSTREAMS; i++)
        CK(cudaStreamDestroy(st[i]));
    hk_report_stats(allocs);
    free(h);
    free(expect);
    return 0;
}

/* ---- a program that relies on cudaFree's wait -------------------------------- */

static int freewait(void)
{
    const size_t n = 1 << 20;
    unsigned char *pinned = NULL, *d = NULL;
    void *x = NULL;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMallocHost((void **)&pinned, n));
    CK(cudaMalloc((void **)&d, n));
    CK(cudaMalloc(&x, 4096));
    memset(pinned, 0, n);
    CK(cudaMemset(d, 0x3c, n));
    CK(cudaDeviceSynchronize());
    CK(cudaLaunchHostFunc(s, hk_sleep_ms, (void *)(intptr_t)30));
    CK(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s));
    CK(cudaFree(x));                  /* CUDA: waits for the copy */
    printf("read after cudaFree: wrong bytes=%ld\n", hk_count_not(pinned, n, 0x3c));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(d));
    CK(cudaFreeHost(pinned));
    CK(cudaStreamDestroy(s));
    hk_report_stats(2);
    return 0;
}

/* ---- a destroyed stream ----------------------------------------------------- */

static int dead(void)
{
    cudaStream_t s;
    void *p = NULL, *q = (void *)0x1;
    size_t f0 = 0, f1 = 0, t = 0;
    CK(cudaMalloc(&p, 1 << 20));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamDestroy(s));
    CK(cudaMemGetInfo(&f0, &t));
    printf("cudaMallocAsync on a destroyed stream: %d\n", (int)cudaMallocAsync(&q, 4096, s));
    printf("  last error: %d, pointer set: %d\n", (int)cudaGetLastError(), q != (void *)0x1);
    printf("cudaFreeAsync on a destroyed stream: %d\n", (int)cudaFreeAsync(p, s));
    printf("  last error: %d\n", (int)cudaGetLastError());
    CK(cudaMemGetInfo(&f1, &t));
    printf("free memory unchanged: %d\n", f0 == f1);
    printf("the block is still live: %d\n", (int)cudaMemset(p, 0, 1 << 20));
    CK(cudaDeviceSynchronize());
    printf("plain free: %d\n", (int)cudaFree(p));
    hk_report_stats(1);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "freewait"))
        return freewait();
    if (argc >= 2 && !strcmp(argv[1], "dead"))
        return dead();
    if (argc >= 2 && !strcmp(argv[1], "shapes"))
        return shapes();
    if (argc >= 3 && !strcmp(argv[1], "churn"))
        return churn(strtoull(argv[2], NULL, 10));
    fprintf(stderr, "usage: prog_streams shapes | churn SEED\n");
    return 2;
}
