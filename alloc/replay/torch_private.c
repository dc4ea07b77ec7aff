/*
 * alloc/replay/torch_private.c - the private pools of the PyTorch model
 * (torch_model.h): the segments a CUDA graph's capture (or a
 * torch.cuda.MemPool) took, held as recorded.
 *
 * PyTorch serves a private pool's blocks only to the requests made into
 * that pool (a capture's), never to the default pool's, and its
 * release_cached_blocks gives a private pool's wholly free segments back
 * only once the pool is freeable: its graph destroyed (use_count 0,
 * graph_pools_freeable; read from c10/cuda/CUDACachingAllocator.cpp). The
 * model does not re-place a capture's blocks: each segment is held from its
 * recorded SEGMENT_ALLOC to its SEGMENT_FREE, outside the default pool, and
 * counts the recorded blocks alive in it (an ALLOC in it to its
 * FREE_REQUESTED); when the replay is told the
 * pools are freeable (tstate.private_freeable: "the graph deleted before
 * this event"), a release of the cache gives back the segments with none.
 */
#include <stdlib.h>

#include "bsearch.h"
#include "grow.h"
#include "torch_model.h"

/* The segment of device d holding addr, or NULL (sorted by address). */
static tprivate *find(tdev *v, uint64_t addr)
{
    size_t after;   /* the first segment that starts above addr */
    VT__PARTITION_POINT(v->npriv, i, v->priv[i].addr <= addr, after);
    if (after == 0 || addr >= v->priv[after - 1].addr + v->priv[after - 1].size)
        return NULL;
    return &v->priv[after - 1];
}

int tm_private_segment(tstate *t, int d, uint64_t addr, uint64_t size)
{
    tdev *v = &t->dev[d];
    if (vt__grow_from((void **)&v->priv, &v->cappriv, v->npriv + 1, sizeof *v->priv, 8)) {
        t->failed = true;
        return -1;
    }
    size_t i = v->npriv;
    while (i > 0 && v->priv[i - 1].addr > addr) {
        v->priv[i] = v->priv[i - 1];
        i--;
    }
    v->priv[i] = (tprivate){ .addr = addr, .size = size };
    v->npriv++;
    v->outside += size;
    tm_note_held(v);
    return 0;
}

void tm_private_segment_free(tstate *t, int d, uint64_t addr)
{
    tdev *v = &t->dev[d];
    tprivate *p = find(v, addr);
    if (!p || p->addr != addr)
        return;
    if (!p->released)
        v->outside = v->outside > p->size ? v->outside - p->size : 0;
    size_t i = (size_t)(p - v->priv);
    for (; i + 1 < v->npriv; i++)
        v->priv[i] = v->priv[i + 1];
    v->npriv--;
}

bool tm_private_alloc(tstate *t, int d, uint64_t addr)
{
    tprivate *p = find(&t->dev[d], addr);
    if (!p)
        return false;
    p->live++;
    return true;
}

void tm_private_free(tstate *t, int d, uint64_t addr)
{
    tprivate *p = find(&t->dev[d], addr);
    if (p && p->live)
        p->live--;
}

void tm_private_release(tstate *t, int d)
{
    tdev *v = &t->dev[d];
    if (!t->private_freeable)
        return;
    for (size_t i = 0; i < v->npriv; i++) {
        tprivate *p = &v->priv[i];
        if (p->released || p->live)
            continue;
        p->released = true;
        v->outside = v->outside > p->size ? v->outside - p->size : 0;
        t->r->devices[d].segment_frees++;
        t->r->devices[d].device_frees++;
    }
}
