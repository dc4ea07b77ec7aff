/* tests/sim/sim_ipc.c - legacy interprocess memory handles between
 * processes of one machine: cuIpcGetMemHandle, cuIpcOpenMemHandle[_v2],
 * cuIpcCloseMemHandle.
 *
 * What the real driver does, and this one too (sources in README.md):
 *  - the handle names the whole allocation that holds the pointer: an
 *    interior pointer gives the same handle as the base, and opening it
 *    returns the base of the mapping (the opener adds any offset itself);
 *  - only cuMemAlloc/cudaMalloc memory: stream-ordered (pool) memory, VMM
 *    reservations, managed and host memory are CUDA_ERROR_INVALID_VALUE;
 *  - a handle is opened only in another process: in the exporting one,
 *    CUDA_ERROR_INVALID_CONTEXT ("invalid device context");
 *  - flags: 0 or CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, else invalid value;
 *  - opening a handle this process has open returns the same pointer and
 *    counts a reference; cuIpcCloseMemHandle drops one and unmaps at zero
 *    (the exporter's allocation is untouched); closing anything else is
 *    CUDA_ERROR_INVALID_VALUE;
 *  - a freed allocation gets a new handle if its address is reused.
 *
 * How: a device allocation is private anonymous memory of one process. Its
 * first export turns it into a shared file (/dev/shm/simcuda-ipc-PID-ID,
 * sim_mem_share: contents copied, the file mapped over the same addresses,
 * after the device went idle), so a program that never exports pays
 * nothing. The 64-byte handle carries a magic, the exporter's pid, the
 * export id and the allocation's size; the importer maps the file at a
 * fresh range of its own device. The file is unlinked when the allocation
 * is freed, at cudaDeviceReset and at exit, so a handle of freed memory (or
 * of a process that exited) no longer opens: CUDA_ERROR_INVALID_HANDLE.
 * Event handles: sim_ipc_event.c, with files of the same names.
 */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define IPC_MAGIC 0x43504953u           /* 'SIPC' */

typedef struct ipc_handle {              /* the bytes of a CUipcMemHandle */
    uint32_t magic;
    int32_t  pid;                        /* exporter */
    int32_t  ordinal;                    /* exporter's device */
    uint32_t pad;
    uint64_t id;                         /* export id, unique in the exporter */
    uint64_t size;                       /* bytes of the allocation */
    uint64_t span;                       /* bytes of the file (pages) */
} ipc_handle;
_Static_assert(sizeof(ipc_handle) <= sizeof(CUipcMemHandle), "an IPC handle is 64 bytes");

typedef struct ipc_open {                /* a handle this process opened */
    struct ipc_open *next;
    int32_t          pid;
    uint64_t         id;
    uintptr_t        addr;
    sim_device      *dev;
    int              refs;
} ipc_open;

/* open_lock (the handles opened here) may be held while a device's
 * mem_lock is taken; ipc_lock (the exports) is taken under mem_lock. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_open       *opened;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t        next_id = 1;
static uint64_t       *exported;         /* live export ids, for the exit handler */
static size_t          nexported, capexported;
static bool            atexit_done;

static void file_name(char *buf, size_t len, int32_t pid, uint64_t id)
{
    snprintf(buf, len, "/dev/shm/simcuda-ipc-%d-%llu", (int)pid, (unsigned long long)id);
}

/* Files of a process that exits go with it: its memory is gone. */
static void remove_all_at_exit(void)
{
    pthread_mutex_lock(&ipc_lock);
    char name[96];
    for (size_t i = 0; i < nexported; i++) {
        file_name(name, sizeof name, (int32_t)getpid(), exported[i]);
        unlink(name);
    }
    nexported = 0;
    pthread_mutex_unlock(&ipc_lock);
}

uint64_t sim_ipc_new_id(void)
{
    pthread_mutex_lock(&ipc_lock);
    uint64_t id = next_id++;
    pthread_mutex_unlock(&ipc_lock);
    return id;
}

int sim_ipc_create(uint64_t id)
{
    char name[96];
    file_name(name, sizeof name, (int32_t)getpid(), id);
    pthread_mutex_lock(&ipc_lock);
    if (nexported == capexported) {
        size_t cap = capexported ? 2 * capexported : 16;
        uint64_t *grown = realloc(exported, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&ipc_lock);
            return -1;
        }
        exported = grown;
        capexported = cap;
    }
    if (!atexit_done)
        atexit_done = atexit(remove_all_at_exit) == 0;
    int fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0)
        exported[nexported++] = id;
    pthread_mutex_unlock(&ipc_lock);
    return fd;
}

int sim_ipc_open(int32_t pid, uint64_t id)
{
    char name[96];
    file_name(name, sizeof name, pid, id);
    return open(name, O_RDWR | O_CLOEXEC);
}

void sim_ipc_remove(uint64_t id)
{
    char name[96];
    file_name(name, sizeof name, (int32_t)getpid(), id);
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nexported; i++)
        if (exported[i] == id) {
            exported[i] = exported[--nexported];
            break;
        }
    unlink(name);
    pthread_mutex_unlock(&ipc_lock);
}

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!pHandle || !dptr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev = sim_mem_owner((uintptr_t)dptr);
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    /* The pages are copied once into the shared file: nothing may write the
     * old ones meanwhile (sim_device_sync's acquire also orders the copy
     * after the work that wrote them). */
    sim_device_sync(dev);
    ipc_handle h = { .magic = IPC_MAGIC, .pid = (int32_t)getpid() };
    uintptr_t base;
    size_t size, span;
    SIM_TRY(sim_mem_share((uintptr_t)dptr, &h.ordinal, &base, &size, &span, &h.id));
    h.size = size;
    h.span = span;
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

static CUresult ipc_open_handle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_MAGIC || h.span == 0 || h.size > h.span)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;   /* not in the exporting process */

    pthread_mutex_lock(&open_lock);
    for (ipc_open *o = opened; o; o = o->next)
        if (o->pid == h.pid && o->id == h.id) {
            o->refs++;
            *pdptr = (CUdeviceptr)o->addr;
            pthread_mutex_unlock(&open_lock);
            return CUDA_SUCCESS;
        }
    int fd = sim_ipc_open(h.pid, h.id);
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;   /* freed, or its process exited */
    uintptr_t addr = 0;
    ipc_open *o = NULL;
    if (fd >= 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        o = calloc(1, sizeof *o);
        if (o)
            rc = sim_mem_map_shared(c->dev, fd, (size_t)h.size, (size_t)h.span, &addr);
        close(fd);
    }
    if (rc == CUDA_SUCCESS) {
        *o = (ipc_open){ .next = opened, .pid = h.pid, .id = h.id, .addr = addr,
                         .dev = c->dev, .refs = 1 };
        opened = o;
        *pdptr = (CUdeviceptr)addr;
    } else {
        free(o);
    }
    pthread_mutex_unlock(&open_lock);
    return rc;
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open_handle(pdptr, handle, Flags);
}

/* The 4.1 ABI: the same signature. */
#undef cuIpcOpenMemHandle
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open_handle(pdptr, handle, Flags);
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    pthread_mutex_lock(&open_lock);
    ipc_open **pp = &opened;
    while (*pp && (*pp)->addr != (uintptr_t)dptr)
        pp = &(*pp)->next;
    ipc_open *o = *pp;
    if (!o) {
        pthread_mutex_unlock(&open_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (--o->refs > 0) {
        pthread_mutex_unlock(&open_lock);
        return CUDA_SUCCESS;
    }
    *pp = o->next;
    pthread_mutex_unlock(&open_lock);
    /* Unmapped like a free: queued work that uses it runs first. */
    sim_device_sync(o->dev);
    CUresult rc = sim_mem_free(o->dev, o->addr, SIM_FREE_IPC);
    free(o);
    return rc;
}
