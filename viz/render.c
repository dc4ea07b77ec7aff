/*
 * viz/render.c - a snapshot as one self-contained HTML page (see render.h).
 *
 * The page draws from the timeline (trace/snap/timeline.h), never from raw
 * events, so it agrees with every other view on what lived when. What it
 * needs is reduced here to compact columns:
 *   - the x axis: the allocator events (alloc, free, segment, mark, OOM);
 *     per axis event its time as a delta from the previous one;
 *   - per lifetime, in allocation order (the stacking order): axis position
 *     of alloc and release, size, requested size, call site (stack node),
 *     free stack, tensor name, stream, device, address, flags;
 *   - reserved bytes per device as (axis position, value) steps;
 *   - the storages vramtrace did not allocate (a CPU tensor's, declared with
 *     vt_storage_external) as more lifetimes in the same columns, on page
 *     devices of their own after the CUDA ones (never in the device curves),
 *     with their last use, uses and tensors as the checker's model has them;
 *   - only the stack nodes, frames and strings those refer to.
 * Deltas and varints keep 1M events around 5 MB of columns; deflated (with
 * zlib; the page inflates them natively) they are far smaller again on a
 * training run's repeated steps.
 */
#include "bsearch.h"
#include "errbuf.h"
#include "render.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "format_bytes.h"

extern const char vt__viz_template_html[];
extern const char vt__viz_timeline_js[];
extern const char vt__viz_ticks_js[];
extern const char vt__viz_sweep_js[];
extern const char vt__viz_style_css[];

#define NONE VT_TL_NONE

struct render {
    const vt__snapshot_data *s;
    const vt_timeline *tl;
    /* External storages: lifetimes nl.. of the page, after the timeline's. */
    vt_check_storage *xs;    /* the checker's model's list (alloc order) */
    vt_lifetime *xlt;        /* each as a lifetime: its events, size, stacks */
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

static uint64_t rel(const struct render *r, uint64_t t)
{
    return t > r->t0 ? t - r->t0 : 0;
}

/* Lifetime i of the page: the timeline's, then the external storages. */
static const vt_lifetime *lt_at(const struct render *r, size_t i)
{
    return i < r->nl ? &r->tl->lifetimes[i] : &r->xlt[i - r->nl];
}

/* Page device of lifetime i: the timeline's device index, or, for an
 * external storage, one per device value after them. */
static uint64_t page_device(const struct render *r, size_t i)
{
    if (i >= r->nl) {
        int dv = r->xlt[i - r->nl].device;
        for (int k = 0; k < r->nxkinds; k++)
            if (r->xkind_dev[k] == dv)
                return r->tl->ndevices + (uint64_t)k;
        return r->tl->ndevices + (uint64_t)(r->nxkinds ? r->nxkinds - 1 : 0);
    }
    int d = r->dev_index[r->tl->lifetimes[i].device + 128];
    return d < 0 ? 0 : (uint64_t)d;
}

/* ---- interning of the strings, frames and stack nodes the page uses ----- */

static uint32_t use_str(struct render *r, uint32_t idx)
{
    if (idx == 0 || idx >= r->s->nstrings)
        return 0;
    if (!r->str_map[idx]) {
        r->str_map[idx] = r->nstrs;
        r->strs[r->nstrs++] = idx;
    }
    return r->str_map[idx];
}

/* Keep stack `id` and its callers. Walks stop at a node already kept, so the
 * total work is linear in the nodes kept. */
static void keep_stack(struct render *r, uint32_t id)
{
    size_t guard = 0;
    while (id > 0 && id < r->s->nstack_nodes && !r->node_map[id] && guard++ < r->s->nstack_nodes) {
        r->node_map[id] = 1;   /* numbered later, in snapshot order */
        id = r->s->stack_nodes[id].parent;
    }
}

static uint32_t page_node(const struct render *r, uint32_t id)
{
    return id < r->s->nstack_nodes ? r->node_map[id] : 0;
}

static uint32_t stream_index(struct render *r, uint64_t v)
{
    size_t i = (size_t)((v * 0x9e3779b97f4a7c15ull) >> 17) & r->smask;
    while (r->svals[i] != NONE) {
        if (r->skeys[i] == v)
            return r->svals[i];
        i = (i + 1) & r->smask;
    }
    r->skeys[i] = v;
    r->svals[i] = r->nstreams;
    r->streams[r->nstreams] = v;
    return r->nstreams++;
}

/* ---- the x axis and the stacking order ---------------------------------- */

static int on_axis_kind(uint8_t kind)
{
    switch (kind) {
    case VT_EV_ALLOC: case VT_EV_FREE_REQUESTED: case VT_EV_FREE_COMPLETED:
    case VT_EV_SEGMENT_ALLOC: case VT_EV_SEGMENT_FREE: case VT_EV_OOM: case VT_EV_MARK:
        return 1;
    default:
        return 0;
    }
}

static void put_axis(struct render *r, uint32_t ev)
{
    if (ev < r->s->nevents)
        r->axis_of[ev] = 1;
}

/* Where a lifetime's band starts: its ALLOC, the event after the gap that
 * hid it, the start; one allocated after the kept events starts at the last. */
static uint32_t band_start(const struct render *r, const vt_lifetime *l)
{
    if ((l->flags & VT_LT_AFTER_WINDOW) && r->s->nevents)
        return (uint32_t)(r->s->nevents - 1);
    return l->start_event;
}

static void build_axis(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    const vt_timeline *tl = r->tl;
    for (size_t i = 0; i < s->nevents; i++)
        r->axis_of[i] = on_axis_kind(s->events[i].kind) ? 1 : 0;
    for (size_t i = 0; i < r->nl + r->nx; i++) {
        put_axis(r, band_start(r, lt_at(r, i)));
        put_axis(r, lt_at(r, i)->release_event);
    }
    for (size_t d = 0; d < tl->ndevices; d++)
        for (size_t k = 0; k < tl->devices[d].npoints; k++)
            put_axis(r, tl->devices[d].points[k].event);
    uint32_t n = 0;
    for (size_t i = 0; i < s->nevents; i++)
        r->axis_of[i] = r->axis_of[i] ? n++ : NONE;
    r->naxis = n;
}

/* Axis position of an event, +1 (0 = before the first event / unknown). */
static uint64_t axis_p1(const struct render *r, uint32_t ev)
{
    if (ev >= r->s->nevents || r->axis_of[ev] == NONE)
        return 0;
    return (uint64_t)r->axis_of[ev] + 1;
}

static const struct render *g_sort_r; /* qsort has no context argument */

static int cmp_alloc_order(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const vt_lifetime *lx = lt_at(g_sort_r, x), *ly = lt_at(g_sort_r, y);
    uint64_t kx = lx->alloc_event == NONE ? 0 : (uint64_t)lx->alloc_event + 1;
    uint64_t ky = ly->alloc_event == NONE ? 0 : (uint64_t)ly->alloc_event + 1;
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The timeline promises allocation order; sort anyway (stable, cheap when
 * already sorted) because the page's sweep relies on it. */
static void build_order(struct render *r)
{
    size_t n = r->nl + r->nx;
    int sorted = 1;
    g_sort_r = r;
    for (size_t i = 0; i < n; i++) {
        r->order[i] = (uint32_t)i;
        if (i && cmp_alloc_order(&(uint32_t){ (uint32_t)i - 1 }, &(uint32_t){ (uint32_t)i }) > 0)
            sorted = 0;
    }
    if (!sorted)
        qsort(r->order, n, sizeof *r->order, cmp_alloc_order);
    g_sort_r = NULL;
    for (size_t i = 0; i < n; i++)
        r->rank[r->order[i]] = (uint32_t)i;
}

/* Renames (TENSOR_NAME) by tensor id, in event order within an id. */
struct rename { uint64_t id; uint32_t ev; uint32_t str; };

static int cmp_rename(const void *a, const void *b)
{
    const struct rename *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

/* The latest name of tensor `id` (its last rename), or `dflt` if never
 * renamed. */
static uint32_t latest_name(const struct rename *rn, size_t n, uint64_t id, uint32_t dflt)
{
    /* first entry with a greater id */
    size_t lo;
    VT__PARTITION_POINT(n, i, rn[i].id <= id, lo);
    return lo && rn[lo - 1].id == id ? rn[lo - 1].str : dflt;
}

/* Name each allocation after the first tensor created on it: a base tensor
 * (not a view) wins over views. A tensor shows its latest name (its last
 * TENSOR_NAME, else its TENSOR_NEW's), as in `vramtrace check`: the hover
 * and the detail panel then agree with the findings. */
static void bind_names(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    size_t nrn = 0;
    for (size_t i = 0; i < s->nevents; i++)
        nrn += s->events[i].kind == VT_EV_TENSOR_NAME;
    /* Without memory for the renames, tensors keep their first names. */
    struct rename *rn = nrn ? malloc(nrn * sizeof *rn) : NULL;
    if (!rn)
        nrn = 0;
    for (size_t i = 0, k = 0; k < nrn && i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_TENSOR_NAME)
            rn[k++] = (struct rename){ s->events[i].aux, (uint32_t)i, s->events[i].str };
    if (nrn > 1)
        qsort(rn, nrn, sizeof *rn, cmp_rename);

    uint8_t *by_view = calloc(r->tl->nlifetimes ? r->tl->nlifetimes : 1, 1);
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->kind != VT_EV_TENSOR_NEW)
            continue;
        uint32_t name = nrn ? latest_name(rn, nrn, e->aux, e->str) : e->str;
        if (name == 0)
            continue;
        const vt_lifetime *lt = vt__timeline_find(r->tl, e->addr, (uint32_t)i);
        if (!lt)
            continue;
        size_t li = (size_t)(lt - r->tl->lifetimes);
        int view = e->aux2 != 0;
        if (r->name[li] == 0 || (!view && by_view && by_view[li])) {
            r->name[li] = name;
            if (by_view)
                by_view[li] = (uint8_t)view;
        }
    }
    free(by_view);
    free(rn);
    /* External storages: their owner's latest name, as the checker names it. */
    for (size_t k = 0; k < r->nx; k++)
        r->name[r->nl + k] = r->xs[k].owner_name;
}

/* ---- findings ------------------------------------------------------------ */

static uint32_t event_by_seq(const vt__snapshot_data *s, uint64_t seq)
{
    size_t lo;
    VT__PARTITION_POINT(s->nevents, i, s->events[i].seq < seq, lo);
    return lo < s->nevents && s->events[lo].seq == seq ? (uint32_t)lo : NONE;
}

/* The external storage a finding is about: the one opened at its alloc_seq
 * (they are in allocation order), else the last one at its address. */
static uint32_t external_lifetime(const struct render *r, const vt_check_finding *f)
{
    size_t lo;
    VT__PARTITION_POINT(r->nx, i, r->xs[i].alloc_seq < f->alloc_seq, lo);
    if (f->alloc_seq && lo < r->nx && r->xs[lo].alloc_seq == f->alloc_seq && r->xs[lo].addr == f->addr)
        return (uint32_t)(r->nl + lo);
    for (size_t k = r->nx; k-- > 0;)
        if (r->xs[k].addr == f->addr)
            return (uint32_t)(r->nl + k);
    return NONE;
}

static uint32_t finding_lifetime(const struct render *r, const vt_check_finding *f)
{
    const vt_timeline *tl = r->tl;
    if (f->external)
        return external_lifetime(r, f);
    if (f->alloc_seq) {
        uint32_t ev = event_by_seq(r->s, f->alloc_seq);
        if (ev != NONE && tl->event_owner && ev < tl->nevents && tl->event_owner[ev] < tl->nlifetimes)
            return tl->event_owner[ev];
    }
    uint32_t at = NONE;
    if (f->last_use_seq)
        at = event_by_seq(r->s, f->last_use_seq);
    if (at == NONE && r->s->nevents)
        at = (uint32_t)r->s->nevents - 1;
    const vt_lifetime *lt = vt__timeline_find(tl, f->addr, at);
    if (!lt)
        lt = vt__timeline_find(tl, f->addr, NONE);
    return lt ? (uint32_t)(lt - tl->lifetimes) : NONE;
}

static void fmt_secs(uint64_t ns, char *buf, size_t len)
{
    if (ns >= 1000000000ull)
        snprintf(buf, len, "%.3g s", (double)ns / 1e9);
    else if (ns >= 1000000ull)
        snprintf(buf, len, "%.3g ms", (double)ns / 1e6);
    else
        snprintf(buf, len, "%.3g us", (double)ns / 1e3);
}

static void add_check_finding(struct render *r, const vt_check_finding *f, uint32_t group)
{
    const vt_timeline *tl = r->tl;
    uint32_t li = finding_lifetime(r, f);
    vt__buf *b = &r->findings;
    char bytes[32], dur[32], title[512];
    vt__fmt_bytes(f->bytes, bytes);
    fmt_secs(f->linger_ns, dur, sizeof dur);
    const char *rule = vt__check_rule_name(f->rule);
    if (f->rule == VT_CHECK_RULE_LINGER)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) alive %s after its last use%s", rule,
                 f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", bytes, dur, f->freed ? "" : ", never freed");
    else if (f->rule == VT_CHECK_RULE_PINNED) {
        char wasted[32];
        vt__fmt_bytes(f->wasted_bytes, wasted);
        snprintf(title, sizeof title, "%s: %s%s%s (%s) kept by %u small view%s, %s wasted for %s",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", bytes, f->nviews_live,
                 f->nviews_live == 1 ? "" : "s", wasted, dur);
    } else if (f->rule == VT_CHECK_RULE_CYCLE)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) held by a reference cycle until gc ran, %s after its last use",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", bytes, dur);
    else if (f->rule == VT_CHECK_RULE_TAPE)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) idle after its last use for %u%% of its step's tensor uses, alive at the step's peak",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", bytes, f->step_idle_pct);
    else if (f->rule == VT_CHECK_RULE_NEVER_FREED)
        snprintf(title, sizeof title, "%s: %u allocation%s (%s) from one call site never freed", rule,
                 f->nallocs, f->nallocs == 1 ? "" : "s", bytes);
    else if (f->rule == VT_CHECK_RULE_GROWTH) {
        char per[32];
        vt__fmt_bytes(f->growth_per_step, per);
        snprintf(title, sizeof title, "%s: one call site's live bytes grow %s per step (%s over %u steps)",
                 rule, per, bytes, f->growth_last_mark - f->growth_first_mark);
    } else
        snprintf(title, sizeof title, "%s: %s outlived its call site's siblings by %s", rule, bytes, dur);

    if (r->nfindings++)
        vt__put_str(b, ",");
    vt__put_printf(b, "{\"l\":%" PRId64 ",\"src\":\"check\",\"kind\":", li == NONE ? (int64_t)-1 : (int64_t)r->rank[li]);
    vt__put_json_str(b, rule, 1);
    vt__put_printf(b, ",\"g\":%" PRIu32 ",\"bytes\":%" PRIu64, group, f->bytes);
    vt__put_str(b, ",\"title\":");
    vt__put_json_str(b, title, 1);
    int used = f->rule == VT_CHECK_RULE_LINGER || f->rule == VT_CHECK_RULE_CYCLE ||
               f->rule == VT_CHECK_RULE_TAPE;
    if (f->external)
        vt__put_str(b, ",\"ext\":true");
    if (used) {
        char msg[512];
        snprintf(msg, sizeof msg, "%u use%s; last by tensor '%s'", f->nuses, f->nuses == 1 ? "" : "s",
                 f->last_use_name);
        if (f->steps_unused)
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; %u complete step%s unused after it",
                     f->steps_unused, f->steps_unused == 1 ? "" : "s");
        vt__put_str(b, ",\"msg\":");
        vt__put_json_str(b, msg, 1);
        if (f->last_use_seq)
            vt__put_printf(b, ",\"lastUse\":%" PRIu64, rel(r, f->last_use_time_ns));
    }
    if (f->rule == VT_CHECK_RULE_CYCLE) {
        char gc[32], why[256];
        fmt_secs(rel(r, f->gc_time_ns), gc, sizeof gc);
        snprintf(why, sizeof why, "held by a reference cycle until gc ran: the collection at %s freed it %s after its last use",
                 gc, dur);
        vt__put_str(b, ",\"why\":");
        vt__put_json_str(b, why, 1);
    }
    if (f->rule == VT_CHECK_RULE_TAPE) {
        char step[32], peak[32], why[256];
        fmt_secs(f->step_ns, step, sizeof step);
        vt__fmt_bytes(f->step_peak_bytes, peak);
        snprintf(why, sizeof why, "retained inside its step: alive %s after its last use (%u%% of the step's tensor uses, a %s step), through the step's peak of %s",
                 dur, f->step_idle_pct, step, peak);
        vt__put_str(b, ",\"why\":");
        vt__put_json_str(b, why, 1);
        vt__put_printf(b, ",\"peak\":%" PRIu64, rel(r, f->linger_from_time_ns));
    }
    if (f->rule == VT_CHECK_RULE_PINNED && f->nviews) {
        /* Which views keep it: the detail panel shows this line. */
        char msg[512], vb[32], cb[32];
        const vt_check_view *v = &f->views[0];
        vt__fmt_bytes(v->bytes, vb);
        vt__fmt_bytes(f->covered_bytes, cb);
        snprintf(msg, sizeof msg, "base tensor dropped; live views cover %s; largest: tensor '%s'%s%s%s (%s)",
                 cb, v->name[0] ? v->name : "?", v->base_name[0] ? " (view of '" : "",
                 v->base_name, v->base_name[0] ? "')" : "", vb);
        vt__put_str(b, ",\"msg\":");
        vt__put_json_str(b, msg, 1);
    }
    /* Hatched from: when it became a finding; a cycle's and a tape's bytes
     * count from the last use (the collection and the peak come later). */
    if ((f->rule == VT_CHECK_RULE_CYCLE || f->rule == VT_CHECK_RULE_TAPE) && f->last_use_seq)
        vt__put_printf(b, ",\"from\":%" PRIu64, rel(r, f->last_use_time_ns));
    else if (f->linger_from_seq || f->linger_from_time_ns)
        vt__put_printf(b, ",\"from\":%" PRIu64, rel(r, f->linger_from_time_ns));
    /* A call-site finding covers every allocation of the site still alive. */
    if (f->rule == VT_CHECK_RULE_NEVER_FREED && f->nallocs > 1 && f->alloc_stack) {
        vt__put_str(b, ",\"ls\":[");
        size_t n = 0;
        for (size_t i = 0; i < tl->nlifetimes; i++) {
            const vt_lifetime *l = &tl->lifetimes[i];
            if (l->alloc_stack != f->alloc_stack || !(l->flags & VT_LT_ALIVE) || l->alloc_event == NONE)
                continue;
            vt__put_printf(b, "%s[%" PRIu32 ",%" PRIu64 "]", n++ ? "," : "", r->rank[i],
                           rel(r, l->alloc_time_ns));
        }
        vt__put_str(b, "]");
    }
    if (f->npaths) {
        /* When the chains were seen, as `vramtrace check` says it. */
        vt__put_str(b, ",\"pathAt\":");
        vt__put_json_str(b, f->path_seq == UINT64_MAX        ? "at the end"
                            : f->rule == VT_CHECK_RULE_CYCLE ? "just before gc collected it"
                            : f->rule == VT_CHECK_RULE_TAPE  ? "at the step's peak"
                                                             : "when it became a finding", 1);
        vt__put_str(b, ",\"path\":[");
        for (size_t p = 0; p < f->npaths; p++) {
            /* Whole, as `vramtrace check --json` has it: a deep chain may
             * need more than the line buffer. */
            char line[2048], *text = line;
            size_t need = vt__check_path_format(&f->paths[p], line, sizeof line);
            if (need >= sizeof line && (text = malloc(need + 1)) != NULL)
                vt__check_path_format(&f->paths[p], text, need + 1);
            if (p)
                vt__put_str(b, ",");
            vt__put_json_str(b, text ? text : line, 1);
            if (text != line)
                free(text);
        }
        vt__put_str(b, "]");
    }
    vt__put_str(b, "}");
}

static void add_event_findings(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->kind != VT_EV_FINDING)
            continue;
        const vt_lifetime *lt = vt__timeline_find(r->tl, e->addr, (uint32_t)i);
        vt__buf *b = &r->findings;
        if (r->nfindings++)
            vt__put_str(b, ",");
        vt__put_printf(b, "{\"l\":%" PRId64 ",\"src\":\"snapshot\",\"kind\":\"recorded\",\"title\":",
                       lt ? (int64_t)r->rank[lt - r->tl->lifetimes] : (int64_t)-1);
        const char *text = vt__snapshot_string(s, e->str);
        vt__put_json_str(b, text[0] ? text : "finding recorded in the snapshot", 1);
        vt__put_printf(b, ",\"from\":%" PRIu64 "}", rel(r, e->time_ns));
    }
}

/* ---- the binary columns -------------------------------------------------- */

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

static void begin(struct columns *c, const char *name, int rle)
{
    c->sec[c->nsec].name = name;
    c->sec[c->nsec].start = c->blob->n;
    c->sec[c->nsec].rle = rle;
    c->nsec++;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Write n values as a column, run-length encoded when that is smaller
 * (names, devices, streams, flags are mostly long runs). */
static void put_column(struct columns *c, const char *name, const uint64_t *v, size_t n)
{
    size_t plain = 0, rle = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && v[j] == v[i])
            j++;
        for (size_t k = i; k < j; k++)
            plain += varint_len(v[k]);
        rle += varint_len(v[i]) + varint_len(j - i);
        i = j;
    }
    begin(c, name, rle < plain);
    if (rle < plain) {
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && v[j] == v[i])
                j++;
            vt__put_varint(c->blob, v[i]);
            vt__put_varint(c->blob, j - i);
            i = j;
        }
    } else {
        for (size_t i = 0; i < n; i++)
            vt__put_varint(c->blob, v[i]);
    }
}

static unsigned common_shift(uint64_t acc)
{
    unsigned sh = 0;
    if (!acc)
        return 0;
    while (!(acc & 1) && sh < 40) {
        acc >>= 1;
        sh++;
    }
    return sh;
}

static void write_columns(struct render *r, struct columns *c, size_t *npoints_total)
{
    const vt__snapshot_data *s = r->s;
    const vt_timeline *tl = r->tl;
    size_t n = r->nl + r->nx;
    vt__buf *blob = c->blob;
    uint64_t *v = c->tmp;

    /* Time: quantized to a power of two about 1/64 of the mean gap, which
     * keeps most deltas in one byte and is far below what a pixel shows. */
    uint64_t span = tl->last_time_ns > r->t0 ? tl->last_time_ns - r->t0 : 0;
    c->tq = 1;
    if (r->naxis)
        while (c->tq * 2 <= span / r->naxis / 64)
            c->tq *= 2;
    size_t k = 0;
    uint64_t prevq = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        if (r->axis_of[i] == NONE)
            continue;
        uint64_t q = rel(r, s->events[i].time_ns) / c->tq;
        v[k++] = q > prevq ? q - prevq : 0;
        if (q > prevq)
            prevq = q;
    }
    put_column(c, "ev_dt", v, k);

    int64_t last = 0;
    for (k = 0; k < n; k++) {
        int64_t p1 = (int64_t)axis_p1(r, band_start(r, lt_at(r, r->order[k])));
        v[k] = vt__zigzag(p1 - last);
        last = p1;
    }
    put_column(c, "l_pos", v, n);
    for (k = 0; k < n; k++) {
        const vt_lifetime *l = lt_at(r, r->order[k]);
        uint64_t p1 = axis_p1(r, band_start(r, l));
        uint64_t e1 = axis_p1(r, l->release_event);
        /* release position = value + p1 - 2; 0 = never released */
        v[k] = e1 == 0 ? 0 : (e1 >= p1 ? e1 - p1 + 1 : 1);
    }
    put_column(c, "l_end", v, n);
    uint64_t acc = 0, aacc = 0;
    for (k = 0; k < n; k++) {
        acc |= lt_at(r, k)->size;
        aacc |= lt_at(r, k)->addr;
    }
    c->size_shift = common_shift(acc);
    c->addr_shift = common_shift(aacc);
    for (k = 0; k < n; k++)
        v[k] = lt_at(r, r->order[k])->size >> c->size_shift;
    put_column(c, "l_size", v, n);
    for (k = 0; k < n; k++) {
        const vt_lifetime *l = lt_at(r, r->order[k]);
        v[k] = l->req_size && l->req_size <= l->size ? l->size - l->req_size + 1 : 0;
    }
    put_column(c, "l_req", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_node(r, lt_at(r, r->order[k])->alloc_stack);
    put_column(c, "l_site", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_node(r, lt_at(r, r->order[k])->free_stack);
    put_column(c, "l_fstk", v, n);
    for (k = 0; k < n; k++)
        v[k] = use_str(r, r->name[r->order[k]]);
    put_column(c, "l_name", v, n);
    for (k = 0; k < n; k++)
        v[k] = stream_index(r, lt_at(r, r->order[k])->stream);
    put_column(c, "l_stream", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_device(r, r->order[k]);
    put_column(c, "l_dev", v, n);
    uint64_t pa = 0;
    for (k = 0; k < n; k++) {
        uint64_t a = lt_at(r, r->order[k])->addr >> c->addr_shift;
        v[k] = vt__zigzag((int64_t)(a - pa));
        pa = a;
    }
    put_column(c, "l_addr", v, n);
    for (k = 0; k < n; k++) {
        /* Bit 7 of the page: outside an observed framework's pool (a
         * segment it reserved, a library's own buffer), not allocated. */
        uint32_t fl = lt_at(r, r->order[k])->flags;
        v[k] = (fl & 0x7f) | (fl & VT_LT_OUTSIDE_POOL ? 0x80 : 0);
    }
    put_column(c, "l_flags", v, n);

    begin(c, "l_xs", 0);
    size_t lastk = 0;
    for (k = 0; k < n; k++) {
        const vt_lifetime *l = lt_at(r, r->order[k]);
        if (!l->nstreams || l->first_stream + (size_t)l->nstreams > tl->nstreams)
            continue;
        vt__put_varint(blob, k - lastk);
        lastk = k;
        vt__put_varint(blob, l->nstreams);
        for (uint32_t j = 0; j < l->nstreams; j++)
            vt__put_varint(blob, stream_index(r, tl->streams[l->first_stream + j]));
        c->nxs++;
    }
    /* External storages, in page order: last use (time quantum + 1, 0:
     * never used), uses, tensors bound. */
    size_t nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl) {
            const vt_check_storage *x = &r->xs[r->order[k] - r->nl];
            v[nx++] = x->last_use_seq ? rel(r, x->last_use_time_ns) / c->tq + 1 : 0;
        }
    put_column(c, "x_use", v, nx);
    nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl)
            v[nx++] = r->xs[r->order[k] - r->nl].nuses;
    put_column(c, "x_nuse", v, nx);
    nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl)
            v[nx++] = r->xs[r->order[k] - r->nl].ntensors;
    put_column(c, "x_nt", v, nx);
    begin(c, "stk", 0);
    for (size_t i = 0; i < s->nstack_nodes; i++) {
        if (i && !r->node_map[i])
            continue;
        const vt_stack_node *nd = &s->stack_nodes[i];
        vt__put_varint(blob, i ? page_node(r, nd->parent) : 0);
        vt__put_varint(blob, i && nd->frame < s->nframes ? r->frame_map[nd->frame] - 1 : 0);
    }
    /* Reserved bytes: only the points where it changes (the timeline has a
     * point for every allocation too). */
    begin(c, "curves", 0);
    for (size_t d = 0; d < tl->ndevices; d++) {
        uint64_t lp = 0, lv = 0;
        size_t kept = 0;
        for (size_t j = 0; j < tl->devices[d].npoints; j++) {
            const vt_tl_point *pt = &tl->devices[d].points[j];
            if (j && pt->reserved == lv)
                continue;
            uint64_t p1 = pt->event == NONE ? 0 : axis_p1(r, pt->event);
            vt__put_varint(blob, p1 >= lp ? p1 - lp : 0);
            if (p1 > lp)
                lp = p1;
            vt__put_varint(blob, pt->reserved);
            lv = pt->reserved;
            kept++;
        }
        npoints_total[d] = kept;
    }
}

/* ---- the JSON metadata ---------------------------------------------------- */

static void json_key_str(vt__buf *b, const char *key, const char *val)
{
    vt__put_printf(b, "\"%s\":", key);
    vt__put_json_str(b, val, 1);
}

/* The replay's curve as {"label":..,"pts":[[device index, axis position
 * (-1: before the first event), bytes],...]}, or null. A point's event that
 * is not on the axis takes the axis position of the last one before it. */
static void write_overlay(struct render *r, vt__buf *m)
{
    const vt__viz_overlay *o = r->overlay;
    if (!o) {
        vt__put_str(m, "null");
        return;
    }
    vt__put_str(m, "{");
    json_key_str(m, "label", o->label ? o->label : "");
    vt__put_str(m, ",\"pts\":[");
    size_t kept = 0;
    for (size_t k = 0; k < o->npoints; k++) {
        int d = r->dev_index[o->device[k] + 128];   /* int8_t: always in range */
        if (d < 0)
            continue;
        int64_t pos = -1;
        for (uint32_t e = o->event[k] + 1; e-- > 0;)
            if (e < r->s->nevents && r->axis_of[e] != NONE) {
                pos = r->axis_of[e];
                break;
            }
        vt__put_printf(m, "%s[%d,%" PRId64 ",%" PRIu64 "]", kept++ ? "," : "", d, pos,
                       o->reserved[k]);
    }
    int64_t oom = -1;
    if (o->oom_event >= 0 && (uint64_t)o->oom_event < r->s->nevents)
        oom = (int64_t)axis_p1(r, (uint32_t)o->oom_event) - 1;
    vt__put_printf(m, "],\"oom\":%" PRId64 "}", oom);
}

/* The OOM explained (the JSON of `vramtrace oom`) with its place on the
 * axis: ,"oom":{"ax":N,"x":{...}} or ,"oom":null. Its text can only hold
 * '<' inside strings: written as \u003c, no "</script>" can close the tag. */
static void write_oom(struct render *r, vt__buf *m)
{
    const char *x = r->oom_json;
    if (!x) {
        vt__put_str(m, ",\"oom\":null");
        return;
    }
    int64_t ax = -1;
    for (size_t i = 0; i < r->s->nevents; i++)
        if (r->s->events[i].kind == VT_EV_OOM) {
            ax = (int64_t)axis_p1(r, (uint32_t)i) - 1;
            break;
        }
    vt__put_printf(m, ",\"oom\":{\"ax\":%" PRId64 ",\"x\":", ax);
    for (const char *p = x; *p; p++) {
        const char *lt = strchr(p, '<');
        size_t n = lt ? (size_t)(lt - p) : strlen(p);
        vt__put_bytes(m, p, n);
        if (!lt)
            break;
        vt__put_str(m, "\\u003c");
        p = lt;
    }
    vt__put_str(m, "}");
}

static void write_meta(struct render *r, vt__buf *m, const struct columns *c, const size_t *npoints)
{
    const struct section *sec = c->sec;
    size_t nsec = c->nsec, nxs = c->nxs;
    const vt__snapshot_data *s = r->s;
    const vt_timeline *tl = r->tl;
    vt__put_printf(m, "{\"v\":1,\"nAxis\":%" PRIu32 ",\"nLife\":%zu,\"nStack\":%" PRIu32 ",\"nXs\":%zu,\"t0\":%" PRIu64
                   ",\"checked\":%s,\"tq\":%" PRIu64 ",\"sizeShift\":%u,\"addrShift\":%u,",
                   r->naxis, r->nl + r->nx, r->nnodes, nxs, r->t0, r->checked ? "true" : "false",
                   c->tq, c->size_shift, c->addr_shift);
    /* The page devices after the CUDA ones: external storages, by device
     * value (-1: the host, as `vramtrace check` says "on host"). */
    vt__put_printf(m, "\"nExt\":%zu,\"extKinds\":[", r->nx);
    for (int k = 0; k < r->nxkinds; k++) {
        if (r->xkind_dev[k] < 0)
            vt__put_printf(m, "%s\"CPU\"", k ? "," : "");
        else
            vt__put_printf(m, "%s\"cuda:%d (external)\"", k ? "," : "", r->xkind_dev[k]);
    }
    vt__put_str(m, "],\"info\":{");
    json_key_str(m, "command", vt__snapshot_string(s, s->meta.command_line));
    vt__put_str(m, ",");
    json_key_str(m, "host", vt__snapshot_string(s, s->meta.host));
    vt__put_str(m, ",");
    json_key_str(m, "version", vt__snapshot_string(s, s->meta.library_version));
    vt__put_str(m, ",");
    json_key_str(m, "config", vt__snapshot_string(s, s->meta.config));
    vt__put_printf(m, ",\"pid\":%" PRId32 ",\"rank\":%" PRId32 ",\"snapshotTime\":%" PRIu64
                   ",\"eventsRecorded\":%" PRIu64 ",\"eventsOverwritten\":%" PRIu64
                   ",\"gaps\":%zu,\"freeUnseen\":%zu},",
                   s->meta.pid, s->meta.rank,
                   s->meta.snapshot_time_ns > r->t0 ? s->meta.snapshot_time_ns - r->t0 : 0,
                   s->meta.events_recorded, s->meta.events_overwritten, tl->ngaps,
                   tl->nfree_unseen);

    vt__put_str(m, "\"devices\":[");
    for (size_t d = 0; d < tl->ndevices; d++) {
        uint32_t name = 0;
        uint64_t total = 0, true_peak = 0;
        for (size_t i = 0; i < s->ndevices; i++)
            if (s->devices[i].ordinal == tl->devices[d].device) {
                name = use_str(r, s->devices[i].name);
                total = s->devices[i].total_bytes;
                true_peak = s->devices[i].peak_allocated;
            }
        vt__put_printf(m, "%s{\"ord\":%d,\"name\":%" PRIu32 ",\"total\":%" PRIu64 ",\"npoints\":%zu",
                       d ? "," : "", tl->devices[d].device, name, total, npoints[d]);
        /* the allocator's own peak (format 1.2), whatever the window kept */
        if (s->meta.flags & VT_META_DEVICE_PEAKS)
            vt__put_printf(m, ",\"truePeak\":%" PRIu64 "}", true_peak);
        else
            vt__put_str(m, ",\"truePeak\":null}");
    }
    /* Memory the cache did not serve (uncached.h): [kind, size, page stack
     * node, alive, device, ns from t0 at its allocation, at its release or -1]. */
    vt__put_str(m, "],\"uncached\":[");
    for (size_t k = 0; k < tl->nuncached; k++) {
        const vt_uncached *u = &tl->uncached[k];
        vt__put_printf(m, "%s[\"%s\",%" PRIu64 ",%" PRIu32 ",%d,%d,%" PRIu64 ",%" PRId64 "]",
                       k ? "," : "", vt__uncached_kind_name((enum vt_uncached_kind)u->kind), u->size,
                       page_node(r, u->alloc_stack), u->alive ? 1 : 0, u->device,
                       u->alloc_time_ns > r->t0 ? u->alloc_time_ns - r->t0 : 0,
                       u->alive ? (int64_t)-1
                                : (int64_t)(u->free_time_ns > r->t0 ? u->free_time_ns - r->t0 : 0));
    }
    vt__put_str(m, "],\"marks\":[");
    for (size_t k = 0; k < tl->nmarks; k++) {
        uint64_t p1 = axis_p1(r, tl->marks[k].event);
        vt__put_printf(m, "%s[%" PRId64 ",%" PRIu32 "]", k ? "," : "", (int64_t)p1 - 1,
                       use_str(r, tl->marks[k].label));
    }
    vt__put_str(m, "],\"streams\":[");
    for (uint32_t i = 0; i < r->nstreams; i++)
        vt__put_printf(m, "%s\"0x%" PRIx64 "\"", i ? "," : "", r->streams[i]);
    vt__put_str(m, "],\"frames\":{\"fn\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].function));
    vt__put_str(m, "],\"file\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].file));
    vt__put_str(m, "],\"line\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", s->frames[r->frames[i]].line);
    vt__put_str(m, "],\"def\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", vt__frame_def_line(s, &s->frames[r->frames[i]]));
    /* 1: the program's own code (vt__frame_is_user_code), as the text views
     * lead with it */
    vt__put_str(m, "],\"user\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%d", i ? "," : "", vt__frame_is_user_code(s, &s->frames[r->frames[i]]));
    vt__put_str(m, "],\"mod\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu32, i ? "," : "", use_str(r, s->frames[r->frames[i]].module));
    vt__put_str(m, "],\"off\":[");
    for (uint32_t i = 0; i < r->nframes; i++)
        vt__put_printf(m, "%s%" PRIu64, i ? "," : "", (uint64_t)(s->frames[r->frames[i]].module_offset & ((1ull << 53) - 1)));
    vt__put_str(m, "]},\"findings\":[");
    vt__put_bytes(m, r->findings.p, r->findings.n);
    vt__put_str(m, "],\"replay\":");
    write_overlay(r, m);
    write_oom(r, m);
    vt__put_printf(m, ",\"deflated\":%s,\"sec\":[", c->deflated ? "true" : "false");
    for (size_t i = 0; i < nsec; i++) {
        size_t end = i + 1 < nsec ? sec[i + 1].start : c->raw_bytes;
        vt__put_printf(m, "%s[\"%s\",%zu,%d]", i ? "," : "", sec[i].name, end - sec[i].start, sec[i].rle);
    }
    /* Strings last: everything above may have added some. */
    vt__put_str(m, "],\"strings\":[\"\"");
    for (uint32_t i = 1; i < r->nstrs; i++) {
        vt__put_str(m, ",");
        vt__put_json_str(m, vt__snapshot_string(s, r->strs[i]), 1);
    }
    vt__put_str(m, "]}");
}

/* ---- the page ------------------------------------------------------------- */

/* Copy the template, replacing each @@VT_NAME@@ marker. */
static int write_page(FILE *out, const struct render *r, const vt__buf *meta, const vt__buf *blob)
{
    const char *t = vt__viz_template_html;
    while (*t) {
        const char *m = strstr(t, "@@VT_");
        size_t n = m ? (size_t)(m - t) : strlen(t);
        if (n && fwrite(t, 1, n, out) != n)
            return -EIO;
        if (!m)
            break;
        const char *end = strstr(m + 5, "@@");
        if (!end)
            return -EINVAL;
        size_t klen = (size_t)(end - (m + 5));
        const char *key = m + 5;
        int rc = 0;
        if (klen == 5 && !strncmp(key, "TITLE", 5)) {
            const char *cmd = vt__snapshot_string(r->s, r->s->meta.command_line);
            char title[160];
            snprintf(title, sizeof title, "%s", cmd[0] ? cmd : "snapshot");
            rc = vt__write_html_text(out, title);
        } else if (klen == 5 && !strncmp(key, "STYLE", 5)) {
            rc = fputs(vt__viz_style_css, out) < 0 ? -EIO : 0;
        } else if (klen == 6 && !strncmp(key, "SCRIPT", 6)) {
            rc = fputs(vt__viz_ticks_js, out) < 0 || fputs(vt__viz_sweep_js, out) < 0 ||
                 fputs(vt__viz_timeline_js, out) < 0 ? -EIO : 0;
        } else if (klen == 4 && !strncmp(key, "META", 4)) {
            rc = fwrite(meta->p, 1, meta->n, out) == meta->n ? 0 : -EIO;
        } else if (klen == 4 && !strncmp(key, "DATA", 4)) {
            rc = vt__write_base64(out, blob->p, blob->n);
        } else {
            return -EINVAL;
        }
        if (rc)
            return rc;
        t = end + 2;
    }
    return ferror(out) ? -EIO : 0;
}

static void render_free(struct render *r)
{
    free(r->xs);
    free(r->xlt);
    free(r->axis_of);
    free(r->order);
    free(r->rank);
    free(r->name);
    free(r->node_map);
    free(r->frame_map);
    free(r->frames);
    free(r->str_map);
    free(r->strs);
    free(r->streams);
    free(r->skeys);
    free(r->svals);
    vt__buf_free(&r->findings);
}

int vt__viz_render(FILE *out, const vt__snapshot_data *s, const vt_timeline *tl,
                   const vt_check_report *report, vt__viz_stats *stats,
                   char *err, size_t errlen)
{
    return vt__viz_render_overlay(out, s, tl, report, NULL, stats, err, errlen);
}

int vt__viz_render_overlay(FILE *out, const vt__snapshot_data *s, const vt_timeline *tl,
                           const vt_check_report *report, const vt__viz_overlay *overlay,
                           vt__viz_stats *stats, char *err, size_t errlen)
{
    return vt__viz_render_page(out, s, tl, report, overlay, NULL, stats, err, errlen);
}

int vt__viz_render_page(FILE *out, const vt__snapshot_data *s, const vt_timeline *tl,
                        const vt_check_report *report, const vt__viz_overlay *overlay,
                        const char *oom_json, vt__viz_stats *stats, char *err, size_t errlen)
{
    struct render r = { .s = s, .tl = tl, .overlay = overlay, .oom_json = oom_json };
    vt__buf blob = { 0 }, meta = { 0 };
    int rc = 0;
    size_t nl = tl->nlifetimes;
    r.nl = nl;
    if (vt__check_list_external(s, &r.xs, &r.nx, err, errlen) != 0)
        return -ENOMEM;
    size_t np = nl + r.nx;   /* lifetimes on the page */

    if (s->nevents >= NONE || np >= NONE) {
        free(r.xs);
        return vt__errf(err, errlen, -EOVERFLOW, "viz: too many events or allocations to render");
    }
    r.t0 = tl->first_time_ns;
    r.checked = report != NULL;
    size_t nstreams_max = nl * 2 + tl->nstreams + 2;
    size_t scap = 64;
    while (scap < nstreams_max * 2 && scap < ((size_t)1 << 40))
        scap *= 2;
    r.smask = scap - 1;
    r.axis_of = calloc(s->nevents + 1, sizeof *r.axis_of);
    r.order = calloc(np + 1, sizeof *r.order);
    r.rank = calloc(np + 1, sizeof *r.rank);
    r.name = calloc(np + 1, sizeof *r.name);
    r.xlt = calloc(r.nx + 1, sizeof *r.xlt);
    r.node_map = calloc(s->nstack_nodes + 1, sizeof *r.node_map);
    r.frame_map = calloc(s->nframes + 1, sizeof *r.frame_map);
    r.frames = calloc(s->nframes + 1, sizeof *r.frames);
    r.str_map = calloc(s->nstrings + 1, sizeof *r.str_map);
    r.strs = calloc(s->nstrings + 1, sizeof *r.strs);
    r.streams = calloc(nstreams_max, sizeof *r.streams);
    r.skeys = calloc(scap, sizeof *r.skeys);
    r.svals = malloc(scap * sizeof *r.svals);
    if (!r.axis_of || !r.order || !r.rank || !r.name || !r.node_map || !r.frame_map || !r.frames ||
        !r.str_map || !r.strs || !r.streams || !r.skeys || !r.svals || !r.xlt) {
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    memset(r.svals, 0xff, scap * sizeof *r.svals);
    r.nstrs = 1;   /* page string 0 is "" */
    for (int i = 0; i < 256; i++)
        r.dev_index[i] = -1;
    for (size_t d = 0; d < tl->ndevices; d++) {
        int o = tl->devices[d].device;
        if (o >= -128 && o < 128)
            r.dev_index[o + 128] = (int)d;
    }

    /* External storages as lifetimes: from their STORAGE_EXTERNAL to their
     * free (found by seq), on a page device per device value. */
    for (size_t k = 0; k < r.nx; k++) {
        const vt_check_storage *x = &r.xs[k];
        uint32_t rel_ev = x->freed ? event_by_seq(s, x->free_seq) : NONE;
        r.xlt[k] = (vt_lifetime){ .addr = x->addr, .size = x->bytes, .req_size = x->bytes,
                                  .alloc_event = x->alloc_event, .start_event = x->alloc_event,
                                  .release_event = rel_ev, .alloc_seq = x->alloc_seq,
                                  .alloc_time_ns = x->alloc_time_ns, .alloc_stack = x->alloc_stack,
                                  .free_stack = x->free_stack, .device = x->device,
                                  .flags = x->freed ? 0 : VT_LT_ALIVE };
        int known = 0;
        for (int j = 0; j < r.nxkinds; j++)
            known |= r.xkind_dev[j] == x->device;
        if (!known && r.nxkinds < (int)(sizeof r.xkind_dev / sizeof r.xkind_dev[0]))
            r.xkind_dev[r.nxkinds++] = x->device;
    }

    build_axis(&r);
    build_order(&r);
    bind_names(&r);

    /* Stacks: the allocations' and the findings', with their callers. */
    for (size_t i = 0; i < nl; i++) {
        keep_stack(&r, tl->lifetimes[i].alloc_stack);
        keep_stack(&r, tl->lifetimes[i].free_stack);
    }
    for (size_t i = 0; i < r.nx; i++) {
        keep_stack(&r, r.xlt[i].alloc_stack);
        keep_stack(&r, r.xlt[i].free_stack);
    }
    for (size_t i = 0; i < tl->nuncached; i++)
        keep_stack(&r, tl->uncached[i].alloc_stack);
    r.nnodes = 1;
    for (size_t i = 1; i < s->nstack_nodes; i++) {
        if (!r.node_map[i])
            continue;
        r.node_map[i] = r.nnodes++;
        uint32_t f = s->stack_nodes[i].frame;
        if (f < s->nframes && !r.frame_map[f]) {
            r.frames[r.nframes] = f;
            r.frame_map[f] = ++r.nframes;
        }
    }
    if (s->nstack_nodes == 0)
        r.nnodes = 0;

    if (report && report->nfindings) {
        /* Findings by cause, as `vramtrace check` groups them. */
        uint32_t *group = malloc(report->nfindings * sizeof *group);
        if (!group || vt__check_report_groups(report, group) < 0) {
            free(group);
            rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
            goto out;
        }
        for (size_t i = 0; i < report->nfindings; i++)
            add_check_finding(&r, &report->findings[i], group[i]);
        free(group);
    }
    add_event_findings(&r);

    struct columns cols = { .blob = &blob };
    size_t ntmp = s->nevents > np ? s->nevents : np;
    cols.tmp = malloc((ntmp + 1) * sizeof *cols.tmp);
    size_t *npoints = calloc(tl->ndevices + 1, sizeof *npoints);
    if (!cols.tmp || !npoints) {
        free(cols.tmp);
        free(npoints);
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    write_columns(&r, &cols, npoints);
    cols.raw_bytes = blob.n;
    /* Deflated when zlib is there: the page inflates it natively
     * (DecompressionStream), faster than a browser parses the bytes saved. */
    vt__buf zblob = { 0 };
    cols.deflated = vt__deflate(&zblob, blob.p, blob.n) == 0 && !zblob.oom;
    if (cols.deflated) {
        vt__buf_free(&blob);
        blob = zblob;
    } else {
        vt__buf_free(&zblob);
    }
    write_meta(&r, &meta, &cols, npoints);
    free(cols.tmp);
    free(npoints);
    if (blob.oom || meta.oom || r.findings.oom) {
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    long start = ftell(out);
    rc = write_page(out, &r, &meta, &blob);
    if (rc == 0 && fflush(out) != 0)
        rc = -EIO;
    if (rc) {
        vt__errf(err, errlen, rc, "viz: %s", rc == -EIO ? "write failed" : "bad page template");
        goto out;
    }
    if (stats) {
        long end = ftell(out);
        stats->html_bytes = start >= 0 && end >= start ? (size_t)(end - start) : 0;
        stats->data_bytes = blob.n;
        stats->meta_bytes = meta.n;
        stats->nlifetimes = nl;
        stats->nexternal = r.nx;
        stats->naxis = r.naxis;
        stats->nfindings = r.nfindings;
    }
out:
    vt__buf_free(&blob);
    vt__buf_free(&meta);
    render_free(&r);
    return rc;
}
