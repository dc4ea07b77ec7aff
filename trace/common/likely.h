/* trace/common/likely.h - branch hints for the hot paths (allocator, hooks,
 * recorder): error and rare branches are marked so the common case falls
 * through. */
#ifndef VT_COMMON_LIKELY_H
#define VT_COMMON_LIKELY_H

#define vt_likely(x)   __builtin_expect(!!(x), 1)
#define vt_unlikely(x) __builtin_expect(!!(x), 0)

#endif
