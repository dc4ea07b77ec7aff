/* trace/common/likely.h - compiler hints for the hot and early paths
 * (allocator, hooks, recorder): error and rare branches are marked so the
 * common case falls through; code that may run before a sanitizer runtime
 * has initialized, or inside a signal handler, is left uninstrumented. */
#ifndef VT_COMMON_LIKELY_H
#define VT_COMMON_LIKELY_H

#define vt__likely(x)   __builtin_expect(!!(x), 1)
#define vt__unlikely(x) __builtin_expect(!!(x), 0)

/* Not instrumented by ASan, TSan or UBSan: for code that a sanitizer runtime
 * reaches through our dlsym while it initializes (TSan's instrumentation of a
 * function entry faults before its thread state exists), and for signal
 * handler paths the runtimes must not see. */
#define vt__no_sanitize __attribute__((no_sanitize("address", "thread", "undefined")))

/* 1 in a ThreadSanitizer build: GCC defines __SANITIZE_THREAD__, Clang has
 * the feature. */
#if defined(__SANITIZE_THREAD__)
#define VT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VT_TSAN 1
#endif
#endif
#ifndef VT_TSAN
#define VT_TSAN 0
#endif

#endif
