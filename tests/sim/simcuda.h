/* tests/sim/simcuda.h - test-only introspection of the simulated CUDA device.
 *
 * Exported from the simulated driver, libcuda.so.1. A test linked with
 * sim_dep calls these directly; a program that must not link libcuda (the
 * static-runtime test, anything preloaded) can dlopen("libcuda.so.1") and
 * dlsym them. All counters are per device and cumulative since process start
 * or the last simcuda_reset_counters().
 */
#ifndef VT_SIMCUDA_H
#define VT_SIMCUDA_H

#include <stddef.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simcuda_counters {
    /* Entry-point calls, successful or not. */
    uint64_t mem_alloc_calls;        /* cuMemAlloc_v2 (cudaMalloc) */
    uint64_t mem_alloc_async_calls;  /* cuMemAllocAsync[_ptsz] (cudaMallocAsync) */
    uint64_t mem_alloc_managed_calls;/* cuMemAllocManaged (cudaMallocManaged) */
    uint64_t mem_alloc_host_calls;   /* cuMemAllocHost_v2, cuMemHostAlloc */
    uint64_t mem_free_calls;         /* cuMemFree_v2 (cudaFree), NULL included */
    uint64_t mem_free_async_calls;   /* cuMemFreeAsync[_ptsz] (cudaFreeAsync) */
    uint64_t mem_free_host_calls;    /* cuMemFreeHost */
    uint64_t vmm_create_calls;       /* cuMemCreate */
    uint64_t vmm_release_calls;      /* cuMemRelease */
    /* Outcomes, device memory only. */
    uint64_t allocs;                 /* successful device allocations, all paths */
    uint64_t allocs_device;          /* ... of which cuMemAlloc */
    uint64_t allocs_async;           /* ... of which cuMemAllocAsync */
    uint64_t allocs_managed;         /* ... of which cuMemAllocManaged */
    uint64_t frees;                  /* device allocations released (async: when
                                        the free is reached in stream order) */
    uint64_t failed_allocs;          /* CUDA_ERROR_OUT_OF_MEMORY returned */
    uint64_t bad_frees;              /* unknown, interior or double frees */
    uint64_t bytes_in_use;           /* device bytes counted against capacity,
                                        VMM physical memory included */
    uint64_t peak_bytes;             /* high-water mark of bytes_in_use */
    /* Work. */
    uint64_t event_records;          /* cuEventRecord* */
    uint64_t event_syncs;            /* cuEventSynchronize */
    uint64_t event_queries;          /* cuEventQuery */
    uint64_t stream_syncs;           /* cuStreamSynchronize* */
    uint64_t stream_waits;           /* cuStreamWaitEvent* */
    uint64_t device_syncs;           /* cuCtxSynchronize and implicit ones (cuMemFree) */
    uint64_t streams_created;
    uint64_t events_created;
    uint64_t kernel_launches;        /* cuLaunchKernel* (run as no-ops) */
    uint64_t host_funcs;             /* cuLaunchHostFunc* */
    uint64_t memcpys;                /* any cuMemcpy* */
    uint64_t memsets;                /* any cuMemset* */
    /* Misuse. */
    uint64_t illegal_addresses;      /* device work that found its memory unmapped
                                        when it ran (sim_vmm.c): the device's
                                        sticky CUDA_ERROR_ILLEGAL_ADDRESS */
    uint64_t stale_stream_uses;      /* a destroyed stream's handle passed to any
                                        call (undefined behaviour on real CUDA) */
} simcuda_counters;

/* Copy the counters of `device` into *out. Returns 0, or -1 if the device
 * does not exist or the driver was never initialised (cuInit). */
int simcuda_stats(int device, simcuda_counters *out);

/* Zero every call/work counter of every device. bytes_in_use is a state,
 * not a count: it is kept, and peak_bytes restarts from it. */
void simcuda_reset_counters(void);

/* Capacity of `device` in bytes (SIMCUDA_MEM), 0 if there is no such device.
 * Initialises the driver if needed. */
size_t simcuda_capacity(int device);

/* For tests: simcuda_stats looked up when first needed, not linked, so that
 * a test binary linked against the simulator also loads and runs on a real
 * driver (scripts/gpu-check). Without the simulator the test stops there as
 * skipped (exit 77): the part before its first reading of the counters has
 * run against the real device. simcuda_require(WHY) skips so at once, for a
 * test whose premise is the simulator's (its capacity, host access to device
 * memory, two devices). */
/* simcuda_stats of the libcuda.so.1 this process uses (loaded here if
 * nothing loaded it yet), or NULL: a real driver. */
static inline void *simcuda_stats_symbol(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    return h ? dlsym(h, "simcuda_stats") : NULL;
}

static inline void simcuda_require(const char *why)
{
    if (!simcuda_stats_symbol()) {
        fprintf(stderr, "SKIP: on a real driver: %s\n", why);
        fflush(NULL);
        _exit(77);
    }
}

static inline int simcuda_stats_or_skip(int device, simcuda_counters *out)
{
    static int (*fn)(int, simcuda_counters *);
    if (!fn) {
        simcuda_require("reads the simulated device's counters (simcuda_stats)");
        void *sym = simcuda_stats_symbol();
        memcpy(&fn, &sym, sizeof sym);
    }
    return fn(device, out);
}

#ifdef __cplusplus
}
#endif

#endif /* VT_SIMCUDA_H */
