/*
 * alloc/alloc_api.c - the allocator's entry points: the public vt_* API
 * (vramtrace.h) and the internal vt__alloc_* API the hooks call
 * (allocator.h). Argument checks, device and stream resolution, the free
 * stacks and the state provider's registration happen here; the work
 * happens in the heap (alloc_heap.c, which captures the allocation stack
 * itself, before it takes the heap lock). Every stack is captured outside
 * every allocator lock.
 */
#include <errno.h>
#include <stdatomic.h>

#include "alloc_internal.h"
#include "backend.h"
#include "cuda_errors.h"
#include "recorder.h"

static atomic_bool provider_set;

/* Device's heap, set up on first use. Once a heap exists the recorder gets
 * the allocator's state provider (alloc_state.c): a snapshot taken before
 * holds events only, one taken after says its state is complete. Outside
 * every heap lock: the recorder takes its own. */
static vt__heap *heap_for(int device)
{
    vt__heap *h = vt__heap_get(device, true);
    if (vt__likely(h) && vt__unlikely(!atomic_load_explicit(&provider_set, memory_order_relaxed))
        && !atomic_exchange(&provider_set, true))
        vt__trace_set_state_provider(vt__alloc_describe_state);
    return h;
}

static int resolve_device(int device)
{
    if (device >= 0)
        return device;
    int d = 0;
    if (vt__backend_current_device(&d))
        return 0;
    return d;
}

/* ---- internal API (allocator.h) ---------------------------------------- */

int vt__alloc_malloc(int device, size_t size, uint64_t stream, void **out)
{
    *out = NULL;
    if (size == 0)
        return 0;
    vt__heap *h = heap_for(resolve_device(device));
    if (vt__unlikely(!h))
        return VT_CUDA_ERR_INVALID_DEVICE;
    return vt__heap_malloc(h, size, vt__stream_key(stream), out);
}

int vt__alloc_free(void *ptr, uint64_t stream, enum vt__free_mode mode)
{
    if (!ptr)
        return 0;
    uint32_t stack = vt__trace_enabled() ? vt__stack_capture_free() : 0;
    uint64_t key = mode == VT_FREE_UNKNOWN_STREAM ? 0 : vt__stream_key(stream);
    return vt__heap_free(ptr, key, mode, stack);
}

void vt__alloc_foreign_free_failed(int device, const void *ptr)
{
    uint32_t stack = vt__trace_enabled() ? vt__stack_capture_free() : 0;
    vt__alloc_report_foreign_free(resolve_device(device), ptr, stack);
}

bool vt__alloc_owns(const void *ptr)
{
    return ptr && vt__heap_owns(ptr);
}

int vt__alloc_record_stream(void *ptr, uint64_t stream)
{
    if (!ptr)
        return VT_CUDA_ERR_INVALID_VALUE;
    return vt__heap_record_stream(ptr, vt__stream_key(stream));
}

void vt__alloc_stream_created(int device, uint64_t stream)
{
    vt__heap *h = heap_for(resolve_device(device));
    if (h)
        vt__heap_stream_created(h, stream);
}

void vt__alloc_stream_destroyed(uint64_t stream)
{
    VT__FOR_EACH_HEAP(h)
        vt__heap_stream_destroyed(h, stream);
}

void vt__alloc_sync_begin(bool all)
{
    VT__FOR_EACH_HEAP(h)
        vt__heap_sync_begin(h, all);
}

void vt__alloc_sync_end(void)
{
    VT__FOR_EACH_HEAP(h)
        vt__heap_sync_end(h);
}

uint64_t vt__alloc_mem_free(int device, uint64_t device_free)
{
    vt__heap *h = vt__heap_get(resolve_device(device), false);
    return h ? vt__heap_mem_free(h, device_free) : device_free;
}

uint64_t vt__alloc_cached_free_bytes(int device)
{
    vt__heap *h = vt__heap_get(resolve_device(device), false);
    return h ? vt__heap_cached_free(h) : 0;
}

int vt__alloc_empty_cache(int device)
{
    if (device >= 0) {
        vt__heap *h = vt__heap_get(device, false);
        return h ? vt__heap_empty_cache(h) : 0;
    }
    int rc = 0;
    VT__FOR_EACH_HEAP(h) {
        int r = vt__heap_empty_cache(h);
        if (r && !rc)
            rc = r;
    }
    return rc;
}

/* ---- public API (vramtrace.h) ------------------------------------------- */

VT_API void *vt_malloc(ssize_t size, int device, cudaStream_t stream)
{
    void *p = NULL;
    if (size <= 0)
        return NULL;
    if (vt__alloc_malloc(device, (size_t)size, (uint64_t)(uintptr_t)stream, &p))
        return NULL;
    return p;
}

VT_API void vt_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
{
    (void)size;
    if (!ptr)
        return;
    uint32_t stack = vt__trace_enabled() ? vt__stack_capture_free() : 0;
    int rc = vt__heap_free(ptr, vt__stream_key((uint64_t)(uintptr_t)stream),
                           VT_FREE_ON_STREAM, stack);
    if (rc == VT_ALLOC_NOT_OWNED)
        vt__alloc_report_foreign_free(resolve_device(device), ptr, stack);
}

/* Not a stand-in for a CUDA call: the heap's CUDA codes become errno values. */
VT_API int vt_record_stream(void *ptr, cudaStream_t stream)
{
    int rc = vt__alloc_record_stream(ptr, (uint64_t)(uintptr_t)stream);
    return rc == 0 ? 0 : rc == VT_CUDA_ERR_OOM ? -ENOMEM : -EINVAL;
}

VT_API int vt_empty_cache(int device)
{
    return vt__alloc_empty_cache(device);
}

VT_API int vt_get_stats(int device, vt_stats *out)
{
    if (!out)
        return -EINVAL;
    vt__heap *h = heap_for(resolve_device(device));
    if (!h)
        return -EINVAL;
    vt__heap_stats(h, out);
    return 0;
}

VT_API int vt_reset_peak_stats(int device)
{
    vt__heap *h = heap_for(resolve_device(device));
    if (!h)
        return -EINVAL;
    vt__heap_reset_peaks(h);
    return 0;
}

VT_API int vt_set_memory_fraction(double fraction, int device)
{
    vt__heap *h = heap_for(resolve_device(device));
    if (!h)
        return -EINVAL;
    return vt__heap_set_fraction(h, fraction);
}
