/*
 * trace/interop/pytorch_convert.c - a PyTorch snapshot pickle converted in
 * bounded memory into a .vtsnap (vt__pytorch_convert, pytorch.h): the trace
 * entries become compact records of per-list runs in a temporary file,
 * merged by the whole import's time order into events written as they come
 * (vt__snapwriter), so that neither the value graph nor the events are
 * ever held whole.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "errbuf.h"
#include "grow.h"
#include "buf.h"
#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"
#include "spill.h"
#include "pytorch_internal.h"

static size_t put_v(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* A varint of a record this file wrote itself. */
static uint64_t get_v(const unsigned char **p)
{
    uint64_t v = 0;
    unsigned shift = 0;
    unsigned char b;
    do {
        b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while ((b & 0x80) && shift < 64);
    return v;
}

/* Anything the converter cannot take as it is (too many lists or runs, no
 * memory, the temporary file failing) makes the caller import the pickle
 * whole instead: the parse stops here. */
static int refuse(struct imp *im)
{
    im->refused = true;
    return -ECANCELED;
}

/* pickle.h's take: the entry as a record of its list's run. */
static int spill_entry(void *ctx, const vt__pickle *p, uint32_t list, uint32_t item)
{
    struct imp *im = ctx;
    vt__event e;
    int rc = vt__pt_read_local(im, p, item, &e);
    if (rc <= 0)
        return rc ? refuse(im) : 0;
    size_t li = 0;
    while (li < im->nlists && im->lists[li].value != list)
        li++;
    if (li == im->nlists) {
        if (im->nlists >= MAX_RUNS ||
            vt__grow((void **)&im->lists, &im->cap_lists, im->nlists + 1, sizeof *im->lists))
            return refuse(im);
        im->lists[im->nlists++] = (struct plist){ .value = list, .device = -1, .run = SIZE_MAX };
    }
    struct plist *l = &im->lists[li];
    struct run *r = l->run == SIZE_MAX ? NULL : &im->runs[l->run];
    if (!r || e.time_ns < r->last_time) {
        if ((r && vt__spill_flush(&r->chain)) || im->nruns >= MAX_RUNS ||
            vt__grow((void **)&im->runs, &im->cap_runs, im->nruns + 1, sizeof *im->runs))
            return refuse(im);
        r = &im->runs[im->nruns];
        *r = (struct run){ .list = li };
        vt__spill_chain_init(&r->chain, im->spill, RUN_CHUNK);
        l->run = im->nruns++;
    }
    uint64_t seq = l->n++;
    unsigned char *at = vt__spill_room(&r->chain, RUN_RECORD);
    if (!at)
        return refuse(im);
    size_t k = 0;
    at[k++] = e.kind;
    k += put_v(at + k, e.time_ns - r->last_time);
    k += put_v(at + k, seq - r->last_seq);
    k += put_v(at + k, vt__zigzag((int64_t)(e.addr - r->last_addr)));
    k += put_v(at + k, e.size);
    k += put_v(at + k, e.stream);
    k += put_v(at + k, e.stack);
    k += put_v(at + k, e.str);
    k += put_v(at + k, e.aux);
    vt__spill_used(&r->chain, k);
    r->last_time = e.time_ns;
    r->last_seq = seq;
    r->last_addr = e.addr;
    return 0;
}

/* pickle.h's passed: the mapped file's pages behind the walk may go (a
 * string kept in the graph that points there faults its page back in). */
static void drop_passed(void *ctx, size_t offset)
{
    struct imp *im = ctx;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), to = offset / page * page;
    if (to < im->dropped)
        im->dropped = 0;   /* a new walk */
    if (to > im->dropped)
        madvise((void *)(im->map + im->dropped), to - im->dropped, MADV_DONTNEED);
    im->dropped = to;
}

/* pickle.h's moved: the lists follow their values. */
static void move_lists(void *ctx, const uint32_t *newidx, size_t n)
{
    struct imp *im = ctx;
    for (size_t i = 0; i < im->nlists; i++)
        if (im->lists[i].value < n)
            im->lists[i].value = newidx[im->lists[i].value];
}

/* Each list its device: its position in `traces` (match_streamed's rules).
 * @return 0, or 1 when the graph is not what the stream assumed. */
static int match_lists(struct imp *im, const vt__pv *traces)
{
    const vt__pickle *p = im->p;
    size_t ndev = traces && traces->type == VT_PV_LIST ? traces->n : 0;
    for (size_t d = 0; d < ndev; d++) {
        const vt__pv *dt = vt__pickle_item(p, traces, d);
        if (dt && dt->type == VT_PV_LIST && dt->n)
            return 1; /* entries left in the graph: their order with the streamed is lost */
    }
    if (!im->nruns)
        return 0;
    if (!ndev)
        return 1;
    for (size_t i = 0; i < im->nlists; i++) {
        struct plist *l = &im->lists[i];
        for (size_t d = 0; d < ndev; d++) {
            const vt__pv *dt = vt__pickle_item(p, traces, d);
            if (!dt || (uint32_t)(dt - p->values) != l->value)
                continue;
            if (l->device >= 0)
                return 1; /* a list met twice */
            l->device = (int)(d < 128 ? d : 128); /* the whole import reads 128 devices */
        }
        if (l->device < 0)
            return 1;
    }
    return 0;
}

/* One source of the merge: a run read back, or the annotations. */
struct src {
    vt__spill_reader rd;
    const unsigned char *p, *end;
    const struct run *run;     /* NULL: the annotations */
    size_t next;               /* ... the next one */
    uint64_t time, seq, addr;  /* the last record's */
    vt__event head;            /* the next event */
};

struct merge {
    struct src *src;
    size_t *heap, nheap;       /* sources with events left, by their next */
};

/* The next event of s into s->head. @return 1, 0 at the end, or -errno. */
static int src_next(const struct imp *im, struct src *s)
{
    if (!s->run) {
        if (s->next >= im->nann)
            return 0;
        s->head = im->ann[s->next++];
        return 1;
    }
    if (s->p == s->end) {
        int rc = vt__spill_read_chunk(&s->rd);
        if (rc <= 0)
            return rc;
        s->p = s->rd.buf;
        s->end = s->rd.buf + s->rd.n;
    }
    const unsigned char *p = s->p;
    vt__event *e = &s->head;
    memset(e, 0, sizeof *e);
    e->kind = *p++;
    e->time_ns = s->time += get_v(&p);
    e->seq = s->seq += get_v(&p);
    e->addr = s->addr += (uint64_t)vt__unzigzag(get_v(&p));
    e->size = get_v(&p);
    e->stream = get_v(&p);
    e->stack = (uint32_t)get_v(&p);
    e->str = (uint32_t)get_v(&p);
    e->aux = get_v(&p);
    e->device = (int8_t)im->lists[s->run->list].device;
    s->p = p;
    return 1;
}

static bool src_before(const struct merge *m, size_t a, size_t b)
{
    return vt__pt_cmp_unfinished(&m->src[m->heap[a]].head, &m->src[m->heap[b]].head) < 0;
}

static void sift_down(struct merge *m, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        if (l < m->nheap && src_before(m, l, best))
            best = l;
        if (l + 1 < m->nheap && src_before(m, l + 1, best))
            best = l + 1;
        if (best == i)
            return;
        size_t t = m->heap[i];
        m->heap[i] = m->heap[best];
        m->heap[best] = t;
        i = best;
    }
}

static void merge_close(struct imp *im, struct merge *m)
{
    for (size_t i = 0; m->src && i <= im->nruns; i++)
        vt__spill_reader_free(&m->src[i].rd);
    free(m->src);
    free(m->heap);
    *m = (struct merge){ 0 };
}

/* Every run of a device the import reads, and the annotations, from their
 * starts. @return 0 or a negative errno. */
static int merge_open(struct imp *im, struct merge *m)
{
    *m = (struct merge){ 0 };
    m->src = calloc(im->nruns + 1, sizeof *m->src);
    m->heap = calloc(im->nruns + 1, sizeof *m->heap);
    if (!m->src || !m->heap)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i <= im->nruns && rc >= 0; i++) {
        struct src *s = &m->src[i];
        if (i < im->nruns) {
            s->run = &im->runs[i];
            if (im->lists[s->run->list].device >= 128)
                continue;
            if ((rc = vt__spill_reader_init(&s->rd, &s->run->chain)))
                break;
        }
        if ((rc = src_next(im, s)) == 1)
            m->heap[m->nheap++] = i;
    }
    for (size_t i = m->nheap / 2; i-- > 0;)
        sift_down(m, i);
    return rc < 0 ? rc : 0;
}

/* The next event in time order. @return 1, 0 at the end, or -errno. */
static int merge_next(const struct imp *im, struct merge *m, vt__event *e)
{
    if (!m->nheap)
        return 0;
    struct src *s = &m->src[m->heap[0]];
    *e = s->head;
    int rc = src_next(im, s);
    if (rc < 0)
        return rc;
    if (rc == 0)
        m->heap[0] = m->heap[--m->nheap];
    sift_down(m, 0);
    return 1;
}

/* The alive blocks by address (link_blocks' rule without every event's
 * address at hand): the last ALLOC at each, and the size it takes. */
struct link { uint64_t addr, seq, size; uint32_t stack; bool used, sized; };

static struct link *link_of(struct link *t, size_t n, uint64_t addr, bool add)
{
    size_t k = vt__pt_mix(addr) & (n - 1);
    while (t[k].used && t[k].addr != addr)
        k = (k + 1) & (n - 1);
    if (!t[k].used && !add)
        return NULL;
    t[k].used = true;
    t[k].addr = addr;
    return &t[k];
}

/* The events in time order, finished: pass 1 interns their stacks and
 * strings in that order and finds what the metadata and the blocks need;
 * pass 2 (w set) writes them. */
static int merge_pass(struct imp *im, struct link *links, size_t nlinks, vt__snapwriter *w,
                      size_t *nevents, uint64_t *last_ns, int *maxdev)
{
    struct merge m;
    vt__event e;
    int rc = merge_open(im, &m);
    uint64_t n = 0;
    while (!rc && (rc = merge_next(im, &m, &e)) == 1) {
        if ((rc = vt__pt_finish_event(im, &e)))
            break;
        e.seq = ++n;
        struct link *k = e.kind == VT_EV_ALLOC ? link_of(links, nlinks, e.addr, false) : NULL;
        if (!w) {
            *last_ns = e.time_ns > *last_ns ? e.time_ns : *last_ns;
            *maxdev = e.device > *maxdev ? e.device : *maxdev;
            if (k) {
                k->seq = e.seq;
                k->stack = e.stack;
            }
        } else {
            if (k && k->sized && k->seq == e.seq)
                e.size = k->size;
            rc = vt__snapwriter_event(w, &e);
        }
    }
    merge_close(im, &m);
    *nevents = (size_t)n;
    return rc < 0 ? rc : 0;
}

/* After parsing: the snapshot but its events, written to `fd` with them. */
static int convert_rest(struct imp *im, const vt__pv *root, int fd, bool plain)
{
    const vt__pickle *p = im->p;
    vt__snapshot_data *s = im->b.s;
    struct pt_parts parts;
    int prc = vt__pt_parts(im, root, &parts);
    if (prc)
        return prc;
    const vt__pv *segments = parts.segments, *traces = parts.traces;
    const vt__pv *annotations = parts.annotations, *settings = parts.settings;
    if (match_lists(im, root->type == VT_PV_DICT ? traces : NULL))
        return 1;
    int rc = 0;
    size_t nseg = segments && segments->type == VT_PV_LIST ? segments->n : 0;
    for (size_t i = 0; i < nseg && !rc; i++)
        rc = vt__pt_import_segment(im, vt__pickle_item(p, segments, i), i);
    if (rc)
        return rc;
    size_t nann = annotations && annotations->type == VT_PV_LIST ? annotations->n : 0;
    if (!(im->ann = malloc((nann ? nann : 1) * sizeof *im->ann)))
        return 1;
    for (size_t i = 0; i < nann; i++) {
        const vt__pv *en = vt__pickle_item(p, annotations, i);
        if (!en || en->type != VT_PV_DICT)
            continue;
        int64_t dev = vt__pickle_int(vt__pickle_get(p, en, "device"), 0);
        im->ann[im->nann++] = (vt__event){
            .kind = VT_EV_MARK, .aux2 = 1, .seq = i, .str = vt__pt_ref_of(p, en),
            .time_ns = vt__pickle_u64(vt__pickle_get(p, en, "time_us"), 0),
            .device = (int8_t)(dev >= 0 && dev < 128 ? dev : 0) };
    }
    qsort(im->ann, im->nann, sizeof *im->ann, vt__pt_cmp_unfinished);
    if (!(im->node_map = calloc(im->loc.s->nstack_nodes, sizeof *im->node_map)) ||
        !(im->frame_map = calloc(im->loc.s->nframes + 1, sizeof *im->frame_map)))
        return 1;
    for (size_t i = 0; i < im->nruns; i++)
        if (vt__spill_flush(&im->runs[i].chain))
            return 1;

    size_t nlinks = 16;
    while (nlinks < s->nblocks * 2)
        nlinks *= 2;
    struct link *links = calloc(nlinks, sizeof *links);
    if (!links)
        return 1;
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].state != VT_BLOCK_INACTIVE)
            link_of(links, nlinks, s->blocks[i].addr, true);
    size_t nevents = 0;
    uint64_t last_ns = 0;
    int maxdev = -1;
    vt__snapwriter *w = NULL;
    rc = merge_pass(im, links, nlinks, NULL, &nevents, &last_ns, &maxdev) ? 1 : 0;
    for (size_t i = 0; i < s->nblocks && !rc; i++) {
        vt__snap_block *bl = &s->blocks[i];
        struct link *k = bl->state == VT_BLOCK_INACTIVE ? NULL
                                                        : link_of(links, nlinks, bl->addr, false);
        if (!k || !k->seq)
            continue;
        bl->alloc_seq = k->seq;
        if (!bl->stack)
            bl->stack = k->stack;
        k->size = bl->size; /* the real block, not the rounded request */
        k->sized = true;
    }
    for (size_t i = 0; i < s->nsegments; i++)
        maxdev = s->segments[i].device > maxdev ? s->segments[i].device : maxdev;
    if (!rc)
        rc = vt__pt_import_settings(im, settings);
    if (!rc)
        rc = vt__pt_finish_meta_of(im, nevents, last_ns, maxdev);
    if (!rc && vt__snapwriter_open(s, fd, plain ? VT_SNAPWRITER_PLAIN : 0, &w, im->err,
                                   im->errlen))
        rc = 1;
    if (!rc && (merge_pass(im, links, nlinks, w, &nevents, &last_ns, &maxdev) ||
                vt__snapwriter_finish(w)))
        rc = 1;
    vt__snapwriter_free(w);
    free(links);
    return rc;
}

int vt__pytorch_convert(const void *data, size_t size, const char *name,
                        const vt__pytorch_convert_opts *opts, int fd, char *err, size_t errlen)
{
    if (errlen)
        err[0] = 0;
    name = name ? name : "(memory)";
    const vt__pytorch_convert_opts none = { 0 };
    opts = opts ? opts : &none;
    vt__spill spill = { .fd = -1 };
    struct imp im = { .name = name, .err = err, .errlen = errlen, .spill = &spill,
                      .map = opts->mapped ? data : NULL };
    vt__pickle *p = NULL;
    vt__pickle_sink sink = { .key = "device_traces", .take = spill_entry, .ctx = &im,
                             .passed = opts->mapped ? drop_passed : NULL, .moved = move_lists,
                             .passed_every = opts->drop_every, .collect_min = opts->collect_min };
    im.b.s = calloc(1, sizeof *im.b.s);
    im.loc.s = calloc(1, sizeof *im.loc.s);
    int rc = 1;
    if (!im.b.s || !im.loc.s || vt__pt_bld_start(&im.loc) || vt__spill_open(&spill, err, errlen))
        goto out;
    rc = vt__pickle_parse_sink(data, size, name, &sink, &p, err, errlen);
    if (rc) {
        /* the input's own fault is said as the whole parse says it */
        rc = im.refused ? 1 : rc;
        goto out;
    }
    im.p = p;
    im.b.p = p;
    im.b.vcache = calloc(p->nvalues ? p->nvalues : 1, sizeof *im.b.vcache);
    rc = !im.b.vcache || vt__pt_bld_start(&im.b) ? 1 : convert_rest(&im, vt__pickle_value(p, p->root), fd,
                                                           opts->plain);
out:
    vt__pt_imp_free(&im);
    vt__snapshot_free(im.b.s);
    vt__spill_close(&spill);
    if (rc == 1 && errlen)
        err[0] = 0;
    return rc;
}
