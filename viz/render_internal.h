/*
 * viz/render_internal.h - what the pieces of the HTML renderer share: the
 * state of one render (struct render), the binary columns being written,
 * the small helpers every piece uses over them, and the steps each piece
 * defines, grouped by file. Only viz/render*.c include it.
 */
#ifndef VT_VIZ_RENDER_INTERNAL_H
#define VT_VIZ_RENDER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "bsearch.h"
#include "buf.h"
#include "render.h"

#define NONE VT_TL_NONE

struct render {
    const vt__snapshot_data *s;
    const vt__timeline *tl;
    /* External storages: lifetimes nl.. of the page, after the timeline's. */
    vt__check_storage *xs;    /* the checker's model's list (alloc order) */
    vt__lifetime *xlt;        /* each as a lifetime: its events, size, stacks */
    size_t nl, nx;           /* timeline lifetimes, external storages */
    int xkind_dev[8];        /* device value of each external page device */
    int nxkinds;
    const vt__viz_overlay *overlay;   /* replayed reserved curve, or NULL */
    const char *oom_json;    /* `vramtrace oom --json` of the snapshot, or NULL */
    uint64_t t0;             /* time origin: the first event */

    uint32_t *axis_of;       /* event index -> axis position, NONE if off the axis */
    uint32_t naxis;

    uint32_t *order;         /* page position -> lifetime (nl + k: external k) */
    uint32_t *rank;          /* lifetime -> page position */
    uint32_t *name;          /* per lifetime: tensor name string */

    uint32_t *node_map;      /* snapshot stack node -> page node (0 = dropped) */
    uint32_t nnodes;
    uint32_t *frame_map;     /* snapshot frame -> page frame + 1 (0 = unused) */
    uint32_t *frames;        /* page frame -> snapshot frame */
    uint32_t nframes;
    uint32_t *str_map;       /* snapshot string -> page string (0 = unused/"") */
    uint32_t *strs;          /* page string -> snapshot string */
    uint32_t nstrs;

    uint64_t *streams;       /* page stream table */
    uint32_t nstreams;
    uint64_t *skeys;         /* stream value -> index hash (open addressing) */
    uint32_t *svals;
    size_t smask;

    int dev_index[256];      /* ordinal + 128 -> index into tl->devices */

    vt__buf findings;        /* JSON array items */
    size_t nfindings;
    int checked;
};

/* The binary columns: each a named section of the blob. */
struct section {
    const char *name;
    size_t start;
    int rle;                 /* (value, run length) pairs instead of plain values */
};

struct columns {
    vt__buf *blob;
    struct section sec[24];
    size_t nsec;
    uint64_t *tmp;           /* one column's values, then its run-length form */
    unsigned size_shift;     /* sizes are multiples of 2^size_shift */
    unsigned addr_shift;     /* addresses likewise */
    uint64_t tq;             /* time quantum in ns */
    size_t nxs;              /* lifetimes with extra streams */
    size_t raw_bytes;        /* the columns' bytes before deflate */
    int deflated;            /* the blob is deflated (zlib format) */
};

/* ---- helpers of every piece --------------------------------------------- */

/* Time t from the page's origin, its first event. */
static inline uint64_t rel(const struct render *r, uint64_t t)
{
    return t > r->t0 ? t - r->t0 : 0;
}

/* Lifetime i of the page: the timeline's, then the external storages. */
static inline const vt__lifetime *lt_at(const struct render *r, size_t i)
{
    return i < r->nl ? &r->tl->lifetimes[i] : &r->xlt[i - r->nl];
}

/* The page's string for snapshot string idx, interned at its first use
 * (0: ""). */
static inline uint32_t use_str(struct render *r, uint32_t idx)
{
    if (idx == 0 || idx >= r->s->nstrings)
        return 0;
    if (!r->str_map[idx]) {
        r->str_map[idx] = r->nstrs;
        r->strs[r->nstrs++] = idx;
    }
    return r->str_map[idx];
}

/* The page's stack node for snapshot node id (0: not kept). */
static inline uint32_t page_node(const struct render *r, uint32_t id)
{
    return id < r->s->nstack_nodes ? r->node_map[id] : 0;
}

/* Where a lifetime's band starts: its ALLOC, the event after the gap that
 * hid it, the start; one allocated after the kept events starts at the last. */
static inline uint32_t band_start(const struct render *r, const vt__lifetime *l)
{
    if ((l->flags & VT_LT_AFTER_WINDOW) && r->s->nevents)
        return (uint32_t)(r->s->nevents - 1);
    return l->start_event;
}

/* Axis position of an event, +1 (0 = before the first event / unknown). */
static inline uint64_t axis_p1(const struct render *r, uint32_t ev)
{
    if (ev >= r->s->nevents || r->axis_of[ev] == NONE)
        return 0;
    return (uint64_t)r->axis_of[ev] + 1;
}

/* The event index of seq, NONE if no event has it. */
static inline uint32_t event_by_seq(const vt__snapshot_data *s, uint64_t seq)
{
    size_t lo;
    VT__PARTITION_POINT(s->nevents, i, s->events[i].seq < seq, lo);
    return lo < s->nevents && s->events[lo].seq == seq ? (uint32_t)lo : NONE;
}

/* ---- render_findings.c -------------------------------------------------- */

/* The checker's finding f (of cause group `group`) as one item of the
 * page's findings (JSON, into r->findings). */
void vt__viz_add_check_finding(struct render *r, const vt__check_finding *f, uint32_t group);
/* The snapshot's recorded FINDING events, likewise. */
void vt__viz_add_event_findings(struct render *r);

/* ---- render_columns.c --------------------------------------------------- */

/* The page's binary columns into c->blob; npoints_total: per device, the
 * points of its reserved curve written. */
void vt__viz_write_columns(struct render *r, struct columns *c, size_t *npoints_total);

/* ---- render_meta.c ------------------------------------------------------ */

/* The page's JSON metadata into m: what the columns hold (c, npoints) and
 * everything drawn besides them. */
void vt__viz_write_meta(struct render *r, vt__buf *m, const struct columns *c,
                        const size_t *npoints);

#endif /* VT_VIZ_RENDER_INTERNAL_H */
