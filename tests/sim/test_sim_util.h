/* tests/sim/test_sim_util.h - small helpers shared by the sim conformance tests. */
#ifndef VT_TEST_SIM_UTIL_H
#define VT_TEST_SIM_UTIL_H

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "simcuda.h"

static inline void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A host function that sleeps, then stores a value: stands in for a slow
 * kernel writing memory. */
typedef struct slow_store {
    int *dst;
    int  value;
    int  delay_ms;
} slow_store;

static inline void CUDART_CB slow_store_fn(void *arg)
{
    slow_store *j = arg;
    sleep_ms(j->delay_ms);
    __atomic_store_n(j->dst, j->value, __ATOMIC_RELEASE);
}

static inline void CUDART_CB slow_store_owned_fn(void *arg)
{
    slow_store_fn(arg);
    free(arg);
}

/* Queues a slow_store of `value` into *dst, `delay_ms` long, on `s`: the
 * usual way to hold a stream back. The job is the host function's own. */
static inline cudaError_t launch_slow_store(cudaStream_t s, int *dst, int value, int delay_ms)
{
    slow_store *j = malloc(sizeof *j);
    if (!j)
        return cudaErrorMemoryAllocation;
    *j = (slow_store){ dst, value, delay_ms };
    cudaError_t e = cudaLaunchHostFunc(s, slow_store_owned_fn, j);
    if (e != cudaSuccess)
        free(j);
    return e;
}

/* Reads a flag at the time it runs, into *seen. */
typedef struct probe {
    int *flag;
    int  seen;
} probe;

static inline void CUDART_CB probe_fn(void *arg)
{
    probe *p = arg;
    p->seen = __atomic_load_n(p->flag, __ATOMIC_ACQUIRE);
}

/* What *flag holds when work queued on `s` now runs: a probe is queued,
 * then `s` synchronized. -1 if either call fails. */
static inline int flag_seen_by(cudaStream_t s, int *flag)
{
    probe p = { flag, -1 };
    if (cudaLaunchHostFunc(s, probe_fn, &p) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
        return -1;
    return p.seen;
}

static inline int load_flag(int *flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }

/* Device 0's counters, read through the driver this process has already
 * loaded (for a program that does not link libcuda.so.1 itself): false if
 * it is not loaded or is no simulator. */
static inline bool loaded_driver_stats(simcuda_counters *c)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *sym = h ? dlsym(h, "simcuda_stats") : NULL;
    if (!sym)
        return false;
    int (*stats)(int, simcuda_counters *);
    memcpy(&stats, &sym, sizeof sym);
    return stats(0, c) == 0;
}

/* The file this program's cudaMalloc was loaded from (dladdr), or NULL. */
static inline const char *cuda_malloc_origin(void)
{
    Dl_info info;
    void *fn;
    cudaError_t (*malloc_fn)(void **, size_t) = cudaMalloc;
    memcpy(&fn, &malloc_fn, sizeof fn);
    return dladdr(fn, &info) ? info.dli_fname : NULL;
}

#endif /* VT_TEST_SIM_UTIL_H */
