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
 *
 * This file lays the page out (the x axis, the stacking order, the names,
 * the stacks kept) and writes it from the template; the findings are
 * render_findings.c's, the columns render_columns.c's, the JSON metadata
 * render_meta.c's, their shared state render_internal.h's.
 */
#include "bsearch.h"
#include "errbuf.h"
#include "grow.h"
#include "render.h"
#include "render_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "outfile.h"

extern const char vt__viz_template_html[];
extern const char vt__viz_timeline_js[];
extern const char vt__viz_ticks_js[];
extern const char vt__viz_sweep_js[];
extern const char vt__viz_style_css[];

/* Keep stack `id` and its callers. Walks stop at a node already kept, so the
 * total work is linear in the nodes kept. */
void vt__viz_keep_stack(struct render *r, uint32_t id)
{
    size_t guard = 0;
    while (id > 0 && id < r->s->nstack_nodes && !r->node_map[id] && guard++ < r->s->nstack_nodes) {
        r->node_map[id] = 1;   /* numbered later, in snapshot order */
        id = r->s->stack_nodes[id].parent;
    }
}

/* ---- the x axis and the stacking order ---------------------------------- */

int vt__viz_on_axis_kind(uint8_t kind)
{
    switch (kind) {
    case VT_EV_ALLOC: case VT_EV_FREE_REQUESTED: case VT_EV_FREE_COMPLETED:
    case VT_EV_SEGMENT_ALLOC: case VT_EV_SEGMENT_FREE: case VT_EV_OOM: case VT_EV_MARK:
        return 1;
    default:
        return 0;
    }
}

int vt__viz_keep_pause(struct render *r, const vt__event *e)
{
    if (e->kind != VT_EV_PAUSE)
        return 0;
    uint64_t *p = vt__grow_push((void **)&r->pauses, &r->cap_pauses, &r->npauses,
                                2 * sizeof *p);
    if (!p)
        return -ENOMEM;
    p[0] = vt__pause_start(e);
    p[1] = e->time_ns;
    return 0;
}

static void put_axis(struct render *r, uint32_t ev)
{
    if (ev < r->nevents)
        r->axis_of[ev] = 1;
}

static void build_axis(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    const vt__timeline *tl = r->tl;
    for (size_t i = 0; i < s->nevents; i++)
        r->axis_of[i] = vt__viz_on_axis_kind(s->events[i].kind) ? 1 : 0;
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

static const struct render *g_sort_r; /* qsort has no context argument */

static int cmp_alloc_order(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const vt__lifetime *lx = lt_at(g_sort_r, x), *ly = lt_at(g_sort_r, y);
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

int vt__viz_cmp_rename(const void *a, const void *b)
{
    const struct vt__viz_rename *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->ev < y->ev ? -1 : x->ev > y->ev;
}

uint32_t vt__viz_latest_name(const struct vt__viz_rename *rn, size_t n, uint64_t id, uint32_t dflt)
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
void vt__viz_bind_name(struct render *r, uint8_t *by_view, size_t li, uint32_t name, int view)
{
    if (r->name[li] == 0 || (!view && by_view && by_view[li])) {
        r->name[li] = name;
        if (by_view)
            by_view[li] = (uint8_t)view;
    }
}

static void bind_names(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    size_t nrn = 0;
    for (size_t i = 0; i < s->nevents; i++)
        nrn += s->events[i].kind == VT_EV_TENSOR_NAME;
    /* Without memory for the renames, tensors keep their first names. */
    struct vt__viz_rename *rn = nrn ? malloc(nrn * sizeof *rn) : NULL;
    if (!rn)
        nrn = 0;
    for (size_t i = 0, k = 0; k < nrn && i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_TENSOR_NAME)
            rn[k++] = (struct vt__viz_rename){ s->events[i].aux, (uint32_t)i, s->events[i].str };
    if (nrn > 1)
        qsort(rn, nrn, sizeof *rn, vt__viz_cmp_rename);

    uint8_t *by_view = calloc(r->tl->nlifetimes ? r->tl->nlifetimes : 1, 1);
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind != VT_EV_TENSOR_NEW)
            continue;
        uint32_t name = nrn ? vt__viz_latest_name(rn, nrn, e->aux, e->str) : e->str;
        if (name == 0)
            continue;
        const vt__lifetime *lt = vt__timeline_find(r->tl, e->addr, (uint32_t)i);
        if (!lt)
            continue;
        vt__viz_bind_name(r, by_view, (size_t)(lt - r->tl->lifetimes), name,
                          VT_TENSOR_BASE(e->aux2) != 0);
    }
    free(by_view);
    free(rn);
    /* External storages: their owner's latest name, as the checker names it. */
    for (size_t k = 0; k < r->nx; k++)
        r->name[r->nl + k] = r->xs[k].owner_name;
}

/* ---- the page ------------------------------------------------------------- */

/* What the page puts in place of each @@VT_NAME@@ marker of the template. */
struct page_parts {
    const struct render *r;
    const vt__buf *meta, *blob;
};

static int fill_page(FILE *out, const char *key, size_t klen, void *ctx)
{
    const struct page_parts *p = ctx;
    if (klen == 5 && !strncmp(key, "TITLE", 5)) {
        const char *cmd = vt__snapshot_string(p->r->s, p->r->s->meta.command_line);
        char title[160];
        snprintf(title, sizeof title, "%s", cmd[0] ? cmd : "snapshot");
        return vt__write_html_text(out, title);
    }
    if (klen == 5 && !strncmp(key, "STYLE", 5))
        return fputs(vt__viz_style_css, out) < 0 ? -EIO : 0;
    if (klen == 6 && !strncmp(key, "SCRIPT", 6))
        return fputs(vt__viz_ticks_js, out) < 0 || fputs(vt__viz_sweep_js, out) < 0 ||
               fputs(vt__viz_timeline_js, out) < 0 ? -EIO : 0;
    if (klen == 4 && !strncmp(key, "META", 4))
        return fwrite(p->meta->p, 1, p->meta->n, out) == p->meta->n ? 0 : -EIO;
    if (klen == 4 && !strncmp(key, "DATA", 4))
        return vt__write_base64(out, p->blob->p, p->blob->n);
    return -EINVAL;
}

void vt__viz_render_free(struct render *r)
{
    vt__u64map_free(&r->stream_at);
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
    free(r->pauses);
    vt__viz_pools_free(r);
    vt__buf_free(&r->findings);
}

int vt__viz_render_init(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    r->node_map = calloc(s->nstack_nodes + 1, sizeof *r->node_map);
    r->frame_map = calloc(s->nframes + 1, sizeof *r->frame_map);
    r->frames = calloc(s->nframes + 1, sizeof *r->frames);
    r->str_map = calloc(s->nstrings + 1, sizeof *r->str_map);
    r->strs = calloc(s->nstrings + 1, sizeof *r->strs);
    if (!r->node_map || !r->frame_map || !r->frames || !r->str_map || !r->strs ||
        vt__u64map_init(&r->stream_at, 64))
        return -ENOMEM;
    r->nstrs = 1;   /* page string 0 is "" */
    return 0;
}

void vt__viz_index_devices(struct render *r)
{
    for (int i = 0; i < 256; i++)
        r->dev_index[i] = -1;
    for (size_t d = 0; d < r->tl->ndevices; d++) {
        int o = r->tl->devices[d].device;
        if (o >= -128 && o < 128)
            r->dev_index[o + 128] = (int)d;
    }
}

void vt__viz_number_stacks(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    r->nnodes = 1;
    for (size_t i = 1; i < s->nstack_nodes; i++) {
        if (!r->node_map[i])
            continue;
        r->node_map[i] = r->nnodes++;
        uint32_t f = s->stack_nodes[i].frame;
        if (f < s->nframes && !r->frame_map[f]) {
            r->frames[r->nframes] = f;
            r->frame_map[f] = ++r->nframes;
        }
    }
    if (s->nstack_nodes == 0)
        r->nnodes = 0;
}

int vt__viz_finish_page(FILE *out, struct render *r, struct columns *c, const size_t *npoints,
                        vt__viz_stats *stats, char *err, size_t errlen)
{
    vt__buf meta = { 0 };
    vt__buf *blob = c->blob;
    int rc = 0;
    c->raw_bytes = blob->n;
    /* Deflated when zlib is there: the page inflates it natively
     * (DecompressionStream), faster than a browser parses the bytes saved. */
    vt__buf zblob = { 0 };
    c->deflated = vt__deflate(&zblob, blob->p, blob->n) == 0 && !zblob.oom;
    if (c->deflated) {
        vt__buf_free(blob);
        *blob = zblob;
    } else {
        vt__buf_free(&zblob);
    }
    vt__viz_write_meta(r, &meta, c, npoints);
    if (blob->oom || meta.oom || r->findings.oom || r->oom) {
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    long start = ftell(out);
    rc = vt__write_template(out, vt__viz_template_html, fill_page,
                            &(struct page_parts){ .r = r, .meta = &meta, .blob = blob });
    if (rc == 0 && fflush(out) != 0)
        rc = -EIO;
    if (rc) {
        vt__errf(err, errlen, rc, "viz: %s", rc == -EIO ? "write failed" : "bad page template");
        goto out;
    }
    if (stats) {
        long end = ftell(out);
        stats->html_bytes = start >= 0 && end >= start ? (size_t)(end - start) : 0;
        stats->data_bytes = blob->n;
        stats->meta_bytes = meta.n;
        stats->nlifetimes = r->nl;
        stats->nexternal = r->nx;
        stats->naxis = r->naxis;
        stats->nfindings = r->nfindings;
    }
out:
    vt__buf_free(&meta);
    return rc;
}

int vt__viz_render(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                   const vt__check_report *report, vt__viz_stats *stats,
                   char *err, size_t errlen)
{
    return vt__viz_render_overlay(out, s, tl, report, NULL, stats, err, errlen);
}

int vt__viz_render_overlay(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                           const vt__check_report *report, const vt__viz_overlay *overlay,
                           vt__viz_stats *stats, char *err, size_t errlen)
{
    return vt__viz_render_page(out, s, tl, report, overlay, NULL, stats, err, errlen);
}

int vt__viz_render_page(FILE *out, const vt__snapshot_data *s, const vt__timeline *tl,
                        const vt__check_report *report, const vt__viz_overlay *overlay,
                        const vt__viz_oom *oom, vt__viz_stats *stats, char *err,
                        size_t errlen)
{
    struct render r = { .s = s, .tl = tl, .overlay = overlay, .explained = oom,
                        .nevents = s->nevents };
    vt__buf blob = { 0 };
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
    r.check = report;
    r.axis_of = calloc(s->nevents + 1, sizeof *r.axis_of);
    r.order = calloc(np + 1, sizeof *r.order);
    r.rank = calloc(np + 1, sizeof *r.rank);
    r.name = calloc(np + 1, sizeof *r.name);
    r.xlt = calloc(r.nx + 1, sizeof *r.xlt);
    if (vt__viz_render_init(&r) || !r.axis_of || !r.order || !r.rank || !r.name || !r.xlt) {
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    vt__viz_index_devices(&r);

    /* External storages as lifetimes: from their STORAGE_EXTERNAL to their
     * free (found by seq), on a page device per device value. */
    for (size_t k = 0; k < r.nx; k++) {
        const vt__check_storage *x = &r.xs[k];
        uint32_t rel_ev = x->freed ? event_by_seq(s, x->free_seq) : NONE;
        vt__viz_external_lifetime(&r, k, rel_ev);
    }

    build_axis(&r);
    build_order(&r);
    bind_names(&r);
    for (size_t i = 0; i < s->nevents; i++)
        if (vt__viz_keep_pause(&r, &s->events[i]) < 0) {
            rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
            goto out;
        }

    /* Stacks: the allocations' and the findings', with their callers. */
    for (size_t i = 0; i < nl; i++) {
        vt__viz_keep_stack(&r, tl->lifetimes[i].alloc_stack);
        vt__viz_keep_stack(&r, tl->lifetimes[i].free_stack);
    }
    for (size_t i = 0; i < r.nx; i++) {
        vt__viz_keep_stack(&r, r.xlt[i].alloc_stack);
        vt__viz_keep_stack(&r, r.xlt[i].free_stack);
    }
    for (size_t i = 0; i < tl->npassthrough; i++)
        vt__viz_keep_stack(&r, tl->passthrough[i].alloc_stack);
    vt__viz_number_stacks(&r);

    if (report && report->nfindings) {
        /* Findings by cause, as `vramtrace check` groups them. */
        uint32_t *group = malloc(report->nfindings * sizeof *group);
        if (!group || vt__check_report_groups(report, s, group) < 0) {
            free(group);
            rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
            goto out;
        }
        for (size_t i = 0; i < report->nfindings; i++)
            vt__viz_add_check_finding(&r, &report->findings[i], group[i],
                                      vt__viz_finding_pos(&r, &report->findings[i]));
        free(group);
    }
    vt__viz_add_event_findings(&r);

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
    vt__viz_write_columns(&r, &cols, npoints);
    if (vt__viz_pools_begin(&r)) {
        free(cols.tmp);
        free(npoints);
        rc = vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->nevents; i++)
        vt__viz_pools_event(&r, (uint32_t)i, &s->events[i]);
    vt__viz_pools_write(&r, &cols);
    free(cols.tmp);
    cols.tmp = NULL;
    rc = vt__viz_finish_page(out, &r, &cols, npoints, stats, err, errlen);
    free(npoints);
out:
    vt__buf_free(&blob);
    vt__viz_render_free(&r);
    return rc;
}

void vt__viz_external_lifetime(struct render *r, size_t k, uint32_t release_event)
{
    const vt__check_storage *x = &r->xs[k];
    r->xlt[k] = (vt__lifetime){ .addr = x->addr, .size = x->bytes, .req_size = x->bytes,
                                .alloc_event = x->alloc_event, .start_event = x->alloc_event,
                                .release_event = release_event, .alloc_seq = x->alloc_seq,
                                .alloc_time_ns = x->alloc_time_ns, .alloc_stack = x->alloc_stack,
                                .free_stack = x->free_stack, .device = x->device,
                                .flags = x->freed ? 0 : VT_LT_ALIVE };
    int known = 0;
    for (int j = 0; j < r->nxkinds; j++)
        known |= r->xkind_dev[j] == x->device;
    if (!known && r->nxkinds < (int)(sizeof r->xkind_dev / sizeof r->xkind_dev[0]))
        r->xkind_dev[r->nxkinds++] = x->device;
}

int vt__viz_write_file(const char *path, vt__viz_page_writer write, void *ctx, char *err,
                       size_t errlen)
{
    char tmp[4096];
    FILE *f = vt__outfile_open(path, tmp, sizeof tmp, err, errlen);
    if (!f)
        return -EIO;
    int rc = write(f, ctx, err, errlen);
    int crc = vt__outfile_close(f, rc == 0, tmp, path, 0, err, errlen);
    return rc ? rc : crc;
}
