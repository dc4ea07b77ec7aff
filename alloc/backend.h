/*
 * alloc/backend.h - the one contract between the allocator and a device.
 *
 * Small on purpose (mimalloc's prim.h): every call returns 0 or a CUDA error
 * code and hands results back through out-parameters. Driver results are
 * returned unchanged: the CUresult values the allocator can see (1 invalid
 * value, 2 out of memory, 3 not initialized, 100 no device, 101 invalid
 * device, 600 not ready, ...) have the same numbers as their cudaError_t
 * counterparts, so callers may treat them as cudaError_t.
 *
 * Every call for device d runs in d's primary context: the backend pushes it
 * when the calling thread's current context is another one, and pops it
 * afterwards. Streams are raw handles: 0 = legacy default stream,
 * 0x2 = the calling thread's per-thread default stream.
 *
 * The one implementation (backend_cuda.c) uses the CUDA driver API through
 * vt__driver(), so the same allocator runs on the simulated driver in the
 * tests and on the real one in use, with or without a libcudart.so.
 */
#ifndef VT_ALLOC_BACKEND_H
#define VT_ALLOC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_errors.h"

#define VT_BACKEND_NOT_READY VT_CUDA_ERR_NOT_READY   /* == CUDA_ERROR_NOT_READY */
#define VT_BACKEND_OOM VT_CUDA_ERR_OOM               /* == CUDA_ERROR_OUT_OF_MEMORY */

/* Load and initialize the driver (cuInit once). */
int vt__backend_init(void);
/* Number of devices. */
int vt__backend_device_count(int *count);
/* The calling thread's current device (0 when no context is current, as
 * the runtime does). */
int vt__backend_current_device(int *device);
/* Device memory: bytes free now and the device's total. */
int vt__backend_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes);
/* Total memory only (no context needed). */
int vt__backend_total_mem(int device, uint64_t *total_bytes);
/* The device's name, NUL-terminated in `len` bytes ("" on any error; no
 * context needed). */
int vt__backend_device_name(int device, char *name, size_t len);

/* One device allocation (a segment) and its release. */
int vt__backend_malloc(int device, uint64_t size, uint64_t *addr);
int vt__backend_free(int device, uint64_t addr);

/* Virtual memory management (expandable segments). A range of addresses is
 * reserved without memory; physical memory is mapped into it one chunk of
 * the granularity at a time (each chunk its own physical allocation, so any
 * chunk can be unmapped alone), readable and writable by the device.
 * Unmapping gives a chunk's memory back to the device. Sizes and addresses
 * are multiples of the granularity. */
/* The device's allocation granularity; an error when it has no VMM. */
int vt__backend_vmm_granularity(int device, uint64_t *granularity);
int vt__backend_va_reserve(int device, uint64_t size, uint64_t *addr);
int vt__backend_va_free(int device, uint64_t addr, uint64_t size);
/* Map [addr, addr + size) chunk by chunk; on failure nothing stays mapped. */
int vt__backend_map(int device, uint64_t addr, uint64_t size, uint64_t chunk);
int vt__backend_unmap(int device, uint64_t addr, uint64_t size, uint64_t chunk);

/* Events for stream ordering (created without timing). */
int vt__backend_event_create(int device, void **event);
int vt__backend_event_record(int device, void *event, uint64_t stream);
/* @return 0 when complete, VT_BACKEND_NOT_READY while pending, else an error
 * (an event in error counts as complete for the allocator: the work it
 * fenced will never run). */
int vt__backend_event_query(int device, void *event);
int vt__backend_event_sync(int device, void *event);
int vt__backend_event_destroy(int device, void *event);
/* Wait for all work queued on a (still existing) stream. */
int vt__backend_stream_sync(int device, uint64_t stream);
/* Wait for all work queued on the device (its primary context). */
int vt__backend_device_sync(int device);
/* Is `stream` capturing into a graph (or, the legacy stream, unusable while
 * a blocking stream captures)? Then nothing may be recorded on it or waited
 * for: 1. Else 0 (also when the driver cannot tell). */
int vt__backend_stream_capturing(int device, uint64_t stream);

#endif /* VT_ALLOC_BACKEND_H */
