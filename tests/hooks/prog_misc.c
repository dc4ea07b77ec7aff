/* tests/hooks/prog_misc.c - unmodified runtime-API programs for the edge cases.
 *
 *   prog_misc race      cudaFree of a buffer a non-blocking stream writes into
 *                       50 ms later; a cudaMalloc + write on another stream
 *                       meanwhile must come back intact
 *   prog_misc badfree   foreign, interior and double frees: print the codes
 *   prog_misc pending   destroy a stream whose freed block is still pending
 *   prog_misc lasterr   calls the cache fails (out of memory, bad frees) set
 *                       the thread's last error: cudaGetLastError and
 *                       cudaPeekAtLastError sequences, mixed with errors of
 *                       the real runtime, in both orders
 *   prog_misc reset     cudaDeviceReset with live, cached and stream-ordered
 *                       blocks: old pointers are invalid afterwards, the
 *                       device works again, memory info adds up
 *   prog_misc hold      allocate 1 MiB, print "ready", wait for signals
 *                       (snapshot tests of `vramtrace run`)
 *   prog_misc exec CMD...  allocate 1 MiB, then exec CMD
 *   prog_misc vfork     allocate 1 MiB, run /bin/true through vfork + execv
 *                       and posix_spawn, then exit normally
 * Output must be identical with and without libvramtrace preloaded (also
 * when linked with a static runtime, where only the driver hooks see it).
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include <cuda_runtime_api.h>

#include "hk_check.h"
#include "hk_stats.h"

#define CK(x) HK_CHECK(cudaError_t, cudaSuccess, x, return 1)

static int race(void)
{
    const size_t n = 256 * 1024;
    unsigned char *h = malloc(n);
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    long allocs = 0;
    int corrupted = 0;
    for (int round = 0; round < 3; round++) {
        void *a = NULL, *b = NULL;
        CK(cudaMalloc(&a, n));
        allocs++;
        /* s1: 50 ms of "kernel", then it writes 0xAA into a. */
        CK(cudaLaunchHostFunc(s1, hk_sleep_ms, (void *)(intptr_t)50));
        CK(cudaMemsetAsync(a, 0xAA, n, s1));
        CK(cudaFree(a));                 /* CUDA waits; the cache must fence */
        CK(cudaMalloc(&b, n));           /* same size: a's block if unfenced */
        allocs++;
        CK(cudaMemsetAsync(b, 0x55, n, s2));
        CK(cudaStreamSynchronize(s2));
        CK(cudaDeviceSynchronize());     /* s1's late write has landed by now */
        CK(cudaMemcpy(h, b, n, cudaMemcpyDeviceToHost));
        corrupted += hk_count_not(h, n, 0x55);
        CK(cudaFree(b));
    }
    printf("race: corrupted bytes=%d\n", corrupted);
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    hk_report_stats(allocs);
    free(h);
    return 0;
}

static int badfree(void)
{
    void *p = NULL, *q = NULL;
    CK(cudaMalloc(&p, 4096));
    CK(cudaMalloc(&q, 1 << 20));
    int host_var = 0;
    printf("foreign device-range pointer: %d\n", (int)cudaFree((void *)(uintptr_t)0x1000));
    printf("host pointer: %d\n", (int)cudaFree(&host_var));
    printf("interior pointer: %d\n", (int)cudaFree((char *)p + 256));
    printf("first free: %d\n", (int)cudaFree(p));
    printf("double free: %d\n", (int)cudaFree(p));
    printf("free of a live neighbour: %d\n", (int)cudaFree(q));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *r = NULL;
    CK(cudaMallocAsync(&r, 1000, s));
    printf("interior async free: %d\n", (int)cudaFreeAsync((char *)r + 8, s));
    printf("async free: %d\n", (int)cudaFreeAsync(r, s));
    CK(cudaStreamSynchronize(s));
    printf("NULL free: %d\n", (int)cudaFree(NULL));
    CK(cudaStreamDestroy(s));
    hk_report_stats(3);
    return 0;
}

/* A block freed on a stream whose work is still running, then the stream is
 * destroyed at once: the block must come back once the work is done, and the
 * late write must not land in a block handed out meanwhile. */
static int pending(void)
{
    const size_t n = 64 * 1024;
    unsigned char *h = malloc(n);
    long allocs = 0;
    int corrupted = 0;
    for (int round = 0; round < 3; round++) {
        cudaStream_t s;
        void *a = NULL, *b = NULL;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMallocAsync(&a, n, s));
        allocs++;
        CK(cudaLaunchHostFunc(s, hk_sleep_ms, (void *)(intptr_t)50));
        CK(cudaMemsetAsync(a, 0xAA, n, s));
        CK(cudaFreeAsync(a, s));
        CK(cudaStreamDestroy(s));
        CK(cudaMalloc(&b, n));
        allocs++;
        CK(cudaMemset(b, 0x33, n));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h, b, n, cudaMemcpyDeviceToHost));
        corrupted += hk_count_not(h, n, 0x33);
        CK(cudaFree(b));
    }
    printf("pending: corrupted bytes=%d\n", corrupted);
    hk_report_stats(allocs);
    free(h);
    return 0;
}

#define HUGE_SIZE ((size_t)1 << 40)   /* far beyond SIMCUDA_MEM */

static void print_last(const char *what)
{
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t peek2 = cudaPeekAtLastError();
    cudaError_t get = cudaGetLastError();
    cudaError_t get2 = cudaGetLastError();
    printf("  after %s: peek=%d peek=%d get=%d get=%d\n", what, (int)peek, (int)peek2, (int)get,
           (int)get2);
}

static int lasterr(void)
{
    void *p = NULL, *q = NULL, *r = NULL;
    print_last("start");
    /* The cache runs out of memory. */
    printf("huge malloc: %d\n", (int)cudaMalloc(&p, HUGE_SIZE));
    cudaError_t g1 = cudaGetLastError(), g2 = cudaGetLastError();
    printf("  get=%d get=%d\n", (int)g1, (int)g2);
    /* A double free the cache catches. */
    CK(cudaMalloc(&p, 4096));
    CK(cudaFree(p));
    printf("double free: %d\n", (int)cudaFree(p));
    print_last("double free");
    /* Later successful calls do not clear it. */
    CK(cudaMalloc(&q, 4096));
    printf("interior free: %d\n", (int)cudaFree((char *)q + 256));
    CK(cudaMalloc(&r, 100));
    CK(cudaMemset(q, 0, 4096));
    CK(cudaFree(r));
    CK(cudaDeviceSynchronize());
    print_last("interior free and successes");
    /* Ours, then a newer error of the real runtime: the newer one wins. (A
     * fresh pointer: the device may have reused p's address for q or r.) */
    CK(cudaMalloc(&p, 4096));
    CK(cudaFree(p));
    printf("double free: %d\n", (int)cudaFree(p));
    printf("bad device: %d\n", (int)cudaSetDevice(9999));
    print_last("double free, bad device");
    /* The real runtime's, then a newer one of ours. */
    printf("bad device: %d\n", (int)cudaSetDevice(9999));
    printf("huge malloc: %d\n", (int)cudaMalloc(&p, HUGE_SIZE));
    print_last("bad device, huge malloc");
    /* Stream-ordered calls. */
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    printf("huge async malloc: %d\n", (int)cudaMallocAsync(&p, HUGE_SIZE, s));
    print_last("huge async malloc");
    CK(cudaMallocAsync(&p, 1000, s));
    printf("interior async free: %d\n", (int)cudaFreeAsync((char *)p + 8, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    print_last("interior async free");
    /* A foreign pointer: the real runtime's own error. */
    int host = 0;
    printf("host pointer free: %d\n", (int)cudaFree(&host));
    print_last("host pointer free");
    CK(cudaFree(q));
    CK(cudaStreamDestroy(s));
    hk_report_stats(5);
    return 0;
}

static int meminfo_full(void)
{
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess)
        return -1;
    return fr == total;
}

static int reset(void)
{
    const size_t n = 64 * 1024;
    unsigned char *h = malloc(n);
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    cudaStream_t s;
    long allocs = 0;
    CK(cudaMalloc(&a, 4096));
    CK(cudaMalloc(&b, (size_t)8 << 20));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMallocAsync(&c, 1000, s));
    CK(cudaMalloc(&d, n));
    allocs += 4;
    CK(cudaFree(d));                     /* cached, not given back */
    CK(cudaMemset(a, 1, 4096));
    CK(cudaMemsetAsync(c, 2, 1000, s));
    printf("before reset: memory all free: %d\n", meminfo_full());
    CK(cudaDeviceReset());
    printf("after reset: memory all free: %d\n", meminfo_full());
    printf("free of an old pointer: %d\n", (int)cudaFree(a));
    printf("  get=%d\n", (int)cudaGetLastError());
    printf("free of an old large pointer: %d\n", (int)cudaFree(b));
    printf("free of an old stream-ordered pointer: %d\n", (int)cudaFree(c));
    cudaError_t g1 = cudaGetLastError(), g2 = cudaGetLastError();
    printf("  get=%d get=%d\n", (int)g1, (int)g2);
    /* The device works again, plain and stream-ordered, unknown-stream frees
     * included (they fence every stream the cache knows). */
    long bad = 0;
    cudaStream_t s2;
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    for (int round = 0; round < 3; round++) {
        void *x = NULL, *y = NULL;
        CK(cudaMalloc(&x, n));
        CK(cudaMallocAsync(&y, n, s2));
        allocs += 2;
        CK(cudaMemset(x, 0x33 + round, n));
        CK(cudaMemsetAsync(y, 0x44, n, s2));
        CK(cudaMemcpy(h, x, n, cudaMemcpyDeviceToHost));
        bad += hk_count_not(h, n, (unsigned char)(0x33 + round));
        CK(cudaStreamSynchronize(s2));
        CK(cudaMemcpy(h, y, n, cudaMemcpyDeviceToHost));
        bad += hk_count_not(h, n, 0x44);
        CK(cudaFree(x));
        CK(cudaFree(y));
    }
    CK(cudaDeviceSynchronize());
    printf("after reset: bad bytes=%ld\n", bad);
    int full = meminfo_full();
    printf("at the end: memory all free: %d last error=%d\n", full, (int)cudaGetLastError());
    CK(cudaStreamDestroy(s2));
    hk_report_stats(allocs);
    free(h);
    return 0;
}

static int hold(void)
{
    void *p;
    CK(cudaMalloc(&p, 1 << 20));
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* Ask for more than the device has: refused with cudaErrorMemoryAllocation. */
static int oom(void)
{
    void *p;
    CK(cudaMalloc(&p, 1 << 20));
    cudaError_t e = cudaMalloc(&p, (size_t)1 << 40);
    printf("%s\n", e == cudaErrorMemoryAllocation ? "out of memory" : "served");
    return e == cudaErrorMemoryAllocation ? 0 : 1;
}

static int exec_after_alloc(char **argv)
{
    void *p;
    CK(cudaMalloc(&p, 1 << 20));
    fflush(stdout);
    execvp(argv[0], argv);
    perror("execvp");
    return 127;
}

static int vfork_exec(void)
{
    void *p;
    CK(cudaMalloc(&p, 1 << 20));
    char *argv[] = { (char *)"true", NULL };
    pid_t pid = vfork();
    if (pid == 0) {
        execv("/bin/true", argv);
        _exit(127);
    }
    int status = -1;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
        return printf("vfork child failed: %d\n", status), 1;
    if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) != 0
        || waitpid(pid, &status, 0) != pid || status != 0)
        return printf("posix_spawn child failed: %d\n", status), 1;
    printf("children ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_misc race|badfree|pending|lasterr|reset|hold|vfork|oom|exec CMD\n");
        return 2;
    }
    static const struct { const char *name; int (*run)(void); } modes[] = {
        { "race", race },       { "badfree", badfree }, { "pending", pending },
        { "lasterr", lasterr }, { "reset", reset },     { "hold", hold },
        { "vfork", vfork_exec }, { "oom", oom },
    };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(argv[1], modes[i].name))
            return modes[i].run();
    if (!strcmp(argv[1], "exec") && argc > 2)
        return exec_after_alloc(argv + 2);
    fprintf(stderr, "prog_misc: unknown mode %s\n", argv[1]);
    return 2;
}
