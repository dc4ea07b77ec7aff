/*
 * viz/render_columns.c - the binary columns of the HTML page: per axis
 * event its time, per lifetime (in page order) its position, end, size,
 * requested size, stacks, name, stream, device, address and flags, the
 * external storages' uses, the stack nodes kept and the reserved curves;
 * varints, deltas and run lengths where they are smaller.
 */
#include "grow.h"
#include "render_internal.h"

/* Page device of a lifetime on device value dv: the timeline's device
 * index, or, for an external storage, one per device value after them. */
uint64_t vt__viz_page_device(const struct render *r, int dv, int external)
{
    if (external) {
        for (int k = 0; k < r->nxkinds; k++)
            if (r->xkind_dev[k] == dv)
                return r->tl->ndevices + (uint64_t)k;
        return r->tl->ndevices + (uint64_t)(r->nxkinds ? r->nxkinds - 1 : 0);
    }
    int d = r->dev_index[dv + 128];
    return d < 0 ? 0 : (uint64_t)d;
}

static uint64_t page_device(const struct render *r, size_t i)
{
    return vt__viz_page_device(r, lt_at(r, i)->device, i >= r->nl);
}

/* Streams are numbered in the order the page first names them. */
uint32_t vt__viz_stream_index(struct render *r, uint64_t v)
{
    uint32_t i = vt__u64map_get(&r->stream_at, v);
    if (i != VT__U64MAP_NONE)
        return i;
    if (vt__grow((void **)&r->streams, &r->cap_streams, (size_t)r->nstreams + 1,
                 sizeof *r->streams) ||
        vt__u64map_put(&r->stream_at, v, r->nstreams)) {
        r->oom = 1;
        return 0;
    }
    r->streams[r->nstreams] = v;
    return r->nstreams++;
}

void vt__viz_col_begin(struct columns *c, const char *name, int rle)
{
    c->sec[c->nsec].name = name;
    c->sec[c->nsec].start = c->blob->n;
    c->sec[c->nsec].rle = rle;
    c->nsec++;
}

size_t vt__viz_varint_len(uint64_t v)
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
void vt__viz_put_column(struct columns *c, const char *name, const uint64_t *v, size_t n)
{
    size_t plain = 0, rle = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && v[j] == v[i])
            j++;
        for (size_t k = i; k < j; k++)
            plain += vt__viz_varint_len(v[k]);
        rle += vt__viz_varint_len(v[i]) + vt__viz_varint_len(j - i);
        i = j;
    }
    vt__viz_col_begin(c, name, rle < plain);
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

unsigned vt__viz_common_shift(uint64_t acc)
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

void vt__viz_write_stacks(struct render *r, struct columns *c)
{
    const vt__snapshot_data *s = r->s;
    vt__viz_col_begin(c, "stk", 0);
    for (size_t i = 0; i < s->nstack_nodes; i++) {
        if (i && !r->node_map[i])
            continue;
        const vt__stack_node *nd = &s->stack_nodes[i];
        vt__put_varint(c->blob, i ? page_node(r, nd->parent) : 0);
        vt__put_varint(c->blob, i && nd->frame < s->nframes ? r->frame_map[nd->frame] - 1 : 0);
    }
}

void vt__viz_write_columns(struct render *r, struct columns *c, size_t *npoints_total)
{
    const vt__snapshot_data *s = r->s;
    const vt__timeline *tl = r->tl;
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
    vt__viz_put_column(c, "ev_dt", v, k);

    int64_t last = 0;
    for (k = 0; k < n; k++) {
        int64_t p1 = (int64_t)axis_p1(r, band_start(r, lt_at(r, r->order[k])));
        v[k] = vt__zigzag(p1 - last);
        last = p1;
    }
    vt__viz_put_column(c, "l_pos", v, n);
    for (k = 0; k < n; k++) {
        const vt__lifetime *l = lt_at(r, r->order[k]);
        uint64_t p1 = axis_p1(r, band_start(r, l));
        uint64_t e1 = axis_p1(r, l->release_event);
        /* release position = value + p1 - 2; 0 = never released */
        v[k] = e1 == 0 ? 0 : (e1 >= p1 ? e1 - p1 + 1 : 1);
    }
    vt__viz_put_column(c, "l_end", v, n);
    uint64_t acc = 0, aacc = 0;
    for (k = 0; k < n; k++) {
        acc |= lt_at(r, k)->size;
        aacc |= lt_at(r, k)->addr;
    }
    c->size_shift = vt__viz_common_shift(acc);
    c->addr_shift = vt__viz_common_shift(aacc);
    for (k = 0; k < n; k++)
        v[k] = lt_at(r, r->order[k])->size >> c->size_shift;
    vt__viz_put_column(c, "l_size", v, n);
    for (k = 0; k < n; k++) {
        const vt__lifetime *l = lt_at(r, r->order[k]);
        v[k] = l->req_size && l->req_size <= l->size ? l->size - l->req_size + 1 : 0;
    }
    vt__viz_put_column(c, "l_req", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_node(r, lt_at(r, r->order[k])->alloc_stack);
    vt__viz_put_column(c, "l_site", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_node(r, lt_at(r, r->order[k])->free_stack);
    vt__viz_put_column(c, "l_fstk", v, n);
    for (k = 0; k < n; k++)
        v[k] = use_str(r, r->name[r->order[k]]);
    vt__viz_put_column(c, "l_name", v, n);
    for (k = 0; k < n; k++)
        v[k] = vt__viz_stream_index(r, lt_at(r, r->order[k])->stream);
    vt__viz_put_column(c, "l_stream", v, n);
    for (k = 0; k < n; k++)
        v[k] = page_device(r, r->order[k]);
    vt__viz_put_column(c, "l_dev", v, n);
    uint64_t pa = 0;
    for (k = 0; k < n; k++) {
        uint64_t a = lt_at(r, r->order[k])->addr >> c->addr_shift;
        v[k] = vt__zigzag((int64_t)(a - pa));
        pa = a;
    }
    vt__viz_put_column(c, "l_addr", v, n);
    for (k = 0; k < n; k++) {
        /* Bit 7 of the page: outside an observed framework's pool (a
         * segment it reserved, a library's own buffer), not allocated. */
        uint32_t fl = lt_at(r, r->order[k])->flags;
        v[k] = (fl & 0x7f) | (fl & VT_LT_OUTSIDE_POOL ? 0x80 : 0);
    }
    vt__viz_put_column(c, "l_flags", v, n);

    vt__viz_col_begin(c, "l_xs", 0);
    size_t lastk = 0;
    for (k = 0; k < n; k++) {
        const vt__lifetime *l = lt_at(r, r->order[k]);
        if (!l->nstreams || l->first_stream + (size_t)l->nstreams > tl->nstreams)
            continue;
        vt__put_varint(blob, k - lastk);
        lastk = k;
        vt__put_varint(blob, l->nstreams);
        for (uint32_t j = 0; j < l->nstreams; j++)
            vt__put_varint(blob, vt__viz_stream_index(r, tl->streams[l->first_stream + j]));
        c->nxs++;
    }
    /* External storages, in page order: last use (time quantum + 1, 0:
     * never used), uses, tensors bound. */
    size_t nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl) {
            const vt__check_storage *x = &r->xs[r->order[k] - r->nl];
            v[nx++] = x->last_use_seq ? rel(r, x->last_use_time_ns) / c->tq + 1 : 0;
        }
    vt__viz_put_column(c, "x_use", v, nx);
    nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl)
            v[nx++] = r->xs[r->order[k] - r->nl].nuses;
    vt__viz_put_column(c, "x_nuse", v, nx);
    nx = 0;
    for (k = 0; k < n; k++)
        if (r->order[k] >= r->nl)
            v[nx++] = r->xs[r->order[k] - r->nl].ntensors;
    vt__viz_put_column(c, "x_nt", v, nx);
    vt__viz_write_stacks(r, c);
    /* Reserved bytes: only the points where it changes (the timeline has a
     * point for every allocation too). */
    vt__viz_col_begin(c, "curves", 0);
    for (size_t d = 0; d < tl->ndevices; d++) {
        uint64_t lp = 0, lv = 0;
        size_t kept = 0;
        for (size_t j = 0; j < tl->devices[d].npoints; j++) {
            const vt__tl_point *pt = &tl->devices[d].points[j];
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
