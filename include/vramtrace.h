/*
 * vramtrace.h - the public C API of vramtrace.
 *
 * vramtrace is a drop-in CUDA caching allocator that records the lifetime of
 * every device allocation. Preload libvramtrace.so (`vramtrace run -- CMD`) and
 * every cudaMalloc/cuMemAlloc of the program is served from its block cache;
 * or call the functions below directly, or hand the library to PyTorch as a
 * pluggable allocator (vt_malloc / vt_free have exactly the signatures that
 * torch.cuda.memory.CUDAPluggableAllocator loads).
 *
 * Conventions (one for the whole API):
 *  - Functions returning `int` return 0 on success. Where vramtrace stands in
 *    for CUDA (allocation and free), a failure returns the CUDA runtime error
 *    code the real call would have returned (cudaErrorMemoryAllocation = 2,
 *    cudaErrorInvalidValue = 1, ...). Other failures return a negative errno
 *    value (-EINVAL, -ENOMEM, -EIO, ...).
 *  - Nothing here ever aborts the host program. Misuse (a bad free, an unknown
 *    configuration key) is reported once on stderr and in the trace.
 *  - Every function is thread-safe.
 */
#ifndef VRAMTRACE_H
#define VRAMTRACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>   /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VT_BUILDING_LIBRARY)
#  define VT_API __attribute__((visibility("default")))
#else
#  define VT_API
#endif

/* Identical to the CUDA runtime's own typedef (driver_types.h), so this header
 * can be used with or without the CUDA headers. */
typedef struct CUstream_st *cudaStream_t;

/* ======================================================================== */
/*  Version                                                                 */
/* ======================================================================== */

#define VRAMTRACE_VERSION_MAJOR 0
#define VRAMTRACE_VERSION_MINOR 1
#define VRAMTRACE_VERSION_PATCH 0
#define VRAMTRACE_VERSION_STRING "0.1.0"
#define VRAMTRACE_VERSION_NUMBER \
    (VRAMTRACE_VERSION_MAJOR * 10000 + VRAMTRACE_VERSION_MINOR * 100 + VRAMTRACE_VERSION_PATCH)

/*! vt_version_number() :
 * @return the version of the loaded library as MAJOR*10000 + MINOR*100 + PATCH,
 *         to compare with VRAMTRACE_VERSION_NUMBER from the header compiled in. */
VT_API unsigned vt_version_number(void);

/*! vt_version_string() :
 * @return the version of the loaded library as "MAJOR.MINOR.PATCH"; static storage. */
VT_API const char *vt_version_string(void);

/* ======================================================================== */
/*  Allocator (alloc/)                                                      */
/* ======================================================================== */

/* @@ALLOCATOR-API@@ (owned by the allocator: declare here what alloc/ implements) */

/* ======================================================================== */
/*  Tracing and snapshots (trace/)                                          */
/* ======================================================================== */

/* @@TRACING-API@@ (owned by the recorder: declare here what trace/ implements) */

/* ======================================================================== */
/*  Annotations for the reference-graph checker (trace/)                    */
/* ======================================================================== */

/* @@ANNOTATION-API@@ (owned by the recorder) */

#ifdef __cplusplus
}
#endif

#endif /* VRAMTRACE_H */
