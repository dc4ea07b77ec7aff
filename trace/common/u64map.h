/* trace/common/u64map.h - the one u64 -> u32 hash map: open addressing with
 * linear probing and backward-shift deletion (no tombstones, so a map that
 * frees as often as it inserts, like a replay's, stays short-probed). The
 * timeline (address -> lifetime, segment), the checker (id -> node, edge
 * pair -> edge) and the replay (recorded address -> entry) use it. Any u64
 * is a key; the value VT__U64MAP_NONE cannot be stored (it marks an empty
 * slot, and is what a lookup of an absent key returns).
 *
 * It calls malloc: not for the recorder's paths that run inside the
 * program's allocation calls or a signal handler. */
#ifndef VT_COMMON_U64MAP_H
#define VT_COMMON_U64MAP_H

#include <stddef.h>
#include <stdint.h>

#define VT__U64MAP_NONE UINT32_MAX

typedef struct vt__u64map {
    uint64_t *keys;
    uint32_t *vals;         /* VT__U64MAP_NONE: empty slot */
    size_t mask;            /* slots - 1 (a power of two); 0 before init */
    size_t n;               /* keys held; the map doubles past half full */
} vt__u64map;

/* Room for `expect` keys without growing. @return 0 or -ENOMEM. */
int vt__u64map_init(vt__u64map *m, size_t expect);
void vt__u64map_free(vt__u64map *m);
/* Set key's value (val != VT__U64MAP_NONE). @return 0 or -ENOMEM (then the
 * map is unchanged); never fails for a key already held, nor while n stays
 * under the `expect` it was initialized for. */
int vt__u64map_put(vt__u64map *m, uint64_t key, uint32_t val);
/* Remove key if held. */
void vt__u64map_del(vt__u64map *m, uint64_t key);

/* murmur3's 64-bit finalizer: every bit of k moves every bit of the
 * result (addresses differ in few bits; the checker's treap draws its
 * priorities from it too). */
static inline uint64_t vt__mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* The slot holding key, or the empty slot where it would go. */
static inline size_t vt__u64map_slot(const vt__u64map *m, uint64_t key)
{
    size_t i = (size_t)vt__mix64(key) & m->mask;
    while (m->vals[i] != VT__U64MAP_NONE && m->keys[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

/* @return key's value, or VT__U64MAP_NONE. */
static inline uint32_t vt__u64map_get(const vt__u64map *m, uint64_t key)
{
    return m->vals ? m->vals[vt__u64map_slot(m, key)] : VT__U64MAP_NONE;
}

#endif
