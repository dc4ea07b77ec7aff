/* trace/common/order.h - the one three-way comparison. vt__order(a, b) is
 * -1, 0 or 1 as a is below, equal to or above b; a comparator of several
 * keys chains it (`int c = vt__order(x->a, y->a); return c ? c :
 * vt__order(x->b, y->b);`). vt__qsort_u64 sorts an array of uint64_t
 * ascending, for qsort. */
#ifndef VT_COMMON_ORDER_H
#define VT_COMMON_ORDER_H

#include <stdint.h>

static inline int vt__order(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

static inline int vt__qsort_u64(const void *a, const void *b)
{
    return vt__order(*(const uint64_t *)a, *(const uint64_t *)b);
}

#endif
