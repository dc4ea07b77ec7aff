/*
 * alloc/replay/replay_early.c - frees moved earlier (vt__replay_options.free_at),
 * the bookkeeping both engines share: which ALLOCs are freed early, which
 * are due before an event, and the recorded free that then comes too late.
 * Each engine frees the block itself, by its own rules.
 *
 * The events go by once, as a stream: an entry learns its ALLOC's address
 * (and that it names an ALLOC at all) when the walk meets that event, which
 * comes before the event the entry frees it after.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"
#include "replay_internal.h"

static int cmp_free_at(const void *a, const void *b)
{
    const vt__early_free *x = a, *y = b;
    int c = vt__order(x->at.at_event, y->at.at_event);
    return c ? c : vt__order(x->at.alloc_event, y->at.alloc_event);
}

/* by_alloc's order (qsort_r: the entries as context) */
static int cmp_by_alloc(const void *a, const void *b, void *ctx)
{
    const vt__early_free *v = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    size_t ax = v[x].at.alloc_event, ay = v[y].at.alloc_event;
    int c = vt__order(ax, ay);
    return c ? c : vt__order(x, y);
}

int vt__early_init(vt__early *ef, size_t nevents, const vt__replay_options *opt)
{
    memset(ef, 0, sizeof *ef);
    if (!opt->nfree_at || !opt->free_at)
        return 0;
    ef->v = malloc(opt->nfree_at * sizeof *ef->v);
    ef->by_alloc = malloc(opt->nfree_at * sizeof *ef->by_alloc);
    if (!ef->v || !ef->by_alloc || vt__rmap_init(&ef->done, 64))
        return -ENOMEM;
    for (size_t k = 0; k < opt->nfree_at; k++) {
        vt__replay_free_at f = opt->free_at[k];
        if (f.alloc_event >= nevents || f.at_event < f.alloc_event)
            continue;
        ef->v[ef->n++] = (vt__early_free){ .at = f };
    }
    qsort(ef->v, ef->n, sizeof *ef->v, cmp_free_at);
    for (size_t k = 0; k < ef->n; k++)
        ef->by_alloc[k] = k;
    qsort_r(ef->by_alloc, ef->n, sizeof *ef->by_alloc, cmp_by_alloc, ef->v);
    return 0;
}

void vt__early_destroy(vt__early *ef)
{
    free(ef->v);
    free(ef->by_alloc);
    vt__rmap_destroy(&ef->done);   /* a zeroed map too */
    memset(ef, 0, sizeof *ef);
}

bool vt__early_alloc(vt__early *ef, size_t i, const vt__event *e)
{
    bool marked = false;
    while (ef->nextalloc < ef->n && ef->v[ef->by_alloc[ef->nextalloc]].at.alloc_event <= i) {
        vt__early_free *f = &ef->v[ef->by_alloc[ef->nextalloc++]];
        if (f->at.alloc_event == i && e->kind == VT_EV_ALLOC) {
            f->addr = e->addr;
            f->seen = true;
            marked = true;
        }
    }
    return marked;
}

bool vt__early_due(vt__early *ef, size_t i, uint64_t *addr)
{
    while (ef->next < ef->n && ef->v[ef->next].at.at_event < i) {
        const vt__early_free *f = &ef->v[ef->next++];
        if (!f->seen)
            continue;   /* names no ALLOC */
        *addr = f->addr;
        return true;
    }
    return false;
}

int vt__early_freed(vt__early *ef, uint64_t addr)
{
    return vt__rmap_put(&ef->done, addr) ? 0 : -ENOMEM;
}

bool vt__early_recorded_free(vt__early *ef, uint64_t addr)
{
    if (!ef->n)
        return false;
    vt__rmap_entry *y = vt__rmap_get(&ef->done, addr);
    if (y)
        vt__rmap_del(&ef->done, y);
    return y != NULL;
}
