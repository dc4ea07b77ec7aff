/* tests/sim/sim_vmm.c - virtual memory management: cuMemCreate & co.
 *
 * A physical allocation is a memfd of its size, counted against capacity.
 * cuMemAddressReserve carves an inaccessible range from the device's address
 * range; cuMemMap maps the memfd there (shared, so two mappings of one handle
 * see the same bytes, as on a GPU) still inaccessible; cuMemSetAccess makes
 * it readable/writable; cuMemUnmap puts an inaccessible anonymous mapping
 * back. cuMemRelease only drops the handle: the memory lives until its last
 * mapping is gone, as in CUDA.
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_MAGIC_PHYS 0x50485953u   /* 'PHYS' */

typedef struct sim_phys {
    uint32_t    magic;
    sim_device *dev;
    size_t      size;
    int         fd;
    int         refs;                /* the handle + one per mapping; under vmm_lock */
    bool        released;
} sim_phys;

typedef struct sim_mapping {
    uintptr_t           va;
    size_t              size;
    sim_phys           *phys;
    struct sim_mapping *next;
} sim_mapping;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_mapping    *mappings;

static void phys_unref_locked(sim_phys *p)
{
    if (--p->refs > 0)
        return;
    close(p->fd);
    sim_mem_uncharge(p->dev, p->size);
    p->magic = 0;
    free(p);
}

static sim_phys *phys_from_handle(CUmemGenericAllocationHandle h)
{
    sim_phys *p = (sim_phys *)(uintptr_t)h;
    if (!p || p->magic != SIM_MAGIC_PHYS || p->released)
        return NULL;
    return p;
}

static bool granular(size_t n) { return n && (n % SIM_VMM_GRANULE) == 0; }

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
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev = sim_device_get(prop->location.id);
    if (!dev)
        return CUDA_ERROR_INVALID_DEVICE;
    SIM_COUNT(dev, vmm_create_calls);
    if ((rc = sim_mem_charge(dev, size)) != CUDA_SUCCESS)
        return rc;
    sim_phys *p = calloc(1, sizeof *p);
    int fd = memfd_create("simcuda-vmm", MFD_CLOEXEC);
    if (!p || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0)
            close(fd);
        free(p);
        sim_mem_uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = (sim_phys){ SIM_MAGIC_PHYS, dev, size, fd, 1, false };
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
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
    p->released = true;
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
    *m = (sim_mapping){ va, size, p, mappings };
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
    /* Unmapping frees memory a queued copy may still use: wait, as CUDA does. */
    sim_device *dev = sim_mem_owner(va);
    if (dev)
        sim_device_sync(dev);
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
            m->phys->released = false;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
}
