/* trace/common/grow.h - the one growable array: room for `need` elements of
 * `elem` bytes in *arr, doubling its capacity *cap (first `first`, or 16).
 * On failure (out of memory, or a size that would overflow) the array is
 * unchanged. @return 0 or -ENOMEM. Header-only: the allocator uses it too. */
#ifndef VT_COMMON_GROW_H
#define VT_COMMON_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int vt__grow_from(void **arr, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : first;
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

static inline int vt__grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    return vt__grow_from(arr, cap, need, elem, 16);
}

/* One more element, zeroed, at the end of *arr, which holds *n of them.
 * @return it, or NULL (the array unchanged). */
static inline void *vt__grow_push(void **arr, size_t *cap, size_t *n, size_t elem)
{
    if (vt__grow(arr, cap, *n + 1, elem))
        return NULL;
    void *p = (char *)*arr + (*n)++ * elem;
    memset(p, 0, elem);
    return p;
}

#endif
