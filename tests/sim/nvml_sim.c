/* tests/sim/nvml_sim.c - libnvidia-ml.so.1: the few NVML calls PyTorch makes.
 *
 * Every machine with an NVIDIA driver has NVML next to libcuda, and PyTorch
 * relies on it: c10/cuda/driver_api.cpp dlopens libnvidia-ml.so.1 and, when
 * it loads, requires six entry points; expandable segments ask NVML for the
 * device's fabric state (c10/cuda/PeerToPeerAccess.cpp) and an out-of-memory
 * message lists the processes using the device. The toolkit ships no
 * nvml.h, so the few types are declared here as NVIDIA's nvml.h has them.
 *
 * Devices are the simulator's (SIMCUDA_DEVICES, default 1), found by the PCI
 * bus id the driver reports (domain 0, bus ordinal + 1, device 0). None has
 * NVLink or fabric. The running processes of a device are this process,
 * with the bytes the simulated driver counts, when it holds any.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simcuda.h"

#define NVML_API __attribute__((visibility("default")))

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
} nvmlReturn_t;

typedef struct nvml_sim_device *nvmlDevice_t;

typedef struct {                             /* nvmlProcessInfo_v1_t */
    unsigned int       pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {                             /* nvmlGpuFabricInfo_v2_t (v3 appends a byte) */
    unsigned int  version;
    unsigned char clusterUuid[16];
    nvmlReturn_t  status;
    unsigned int  cliqueId;
    unsigned char state;                     /* NVML_GPU_FABRIC_STATE_* */
    unsigned int  healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct {
    nvmlGpuFabricInfo_v2_t v2;
    unsigned char          healthSummary;
} nvmlGpuFabricInfo_v3_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t dev, unsigned int link, int *type);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link, void *pci);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfo_v2_t *info);

#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))

struct nvml_sim_device { int ordinal; };

#define MAX_DEVICES 16                       /* as the driver's SIM_MAX_DEVICES */
static struct nvml_sim_device devices[MAX_DEVICES];
static int device_count = -1;                /* -1: nvmlInit not called */

static int sim_devices(void)
{
    const char *env = getenv("SIMCUDA_DEVICES");
    int n = env && *env ? atoi(env) : 1;
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    int n = sim_devices();
    for (int i = 0; i < n; i++)
        devices[i].ordinal = i;
    __atomic_store_n(&device_count, n, __ATOMIC_RELEASE);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

static int initialized(void) { return __atomic_load_n(&device_count, __ATOMIC_ACQUIRE) >= 0; }

static struct nvml_sim_device *device(nvmlDevice_t d)
{
    if (!initialized() || d < devices || d >= devices + device_count)
        return NULL;
    return d;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)device_count;
    return NVML_SUCCESS;
}

/* "domain:bus:device.function", hexadecimal, as NVML_DEVICE_PCI_BUS_ID_FMT
 * writes it (and the shorter domain the legacy format has). */
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *dev)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    unsigned domain, bus, slot, function;
    if (!pciBusId || !dev || sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (domain != 0 || slot != 0 || function != 0 || bus == 0 || bus > (unsigned)device_count)
        return NVML_ERROR_NOT_FOUND;
    *dev = &devices[bus - 1];
    return NVML_SUCCESS;
}

/* What a query of one NVLink answers with its arguments checked (`out`:
 * where the answer would go): the simulated devices have no NVLink. */
static nvmlReturn_t no_nvlink(nvmlDevice_t dev, const void *out)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device(dev) || !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t dev, unsigned int link, int *type)
{
    (void)link;
    return no_nvlink(dev, type);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link, void *pci)
{
    (void)link;
    return no_nvlink(dev, pci);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = 13000;                        /* the driver's cuDriverGetVersion */
    return NVML_SUCCESS;
}

/* The simulated driver's bytes in use on a device, 0 if it is not loaded. */
static unsigned long long bytes_in_use(int ordinal)
{
    int (*stats)(int, simcuda_counters *);
    *(void **)&stats = dlsym(RTLD_DEFAULT, "simcuda_stats");
    simcuda_counters c;
    if (!stats || stats(ordinal, &c) != 0)
        return 0;
    return c.bytes_in_use;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count,
                                                           nvmlProcessInfo_v1_t *infos)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    struct nvml_sim_device *d = device(dev);
    if (!d || !count || (*count && !infos))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = bytes_in_use(d->ordinal);
    unsigned need = used ? 1 : 0;
    if (*count < need) {
        *count = need;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = need;
    if (need)
        infos[0] = (nvmlProcessInfo_v1_t){ (unsigned)getpid(), used };
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfo_v2_t *info)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device(dev) || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned v2 = NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v2_t), 2);
    unsigned v3 = NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v3_t), 3);
    if (info->version != v2 && info->version != v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->status = NVML_SUCCESS;
    info->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    if (version == v3)
        ((nvmlGpuFabricInfo_v3_t *)(void *)info)->healthSummary = 0;
    return NVML_SUCCESS;
}
