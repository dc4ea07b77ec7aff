/* tests/sim/test_sim_vmm.c - the driver calls PyTorch's expandable segments
 * and its other driver-API users need: shareable handles, allocation
 * properties, address ranges of mapped memory, 32-bit memsets and stream
 * writes, the absent features' answers, and NVML. Runs with SIMCUDA_MEM=4G. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_util.h"

#define GRAN ((size_t)2 << 20)

static CUmemAllocationProp device_prop(unsigned handle_types)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return prop;
}

static uint64_t bytes_in_use(void)
{
    simcuda_counters st;
    return simcuda_stats(0, &st) == 0 ? st.bytes_in_use : UINT64_MAX;
}

static CUresult map_rw(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
    CUresult rc = cuMemMap(va, size, 0, h, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    return cuMemSetAccess(va, size, &acc, 1);
}

TEST(posix_handle_exports_only_when_requested_and_imports_the_same_memory)
{
    ASSERT_OK(cudaFree(NULL));
    int attr = -1;
    ASSERT_OK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
    ASSERT_EQ(attr, 1);
    ASSERT_OK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0));
    ASSERT_EQ(attr, 0);
    CUmemGenericAllocationHandle h, plain, imported;
    CUmemAllocationProp fabric = device_prop(CU_MEM_HANDLE_TYPE_FABRIC);
    ASSERT_EQ(cuMemCreate(&h, GRAN, &fabric, 0), CUDA_ERROR_NOT_SUPPORTED);  /* no fabric here */
    CUmemAllocationProp bogus = device_prop(0x40);
    ASSERT_EQ(cuMemCreate(&h, GRAN, &bogus, 0), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(bytes_in_use(), 0);

    CUmemAllocationProp none = device_prop(CU_MEM_HANDLE_TYPE_NONE);
    ASSERT_OK(cuMemCreate(&plain, GRAN, &none, 0));
    int fd = -1;
    ASSERT_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);                              /* not requested */
    ASSERT_OK(cuMemRelease(plain));

    CUmemAllocationProp posix = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ASSERT_OK(cuMemCreate(&h, 2 * GRAN, &posix, 0));
    CUmemAllocationProp got;
    memset(&got, 0xff, sizeof got);
    ASSERT_OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    ASSERT_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
    ASSERT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    ASSERT_EQ(got.location.id, 0);
    ASSERT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(NULL, h), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
              CUDA_ERROR_INVALID_VALUE);                              /* flags must be 0 */
    ASSERT_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    ASSERT_GE(fd, 0);

    /* Imported in the exporting process: the same memory, not counted twice. */
    ASSERT_OK(cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    ASSERT_EQ(close(fd), 0);                                         /* the caller's to close */
    ASSERT_EQ(bytes_in_use(), 2 * GRAN);
    ASSERT_OK(cuMemGetAllocationPropertiesFromHandle(&got, imported));
    ASSERT_EQ(got.location.id, 0);
    CUdeviceptr va, va2;
    ASSERT_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    ASSERT_OK(cuMemAddressReserve(&va2, 2 * GRAN, 0, 0, 0));
    ASSERT_OK(map_rw(va, 2 * GRAN, h));
    ASSERT_OK(map_rw(va2, 2 * GRAN, imported));
    ((volatile char *)(uintptr_t)va)[GRAN + 7] = 99;
    ASSERT_EQ(((volatile char *)(uintptr_t)va2)[GRAN + 7], 99);
    ASSERT_OK(cuMemRelease(imported));
    ASSERT_OK(cuMemRelease(h));
    ASSERT_OK(cuMemUnmap(va, 2 * GRAN));
    ASSERT_OK(cuMemUnmap(va2, 2 * GRAN));
    ASSERT_EQ(bytes_in_use(), 0);                                    /* gone with its last mapping */
    ASSERT_OK(cuMemAddressFree(va, 2 * GRAN));
    ASSERT_OK(cuMemAddressFree(va2, 2 * GRAN));

    /* Descriptors that are not simulated device memory are refused. */
    ASSERT_EQ(cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)0,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);                              /* closed */
}

TEST(address_range_of_mapped_memory_is_the_mapped_handle)
{
    ASSERT_OK(cudaFree(NULL));
    CUmemAllocationProp prop = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle a, b;
    ASSERT_OK(cuMemCreate(&a, GRAN, &prop, 0));
    ASSERT_OK(cuMemCreate(&b, 2 * GRAN, &prop, 0));
    CUdeviceptr va, base = 0;
    size_t size = 0;
    ASSERT_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
    ASSERT_OK(map_rw(va, GRAN, a));
    ASSERT_OK(map_rw(va + GRAN, 2 * GRAN, b));
    ASSERT_OK(cuMemGetAddressRange(&base, &size, va + 100));
    ASSERT_EQ(base, va);
    ASSERT_EQ(size, GRAN);
    ASSERT_OK(cuMemGetAddressRange(&base, &size, va + 2 * GRAN + 5));
    ASSERT_EQ(base, va + GRAN);
    ASSERT_EQ(size, 2 * GRAN);
    ASSERT_EQ(cuMemGetAddressRange(&base, &size, va + 3 * GRAN), CUDA_ERROR_NOT_FOUND); /* unmapped */
    /* cuMemAlloc memory: the allocation */
    CUdeviceptr d;
    ASSERT_OK(cuMemAlloc(&d, 5000));
    ASSERT_OK(cuMemGetAddressRange(&base, &size, d + 4999));
    ASSERT_EQ(base, d);
    ASSERT_EQ(size, 5000);
    ASSERT_OK(cuMemFree(d));
    ASSERT_OK(cuMemUnmap(va, 3 * GRAN));
    ASSERT_OK(cuMemRelease(a));
    ASSERT_OK(cuMemRelease(b));
    ASSERT_EQ(cuMemGetAddressRange(&base, &size, va + 100), CUDA_ERROR_NOT_FOUND);
    ASSERT_OK(cuMemAddressFree(va, 4 * GRAN));
}

TEST(memset_d32_and_write_value32_run_in_stream_order)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreate(&s));
    uint32_t *d;
    ASSERT_OK(cudaMalloc((void **)&d, 64 * sizeof *d));
    int gate = 0;
    ASSERT_OK(launch_slow_store(s, &gate, 1, 100));                 /* holds the stream back */
    ASSERT_OK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)d, 0xdeadbeef, 64, (CUstream)s));
    ASSERT_OK(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(uintptr_t)(d + 5), 42, 0));
    ASSERT_EQ(d[0], 0);                                              /* not yet: stream order */
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(__atomic_load_n(&gate, __ATOMIC_ACQUIRE), 1);
    ASSERT_EQ(d[0], 0xdeadbeef);
    ASSERT_EQ(d[63], 0xdeadbeef);
    ASSERT_EQ(d[5], 42);
    ASSERT_OK(cuMemsetD32((CUdeviceptr)(uintptr_t)d, 7, 2));
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(d[1], 7);
    ASSERT_EQ(d[2], 0xdeadbeef);
    CUdeviceptr odd = (CUdeviceptr)(uintptr_t)d + 2;
    ASSERT_EQ(cuMemsetD32Async(odd, 1, 4, (CUstream)s), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuStreamWriteValue32((CUstream)s, odd, 1, 0), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(uintptr_t)d,
                                   1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
              CUDA_ERROR_INVALID_VALUE);                              /* not in the v2 ABI */
    void *m;
    ASSERT_OK(cudaMallocManaged(&m, 256, cudaMemAttachGlobal));
    ASSERT_EQ(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(uintptr_t)m, 1, 0),
              CUDA_ERROR_INVALID_VALUE);                              /* managed memory */
    int local;
    ASSERT_EQ(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(uintptr_t)&local, 1, 0),
              CUDA_ERROR_INVALID_VALUE);                              /* pageable host memory */
    uint32_t *pinned;
    ASSERT_OK(cudaMallocHost((void **)&pinned, 16));
    ASSERT_OK(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(uintptr_t)pinned, 9, 0));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(pinned[0], 9);
    ASSERT_OK(cudaFreeHost(pinned));
    ASSERT_OK(cudaFree(m));
    ASSERT_OK(cudaFree(d));
    ASSERT_OK(cudaStreamDestroy(s));
}

static void CUDA_CB log_cb(void *data, CUlogLevel level, char *msg, size_t len)
{
    (void)data; (void)level; (void)msg; (void)len;
}

TEST(absent_features_answer_not_supported_and_every_entry_point_is_handed_out)
{
    ASSERT_OK(cudaFree(NULL));
    int attr = -1;
    ASSERT_OK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0));
    ASSERT_EQ(attr, 0);
    CUmulticastObjectProp mc;
    memset(&mc, 0, sizeof mc);
    mc.numDevices = 1;
    mc.size = GRAN;
    CUmemGenericAllocationHandle mh;
    ASSERT_EQ(cuMulticastCreate(&mh, &mc), CUDA_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(cuMulticastCreate(NULL, &mc), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuMulticastAddDevice(0, 0), CUDA_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(cuMulticastAddDevice(0, 5), CUDA_ERROR_INVALID_DEVICE);
    CUdevResource res;
    ASSERT_EQ(cuDeviceGetDevResource(0, &res, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_NOT_SUPPORTED);
    CUgreenCtx g;
    CUdevResourceDesc desc = NULL;
    ASSERT_EQ(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_NOT_SUPPORTED);
    CUlogsCallbackHandle cb;
    ASSERT_OK(cuLogsRegisterCallback(log_cb, NULL, &cb));
    ASSERT_OK(cuLogsRegisterCallback(log_cb, NULL, NULL));           /* the handle is optional */
    ASSERT_OK(cuLogsUnregisterCallback(cb));
    ASSERT_EQ(cuLogsUnregisterCallback(cb), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cuLogsRegisterCallback(NULL, NULL, &cb), CUDA_ERROR_INVALID_VALUE);

    /* What PyTorch's c10/cuda/driver_api.h asks for, at the versions it asks. */
    static const struct { const char *name; int version; } wanted[] = {
        { "cuMemGetAddressRange", 12000 }, { "cuMemExportToShareableHandle", 12000 },
        { "cuMemImportFromShareableHandle", 12000 },
        { "cuMemGetAllocationPropertiesFromHandle", 12000 }, { "cuMemsetD32Async", 12000 },
        { "cuStreamWriteValue32", 12000 }, { "cuMulticastAddDevice", 12030 },
        { "cuMulticastBindMem", 12030 }, { "cuMulticastCreate", 12030 },
        { "cuMulticastUnbind", 12030 }, { "cuCtxFromGreenCtx", 12080 },
        { "cuGreenCtxCreate", 12080 }, { "cuGreenCtxDestroy", 12080 },
        { "cuGreenCtxStreamCreate", 12080 }, { "cuDevSmResourceSplitByCount", 12080 },
        { "cuDeviceGetDevResource", 12080 }, { "cuDevResourceGenerateDesc", 12080 },
        { "cuLogsRegisterCallback", 12090 }, { "cuLogsUnregisterCallback", 12090 },
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        ASSERT_OK(cuGetProcAddress(wanted[i].name, &fn, wanted[i].version, 0, &st));
        ASSERT_MSG(st == CU_GET_PROC_ADDRESS_SUCCESS && fn, "%s", wanted[i].name);
        enum cudaDriverEntryPointQueryResult rst;
        fn = NULL;
        ASSERT_OK(cudaGetDriverEntryPointByVersion(wanted[i].name, &fn, (unsigned)wanted[i].version,
                                                   cudaEnableDefault, &rst));
        ASSERT_MSG(rst == cudaDriverEntryPointSuccess && fn, "%s", wanted[i].name);
    }
    void *w = NULL, *w_ptsz = NULL;
    CUdriverProcAddressQueryResult st;
    ASSERT_OK(cuGetProcAddress("cuStreamWriteValue32", &w, 13000, 0, &st));
    ASSERT_OK(cuGetProcAddress("cuStreamWriteValue32", &w_ptsz, 13000,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    ASSERT_PTR_EQ(w, dlsym(RTLD_DEFAULT, "cuStreamWriteValue32_v2"));
    ASSERT_PTR_EQ(w_ptsz, dlsym(RTLD_DEFAULT, "cuStreamWriteValue32_v2_ptsz"));
}

/* NVML as PyTorch calls it (c10/cuda/driver_api.h, PeerToPeerAccess.cpp). */
TEST(nvml_finds_the_device_by_pci_bus_id_and_reports_no_fabric)
{
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    ASSERT(nvml != NULL);
    int (*init)(void);
    int (*by_pci)(const char *, void **);
    int (*fabric)(void *, void *);
    int (*procs)(void *, unsigned *, void *);
    int (*driver_version)(int *);
    *(void **)&init = dlsym(nvml, "nvmlInit_v2");
    *(void **)&by_pci = dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&fabric = dlsym(nvml, "nvmlDeviceGetGpuFabricInfoV");
    *(void **)&procs = dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses");
    *(void **)&driver_version = dlsym(nvml, "nvmlSystemGetCudaDriverVersion_v2");
    ASSERT(init && by_pci && fabric && procs && driver_version);
    for (const char **n = (const char *[]){ "nvmlDeviceGetNvLinkRemoteDeviceType",
                                           "nvmlDeviceGetNvLinkRemotePciInfo_v2", NULL }; *n; n++)
        ASSERT_MSG(dlsym(nvml, *n) != NULL, "%s", *n);
    void *dev = NULL;
    ASSERT_EQ(by_pci("00000000:01:00.0", &dev), 1);                  /* before nvmlInit: uninitialized */
    ASSERT_EQ(init(), 0);
    struct cudaDeviceProp p;
    ASSERT_OK(cudaGetDeviceProperties(&p, 0));
    char id[32];
    snprintf(id, sizeof id, "%08X:%02X:%02X.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    ASSERT_EQ(by_pci(id, &dev), 0);
    ASSERT(dev != NULL);
    ASSERT_EQ(by_pci("00000000:09:00.0", &dev), 6);                  /* NVML_ERROR_NOT_FOUND */
    ASSERT_EQ(by_pci(id, &dev), 0);
    struct { unsigned version; unsigned char uuid[16]; int status; unsigned clique;
             unsigned char state; unsigned health; } info;
    memset(&info, 0xff, sizeof info);
    info.version = (unsigned)sizeof info | (2u << 24);
    ASSERT_EQ(fabric(dev, &info), 0);
    ASSERT_EQ(info.state, 0);                                        /* NOT_SUPPORTED */
    int v = 0;
    ASSERT_EQ(driver_version(&v), 0);
    int dv = 0;
    ASSERT_OK(cudaDriverGetVersion(&dv));
    ASSERT_EQ(v, dv);
    /* This process, with what the device holds for it. */
    void *d;
    ASSERT_OK(cudaMalloc(&d, 3 << 20));
    struct { unsigned pid; unsigned long long used; } pi[2];
    unsigned n = 0;
    ASSERT_EQ(procs(dev, &n, NULL), 7);                              /* INSUFFICIENT_SIZE */
    ASSERT_EQ(n, 1);
    n = 2;
    ASSERT_EQ(procs(dev, &n, pi), 0);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(pi[0].pid, (unsigned)getpid());
    ASSERT_EQ(pi[0].used, 3 << 20);
    ASSERT_OK(cudaFree(d));
    dlclose(nvml);
}

/* One chunk reserved, mapped and readable (its handle released: the
 * mapping keeps the memory), and a non-blocking stream. */
static CUdeviceptr mapped_chunk_and_stream(cudaStream_t *s)
{
    ASSERT_OK(cudaFree(NULL));
    CUmemAllocationProp prop = device_prop(CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    ASSERT_OK(cuMemAddressReserve(&va, GRAN, 0, 0, 0));
    ASSERT_OK(cuMemCreate(&h, GRAN, &prop, 0));
    ASSERT_OK(map_rw(va, GRAN, h));
    ASSERT_OK(cuMemRelease(h));
    ASSERT_OK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    return va;
}

/* cuMemUnmap does not wait for work queued on the memory, as on an H200
 * (tests/gpucheck's fact unmap_while_queued): the memset runs after the
 * unmap, finds nothing mapped and faults; the fault is the context's sticky
 * CUDA_ERROR_ILLEGAL_ADDRESS, answered by every later sync and enqueue
 * until the device is reset. */
TEST(work_queued_on_memory_unmapped_meanwhile_faults_until_a_reset)
{
    cudaStream_t s;
    CUdeviceptr va = mapped_chunk_and_stream(&s);
    int held = 0;   /* set by the stream's host function once it ran */
    ASSERT_OK(launch_slow_store(s, &held, 1, 200));
    ASSERT_OK(cudaMemsetAsync((void *)va, 1, GRAN, s));
    ASSERT_OK(cuMemUnmap(va, GRAN));
    ASSERT_EQ(load_flag(&held), 0);   /* it did not wait for the stream */
    ASSERT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_EQ(c.illegal_addresses, 1);
    ASSERT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
    ASSERT_EQ(cudaMemsetAsync((void *)va, 1, GRAN, s), cudaErrorIllegalAddress);   /* sticky */
    ASSERT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    ASSERT_OK(cuMemAddressFree(va, GRAN));
    ASSERT_OK(cudaDeviceReset());
    void *p = NULL;
    ASSERT_OK(cudaMalloc(&p, 4096));
    ASSERT_OK(cudaMemset(p, 0, 4096));
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_OK(cudaFree(p));
}

/* The same work on memory still mapped runs: the pages are the mapping's. */
TEST(work_queued_on_memory_still_mapped_runs)
{
    cudaStream_t s;
    CUdeviceptr va = mapped_chunk_and_stream(&s);
    int held = 0;
    ASSERT_OK(launch_slow_store(s, &held, 1, 50));
    ASSERT_OK(cudaMemsetAsync((void *)va, 7, GRAN, s));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_EQ(((unsigned char *)va)[GRAN - 1], 7);
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_EQ(c.illegal_addresses, 0);
    ASSERT_OK(cuMemUnmap(va, GRAN));
    ASSERT_OK(cuMemAddressFree(va, GRAN));
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST_MAIN()
