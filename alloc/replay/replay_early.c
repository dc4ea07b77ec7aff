/*
 * alloc/replay/replay_early.c - frees moved earlier (vt__replay_options.free_at),
 * the bookkeeping both engines share: which ALLOCs are freed early, which
 * are due before an event, and the recorded free that then comes too late.
 * Each engine frees the block itself, by its own rules.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"

static int cmp_free_at(const void *a, const void *b)
{
    const vt__replay_free_at *x = a, *y = b;
    if (x->at_event != y->at_event)
        return x->at_event < y->at_event ? -1 : 1;
    return (x->alloc_event > y->alloc_event) - (x->alloc_event < y->alloc_event);
}

int vt__early_init(vt__early *ef, const vt__snapshot_data *s, const vt__replay_options *opt)
{
    memset(ef, 0, sizeof *ef);
    if (!opt->nfree_at || !opt->free_at)
        return 0;
    ef->at = malloc(opt->nfree_at * sizeof *ef->at);
    ef->marked = calloc(s->nevents ? s->nevents : 1, 1);
    if (!ef->at || !ef->marked || vt__rmap_init(&ef->done, 64))
        return -ENOMEM;
    for (size_t k = 0; k < opt->nfree_at; k++) {
        vt__replay_free_at f = opt->free_at[k];
        if (f.alloc_event >= s->nevents || f.at_event < f.alloc_event
            || s->events[f.alloc_event].kind != VT_EV_ALLOC)
            continue;
        ef->marked[f.alloc_event] = 1;
        ef->at[ef->n++] = f;
    }
    qsort(ef->at, ef->n, sizeof *ef->at, cmp_free_at);
    return 0;
}

void vt__early_destroy(vt__early *ef)
{
    free(ef->at);
    free(ef->marked);
    vt__rmap_destroy(&ef->done);   /* a zeroed map too */
    memset(ef, 0, sizeof *ef);
}

bool vt__early_due(vt__early *ef, const vt__snapshot_data *s, size_t i, uint64_t *addr)
{
    if (ef->next >= ef->n || ef->at[ef->next].at_event >= i)
        return false;
    *addr = s->events[ef->at[ef->next++].alloc_event].addr;
    return true;
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
