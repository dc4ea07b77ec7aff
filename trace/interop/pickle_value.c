/*
 * trace/interop/pickle_value.c - reading a parsed pickle's values (see
 * pickle.h): a value by index, a dict's value by key (binary search over
 * the keys pickle_read.c sorted, else the last binding, as in Python), a
 * list's or tuple's item, numbers with a default. Each checks the type it
 * was given, so a snapshot of the wrong shape reads as missing fields.
 */
#include <stdint.h>
#include <string.h>

#include "pickle.h"

const vt__pv *vt__pickle_value(const vt__pickle *p, uint32_t index)
{
    return p && index < p->nvalues ? &p->values[index] : NULL;
}

static const vt__pv_container *container_of(const vt__pickle *p, const vt__pv *v)
{
    if (!p || !v || (v->type != VT_PV_LIST && v->type != VT_PV_TUPLE && v->type != VT_PV_DICT) ||
        v->container >= p->ncontainers)
        return NULL;
    return &p->containers[v->container];
}

int vt__pickle_str_is(const vt__pv *v, const char *text)
{
    if (!v || v->type != VT_PV_STR)
        return 0;
    size_t n = strlen(text);
    return v->n == n && !memcmp(v->s, text, n);
}

const vt__pv *vt__pickle_get(const vt__pickle *p, const vt__pv *dict, const char *key)
{
    if (!dict || dict->type != VT_PV_DICT)
        return NULL;
    const vt__pv_container *c = container_of(p, dict);
    if (!c)
        return NULL;
    size_t n = strlen(key);
    if (c->keys) {
        uint32_t lo = 0, hi = c->nkeys;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            const vt__pv *kv = &p->values[c->items[2 * c->keys[mid]]];
            int d = kv->n != n ? (kv->n < n ? -1 : 1) : n ? memcmp(kv->s, key, n) : 0;
            if (d == 0)
                return &p->values[c->items[2 * c->keys[mid] + 1]];
            if (d < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        return NULL;
    }
    return vt__pickle_scan(p, c, key, n);
}

const vt__pv *vt__pickle_scan(const vt__pickle *p, const vt__pv_container *c, const char *key,
                              size_t n)
{
    /* the last binding wins, as in Python */
    const vt__pv *found = NULL;
    for (uint32_t k = 0; k + 1 < c->n; k += 2) {
        const vt__pv *kv = &p->values[c->items[k]];
        if (kv->type == VT_PV_STR && kv->n == n && (!n || !memcmp(kv->s, key, n)))
            found = &p->values[c->items[k + 1]];
    }
    return found;
}

const vt__pv *vt__pickle_item(const vt__pickle *p, const vt__pv *seq, size_t k)
{
    if (!seq || (seq->type != VT_PV_LIST && seq->type != VT_PV_TUPLE))
        return NULL;
    const vt__pv_container *c = container_of(p, seq);
    return c && k < c->n ? &p->values[c->items[k]] : NULL;
}

int64_t vt__pickle_int(const vt__pv *v, int64_t dflt)
{
    if (!v)
        return dflt;
    switch (v->type) {
    case VT_PV_BOOL:
    case VT_PV_INT: return v->i;
    case VT_PV_UINT: return (int64_t)v->u;
    case VT_PV_FLOAT: return v->f == v->f && v->f > -9.2e18 && v->f < 9.2e18 ? (int64_t)v->f : dflt;
    default: return dflt;
    }
}

uint64_t vt__pickle_u64(const vt__pv *v, uint64_t dflt)
{
    if (v && v->type == VT_PV_UINT)
        return v->u;
    if (v && v->type == VT_PV_FLOAT)
        return v->f >= 0 && v->f < 1.8e19 ? (uint64_t)v->f : dflt;
    return v && (v->type == VT_PV_INT || v->type == VT_PV_BOOL) ? (uint64_t)v->i : dflt;
}

