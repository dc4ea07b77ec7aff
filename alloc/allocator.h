/*
 * alloc/allocator.h - the caching allocator as the rest of the library sees it.
 *
 * The public entry points (vt_malloc, vt_free, ... in vramtrace.h) and the
 * CUDA hooks both call these. Return values are CUDA runtime error codes
 * (cudaError_t values: 0 success, 2 cudaErrorMemoryAllocation,
 * 1 cudaErrorInvalidValue); the driver-layer hooks map them to CUresult.
 * Streams are raw cudaStream_t/CUstream values as integers.
 */
#ifndef VT_ALLOC_ALLOCATOR_H
#define VT_ALLOC_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a free knows the streams that may still use the block. */
enum vt__free_mode {
    VT_FREE_ON_STREAM = 0,   /* vt_free / cudaFreeAsync: ordered on `stream` */
    VT_FREE_UNKNOWN_STREAM = 1, /* plain cudaFree/cuMemFree: fence on every known stream */
};

/* The stream of an allocation ordered on no stream (cudaMalloc,
 * cuMemAlloc). The program may use such memory on any stream at once, so
 * it is served only from blocks that no stream's queued work can still
 * touch: never from a block freed in stream order (cudaFreeAsync,
 * vt_free) before that stream has reached the free, whichever stream it
 * was (the legacy one included). Such blocks have a stream key of their own. */
#define VT_NO_STREAM UINT64_MAX

/* Allocate `size` bytes on `device` for use on `stream` (or VT_NO_STREAM). size 0 gives NULL
 * and success, as cudaMalloc does. */
int vt__alloc_malloc(int device, size_t size, uint64_t stream, void **out);

/* Free a pointer. A pointer the cache does not own returns
 * VT_ALLOC_NOT_OWNED without any report (the hooks hand it to the real free);
 * an interior pointer or a double free is reported once and returns
 * cudaErrorInvalidValue. */
#define VT_ALLOC_NOT_OWNED (-1)
int vt__alloc_free(void *ptr, uint64_t stream, enum vt__free_mode mode);

/* The real free refused a pointer the cache does not own (invalid value):
 * a bad free of the program's; report it (unknown pointer, double free
 * with cache:0, freed by a device reset). */
void vt__alloc_foreign_free_failed(int device, const void *ptr);

/* Does the cache own the block starting at (or containing) ptr? */
bool vt__alloc_owns(const void *ptr);

/* The block containing ptr is used on `stream` too (vt_record_stream). */
int vt__alloc_record_stream(void *ptr, uint64_t stream);

/* Streams known to the process, for fencing frees of unknown stream. */
void vt__alloc_stream_created(int device, uint64_t stream);
void vt__alloc_stream_destroyed(uint64_t stream);

/* Bytes the cache holds on `device` that any next allocation can get (the
 * segments holding no allocated block: the OOM chain gives them back), for
 * cudaMemGetInfo, which reports them as free. */
uint64_t vt__alloc_cached_free_bytes(int device);

/* What cudaMemGetInfo reports as free on `device` when the device itself
 * has `device_free` bytes free: those plus vt__alloc_cached_free_bytes,
 * no more than the cache's cap (per_process_memory_fraction) still lets
 * the program allocate. */
uint64_t vt__alloc_mem_free(int device, uint64_t device_free);

/* The program waits for the device: all of it (cudaDeviceSynchronize,
 * all = true) or a stream or an event. Before the wait, frees of unknown
 * stream get their fence (all: even when one is in flight), so the wait
 * covers them; after it, completed fences are retired at once, so a free's
 * completion is recorded when it happened, not at the next allocation. */
void vt__alloc_sync_begin(bool all);
void vt__alloc_sync_end(void);

/* Return every fully free segment of `device` to the device (-1: all). */
int vt__alloc_empty_cache(int device);

/* The device is about to be reset (cudaDeviceReset, cuDevicePrimaryCtxReset),
 * which frees every allocation and destroys its streams and events: drop
 * everything the cache holds for it, live blocks included, and forget its
 * streams, so the books match the device afterwards (alloc_reset.c). */
void vt__alloc_device_reset(int device);

/* A legacy IPC handle is asked for ptr (cuIpcGetMemHandle): when ptr is
 * inside a cached segment, not at its start, say so and (ipc_safe:auto)
 * make later cudaMalloc blocks ipc-safe (alloc_ipc.c). */
void vt__alloc_ipc_exporting(const void *ptr);

/* A library may have been loaded (the dlopen and dlsym hooks): the
 * IPC-safe mode's auto detection looks again at the next cudaMalloc. Safe
 * while a sanitizer runtime initializes. */
void vt__alloc_ipc_loads_changed(void);

#endif /* VT_ALLOC_ALLOCATOR_H */
