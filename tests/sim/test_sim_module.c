/* tests/sim/test_sim_module.c - modules loaded at run time (driver_module.c):
 * a cubin nvcc built (SIM_MODULE_CUBIN, skipped without nvcc) and PTX text
 * load, their kernels are found by name, have a plain kernel's attributes
 * and launch with cuLaunchKernelEx as ordered no-ops; what is no CUDA code
 * is refused; the context limits Triton's launcher reads. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "simcuda.h"

static void current_context(void)
{
    CUcontext c;
    ASSERT_OK(cuInit(0));
    ASSERT_OK(cuDevicePrimaryCtxRetain(&c, 0));
    ASSERT_OK(cuCtxSetCurrent(c));
}

/* The whole file; NULL (the test skipped) where it was not built. */
static void *read_image(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)n);
    ASSERT(p && fread(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return p;
}

TEST(a_cubin_loads_and_its_kernels_are_found_by_name)
{
#ifndef SIM_MODULE_CUBIN
    SKIP("no nvcc: no cubin was built");
#else
    void *image = read_image(SIM_MODULE_CUBIN);
    ASSERT(image);
    CUmodule m;
    ASSERT_EQ(cuModuleLoadData(&m, image), CUDA_ERROR_NOT_INITIALIZED);
    current_context();
    ASSERT_OK(cuModuleLoadData(&m, image));
    memset(image, 0, 64);      /* the driver keeps its own copy */
    free(image);
    CUfunction f, again;
    ASSERT_OK(cuModuleGetFunction(&f, m, "scale"));
    ASSERT_OK(cuModuleGetFunction(&again, m, "scale"));
    ASSERT(f == again);        /* one handle a kernel */
    /* a device function is no kernel; neither is a name the module lacks */
    ASSERT_EQ(cuModuleGetFunction(&again, m, "_Z5twicef"), CUDA_ERROR_NOT_FOUND);
    ASSERT_EQ(cuModuleGetFunction(&again, m, "scal"), CUDA_ERROR_NOT_FOUND);

    int v;
    ASSERT_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    ASSERT_EQ(v, 1024);
    ASSERT_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    ASSERT_EQ(v, 49152);
    int optin;
    ASSERT_OK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
    ASSERT_OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin));
    ASSERT_OK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    ASSERT_EQ(v, optin);
    ASSERT_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1),
              CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 16), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuFuncSetAttribute(f, (CUfunction_attribute)17, 1), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
    CUlaunchConfig cfg = {0};
    CUlaunchAttribute cluster = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    cluster.value.clusterDim.x = 2;
    cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    ASSERT_OK(cuOccupancyMaxActiveClusters(&v, f, &cfg));
    ASSERT(v > 0);
    cluster.value.clusterDim.x = 16;   /* beyond the portable 8 ... */
    ASSERT_EQ(cuOccupancyMaxActiveClusters(&v, f, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    ASSERT_OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    ASSERT_OK(cuOccupancyMaxActiveClusters(&v, f, &cfg));   /* ... allowed now */

    /* a launch: checked, ordered in its stream, counted; device code never runs */
    CUstream s;
    ASSERT_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr out, in;
    ASSERT_OK(cuMemAlloc(&out, 4096));
    ASSERT_OK(cuMemAlloc(&in, 4096));
    int n = 1024;
    void *params[] = {&out, &in, &n};
    simcuda_counters c0, c1;
    simcuda_stats_or_skip(0, &c0);
    cfg = (CUlaunchConfig){.gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                           .blockDimY = 1, .blockDimZ = 1, .hStream = s};
    ASSERT_OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    cfg.blockDimX = 2048;      /* more threads than a block has */
    ASSERT_EQ(cuLaunchKernelEx(&cfg, f, params, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuLaunchKernelEx(NULL, f, params, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuStreamSynchronize(s));
    simcuda_stats_or_skip(0, &c1);
    ASSERT_EQ(c1.kernel_launches - c0.kernel_launches, 1);

    ASSERT_OK(cuModuleUnload(m));
    /* handles of what was unloaded are refused, never read */
    ASSERT_EQ(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_ERROR_INVALID_HANDLE);
    ASSERT_EQ(cuModuleGetFunction(&again, m, "scale"), CUDA_ERROR_INVALID_HANDLE);
    ASSERT_OK(cuMemFree(out));
    ASSERT_OK(cuMemFree(in));
    ASSERT_OK(cuStreamDestroy(s));
#endif
}

/* PTX as a compiler writes it: the driver compiles it at load (here: reads
 * its entries). */
static const char ptx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".func (.reg .f32 %r) helper(.reg .f32 %x) { mov.f32 %r, %x; ret; }\n"
    ".visible .entry fill(\n"
    "    .param .u64 out\n"
    ")\n"
    "{\n"
    "    ret;\n"
    "}\n";

TEST(ptx_text_loads_and_names_its_entries)
{
    current_context();
    CUmodule m;
    CUfunction f;
    ASSERT_OK(cuModuleLoadData(&m, ptx));
    ASSERT_OK(cuModuleGetFunction(&f, m, "fill"));
    ASSERT_EQ(cuModuleGetFunction(&f, m, "helper"), CUDA_ERROR_NOT_FOUND);
    ASSERT_EQ(cuModuleGetFunction(&f, m, "fil"), CUDA_ERROR_NOT_FOUND);
    ASSERT_EQ(cuModuleGetFunction(&f, m, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuModuleUnload(m));
}

/* What inductor's loader (libcaffe2_nvrtc) calls besides: a module from a
 * file, occupancy per block, a cooperative launch, a tensor map; the JIT
 * linker answers that it is not there. */
TEST(a_module_from_a_file_its_occupancy_and_what_is_not_modelled)
{
    current_context();
    char path[] = "/tmp/sim-module-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT(write(fd, ptx, sizeof ptx - 1) == (ssize_t)(sizeof ptx - 1));   /* no NUL on disk */
    close(fd);
    CUmodule m;
    CUfunction f;
    ASSERT_EQ(cuModuleLoad(&m, "/nonexistent/k.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
    ASSERT_OK(cuModuleLoad(&m, path));
    unlink(path);
    ASSERT_OK(cuModuleGetFunction(&f, m, "fill"));
    int blocks;
    ASSERT_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
    ASSERT_EQ(blocks, 8);                       /* 2048 threads a multiprocessor */
    ASSERT_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 16384));
    ASSERT_EQ(blocks, 13);                      /* shared memory: 228 KiB / (16 KiB + 1 KiB) */
    ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 65536),
              CUDA_ERROR_INVALID_VALUE);        /* more than the function may use */
    ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 2048, 0),
              CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr out;
    ASSERT_OK(cuMemAlloc(&out, 1 << 20));
    void *params[] = {&out};
    ASSERT_OK(cuLaunchCooperativeKernel(f, 4, 1, 1, 128, 1, 1, 0, NULL, params));
    ASSERT_OK(cuCtxSynchronize());

    CUtensorMap map;   /* the type is aligned as cuda.h declares it */
    cuuint64_t dims[2] = {256, 128}, strides[1] = {256 * 4};
    cuuint32_t box[2] = {64, 32}, elem[2] = {1, 1};
    ASSERT_OK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)out, dims,
                                     strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    strides[0] = 1000;                          /* not a multiple of 16 */
    ASSERT_EQ(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)out, dims,
                                     strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), CUDA_ERROR_INVALID_VALUE);

    CUlinkState link;
    ASSERT_EQ(cuLinkCreate(0, NULL, NULL, &link), CUDA_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(cuLinkCreate(0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuModuleUnload(m));
    ASSERT_OK(cuMemFree(out));
}

TEST(images_that_are_no_cuda_code_are_refused)
{
    current_context();
    CUmodule m;
    CUfunction f;
    ASSERT_EQ(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuModuleLoadData(&m, "no code at all"), CUDA_ERROR_INVALID_IMAGE);
    void *self = read_image("/proc/self/exe");   /* an ELF for the host's processor */
    ASSERT(self);
    ASSERT_EQ(cuModuleLoadData(&m, self), CUDA_ERROR_INVALID_IMAGE);
    free(self);
    ASSERT_EQ(cuModuleGetFunction(&f, (CUmodule)&m, "fill"), CUDA_ERROR_INVALID_HANDLE);
    int v;
    ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)&m),
              CUDA_ERROR_INVALID_HANDLE);
}

TEST(context_limits_have_defaults_and_keep_what_is_set)
{
    size_t v;
    ASSERT_OK(cuInit(0));
    ASSERT_OK(cuCtxSetCurrent(NULL));
    ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE), CUDA_ERROR_INVALID_CONTEXT);
    current_context();
    ASSERT_OK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
    ASSERT_EQ(v, (size_t)1 << 20);
    ASSERT_OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, (size_t)4 << 20));
    ASSERT_OK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
    ASSERT_EQ(v, (size_t)4 << 20);
    ASSERT_OK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    ASSERT_EQ(v, 1024);
    ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 48), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
    ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
}

TEST_MAIN()
