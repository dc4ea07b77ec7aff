/*
 * viz/render_pools.c - the bytes CUDA graphs' private pools reserve, per
 * device, as steps on the page's axis (section "pools"): the segments plot
 * draws them within the reserved bytes, so that a graph's pool, kept for
 * its replays and no other request's, is not read as the cache's unused
 * memory. From the segments' pools (format 1.14: SEGMENT_ALLOC aux2, and
 * for those alive before the window the state's SEGMENT_POOLS), fed the
 * events in order by either render (whole or streamed).
 */
#include <stdlib.h>

#include "grow.h"
#include "render_internal.h"

static struct pool_dev *dev_of(struct render *r, int device)
{
    int d = device >= -128 && device < 128 ? r->dev_index[device + 128] : -1;
    return d >= 0 && (size_t)d < r->pools.ndev ? &r->pools.dev[d] : NULL;
}

/* A step of device d's pools' bytes after event ev (NONE: before the first). */
static void step(struct render *r, struct pool_dev *p, uint32_t ev)
{
    if (p->n && p->v[p->n - 1].event == ev) {
        p->v[p->n - 1].bytes = p->bytes;
        return;
    }
    struct pool_step *st = vt__grow_push((void **)&p->v, &p->cap, &p->n, sizeof *st);
    if (!st) {
        r->oom = 1;
        return;
    }
    *st = (struct pool_step){ ev, p->bytes };
}

int vt__viz_pools_begin(struct render *r)
{
    const vt__timeline *tl = r->tl;
    r->pools.ndev = tl->ndevices;
    r->pools.dev = calloc(tl->ndevices + 1, sizeof *r->pools.dev);
    if (!r->pools.dev || vt__u64map_init(&r->pools.at, 16))
        return -1;
    /* the pools' segments alive when the window opened: the state's */
    for (size_t i = 0; i < tl->nsegments; i++) {
        const vt__segment_span *g = &tl->segments[i];
        struct pool_dev *p = g->private_pool && (g->flags & VT_LT_BEFORE_WINDOW)
                                 ? dev_of(r, g->device) : NULL;
        if (!p)
            continue;
        p->bytes += g->size;
        if (vt__u64map_put(&r->pools.at, g->addr, 1))
            return -1;
    }
    for (size_t d = 0; d < r->pools.ndev; d++)
        if (r->pools.dev[d].bytes)
            step(r, &r->pools.dev[d], NONE);
    return r->oom ? -1 : 0;
}

void vt__viz_pools_event(struct render *r, uint32_t ev, const vt__event *e)
{
    if (e->kind != VT_EV_SEGMENT_ALLOC && e->kind != VT_EV_SEGMENT_FREE)
        return;
    struct pool_dev *p = dev_of(r, e->device);
    if (!p || !r->pools.dev)
        return;
    if (e->kind == VT_EV_SEGMENT_ALLOC) {
        if (!e->aux2)
            return;
        if (vt__u64map_put(&r->pools.at, e->addr, 1)) {
            r->oom = 1;
            return;
        }
        p->bytes += e->size;
    } else {
        if (vt__u64map_get(&r->pools.at, e->addr) == VT__U64MAP_NONE)
            return;
        vt__u64map_del(&r->pools.at, e->addr);
        p->bytes = p->bytes > e->size ? p->bytes - e->size : 0;
    }
    step(r, p, ev);
}

bool vt__viz_pools_seen(const struct render *r)
{
    for (size_t d = 0; d < r->pools.ndev; d++)
        if (r->pools.dev[d].n)
            return true;
    return false;
}

void vt__viz_pools_write(struct render *r, struct columns *c)
{
    if (!vt__viz_pools_seen(r))
        return;
    vt__viz_col_begin(c, "pools", 0);
    for (size_t d = 0; d < r->pools.ndev; d++) {
        uint64_t lp = 0;
        const struct pool_dev *p = &r->pools.dev[d];
        for (size_t j = 0; j < p->n; j++) {
            uint64_t p1 = p->v[j].event == NONE ? 0 : axis_p1(r, p->v[j].event);
            vt__put_varint(c->blob, p1 >= lp ? p1 - lp : 0);
            if (p1 > lp)
                lp = p1;
            vt__put_varint(c->blob, p->v[j].bytes);
        }
    }
}

void vt__viz_pools_free(struct render *r)
{
    for (size_t d = 0; r->pools.dev && d < r->pools.ndev; d++)
        free(r->pools.dev[d].v);
    free(r->pools.dev);
    vt__u64map_free(&r->pools.at);
}
