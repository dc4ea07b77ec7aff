/* trace/common/bsearch.h - the one binary search. VT__PARTITION_POINT sets
 * `out` to the first index in [0, n) at which `before` - an expression of
 * the index variable named `i` - is false, or n; `before` must hold on a
 * prefix of the range and nowhere after it. On an array sorted by key,
 * "key(i) < x" gives the first element >= x, "key(i) <= x" the first > x.
 * A macro because C has no closures: `before` reads any array of any
 * element type, inline, as the nine hand-written loops it replaces did. */
#ifndef VT_COMMON_BSEARCH_H
#define VT_COMMON_BSEARCH_H

#include <stddef.h>

#define VT__PARTITION_POINT(n, i, before, out) \
    do {                                       \
        size_t lo_ = 0, hi_ = (n);             \
        while (lo_ < hi_) {                    \
            size_t i = lo_ + (hi_ - lo_) / 2;  \
            if (before)                        \
                lo_ = i + 1;                   \
            else                               \
                hi_ = i;                       \
        }                                      \
        (out) = lo_;                           \
    } while (0)

#endif
