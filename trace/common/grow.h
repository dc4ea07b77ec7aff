/* trace/common/grow.h - the one growable array: room for `need` elements of
 * `elem` bytes in *arr, doubling its capacity *cap (first 16). On failure
 * (out of memory, or a size that would overflow) the array is unchanged.
 * @return 0 or -ENOMEM. */
#ifndef VT_COMMON_GROW_H
#define VT_COMMON_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static inline int vt__grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -ENOMEM;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem)
        return -ENOMEM;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

#endif
