/* tests/sim/sim_memory.c - device memory: a reserved address range per device.
 *
 * Each device reserves a large PROT_NONE, MAP_NORESERVE range at start-up.
 * An allocation carves a page-aligned piece (so it is at least 256-byte
 * aligned, as cudaMalloc promises) and makes it readable and writable; a free
 * drops the pages (MADV_DONTNEED) and makes them PROT_NONE again, so a
 * use-after-free faults the way an illegal address would on a GPU.
 *
 * Footprint: capacity (and cudaMemGetInfo's free memory) is consumed the way
 * an NVIDIA H200 (driver 580.159.04, CUDA 13.0) was seen to consume it
 * (tests/gpucheck/driver_facts.real, fact malloc_footprint, 2026-11-28):
 * in 2 MiB pages (SIM_PAGE). A cuMemAlloc above 1 MiB takes its size rounded
 * up to whole pages (1 MiB+1: 2 MiB, 3 MiB: 4 MiB, 7 MiB: 8 MiB, 20 MiB+1:
 * 22 MiB); up to 1 MiB it shares pages with the other small ones (sixteen
 * 512 B allocations took nothing more, sixteen of 1 MiB took 16 MiB): here
 * the small ones are packed perfectly, each rounded up to 512 B (a guess:
 * the real sub-allocator's unit and its fragmentation were not seen). A
 * cuMemAllocAsync from a pool takes its size rounded up to a whole page, out
 * of chunks of 32 MiB the pools reserve (fact malloc_async_footprint: the
 * first 1 MiB allocation took 32 MiB, sixteen of 1 MiB took 2 MiB each,
 * nothing was kept once they were freed, release threshold 0). A guess that
 * fits what was seen, the pools' real policy being undocumented: the chunks
 * are shared by every pool of the device and packed perfectly; a pool
 * allocation above 32 MiB takes its own pages.
 * bytes_in_use (simcuda_stats) still counts the requested sizes.
 * The address range is four times the capacity (at least 64 GiB), so that
 * fragmentation of the range is not what makes an allocation fail.
 *
 * The free ranges are kept TLSF-style: size classes of 16 sub-classes per
 * power of two, with bitmaps, so finding a fitting block is O(1); used blocks
 * are in a glibc tsearch tree keyed by address range, O(log n), which also
 * answers "which allocation contains this interior pointer".
 */
#include "sim_internal.h"

#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Where the ranges go when the kernel honours the hint: far from the brk heap
 * and from the usual mmap area, one TiB apart per device. */
#define RANGE_HINT_BASE  ((uintptr_t)0x500000000000ull)
#define RANGE_HINT_STEP  ((uintptr_t)1 << 40)

/* ---- size classes ------------------------------------------------------- */

static inline int log2_floor(size_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

/* n in granules, n >= 1. Below 16 granules every size has its own class. */
static void mapping(size_t n, int *fl, int *sl)
{
    if (n < SIM_SL_COUNT) {
        *fl = 0;
        *sl = (int)n;
        return;
    }
    int l = log2_floor(n);
    *fl = l - 3;
    *sl = (int)((n >> (l - 4)) - SIM_SL_COUNT);
}

/* The class whose every block is >= n granules. */
static void mapping_search(size_t n, int *fl, int *sl)
{
    if (n >= SIM_SL_COUNT) {
        int l = log2_floor(n);
        n += ((size_t)1 << (l - 4)) - 1;
    }
    mapping(n, fl, sl);
}

static void free_list_insert(sim_heap *h, sim_block *b)
{
    int fl, sl;
    mapping(b->span / SIM_GRANULE, &fl, &sl);
    b->is_free = 1;
    b->prev_free = NULL;
    b->next_free = h->free_heads[fl][sl];
    if (b->next_free)
        b->next_free->prev_free = b;
    h->free_heads[fl][sl] = b;
    h->fl_bitmap |= 1ull << fl;
    h->sl_bitmap[fl] |= 1u << sl;
}

static void free_list_remove(sim_heap *h, sim_block *b)
{
    int fl, sl;
    mapping(b->span / SIM_GRANULE, &fl, &sl);
    if (b->prev_free)
        b->prev_free->next_free = b->next_free;
    else
        h->free_heads[fl][sl] = b->next_free;
    if (b->next_free)
        b->next_free->prev_free = b->prev_free;
    if (!h->free_heads[fl][sl]) {
        h->sl_bitmap[fl] &= ~(1u << sl);
        if (!h->sl_bitmap[fl])
            h->fl_bitmap &= ~(1ull << fl);
    }
    b->is_free = 0;
    b->prev_free = b->next_free = NULL;
}

static sim_block *find_free(sim_heap *h, size_t n)
{
    int fl, sl;
    mapping_search(n, &fl, &sl);
    if (fl >= SIM_FL_COUNT)
        return NULL;
    uint32_t sl_map = sl < 32 ? h->sl_bitmap[fl] & (~0u << sl) : 0;
    if (!sl_map) {
        uint64_t fl_map = fl + 1 < 64 ? h->fl_bitmap & (~0ull << (fl + 1)) : 0;
        if (!fl_map)
            return NULL;
        fl = __builtin_ctzll(fl_map);
        sl_map = h->sl_bitmap[fl];
    }
    sl = __builtin_ctz(sl_map);
    return h->free_heads[fl][sl];
}

/* ---- used-block tree ---------------------------------------------------- */

/* Ranges never overlap, so "overlaps" is "equal": a probe of one byte finds
 * the block that contains it. */
static int range_cmp(const void *a, const void *b)
{
    const sim_block *x = a, *y = b;
    if (x->addr + x->span <= y->addr)
        return -1;
    if (y->addr + y->span <= x->addr)
        return 1;
    return 0;
}

static sim_block *tree_find(sim_heap *h, uintptr_t p)
{
    sim_block probe = { .addr = p, .span = 1, .req = 1 };
    void *node = tfind(&probe, &h->used_tree, range_cmp);
    return node ? *(sim_block **)node : NULL;
}

/* The used block holding p, unless it is a parked graph allocation (which
 * the program sees as freed). */
static sim_block *live_find(sim_heap *h, uintptr_t p)
{
    sim_block *b = tree_find(h, p);
    return b && !b->parked ? b : NULL;
}

/* ---- footprint (see the header) ------------------------------------------ */

static size_t round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* Capacity one allocation of `bytes` of `kind` takes; *small: in shared
 * memory (1: the small pages, 2: the pools' chunks). */
static size_t charge_of(size_t bytes, sim_mem_kind kind, uint8_t *small)
{
    *small = 0;
    if ((kind == SIM_MEM_DEVICE || kind == SIM_MEM_MANAGED) && bytes <= SIM_SMALL_MAX) {
        *small = 1;
        return round_up(bytes, SIM_SMALL_UNIT);
    }
    if (kind == SIM_MEM_ASYNC && bytes <= SIM_POOL_CHUNK)
        *small = 2;
    return round_up(bytes, SIM_PAGE);
}

static size_t *shared_bytes(sim_device *dev, uint8_t cls)
{
    return cls == 1 ? &dev->small_bytes : &dev->pool_bytes;
}

/* The footprint once `charge` (of class `cls`) is added (or taken away);
 * under mem_lock. */
static size_t footprint_with(sim_device *dev, size_t charge, uint8_t cls, bool add)
{
    if (!cls)
        return add ? dev->footprint + charge : dev->footprint - charge;
    size_t unit = cls == 1 ? SIM_PAGE : SIM_POOL_CHUNK;
    size_t old = *shared_bytes(dev, cls);
    size_t s = add ? old + charge : old - charge;
    return dev->footprint - round_up(old, unit) + round_up(s, unit);
}

/* Take (add) or give back the capacity of b; false if it does not fit. */
static bool charge_block(sim_device *dev, sim_block *b, bool add)
{
    size_t f = footprint_with(dev, b->charge, b->small, add);
    if (add && (f > dev->capacity || f < dev->footprint))
        return false;
    dev->footprint = f;
    if (b->small) {
        size_t *sb = shared_bytes(dev, b->small);
        *sb = add ? *sb + b->charge : *sb - b->charge;
    }
    if (add) {
        dev->used += b->req;
        if (dev->used > dev->peak)
            dev->peak = dev->used;
    } else {
        dev->used -= b->req;
    }
    return true;
}

/* ---- allocations cudaDeviceReset released ----------------------------------- */
/* After cudaDeviceReset, cudaFreeAsync of a stream-ordered pointer from
 * before it returned cudaSuccess on the H200 (fact reset_then_free_old; so
 * did cudaFree of one: prog_misc reset, the first real run), while cudaFree
 * of a cudaMalloc pointer from before returned
 * cudaErrorInvalidValue. Here: the bases of the stream-ordered allocations
 * a reset released are remembered; one free of each is accepted and does
 * nothing, until the address is handed out again. */

static uintptr_t *orphans[SIM_MAX_DEVICES];   /* under mem_lock */
static size_t norphans[SIM_MAX_DEVICES], orphans_cap[SIM_MAX_DEVICES];

static void orphan_add(sim_device *dev, uintptr_t p)
{
    int d = dev->ordinal;
    if (norphans[d] == orphans_cap[d]) {
        size_t c = orphans_cap[d] ? 2 * orphans_cap[d] : 16;
        uintptr_t *v = realloc(orphans[d], c * sizeof *v);
        if (!v)
            return;
        orphans[d] = v;
        orphans_cap[d] = c;
    }
    orphans[d][norphans[d]++] = p;
}

/* Forget the orphans in [addr, addr+span): the range is handed out again. */
static void orphans_forget(sim_device *dev, uintptr_t addr, size_t span)
{
    int d = dev->ordinal;
    for (size_t i = 0; i < norphans[d];) {
        if (orphans[d][i] >= addr && orphans[d][i] < addr + span)
            orphans[d][i] = orphans[d][--norphans[d]];
        else
            i++;
    }
}

bool sim_mem_reset_orphan_take(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    bool found = false;
    if (!tree_find(&dev->heap, ptr)) {
        int d = dev->ordinal;
        for (size_t i = 0; i < norphans[d] && !found; i++) {
            if (orphans[d][i] == ptr) {
                orphans[d][i] = orphans[d][--norphans[d]];
                found = true;
            }
        }
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return found;
}

/* ---- commit / decommit -------------------------------------------------- */

static void commit(uintptr_t addr, size_t span)
{
    /* Failure (ENOMEM from too many mappings) leaves the pages inaccessible;
     * make it loud rather than a mysterious fault later. */
    if (mprotect((void *)addr, span, PROT_READ | PROT_WRITE) != 0)
        abort();
}

static void decommit(uintptr_t addr, size_t span)
{
    madvise((void *)addr, span, MADV_DONTNEED);
    mprotect((void *)addr, span, PROT_NONE);
}

/* A VA reservation may have shared (VMM) mappings in it: put a fresh
 * inaccessible anonymous mapping over the whole range. */
static void unreserve(uintptr_t addr, size_t span)
{
    mmap((void *)addr, span, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* ---- heap --------------------------------------------------------------- */

int sim_heap_init(sim_device *dev)
{
    sim_heap *h = &dev->heap;
    size_t size = dev->capacity * 4;
    if (size < ((size_t)64 << 30))
        size = (size_t)64 << 30;
    size = (size + SIM_VMM_GRANULE - 1) & ~((size_t)SIM_VMM_GRANULE - 1);
    void *hint = (void *)(RANGE_HINT_BASE + RANGE_HINT_STEP * (uintptr_t)dev->ordinal);
    /* One extra VMM granule so the base can be 2 MiB aligned, like real
     * device allocations of that size. */
    void *p = mmap(hint, size + SIM_VMM_GRANULE, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    uintptr_t base = ((uintptr_t)p + SIM_VMM_GRANULE - 1) & ~((uintptr_t)SIM_VMM_GRANULE - 1);
    h->base = base;
    h->size = size;
    sim_block *b = calloc(1, sizeof *b);
    if (!b)
        return -1;
    b->addr = base;
    b->span = size;
    free_list_insert(h, b);
    return 0;
}

sim_device *sim_mem_owner(uintptr_t ptr)
{
    for (int i = 0; i < sim_device_count; i++) {
        sim_heap *h = &sim_devices[i].heap;
        if (ptr >= h->base && ptr < h->base + h->size)
            return &sim_devices[i];
    }
    return NULL;
}

/* The device whose range holds ptr, returned with its mem_lock taken, and
 * in *b the live block holding ptr (NULL: none); NULL, no lock taken, when
 * no device's range holds ptr. For the queries by address alone. */
static sim_device *owner_locked(uintptr_t ptr, sim_block **b)
{
    sim_device *dev = sim_mem_owner(ptr);
    if (!dev)
        return NULL;
    pthread_mutex_lock(&dev->mem_lock);
    *b = live_find(&dev->heap, ptr);
    return dev;
}

/* owner_locked, *b left NULL unless ptr is in the block's requested bytes
 * (of a zero-byte allocation: its address), not in the rest of its span. */
static sim_device *requested_owner_locked(uintptr_t ptr, sim_block **b)
{
    sim_device *dev = owner_locked(ptr, b);
    if (dev && *b && ptr >= (*b)->addr + ((*b)->req ? (*b)->req : 1))
        *b = NULL;
    return dev;
}

/* Cuts free block `b` `offset` bytes in: returns the block after the cut,
 * linked into address order, or NULL (b unchanged) if out of memory. */
static sim_block *split_at(sim_block *b, size_t offset)
{
    sim_block *rest = calloc(1, sizeof *rest);
    if (!rest)
        return NULL;
    rest->addr = b->addr + offset;
    rest->span = b->span - offset;
    b->span = offset;
    rest->prev_phys = b;
    rest->next_phys = b->next_phys;
    if (rest->next_phys)
        rest->next_phys->prev_phys = rest;
    b->next_phys = rest;
    return rest;
}

/* Carve `span` bytes (granule multiple) with the given alignment; under mem_lock. */
static sim_block *carve(sim_heap *h, size_t span, size_t align)
{
    size_t need = span + (align > SIM_GRANULE ? align - SIM_GRANULE : 0);
    sim_block *b = find_free(h, need / SIM_GRANULE);
    if (!b)
        return NULL;
    free_list_remove(h, b);
    uintptr_t start = (b->addr + align - 1) & ~(uintptr_t)(align - 1);
    if (start != b->addr) {            /* split off the misaligned head */
        sim_block *head = b;
        b = split_at(head, start - head->addr);
        free_list_insert(h, head);
        if (!b)
            return NULL;
    }
    if (b->span > span) {              /* split off the tail */
        sim_block *tail = split_at(b, span);
        if (tail)
            free_list_insert(h, tail);
    }
    return b;
}

/* Return a block to the free lists, merging with free neighbours; under mem_lock. */
static void release(sim_heap *h, sim_block *b)
{
    b->req = 0;
    b->charge = 0;
    b->kind = 0;
    b->free_pending = 0;
    b->small = b->graph = b->unlaunched = b->parked = b->stale_frees = 0;
    sim_block *prev = b->prev_phys, *next = b->next_phys;
    if (prev && prev->is_free) {
        free_list_remove(h, prev);
        prev->span += b->span;
        prev->next_phys = next;
        if (next)
            next->prev_phys = prev;
        free(b);
        b = prev;
    }
    if (next && next->is_free) {
        free_list_remove(h, next);
        b->span += next->span;
        b->next_phys = next->next_phys;
        if (b->next_phys)
            b->next_phys->prev_phys = b;
        free(next);
    }
    free_list_insert(h, b);
}

CUresult sim_mem_alloc(sim_device *dev, size_t bytes, sim_mem_kind kind, uintptr_t *out)
{
    /* Big allocations come 2 MiB aligned, as from the real driver. */
    return sim_mem_alloc_aligned(dev, bytes, bytes >= SIM_VMM_GRANULE ? SIM_VMM_GRANULE : SIM_GRANULE,
                                 kind, out);
}

CUresult sim_mem_alloc_aligned(sim_device *dev, size_t bytes, size_t align,
                               sim_mem_kind kind, uintptr_t *out)
{
    size_t span = (bytes + SIM_GRANULE - 1) & ~((size_t)SIM_GRANULE - 1);
    if (span < bytes || align == 0 || (align & (align - 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (align < SIM_GRANULE)
        align = SIM_GRANULE;
    bool counted = kind != SIM_MEM_VA && kind != SIM_MEM_IPC;

    uint8_t small = 0;
    size_t charge = counted ? charge_of(bytes, kind, &small) : 0;

    pthread_mutex_lock(&dev->mem_lock);
    if (counted && footprint_with(dev, charge, small, true) > dev->capacity) {
        pthread_mutex_unlock(&dev->mem_lock);
        SIM_COUNT(dev, failed_allocs);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_block *b = carve(&dev->heap, span, align);
    if (!b) {
        pthread_mutex_unlock(&dev->mem_lock);
        SIM_COUNT(dev, failed_allocs);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->req = bytes;
    b->kind = (uint8_t)kind;
    b->charge = charge;
    b->small = small;
    if (!tsearch(b, &dev->heap.used_tree, range_cmp)) {
        release(&dev->heap, b);
        pthread_mutex_unlock(&dev->mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (counted)
        charge_block(dev, b, true);
    if (norphans[dev->ordinal])
        orphans_forget(dev, b->addr, b->span);
    uintptr_t addr = b->addr;
    pthread_mutex_unlock(&dev->mem_lock);

    /* The range is ours until freed: commit outside the lock. */
    if (counted)
        commit(addr, span);
    if (counted) {
        SIM_COUNT(dev, allocs);
        if (kind == SIM_MEM_DEVICE)
            SIM_COUNT(dev, allocs_device);
        else if (kind == SIM_MEM_ASYNC)
            SIM_COUNT(dev, allocs_async);
        else if (kind == SIM_MEM_MANAGED)
            SIM_COUNT(dev, allocs_managed);
    }
    *out = addr;
    return CUDA_SUCCESS;
}

/* Free the allocation that starts at ptr. Interior pointers, unknown ones
 * and second frees are CUDA_ERROR_INVALID_VALUE and change nothing. A
 * pointer with a stream-ordered free queued is only freed by that op; a VA
 * reservation only by cuMemAddressFree, and nothing else by it. */
CUresult sim_mem_free(sim_device *dev, uintptr_t ptr, sim_free_mode mode)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = live_find(&dev->heap, ptr);
    if (b && b->addr == ptr && mode == SIM_FREE_QUEUED && b->stale_frees) {
        b->stale_frees--;                /* a relaunch took the memory back */
        pthread_mutex_unlock(&dev->mem_lock);
        return CUDA_SUCCESS;
    }
    if (!b || b->addr != ptr ||
        (b->free_pending && mode != SIM_FREE_QUEUED) ||
        ((b->kind == SIM_MEM_VA) != (mode == SIM_FREE_VA)) ||
        ((b->kind == SIM_MEM_IPC) != (mode == SIM_FREE_IPC))) {
        pthread_mutex_unlock(&dev->mem_lock);
        SIM_COUNT(dev, bad_frees);
        return CUDA_ERROR_INVALID_VALUE;
    }
    bool counted = b->kind != SIM_MEM_VA && b->kind != SIM_MEM_IPC;
    if (b->graph) {
        /* A graph's allocation: the range stays the graph's for its next
         * launch (sim_graph.c); the memory goes. */
        b->parked = 1;
        b->free_pending = 0;
        charge_block(dev, b, false);
        decommit(b->addr, b->span);
        pthread_mutex_unlock(&dev->mem_lock);
        SIM_COUNT(dev, frees);
        return CUDA_SUCCESS;
    }
    tdelete(b, &dev->heap.used_tree, range_cmp);
    if (counted)
        charge_block(dev, b, false);
    size_t span = b->span;
    /* Decommit before the range can be handed out again; shared pages
     * (exported or imported) are replaced by a fresh private mapping. */
    if (counted && !b->ipc_id)
        decommit(b->addr, span);
    else
        unreserve(b->addr, span);
    if (b->ipc_id)
        sim_ipc_remove(b->ipc_id);
    b->ipc_id = 0;
    release(&dev->heap, b);
    pthread_mutex_unlock(&dev->mem_lock);
    if (counted)
        SIM_COUNT(dev, frees);
    return CUDA_SUCCESS;
}

CUresult sim_mem_mark_free_pending(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = live_find(&dev->heap, ptr);
    CUresult rc = CUDA_SUCCESS;
    if (!b || b->addr != ptr || b->free_pending || b->kind == SIM_MEM_VA)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        b->free_pending = 1;
    pthread_mutex_unlock(&dev->mem_lock);
    if (rc != CUDA_SUCCESS)
        SIM_COUNT(dev, bad_frees);
    return rc;
}

bool sim_mem_is_async(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = live_find(&dev->heap, ptr);
    bool async = b && b->addr == ptr && b->kind == SIM_MEM_ASYNC;
    pthread_mutex_unlock(&dev->mem_lock);
    return async;
}

CUresult sim_mem_lookup(uintptr_t ptr, sim_device **dev_out, uintptr_t *base,
                        size_t *size, sim_mem_kind *kind)
{
    sim_block *b;
    sim_device *dev = requested_owner_locked(ptr, &b);
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (b) {
        if (dev_out) *dev_out = dev;
        if (base) *base = b->addr;
        if (size) *size = b->req;
        if (kind) *kind = (sim_mem_kind)b->kind;
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return b ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static __thread sim_device *release_all_dev;
static void collect_block(const void *node, VISIT which, int depth)
{
    (void)depth;
    if (which != postorder && which != leaf)
        return;
    sim_block *b = *(sim_block *const *)node;
    sim_device *dev = release_all_dev;
    if (b->kind == SIM_MEM_ASYNC && !b->parked)
        orphan_add(dev, b->addr);
    if (b->parked) {
        /* already uncommitted and not counted */
    } else if (b->kind != SIM_MEM_VA && b->kind != SIM_MEM_IPC && !b->ipc_id) {
        decommit(b->addr, b->span);
        SIM_COUNT(dev, frees);
    } else {
        unreserve(b->addr, b->span);
        if (b->kind != SIM_MEM_VA && b->kind != SIM_MEM_IPC)
            SIM_COUNT(dev, frees);
        if (b->ipc_id)
            sim_ipc_remove(b->ipc_id);
        b->ipc_id = 0;
    }
}

static void no_free(void *p) { (void)p; }

/* cudaDeviceReset: every allocation of the device goes, VA reservations too. */
void sim_mem_release_all(sim_device *dev)
{
    pthread_mutex_lock(&dev->mem_lock);
    release_all_dev = dev;
    twalk(dev->heap.used_tree, collect_block);
    /* Collect the blocks first: tdestroy frees tree nodes, not our blocks. */
    size_t n = 0, cap = 64;
    sim_block **list = malloc(cap * sizeof *list);
    while (dev->heap.used_tree && list) {
        sim_block *b = *(sim_block **)dev->heap.used_tree;
        tdelete(b, &dev->heap.used_tree, range_cmp);
        if (n == cap) {
            sim_block **grown = realloc(list, 2 * cap * sizeof *list);
            if (!grown)
                break;
            list = grown;
            cap *= 2;
        }
        list[n++] = b;
    }
    for (size_t i = 0; i < n; i++)
        release(&dev->heap, list[i]);
    free(list);
    tdestroy(dev->heap.used_tree, no_free);
    dev->heap.used_tree = NULL;
    dev->used = 0;
    dev->footprint = 0;
    dev->small_bytes = 0;
    dev->pool_bytes = 0;
    pthread_mutex_unlock(&dev->mem_lock);
}

/* ---- graph allocations (sim_graph.c) ---------------------------------------- */

void sim_mem_graph_mark(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = live_find(&dev->heap, ptr);
    if (b && b->addr == ptr)
        b->graph = b->unlaunched = 1;
    pthread_mutex_unlock(&dev->mem_lock);
}

/* Is ptr the start of a graph's allocation (`unlaunched`: one that no
 * launch has made yet)? */
static bool is_graph_block(uintptr_t ptr, bool unlaunched)
{
    sim_block *b;
    sim_device *dev = owner_locked(ptr, &b);
    if (!dev)
        return false;
    bool g = b && b->addr == ptr && b->graph && (!unlaunched || b->unlaunched);
    pthread_mutex_unlock(&dev->mem_lock);
    return g;
}

bool sim_mem_is_unlaunched_graph(uintptr_t ptr)
{
    return is_graph_block(ptr, true);
}

bool sim_mem_is_graph(uintptr_t ptr)
{
    return is_graph_block(ptr, false);
}

/* Live: allocated, and no free of it done or queued. */
bool sim_mem_graph_is_live(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = tree_find(&dev->heap, ptr);
    bool live = b && b->addr == ptr && b->graph && !b->parked && !b->free_pending;
    pthread_mutex_unlock(&dev->mem_lock);
    return live;
}

CUresult sim_mem_graph_revive(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = tree_find(&dev->heap, ptr);
    CUresult rc = CUDA_SUCCESS;
    if (b && b->addr == ptr)
        b->unlaunched = 0;
    if (!b || b->addr != ptr || !b->graph) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (b->parked) {
        if (!charge_block(dev, b, true)) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            b->parked = 0;
            commit(b->addr, b->span);
        }
    } else if (b->free_pending) {
        /* Its free is queued, not yet reached: that free belongs to the
         * previous launch's allocation, which this launch takes back. */
        b->free_pending = 0;
        b->stale_frees++;
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return rc;
}

void sim_mem_graph_drop(sim_device *dev, uintptr_t ptr)
{
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = tree_find(&dev->heap, ptr);
    if (b && b->addr == ptr && b->graph) {
        b->graph = b->unlaunched = 0;
        if (b->parked) {
            tdelete(b, &dev->heap.used_tree, range_cmp);
            b->parked = 0;
            b->stale_frees = 0;
            release(&dev->heap, b);
        }
    }
    pthread_mutex_unlock(&dev->mem_lock);
}

/* ---- interprocess sharing (sim_ipc.c) ----------------------------------- */

/* Private pages cannot be seen by another process: the first export of an
 * allocation copies its bytes into a shared file and maps that file over
 * the same addresses. The device is idle meanwhile (the caller waited), so
 * no queued copy writes into the old pages after they were copied. */
CUresult sim_mem_share(uintptr_t ptr, int *ordinal, uintptr_t *base, size_t *size,
                       size_t *span, uint64_t *id)
{
    sim_block *b;
    sim_device *dev = requested_owner_locked(ptr, &b);
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    if (!b || b->kind != SIM_MEM_DEVICE)
        rc = CUDA_ERROR_INVALID_VALUE;   /* legacy IPC: cuMemAlloc memory only */
    if (rc == CUDA_SUCCESS && !b->ipc_id) {
        uint64_t nid = sim_ipc_new_id();
        int fd = sim_ipc_create(nid);
        rc = CUDA_ERROR_MAP_FAILED;
        if (fd >= 0) {
            size_t done = 0;
            while (done < b->span) {
                ssize_t w = pwrite(fd, (const char *)b->addr + done, b->span - done, (off_t)done);
                if (w <= 0)
                    break;
                done += (size_t)w;
            }
            if (done == b->span &&
                mmap((void *)b->addr, b->span, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
                b->ipc_id = nid;
                rc = CUDA_SUCCESS;
            } else {
                sim_ipc_remove(nid);
            }
            close(fd);
        }
    }
    if (rc == CUDA_SUCCESS) {
        *ordinal = dev->ordinal;
        *base = b->addr;
        *size = b->req;
        *span = b->span;
        *id = b->ipc_id;
    }
    pthread_mutex_unlock(&dev->mem_lock);
    return rc;
}

CUresult sim_mem_map_shared(sim_device *dev, int fd, size_t size, size_t span, uintptr_t *out)
{
    uintptr_t p;
    CUresult rc = sim_mem_alloc_aligned(dev, span, span >= SIM_VMM_GRANULE ? SIM_VMM_GRANULE
                                                                           : SIM_GRANULE,
                                        SIM_MEM_IPC, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (mmap((void *)p, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        sim_mem_free(dev, p, SIM_FREE_IPC);
        return CUDA_ERROR_MAP_FAILED;
    }
    pthread_mutex_lock(&dev->mem_lock);
    sim_block *b = tree_find(&dev->heap, p);
    if (b)
        b->req = size;   /* the exporter's size, as its range queries say */
    pthread_mutex_unlock(&dev->mem_lock);
    *out = p;
    return CUDA_SUCCESS;
}

/* VMM physical memory: counted against capacity, backed elsewhere. */
CUresult sim_mem_charge(sim_device *dev, size_t bytes)
{
    sim_block probe = { .req = bytes, .charge = round_up(bytes, SIM_PAGE) };
    pthread_mutex_lock(&dev->mem_lock);
    if (!charge_block(dev, &probe, true)) {
        pthread_mutex_unlock(&dev->mem_lock);
        SIM_COUNT(dev, failed_allocs);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&dev->mem_lock);
    SIM_COUNT(dev, allocs);
    return CUDA_SUCCESS;
}

void sim_mem_uncharge(sim_device *dev, size_t bytes)
{
    sim_block probe = { .req = bytes, .charge = round_up(bytes, SIM_PAGE) };
    pthread_mutex_lock(&dev->mem_lock);
    if (probe.charge > dev->footprint || bytes > dev->used) {
        dev->used = bytes > dev->used ? 0 : dev->used - bytes;
        dev->footprint = probe.charge > dev->footprint ? 0 : dev->footprint - probe.charge;
    } else {
        charge_block(dev, &probe, false);
    }
    pthread_mutex_unlock(&dev->mem_lock);
    SIM_COUNT(dev, frees);
}

void sim_mem_info(sim_device *dev, size_t *free_b, size_t *total_b)
{
    pthread_mutex_lock(&dev->mem_lock);
    *free_b = dev->capacity - dev->footprint;
    *total_b = dev->capacity;
    pthread_mutex_unlock(&dev->mem_lock);
}

/* ---- pinned host memory ------------------------------------------------- */
/* Plain host memory, remembered so cuMemFreeHost can reject strangers and
 * pointer attributes can say "host". A small locked list: rare calls. */

typedef struct host_alloc {
    void              *p;
    size_t             n;
    struct host_alloc *next;
    bool               registered;       /* cuMemHostRegister: the program's memory */
} host_alloc;

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_alloc     *host_list;

int sim_mem_host_track(void *p, size_t n, bool add)
{
    pthread_mutex_lock(&host_lock);
    int rc = -1;
    if (add) {
        host_alloc *a = malloc(sizeof *a);
        if (a) {
            *a = (host_alloc){ p, n, host_list, false };
            host_list = a;
            rc = 0;
        }
    } else {
        for (host_alloc **pp = &host_list; *pp; pp = &(*pp)->next) {
            if ((*pp)->p == p && !(*pp)->registered) {
                host_alloc *a = *pp;
                *pp = a->next;
                free(a);
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&host_lock);
    return rc;
}

bool sim_mem_host_lookup(const void *p, void **base, size_t *size)
{
    bool found = false;
    pthread_mutex_lock(&host_lock);
    for (host_alloc *a = host_list; a; a = a->next) {
        if ((const char *)p >= (char *)a->p && (const char *)p < (char *)a->p + (a->n ? a->n : 1)) {
            if (base) *base = a->p;
            if (size) *size = a->n;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&host_lock);
    return found;
}

CUresult sim_mem_host_register(void *p, size_t n, bool add)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&host_lock);
    if (add) {
        for (host_alloc *a = host_list; a; a = a->next)
            if ((char *)p < (char *)a->p + a->n && (char *)a->p < (char *)p + n) {
                rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
                break;
            }
        host_alloc *a = rc == CUDA_SUCCESS ? malloc(sizeof *a) : NULL;
        if (a) {
            *a = (host_alloc){ p, n, host_list, true };
            host_list = a;
        } else if (rc == CUDA_SUCCESS) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        for (host_alloc **pp = &host_list; *pp; pp = &(*pp)->next) {
            if ((*pp)->p == p && (*pp)->registered) {
                host_alloc *a = *pp;
                *pp = a->next;
                free(a);
                rc = CUDA_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&host_lock);
    return rc;
}
