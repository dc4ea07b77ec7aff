/* tests/sim/sim_device.c - driver initialisation, devices, contexts, counters.
 *
 * Devices exist from cuInit on: SIMCUDA_DEVICES of them (default 1), each
 * with SIMCUDA_MEM bytes (default 8G) carved from its own reserved address
 * range. Each device has exactly one context, its primary context; the
 * current-context stack is per thread, as in the real driver.
 */
#include "sim_internal.h"
#include "kernel_limits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sim_device  sim_devices[SIM_MAX_DEVICES];
int         sim_device_count;
atomic_bool sim_initialized;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult       init_result = CUDA_ERROR_NOT_INITIALIZED;

#define CTX_STACK_MAX 16
static __thread sim_ctx *ctx_stack[CTX_STACK_MAX];
static __thread int      ctx_depth;

/* "8G", "512M", "1048576", "64k": a size with an optional binary suffix. */
static size_t parse_size(const char *s, size_t dflt)
{
    if (!s || !*s)
        return dflt;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return dflt;
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    case 't': case 'T': v <<= 40; break;
    case '\0': break;
    default: return dflt;
    }
    return (size_t)v;
}

static void init_devices(void)
{
    const char *env = getenv("SIMCUDA_DEVICES");
    int n = env && *env ? atoi(env) : 1;
    if (n < 0)
        n = 0;
    if (n > SIM_MAX_DEVICES)
        n = SIM_MAX_DEVICES;
    size_t cap = parse_size(getenv("SIMCUDA_MEM"), (size_t)8 << 30);
    if (cap < SIM_GRANULE)
        cap = SIM_GRANULE;

    for (int i = 0; i < n; i++) {
        sim_device *dev = &sim_devices[i];
        dev->ordinal = i;
        dev->capacity = cap;
        pthread_mutex_init(&dev->lock, NULL);
        pthread_cond_init(&dev->progress, NULL);
        pthread_mutex_init(&dev->mem_lock, NULL);
        dev->primary.magic = SIM_MAGIC_CTX;
        dev->primary.dev = dev;
        if (sim_heap_init(dev) != 0) {
            fprintf(stderr, "simcuda: cannot reserve address range for device %d\n", i);
            init_result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
        if (sim_stream_create(dev, 0, 0, SIM_STREAM_LEGACY, &dev->legacy) != CUDA_SUCCESS) {
            init_result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
    }
    sim_device_count = n;
    init_result = n ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    atomic_store_explicit(&sim_initialized, n > 0, memory_order_release);
}

SIM_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&init_once, init_devices);
    return init_result;
}

CUresult sim_check_init(void)
{
    if (sim_likely(atomic_load_explicit(&sim_initialized, memory_order_acquire)))
        return CUDA_SUCCESS;
    return CUDA_ERROR_NOT_INITIALIZED;
}

sim_device *sim_device_get(int ordinal)
{
    if (ordinal < 0 || ordinal >= sim_device_count)
        return NULL;
    return &sim_devices[ordinal];
}

CUresult sim_current_ctx(sim_ctx **out)
{
    CUresult rc = sim_check_init();
    if (sim_unlikely(rc != CUDA_SUCCESS))
        return rc;
    sim_ctx *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    if (sim_unlikely(!c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (sim_unlikely(atomic_load_explicit(&c->reset, memory_order_relaxed)))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

static sim_ctx *ctx_from_handle(CUcontext h)
{
    sim_ctx *c = (sim_ctx *)h;
    if (!c || c->magic != SIM_MAGIC_CTX)
        return NULL;
    return c;
}

/* The prologue of the per-device calls, in the order the driver checks:
 * initialised, then the out-arguments (`args_ok`), then the ordinal. */
static CUresult device_arg(CUdevice ordinal, bool args_ok, sim_device **out)
{
    SIM_TRY(sim_check_init());
    if (!args_ok)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(*out = sim_device_get(ordinal)))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* ---- versions and devices ----------------------------------------------- */

SIM_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = SIM_DRIVER_VERSION;  /* works before cuInit */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    SIM_TRY(sim_check_init());
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_device_count;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    sim_device *d;
    CUresult rc = device_arg(ordinal, device != NULL, &d);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, name && len > 0, &d));
    /* One model name for every device, like a machine of identical GPUs. */
    (void)d;
    snprintf(name, (size_t)len, "vramtrace simulated GPU");
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, bytes != NULL, &d));
    *bytes = d->capacity;
    return CUDA_SUCCESS;
}

/* A plausible Hopper-class device: what allocators and launch helpers ask. */
SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, pi != NULL, &d));
    int v;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:         v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:               v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:               v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:               v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:                v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:                v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:                v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:   v = SIM_SMEM_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:         v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:                     v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:       v = SIM_REGS_PER_SM; break;
    /* per SM (kernel_limits.h): torch.compile's Triton heuristics raise
     * "device_prop.regs_per_multiprocessor is not set" on a 0 */
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = SIM_REGS_PER_SM; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = SIM_SMEM_PER_SM; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = SIM_BLOCKS_PER_SM; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = SIM_SMEM_RESERVED; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:                    v = 1755000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:             v = 512; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:          v = SIM_MULTIPROCESSORS; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:                    v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:           v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:                  v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:            v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:                   v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:                    v = dev + 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:                 v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:                 v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:             v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:       v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:                 v = 60 << 20; break;   /* an H200: fact device_limits */
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = SIM_THREADS_PER_SM; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:            v = 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:            v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:      v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:      v = 0; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:   v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:                v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:               v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:     v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:        v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = SIM_SMEM_OPTIN; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:        v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:  v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:           v = 0; break;
    default:                                                v = 0; break;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, uuid != NULL, &d));
    memset(uuid, 0, sizeof *uuid);
    memcpy(uuid->bytes, "vtsim", 5);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------- */

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, pctx != NULL, &d));
    atomic_fetch_add(&d->primary.retains, 1);
    atomic_store(&d->primary.reset, false);   /* made anew after a reset */
    *pctx = (CUcontext)&d->primary;
    return CUDA_SUCCESS;
}

/* The primary context is never torn down by a release to zero: its memory
 * stays valid, which only matters to programs that free after releasing. */
SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, true, &d));
    if (atomic_load(&d->primary.retains) <= 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    atomic_fetch_sub(&d->primary.retains, 1);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, true, &d));
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = d->primary.flags;
    *active = atomic_load(&d->primary.retains) > 0;
    return CUDA_SUCCESS;
}

/* cudaDeviceReset lands here: wait for the device, then drop every
 * allocation and every user stream. Events stay valid (their handles may
 * still be held) but forget their records. */
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    sim_device *d;
    SIM_TRY(device_arg(dev, true, &d));
    sim_device_reset(d);
    /* The context is destroyed: a thread that keeps it current gets
     * CUDA_ERROR_CONTEXT_IS_DESTROYED until someone retains it again (the
     * runtime does, at its next call). Seen on an H200: the simulator's
     * static runtime, which did not retain again, ran over the real driver
     * and every call after cudaDeviceReset failed with 709; so did a
     * cudaMalloc served by the preload's cache right after the reset. */
    atomic_store(&d->primary.reset, true);
    return CUDA_SUCCESS;
}

void sim_device_reset(sim_device *dev)
{
    sim_device_sync(dev);
    sim_device_destroy_user_streams(dev);
    sim_device_sync(dev);
    sim_mem_release_all(dev);
    atomic_store(&dev->fault, CUDA_SUCCESS);   /* a reset is how a program recovers */
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_TRY(sim_check_init());
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = ctx_depth ? (CUcontext)ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

/* NULL unbinds: it pops the top of the stack, or does nothing. */
SIM_API CUresult cuCtxSetCurrent(CUcontext h)
{
    SIM_TRY(sim_check_init());
    if (!h) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    sim_ctx *c = ctx_from_handle(h);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext h)
{
    SIM_TRY(sim_check_init());
    sim_ctx *c = ctx_from_handle(h);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_TRY(sim_check_init());
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* The CUDA 13.0 ABI of cuCtxGetDevice and cuCtxSynchronize (what
 * cuGetProcAddress hands out from 13000 on): the context is an argument,
 * NULL meaning the current one. The older ABI passes NULL. */
static CUresult ctx_or_current(CUcontext h, sim_ctx **out)
{
    if (!h)
        return sim_current_ctx(out);
    SIM_TRY(sim_check_init());
    if (!(*out = ctx_from_handle(h)))
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

static CUresult ctx_device(CUdevice *device, CUcontext ctx)
{
    sim_ctx *c;
    SIM_TRY(ctx_or_current(ctx, &c));
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->dev->ordinal;
    return CUDA_SUCCESS;
}

static CUresult ctx_sync(CUcontext ctx)
{
    sim_ctx *c;
    SIM_TRY(ctx_or_current(ctx, &c));
    SIM_TRY(sim_capture_device_sync(c->dev));
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, device_syncs);
    sim_device_sync(c->dev);
    return sim_device_fault(c->dev);
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)                 { return ctx_device(device, NULL); }
SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext c) { return ctx_device(device, c); }
SIM_API CUresult cuCtxSynchronize(void)                           { return ctx_sync(NULL); }
SIM_API CUresult cuCtxSynchronize_v2(CUcontext c)                 { return ctx_sync(c); }

SIM_API CUresult cuCtxGetApiVersion(CUcontext h, unsigned int *version)
{
    SIM_TRY(sim_check_init());
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    if (h && !ctx_from_handle(h))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 12010;  /* what the real driver reports for a primary context */
    return CUDA_SUCCESS;
}

/* ---- test introspection (simcuda.h) ------------------------------------- */

SIM_API int simcuda_stats(int device, simcuda_counters *out)
{
    sim_device *d = sim_check_init() == CUDA_SUCCESS ? sim_device_get(device) : NULL;
    if (!d || !out)
        return -1;
    /* Field by field with atomic loads: the counters change under us. */
    uint64_t *dst = (uint64_t *)out;
    uint64_t *src = (uint64_t *)&d->stats;
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    pthread_mutex_lock(&d->mem_lock);
    out->bytes_in_use = d->used;
    out->peak_bytes = d->peak;
    pthread_mutex_unlock(&d->mem_lock);
    return 0;
}

SIM_API void simcuda_reset_counters(void)
{
    for (int i = 0; i < sim_device_count; i++) {
        sim_device *d = &sim_devices[i];
        uint64_t *p = (uint64_t *)&d->stats;
        for (size_t k = 0; k < sizeof d->stats / sizeof(uint64_t); k++)
            __atomic_store_n(&p[k], 0, __ATOMIC_RELAXED);
        pthread_mutex_lock(&d->mem_lock);
        d->peak = d->used;
        pthread_mutex_unlock(&d->mem_lock);
    }
}

SIM_API size_t simcuda_capacity(int device)
{
    cuInit(0);
    sim_device *d = sim_check_init() == CUDA_SUCCESS ? sim_device_get(device) : NULL;
    return d ? d->capacity : 0;
}
