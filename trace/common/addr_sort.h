/* trace/common/addr_sort.h - the one radix sort. vt__addr_keys_sort sorts
 * (address, index) keys by address, keys of equal address staying in the
 * order given (a stable least-significant-digit sort, a byte a pass), and
 * skips the bytes every address shares: addresses of one process's
 * allocations or of one module's symbols differ in three or four bytes, so
 * three or four passes, each sequential over the keys. Used where a
 * comparison sort was too slow: the timeline's address index (a million
 * lifetimes), a module's symbols at an exit snapshot (libtorch_cpu.so's
 * hundreds of thousands: glibc's qsort, a comparison call a step, was two
 * thirds of the index's build). */
#ifndef VT_COMMON_ADDR_SORT_H
#define VT_COMMON_ADDR_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct vt__addr_key {
    uint64_t addr;
    uint32_t idx;    /* what the caller sorts: its position in the caller's array */
} vt__addr_key;

/* Sorts keys[0, n), with scratch[0, n) to move them through: returns the
 * one of the two that holds the sorted keys. */
static inline vt__addr_key *vt__addr_keys_sort(vt__addr_key *keys, vt__addr_key *scratch,
                                               size_t n)
{
    uint64_t varies = 0;   /* the address bits that differ between keys */
    for (size_t i = 1; i < n; i++)
        varies |= keys[i].addr ^ keys[0].addr;
    vt__addr_key *from = keys, *to = scratch;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        if (!((varies >> shift) & 0xff))
            continue;
        size_t at[256] = { 0 };
        for (size_t i = 0; i < n; i++)
            at[(from[i].addr >> shift) & 0xff]++;
        for (size_t d = 0, sum = 0; d < 256; d++) {
            size_t c = at[d];
            at[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[at[(from[i].addr >> shift) & 0xff]++] = from[i];
        vt__addr_key *t = from;
        from = to;
        to = t;
    }
    return from;
}

#endif
