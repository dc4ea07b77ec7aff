/*
 * alloc/backend_host.c - backend.h on host bookkeeping: see backend_host.h.
 *
 * Placement mirrors what a program sees on a device: the lowest free range
 * that fits, so freed address space is reused first and a new segment's
 * address relative to the others (which breaks the allocator's best-fit
 * ties) follows the order of a real device's. Free ranges are kept sorted
 * and coalesced; a replay holds at most thousands of segments, so a linear
 * first-fit scan costs less than the allocator's own work per segment.
 */
#include "backend_host.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

#define HOST_MAX_DEVICES 64
#define HOST_PAGE (4096ull)
#define HOST_BIG_ALIGN (2ull << 20)
#define HOST_BASE 0x7e0000000000ull        /* device d's range starts at base + d * span */
#define HOST_SPAN (1ull << 40)             /* address space per device: 1 TiB */
#define HOST_VA_BASE 0x400000000000ull     /* reserved ranges of device d: va base + d * span */
#define HOST_VMM_GRANULE (2ull << 20)      /* as the driver reports on current GPUs */
#define HOST_ERR_INVALID_VALUE 1
#define HOST_ERR_INVALID_DEVICE 101

typedef struct range { uint64_t addr, size; } range;

typedef struct host_device {
    uint64_t capacity, used;
    uint64_t va_next;              /* next reserved range (bump, never reused) */
    range *holes;                  /* free address ranges, sorted, coalesced */
    size_t nholes, capholes;
    range *live;                   /* allocations, sorted by address */
    size_t nlive, caplive;
    vt__host_calls calls;
} host_device;

typedef struct host_event {
    int device;
    bool recorded;
    uint64_t when;                 /* complete once now >= when */
} host_event;

static host_device devices[HOST_MAX_DEVICES];
static int ndev;
static uint64_t now;

void vt__host_teardown(void)
{
    for (int d = 0; d < HOST_MAX_DEVICES; d++) {
        free(devices[d].holes);
        free(devices[d].live);
    }
    memset(devices, 0, sizeof devices);
    ndev = 0;
    now = 0;
}

int vt__host_setup(int ndevices, const uint64_t *capacity)
{
    if (ndevices < 1 || ndevices > HOST_MAX_DEVICES || !capacity)
        return -EINVAL;
    vt__host_teardown();
    for (int d = 0; d < ndevices; d++) {
        host_device *hd = &devices[d];
        hd->capacity = capacity[d];
        if (vt__grow((void **)&hd->holes, &hd->capholes, 1, sizeof *hd->holes)) {
            vt__host_teardown();
            return -ENOMEM;
        }
        hd->holes[0] = (range){ HOST_BASE + (uint64_t)d * HOST_SPAN, HOST_SPAN };
        hd->nholes = 1;
        hd->va_next = HOST_VA_BASE + (uint64_t)d * HOST_SPAN;
    }
    ndev = ndevices;
    return 0;
}

void vt__host_set_now(uint64_t t) { now = t; }

static host_device *dev_of(int device)
{
    return device >= 0 && device < ndev ? &devices[device] : NULL;
}

void vt__host_get_calls(int device, vt__host_calls *out)
{
    host_device *hd = dev_of(device);
    if (hd)
        *out = hd->calls;
    else
        memset(out, 0, sizeof *out);
}

uint64_t vt__host_used(int device)
{
    host_device *hd = dev_of(device);
    return hd ? hd->used : 0;
}

/* ---- backend.h ---------------------------------------------------------- */

int vt__backend_init(void) { return 0; }

int vt__backend_device_count(int *count)
{
    *count = ndev;
    return 0;
}

int vt__backend_current_device(int *device)
{
    *device = 0;
    return 0;
}

int vt__backend_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    hd->calls.mem_infos++;
    *total_bytes = hd->capacity;
    *free_bytes = hd->capacity == VT_HOST_UNLIMITED ? VT_HOST_UNLIMITED : hd->capacity - hd->used;
    return 0;
}

int vt__backend_total_mem(int device, uint64_t *total_bytes)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    /* unknown total: the allocator then has no cap of its own */
    *total_bytes = hd->capacity == VT_HOST_UNLIMITED ? 0 : hd->capacity;
    return 0;
}

int vt__backend_malloc(int device, uint64_t size, uint64_t *addr)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    if (size == 0 || size > HOST_SPAN)
        return VT_BACKEND_OOM;
    if (hd->capacity != VT_HOST_UNLIMITED && size > hd->capacity - hd->used) {
        hd->calls.failed_mallocs++;
        return VT_BACKEND_OOM;
    }
    uint64_t span = (size + HOST_PAGE - 1) & ~(HOST_PAGE - 1);
    uint64_t align = size >= HOST_BIG_ALIGN ? HOST_BIG_ALIGN : HOST_PAGE;
    if (vt__grow((void **)&hd->live, &hd->caplive, hd->nlive + 1, sizeof *hd->live)
        || vt__grow((void **)&hd->holes, &hd->capholes, hd->nholes + 1, sizeof *hd->holes))
        return VT_BACKEND_OOM;
    for (size_t i = 0; i < hd->nholes; i++) {
        range *h = &hd->holes[i];
        uint64_t start = (h->addr + align - 1) & ~(align - 1);
        if (start - h->addr + span > h->size)
            continue;
        uint64_t head = start - h->addr, tail = h->size - head - span;
        if (head && tail) {            /* split the hole in two */
            memmove(h + 2, h + 1, (hd->nholes - i - 1) * sizeof *h);
            hd->nholes++;
            h[1] = (range){ start + span, tail };
            h->size = head;
        } else if (head) {
            h->size = head;
        } else if (tail) {
            h->addr = start + span;
            h->size = tail;
        } else {
            memmove(h, h + 1, (hd->nholes - i - 1) * sizeof *h);
            hd->nholes--;
        }
        size_t lo = 0, hi = hd->nlive;   /* insert keeping address order */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (hd->live[mid].addr < start)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(&hd->live[lo + 1], &hd->live[lo], (hd->nlive - lo) * sizeof *hd->live);
        hd->live[lo] = (range){ start, size };
        hd->nlive++;
        hd->used += size;
        hd->calls.mallocs++;
        *addr = start;
        return 0;
    }
    hd->calls.failed_mallocs++;
    return VT_BACKEND_OOM;
}

int vt__backend_free(int device, uint64_t addr)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    size_t lo = 0, hi = hd->nlive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (hd->live[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == hd->nlive || hd->live[lo].addr != addr)
        return HOST_ERR_INVALID_VALUE;
    uint64_t size = hd->live[lo].size;
    uint64_t span = (size + HOST_PAGE - 1) & ~(HOST_PAGE - 1);
    memmove(&hd->live[lo], &hd->live[lo + 1], (hd->nlive - lo - 1) * sizeof *hd->live);
    hd->nlive--;
    hd->used -= size;
    hd->calls.frees++;
    /* back into the holes, coalescing with the neighbours */
    size_t i = 0;
    while (i < hd->nholes && hd->holes[i].addr < addr)
        i++;
    bool left = i > 0 && hd->holes[i - 1].addr + hd->holes[i - 1].size == addr;
    bool right = i < hd->nholes && addr + span == hd->holes[i].addr;
    if (left && right) {
        hd->holes[i - 1].size += span + hd->holes[i].size;
        memmove(&hd->holes[i], &hd->holes[i + 1], (hd->nholes - i - 1) * sizeof *hd->holes);
        hd->nholes--;
    } else if (left) {
        hd->holes[i - 1].size += span;
    } else if (right) {
        hd->holes[i].addr = addr;
        hd->holes[i].size += span;
    } else {
        if (vt__grow((void **)&hd->holes, &hd->capholes, hd->nholes + 1, sizeof *hd->holes))
            return 0;   /* the range is lost to placement, still counted free */
        memmove(&hd->holes[i + 1], &hd->holes[i], (hd->nholes - i) * sizeof *hd->holes);
        hd->holes[i] = (range){ addr, span };
        hd->nholes++;
    }
    return 0;
}

int vt__backend_vmm_granularity(int device, uint64_t *granularity)
{
    if (!dev_of(device))
        return HOST_ERR_INVALID_DEVICE;
    *granularity = HOST_VMM_GRANULE;
    return 0;
}

int vt__backend_va_reserve(int device, uint64_t size, uint64_t *addr)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    uint64_t end = HOST_VA_BASE + (uint64_t)(device + 1) * HOST_SPAN;
    if (!size || size % HOST_VMM_GRANULE || size > end - hd->va_next)
        return VT_BACKEND_OOM;
    *addr = hd->va_next;
    hd->va_next += size;
    hd->calls.va_reserves++;
    return 0;
}

int vt__backend_va_free(int device, uint64_t addr, uint64_t size)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    (void)addr;
    (void)size;
    hd->calls.va_frees++;
    return 0;
}

int vt__backend_map(int device, uint64_t addr, uint64_t size, uint64_t chunk)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    if (!chunk || size % chunk || addr % chunk)
        return HOST_ERR_INVALID_VALUE;
    if (hd->capacity != VT_HOST_UNLIMITED && size > hd->capacity - hd->used) {
        hd->calls.failed_maps++;
        return VT_BACKEND_OOM;
    }
    hd->used += size;
    hd->calls.maps += size / chunk;
    return 0;
}

int vt__backend_unmap(int device, uint64_t addr, uint64_t size, uint64_t chunk)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    if (!chunk || size % chunk || addr % chunk || size > hd->used)
        return HOST_ERR_INVALID_VALUE;
    hd->used -= size;
    hd->calls.unmaps += size / chunk;
    return 0;
}

int vt__backend_event_create(int device, void **event)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    host_event *e = calloc(1, sizeof *e);
    if (!e)
        return VT_BACKEND_OOM;
    e->device = device;
    hd->calls.event_creates++;
    *event = e;
    return 0;
}

int vt__backend_event_record(int device, void *event, uint64_t stream)
{
    host_device *hd = dev_of(device);
    if (!hd || !event)
        return HOST_ERR_INVALID_VALUE;
    host_event *e = event;
    e->recorded = true;
    bool logical = (stream & VT_HOST_LOGICAL_STREAM) && !(stream >> 63);
    e->when = logical ? stream & (VT_HOST_LOGICAL_STREAM - 1) : 0;
    hd->calls.event_records++;
    return 0;
}

int vt__backend_event_query(int device, void *event)
{
    host_device *hd = dev_of(device);
    if (!hd || !event)
        return HOST_ERR_INVALID_VALUE;
    host_event *e = event;
    hd->calls.event_queries++;
    return !e->recorded || now >= e->when ? 0 : VT_BACKEND_NOT_READY;
}

int vt__backend_event_sync(int device, void *event)
{
    host_device *hd = dev_of(device);
    if (!hd || !event)
        return HOST_ERR_INVALID_VALUE;
    hd->calls.event_syncs++;
    ((host_event *)event)->when = 0;   /* waited for: done */
    return 0;
}

int vt__backend_event_destroy(int device, void *event)
{
    free(event);
    return 0;
}

int vt__backend_stream_sync(int device, uint64_t stream)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    hd->calls.stream_syncs++;
    return 0;
}

int vt__backend_device_sync(int device)
{
    host_device *hd = dev_of(device);
    if (!hd)
        return HOST_ERR_INVALID_DEVICE;
    hd->calls.device_syncs++;
    return 0;
}

/* A recorded program's streams are never captured into a graph here. */
int vt__backend_stream_capturing(int device, uint64_t stream)
{
    (void)device;
    (void)stream;
    return 0;
}

int vt__backend_device_name(int device, char *name, size_t len)
{
    if (!len)
        return HOST_ERR_INVALID_VALUE;
    if (!dev_of(device)) {
        name[0] = '\0';
        return HOST_ERR_INVALID_DEVICE;
    }
    snprintf(name, len, "replay device %d", device);
    return 0;
}
