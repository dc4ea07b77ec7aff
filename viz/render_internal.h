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
#include "u64map.h"

#define NONE VT_TL_NONE

/* CUDA graphs' private pools' reserved bytes, per device (render_pools.c). */
struct pool_step { uint32_t event; uint64_t bytes; };
struct pool_dev {
    struct pool_step *v;     /* after each event that changed them */
    size_t n, cap;
    uint64_t bytes;          /* now */
};
struct pools {
    struct pool_dev *dev;    /* by index into tl->devices */
    size_t ndev;
    vt__u64map at;           /* the pools' live segments' addresses */
};

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
    const vt__viz_oom *explained;   /* an OOM explained (`vramtrace oom --json`), or NULL */
    uint64_t t0;             /* time origin: the first event */
    size_t nevents;          /* the snapshot's events (a stream's count: s holds none) */

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
    size_t cap_streams;
    vt__u64map stream_at;    /* stream value -> index into streams */
    int oom;                 /* a table could not grow: the render fails */

    int dev_index[256];      /* ordinal + 128 -> index into tl->devices */

    vt__buf findings;        /* JSON array items */
    size_t nfindings;
    const vt__check_report *check;   /* the checker's report, NULL: not checked */
    /* The tool's pauses (PAUSE events: track()'s holder walks, a
     * snapshot's), [start, end] ns pairs: time on the axis that was not the
     * program's, shaded and said on the page. */
    uint64_t *pauses;
    size_t npauses, cap_pauses;   /* pairs */
    struct pools pools;      /* CUDA graphs' pools (render_pools.c) */
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
    if ((l->flags & VT_LT_AFTER_WINDOW) && r->nevents)
        return (uint32_t)(r->nevents - 1);
    return l->start_event;
}

/* Axis position of an event, +1 (0 = before the first event / unknown). */
static inline uint64_t axis_p1(const struct render *r, uint32_t ev)
{
    if (ev >= r->nevents || r->axis_of[ev] == NONE)
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

/* ---- render.c ------------------------------------------------------------ */

/* The tables every render fills as it goes (stacks, frames, strings,
 * streams), for a snapshot whose sections s holds (its events or not).
 * @return 0 or -ENOMEM. */
int vt__viz_render_init(struct render *r);
/* r->dev_index from r->tl's devices. */
void vt__viz_index_devices(struct render *r);
void vt__viz_render_free(struct render *r);
/* Keep stack `id` and its callers on the page. */
void vt__viz_keep_stack(struct render *r, uint32_t id);
/* Is an event of this kind on the x axis whatever the lifetimes say? */
int vt__viz_on_axis_kind(uint8_t kind);
/* Event e, if a PAUSE (its end time, aux its length), kept in r->pauses.
 * 0, or -ENOMEM. */
int vt__viz_keep_pause(struct render *r, const vt__event *e);
/* Renames (TENSOR_NAME) by tensor id, in event order within an id. */
struct vt__viz_rename { uint64_t id; uint32_t ev; uint32_t str; };
int vt__viz_cmp_rename(const void *a, const void *b);
/* The latest name of tensor `id` (its last rename in rn, sorted by
 * vt__viz_cmp_rename), or `dflt` if never renamed. */
uint32_t vt__viz_latest_name(const struct vt__viz_rename *rn, size_t n, uint64_t id, uint32_t dflt);
/* A tensor named `name` created on the page's lifetime li (view: a view's):
 * the first tensor names it, a base tensor over views (by_view: per
 * lifetime, named by a view; NULL: the first wins). */
void vt__viz_bind_name(struct render *r, uint8_t *by_view, size_t li, uint32_t name, int view);
/* External storage k (r->xs) as the page's lifetime r->xlt[k], released
 * at release_event (VT_TL_NONE: never); its device noted. */
void vt__viz_external_lifetime(struct render *r, size_t k, uint32_t release_event);
/* Number the kept stack nodes in snapshot order, and their frames. */
void vt__viz_number_stacks(struct render *r);
/* The page from its columns (c->blob, not yet deflated) and findings:
 * deflated, the metadata, the template filled into out. @return 0 or a
 * negative errno with one line in err. */
int vt__viz_finish_page(FILE *out, struct render *r, struct columns *c, const size_t *npoints,
                        vt__viz_stats *stats, char *err, size_t errlen);

/* ---- render_findings.c -------------------------------------------------- */

/* The external storage (nl + its index) the checker's finding f is about,
 * NONE: none or not external. */
uint32_t vt__viz_external_of(const struct render *r, const vt__check_finding *f);
/* The page position of the lifetime the checker's finding f is about, -1:
 * none (a whole snapshot's render: r->tl has event_owner). */
int64_t vt__viz_finding_pos(const struct render *r, const vt__check_finding *f);
/* The checker's finding f (of cause group `group`) as one item of the
 * page's findings (JSON, into r->findings), about the lifetime at page
 * position pos (-1: none). */
void vt__viz_add_check_finding(struct render *r, const vt__check_finding *f, uint32_t group,
                               int64_t pos);
/* A recorded FINDING event e, likewise. */
void vt__viz_add_event_finding(struct render *r, const vt__event *e, int64_t pos);
/* Every FINDING event of a whole snapshot. */
void vt__viz_add_event_findings(struct render *r);

/* ---- render_columns.c --------------------------------------------------- */

/* The page's binary columns into c->blob; npoints_total: per device, the
 * points of its reserved curve written. */
void vt__viz_write_columns(struct render *r, struct columns *c, size_t *npoints_total);
/* What the streamed render (render_stream.c) writes its columns with. */
void vt__viz_col_begin(struct columns *c, const char *name, int rle);

/* render_pools.c: CUDA graphs' pools' reserved bytes as steps. begin once
 * the timeline and the axis are known (@return -1 out of memory), every
 * event in order, then write its section (none when no pool was seen). */
int vt__viz_pools_begin(struct render *r);
void vt__viz_pools_event(struct render *r, uint32_t ev, const vt__event *e);
void vt__viz_pools_write(struct render *r, struct columns *c);
void vt__viz_pools_free(struct render *r);
/* Was a pool seen (a step kept): the page has section "pools". */
bool vt__viz_pools_seen(const struct render *r);
void vt__viz_put_column(struct columns *c, const char *name, const uint64_t *v, size_t n);
size_t vt__viz_varint_len(uint64_t v);
unsigned vt__viz_common_shift(uint64_t acc);
uint32_t vt__viz_stream_index(struct render *r, uint64_t v);
/* The page device of a lifetime on device value dv (external: an external
 * storage's, on the page devices after the timeline's). */
uint64_t vt__viz_page_device(const struct render *r, int dv, int external);
/* The "stk" column: the stack nodes kept. */
void vt__viz_write_stacks(struct render *r, struct columns *c);

/* ---- render_meta.c ------------------------------------------------------ */

/* The page's JSON metadata into m: what the columns hold (c, npoints) and
 * everything drawn besides them. */
void vt__viz_write_meta(struct render *r, vt__buf *m, const struct columns *c,
                        const size_t *npoints);

#endif /* VT_VIZ_RENDER_INTERNAL_H */
