/*
 * cli/compare_series.c - one rank's growth series (`vramtrace compare`),
 * collected as its lifetimes go by, so that a rank is read as a stream and
 * let go before the next one is read.
 *
 * What the growth needs of a rank is, per call site, the bytes of its
 * allocations alive at each mark, and the rank's total there. A lifetime
 * alive at marks [a, b) adds its size to its site's span (site, a, b);
 * spans of one site over the same marks add up, so they are merged as they
 * come: what is kept grows with the distinct spans (sites x the marks a
 * lifetime outlives), not with the allocations. A retired lifetime's marks
 * are all known when the streamed build lets it go (the build tells each
 * MARK before anything a later event resolves), so its span is final then.
 *
 * The spans are counted against every mark of the rank; the ranks are
 * aligned on the fewest marks of any, known only when all were read, so
 * vt__growth_build clamps them then: a span's marks below the aligned count
 * are the same either way, and the total's prefix sums too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "compare_growth.h"
#include "grow.h"
#include "order.h"
#include "report_util.h"

/* Spans kept before the first merge: a rank with few is never sorted twice. */
#define MERGE_FIRST 4096

static int cmp_span(const void *p, const void *q)
{
    const vt__growth_span *x = p, *y = q;
    int c = vt__order(x->key, y->key);
    if (!c)
        c = vt__order(x->a, y->a);
    return c ? c : vt__order(x->b, y->b);
}

/* Sort the spans and add up those of one site over the same marks. */
static void merge_spans(vt__growth_series *gs)
{
    if (!gs->nspans)
        return;
    qsort(gs->spans, gs->nspans, sizeof *gs->spans, cmp_span);
    size_t w = 0;
    for (size_t k = 0; k < gs->nspans; k++) {
        vt__growth_span *x = &gs->spans[k];
        if (w && !cmp_span(&gs->spans[w - 1], x))
            gs->spans[w - 1].size += x->size;
        else
            gs->spans[w++] = *x;
    }
    gs->nspans = w;
}

int vt__growth_series_open(vt__growth_series **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

void vt__growth_series_mark(vt__growth_series *gs, const vt__tl_mark *m)
{
    size_t n = gs->nmarks;
    if (gs->rc || vt__grow((void **)&gs->mark_event, &gs->cap_marks, n + 1,
                           sizeof *gs->mark_event) ||
        vt__grow((void **)&gs->mark_label, &gs->cap_labels, n + 1, sizeof *gs->mark_label) ||
        vt__grow((void **)&gs->total, &gs->cap_total, n + 2, sizeof *gs->total)) {
        gs->rc = -ENOMEM;
        return;
    }
    if (!n)
        gs->total[0] = 0;
    gs->mark_event[n] = m->event;
    gs->mark_label[n] = m->label;
    gs->total[n + 1] = 0;
    gs->nmarks = n + 1;
}

void vt__growth_series_lifetime(vt__growth_series *gs, const vt__snapshot_data *s,
                                const vt__lifetime *l)
{
    size_t nm = gs->nmarks, a = 0, b = nm;
    if (gs->rc || !nm)
        return;
    const uint32_t *ev = gs->mark_event;
    if (l->start_event != VT_TL_NONE)
        VT__PARTITION_POINT(nm, m, ev[m] < l->start_event, a);
    if (l->release_event != VT_TL_NONE)
        VT__PARTITION_POINT(nm, m, ev[m] < l->release_event, b);
    if (a >= b || !vt__lifetime_allocated_at(l, ev[a]))
        return;   /* alive at no step's end, or in no curve */
    if (gs->nspans == gs->cap_spans) {
        if (gs->nspans >= MERGE_FIRST)
            merge_spans(gs);
        /* a merge that leaves the array more than half full: it doubles */
        if (gs->nspans * 2 >= gs->cap_spans &&
            vt__grow((void **)&gs->spans, &gs->cap_spans, gs->cap_spans + 1, sizeof *gs->spans)) {
            gs->rc = -ENOMEM;
            return;
        }
    }
    const vt__frame *f = vt__report_site_frame(s, l->alloc_stack);
    gs->spans[gs->nspans++] = (vt__growth_span){ f ? (uint64_t)(f - s->frames) + 1 : 0,
                                                 (uint32_t)a, (uint32_t)b, l->size };
    gs->total[a] += (int64_t)l->size;
    gs->total[b] -= (int64_t)l->size;
}

/* A site's name and the key (frame index + 1) it names. */
typedef struct named {
    char *name;
    uint64_t key;
    size_t id;                  /* its site's number, once named */
} named;

static int cmp_named(const void *p, const void *q)
{
    const named *x = p, *y = q;
    return strcmp(x->name, y->name);
}

static int cmp_key(const void *p, const void *q)
{
    const named *x = p, *y = q;
    return vt__order(x->key, y->key);
}

/* Sites are lines: frames that read the same (one line called from two
 * places, an imported snapshot's frames) are one site. The spans' frame
 * keys become site numbers, names[id] the name. @return 0 or -ENOMEM. */
static int name_sites(vt__growth_series *gs, const vt__snapshot_data *s)
{
    merge_spans(gs);   /* sorted by key */
    size_t nk = 0;
    for (size_t k = 0; k < gs->nspans; k++)
        nk += !k || gs->spans[k].key != gs->spans[k - 1].key;
    named *nm = calloc(nk ? nk : 1, sizeof *nm);
    if (!nm)
        return -ENOMEM;
    int rc = 0;
    for (size_t k = 0, j = 0; k < gs->nspans && !rc; k++) {
        uint64_t key = gs->spans[k].key;
        if (k && key == gs->spans[k - 1].key)
            continue;
        char name[512];
        vt__report_site_name(s, key ? &s->frames[key - 1] : NULL, name, sizeof name);
        nm[j] = (named){ strdup(name), key, 0 };
        if (!nm[j++].name)
            rc = -ENOMEM;
    }
    if (!rc && nk) {
        qsort(nm, nk, sizeof *nm, cmp_named);
        gs->names = calloc(nk, sizeof *gs->names);
        rc = gs->names ? 0 : -ENOMEM;
    }
    /* one name per site, in name order; each key now its site's number */
    for (size_t j = 0; j < nk && !rc; j++) {
        if (!gs->nnames || strcmp(nm[j].name, gs->names[gs->nnames - 1]))
            gs->names[gs->nnames++] = nm[j].name;
        else
            free(nm[j].name);
        nm[j].name = NULL;
        nm[j].id = gs->nnames - 1;
    }
    if (!rc && nk) {
        qsort(nm, nk, sizeof *nm, cmp_key);
        for (size_t k = 0, j = 0; k < gs->nspans; k++) {
            while (nm[j].key != gs->spans[k].key)
                j++;
            gs->spans[k].key = nm[j].id;
        }
        merge_spans(gs);
    }
    if (rc)
        for (size_t j = 0; j < nk; j++)
            free(nm[j].name);
    free(nm);
    return rc;
}

int vt__growth_series_finish(vt__growth_series *gs, const vt__snapshot_data *s)
{
    if (gs->rc)
        return gs->rc;
    gs->labels = calloc(gs->nmarks ? gs->nmarks : 1, sizeof *gs->labels);
    if (!gs->labels)
        return gs->rc = -ENOMEM;
    for (size_t k = 0; k < gs->nmarks; k++)
        if (!(gs->labels[k] = strdup(vt__snapshot_string(s, gs->mark_label[k]))))
            return gs->rc = -ENOMEM;
    return gs->rc = name_sites(gs, s);
}

void vt__growth_series_free(vt__growth_series *gs)
{
    if (!gs)
        return;
    for (size_t k = 0; gs->labels && k < gs->nmarks; k++)
        free(gs->labels[k]);
    for (size_t k = 0; k < gs->nnames; k++)
        free(gs->names[k]);
    free(gs->labels);
    free(gs->names);
    free(gs->mark_event);
    free(gs->mark_label);
    free(gs->total);
    free(gs->spans);
    free(gs);
}
