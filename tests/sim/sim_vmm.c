/* tests/sim/sim_vmm.c - virtual memory management: cuMemCreate & co.
 *
 * A physical allocation is a memfd of its size, counted against capacity.
 * cuMemAddressReserve carves an inaccessible range from the device's address
 * range; cuMemMap maps the memfd there (shared, so two mappings of one handle
 * see the same bytes, as on a GPU) still inaccessible; cuMemSetAccess makes
 * it readable/writable; cuMemUnmap puts an inaccessible anonymous mapping
 * back. cuMemRelease only drops the handle: the memory lives until its last
 * mapping is gone, as in CUDA.
 *
 * Shareable handles: an allocation created with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested types exports
 * a duplicate of its memfd; importing such a descriptor in another process
 * maps the same pages (not counted against that process's capacity, as a
 * legacy IPC import is not); importing it in the exporting process finds the
 * allocation itself. The memfd's name carries the device ordinal, so the
 * importer knows where the memory lives.
 */
#include "sim_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_MAGIC_PHYS 0x50485953u   /* 'PHYS' */

typedef struct sim_phys {
    uint32_t            magic;
    sim_device         *dev;
    size_t              size;
    int                 fd;
    int                 refs;        /* handles + one per mapping; under vmm_lock */
    int                 handles;     /* created, retained or imported, not yet released */
    bool                charged;     /* counted against dev's capacity (not an import
                                        from another process) */
    CUmemAllocationProp prop;        /* as created (cuMemGetAllocationPropertiesFromHandle) */
    dev_t               st_dev;      /* the memfd's identity: an import of an */
    ino_t               st_ino;      /* exported descriptor finds its allocation */
    struct sim_phys    *next;        /* all live allocations, under vmm_lock */
} sim_phys;

typedef struct sim_mapping {
    uintptr_t           va;
    size_t              size;
    sim_phys           *phys;
    struct sim_mapping *next;
    bool                accessible;  /* cuMemSetAccess made it readable */
} sim_mapping;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_mapping    *mappings;
static sim_phys       *allocations;
static atomic_bool     reserved_once;   /* a reservation was ever made (sim_vmm_work_begin) */

static void phys_unref_locked(sim_phys *p)
{
    if (--p->refs > 0)
        return;
    for (sim_phys **pp = &allocations; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    close(p->fd);
    if (p->charged)
        sim_mem_uncharge(p->dev, p->size);
    p->magic = 0;
    free(p);
}

/* A new allocation object for memfd `fd` (taken), linked in. */
static CUresult phys_new(sim_device *dev, int fd, size_t size, bool charged,
                         const CUmemAllocationProp *prop, CUmemGenericAllocationHandle *handle)
{
    struct stat st;
    sim_phys *p = calloc(1, sizeof *p);
    if (!p || fstat(fd, &st) != 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = (sim_phys){ .magic = SIM_MAGIC_PHYS, .dev = dev, .size = size, .fd = fd, .refs = 1, .handles = 1,
                     .charged = charged, .prop = *prop, .st_dev = st.st_dev,
                     .st_ino = st.st_ino };
    p->prop.win32HandleMetaData = NULL;
    pthread_mutex_lock(&vmm_lock);
    p->next = allocations;
    allocations = p;
    pthread_mutex_unlock(&vmm_lock);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static sim_phys *phys_from_handle(CUmemGenericAllocationHandle h)
{
    sim_phys *p = (sim_phys *)(uintptr_t)h;
    if (!p || p->magic != SIM_MAGIC_PHYS || p->handles == 0)
        return NULL;
    return p;
}

static bool granular(size_t n) { return n && (n % SIM_VMM_GRANULE) == 0; }

#define HANDLE_TYPES_KNOWN (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 | \
                            CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC)
#define MEMFD_PREFIX "simcuda-vmm-dev"

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    SIM_TRY(sim_check_init());
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    (void)option;  /* minimum and recommended are both 2 MiB */
    *granularity = SIM_VMM_GRANULE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !prop || flags != 0 || !granular(size) ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (prop->requestedHandleTypes & ~(unsigned)HANDLE_TYPES_KNOWN))
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev = sim_device_get(prop->location.id);
    if (!dev)
        return CUDA_ERROR_INVALID_DEVICE;
    SIM_COUNT(dev, vmm_create_calls);
    /* Only POSIX descriptors can be had here: the device reports fabric
     * handles unsupported, and Win32 handles do not exist on Linux. */
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((rc = sim_mem_charge(dev, size)) != CUDA_SUCCESS)
        return rc;
    char name[32];
    snprintf(name, sizeof name, MEMFD_PREFIX "%d", dev->ordinal);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 ||
        (rc = phys_new(dev, fd, size, true, prop, handle)) != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        sim_mem_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_TRY(sim_check_init());
    pthread_mutex_lock(&vmm_lock);
    sim_phys *p = phys_from_handle(handle);
    if (!p) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    SIM_COUNT(p->dev, vmm_release_calls);
    p->handles--;
    phys_unref_locked(p);
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    sim_ctx *c;
    CUresult rc = sim_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || !granular(size) || flags != 0 || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    (void)addr;  /* a hint: the sim places ranges itself */
    if (alignment < SIM_VMM_GRANULE)
        alignment = SIM_VMM_GRANULE;
    uintptr_t p;
    rc = sim_mem_alloc_aligned(c->dev, size, alignment, SIM_MEM_VA, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    *ptr = (CUdeviceptr)p;
    atomic_store_explicit(&reserved_once, true, memory_order_relaxed);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_TRY(sim_check_init());
    sim_device *dev;
    uintptr_t base;
    size_t rsize;
    sim_mem_kind kind;
    if (sim_mem_lookup((uintptr_t)ptr, &dev, &base, &rsize, &kind) != CUDA_SUCCESS ||
        kind != SIM_MEM_VA || base != (uintptr_t)ptr || rsize != size)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_mem_free(dev, (uintptr_t)ptr, SIM_FREE_VA);
}

/* [va, va+size) must lie inside one reservation. */
static bool in_reservation(uintptr_t va, size_t size)
{
    uintptr_t base;
    size_t rsize;
    sim_mem_kind kind;
    if (sim_mem_lookup(va, NULL, &base, &rsize, &kind) != CUDA_SUCCESS || kind != SIM_MEM_VA)
        return false;
    return va + size <= base + rsize;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    SIM_TRY(sim_check_init());
    uintptr_t va = (uintptr_t)ptr;
    if (flags != 0 || !granular(size) || (offset % SIM_VMM_GRANULE) || (va % SIM_VMM_GRANULE) ||
        !in_reservation(va, size))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    sim_phys *p = phys_from_handle(handle);
    if (!p || offset + size > p->size) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (sim_mapping *m = mappings; m; m = m->next) {
        if (va < m->va + m->size && m->va < va + size) {
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_ERROR_INVALID_VALUE;   /* already mapped */
        }
    }
    sim_mapping *m = malloc(sizeof *m);
    if (!m || mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
                   (off_t)offset) == MAP_FAILED) {
        pthread_mutex_unlock(&vmm_lock);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (sim_mapping){ va, size, p, mappings, false };
    mappings = m;
    p->refs++;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_TRY(sim_check_init());
    uintptr_t va = (uintptr_t)ptr;
    if (!granular(size) || !in_reservation(va, size))
        return CUDA_ERROR_INVALID_VALUE;
    /* No wait for work still queued on the memory: it faults when it runs
     * (sim_vmm_work_begin). */
    pthread_mutex_lock(&vmm_lock);
    for (sim_mapping **pp = &mappings; *pp;) {
        sim_mapping *m = *pp;
        if (m->va >= va && m->va + m->size <= va + size) {
            mmap((void *)m->va, m->size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            *pp = m->next;
            phys_unref_locked(m->phys);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    SIM_TRY(sim_check_init());
    uintptr_t va = (uintptr_t)ptr;
    if (!desc || count == 0 || !granular(size) || !in_reservation(va, size))
        return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !sim_device_get(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
            prot = PROT_READ;
    }
    /* Every page of the range must be mapped. */
    pthread_mutex_lock(&vmm_lock);
    size_t covered = 0;
    for (sim_mapping *m = mappings; m; m = m->next)
        if (m->va >= va && m->va + m->size <= va + size)
            covered += m->size;
    if (covered != size) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    int err = mprotect((void *)va, size, prot);
    if (!err)
        for (sim_mapping *m = mappings; m; m = m->next)
            if (m->va >= va && m->va + m->size <= va + size)
                m->accessible = prot != PROT_NONE;
    pthread_mutex_unlock(&vmm_lock);
    return err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SIM_TRY(sim_check_init());
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a = (uintptr_t)addr;
    pthread_mutex_lock(&vmm_lock);
    for (sim_mapping *m = mappings; m; m = m->next) {
        if (a == m->va) {
            /* A retained handle is a new reference, released by cuMemRelease. */
            m->phys->refs++;
            m->phys->handles++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    SIM_TRY(sim_check_init());
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    sim_phys *p = phys_from_handle(handle);
    if (p)
        *prop = p->prop;
    pthread_mutex_unlock(&vmm_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    SIM_TRY(sim_check_init());
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    sim_phys *p = phys_from_handle(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!p || !(handleType & HANDLE_TYPES_KNOWN) || (handleType & (handleType - 1)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (!(p->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        rc = CUDA_ERROR_INVALID_VALUE;          /* not requested at cuMemCreate */
    int fd = rc == CUDA_SUCCESS ? dup(p->fd) : -1;
    pthread_mutex_unlock(&vmm_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* The device ordinal in a simulated allocation's memfd name, or -1 if the
 * descriptor is not one. */
static int memfd_device(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    const char *prefix = "/memfd:" MEMFD_PREFIX;
    if (strncmp(target, prefix, strlen(prefix)) != 0)
        return -1;
    int ordinal = -1;
    return sscanf(target + strlen(prefix), "%d", &ordinal) == 1 ? ordinal : -1;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    SIM_TRY(sim_check_init());
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType == CU_MEM_HANDLE_TYPE_WIN32 || shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
        shHandleType == CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = (int)(intptr_t)osHandle;
    struct stat st;
    int ordinal = memfd_device(fd);
    if (ordinal < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || !granular((size_t)st.st_size))
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev = sim_device_get(ordinal);
    if (!dev)
        return CUDA_ERROR_INVALID_DEVICE;
    /* The exporting process: the allocation itself, one more reference to
     * it, as cuMemRetainAllocationHandle gives. */
    pthread_mutex_lock(&vmm_lock);
    for (sim_phys *p = allocations; p; p = p->next) {
        if (p->st_dev == st.st_dev && p->st_ino == st.st_ino) {
            p->refs++;
            p->handles++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    /* Another process's memory: the caller keeps its descriptor. */
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUmemAllocationProp prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = { CU_MEM_LOCATION_TYPE_DEVICE, ordinal },
    };
    CUresult rc = phys_new(dev, own, (size_t)st.st_size, false, &prop, handle);
    if (rc != CUDA_SUCCESS)
        close(own);
    return rc;
}

CUresult sim_vmm_mapping_range(uintptr_t ptr, uintptr_t *base, size_t *size)
{
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&vmm_lock);
    for (sim_mapping *m = mappings; m; m = m->next) {
        if (ptr >= m->va && ptr < m->va + m->size) {
            *base = m->va;
            *size = m->size;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

/* ---- device work on mapped memory ---------------------------------------- */

/* Where [p, p + n) lies: RESERVED in an address reservation (its mappings
 * decide), GONE in a device's addresses but no allocation any more (the
 * reservation was freed too: faults), else ordinary memory. */
enum where { ORDINARY, RESERVED, GONE };
static enum where memory_at(uintptr_t p, size_t n)
{
    sim_mem_kind kind;
    if (!n)
        return ORDINARY;
    if (sim_mem_lookup(p, NULL, NULL, NULL, &kind) == CUDA_SUCCESS)
        return kind == SIM_MEM_VA ? RESERVED : ORDINARY;
    return sim_mem_owner(p) ? GONE : ORDINARY;
}

/* Under vmm_lock: is every byte of [p, p + n) mapped and accessible? */
static bool accessible_locked(uintptr_t p, size_t n)
{
    size_t covered = 0;
    for (sim_mapping *m = mappings; m; m = m->next) {
        if (!m->accessible || m->va >= p + n || p >= m->va + m->size)
            continue;
        uintptr_t lo = m->va > p ? m->va : p;
        uintptr_t hi = m->va + m->size < p + n ? m->va + m->size : p + n;
        covered += hi - lo;
    }
    return covered == n;
}

sim_vmm_work sim_vmm_work_begin(const void *dst, const void *src, size_t n)
{
    if (!atomic_load_explicit(&reserved_once, memory_order_relaxed))
        return SIM_VMM_WORK_PLAIN;
    enum where d = memory_at((uintptr_t)dst, n), s = src ? memory_at((uintptr_t)src, n) : ORDINARY;
    if (d == GONE || s == GONE)
        return SIM_VMM_WORK_FAULT;
    if (d == ORDINARY && s == ORDINARY)
        return SIM_VMM_WORK_PLAIN;
    pthread_mutex_lock(&vmm_lock);
    if ((d == ORDINARY || accessible_locked((uintptr_t)dst, n))
        && (s == ORDINARY || accessible_locked((uintptr_t)src, n)))
        return SIM_VMM_WORK_LOCKED;
    pthread_mutex_unlock(&vmm_lock);
    return SIM_VMM_WORK_FAULT;
}

void sim_vmm_work_end(sim_vmm_work w)
{
    if (w == SIM_VMM_WORK_LOCKED)
        pthread_mutex_unlock(&vmm_lock);
}
