/*
 * trace/interop/pytorch_import.c - a PyTorch snapshot pickle into vt__snapshot_data
 * (the mapping is documented in pytorch.h). The pickle is parsed by the safe
 * reader (pickle_read.c); this file only walks PyTorch's fixed shape: it
 * never recurses on the data, so a self-containing list cannot loop it.
 * The trace entries, the bulk of a snapshot, are read into unfinished
 * events as the parser hands each batch over (its sink), so the value graph
 * never holds them all; a pickle not shaped for that is imported again
 * through its whole graph, the reference the streamed way is tested against.
 * The converter (pytorch_convert.c) goes further for the views: it never
 * holds the events either. The snapshot builder is pytorch_build.c.
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
#include "order.h"
#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"
#include "spill.h"
#include "pytorch_internal.h"

/* ---- the mapping ------------------------------------------------------- */

int vt__pt_oom(struct imp *im, int rc)
{
    return fail(im, rc, rc == -EOVERFLOW ? "snapshot too large to import" : "out of memory");
}

static uint8_t block_state(const vt__pv *st)
{
    if (vt__pickle_str_is(st, "active_allocated"))
        return VT_BLOCK_ACTIVE_ALLOCATED;
    if (vt__pickle_str_is(st, "active_pending_free"))
        return VT_BLOCK_ACTIVE_PENDING_FREE;
    return VT_BLOCK_INACTIVE;
}

/* A trace entry's pool_id (a segment's segment_pool_id), PyTorch's MempoolId_t pair ((0, 0): its default
 * pool; a CUDA graph's (capture id, 0); one the program made (0, uid)), as
 * the one nonzero id format 1.14 gives a private pool: the same rule as
 * private_pool() in scripts/vramtrace/native/pool_observer.cpp (the
 * observer, built against torch, keeps its own copy: change both). */
static uint64_t private_pool_id(const vt__pickle *p, const vt__pv *id)
{
    if (!id || (id->type != VT_PV_TUPLE && id->type != VT_PV_LIST) || id->n != 2)
        return 0;
    const uint64_t max = (1ull << 54) - 1;
    uint64_t first = vt__pickle_u64(vt__pickle_item(p, id, 0), 0);
    uint64_t second = vt__pickle_u64(vt__pickle_item(p, id, 1), 0);
    if (first)
        return (first & max) << 1;
    return second ? ((second & max) << 1) | 1 : 0;
}

static int add_block(struct imp *im, vt__snap_block blk)
{
    vt__snapshot_data *s = im->b.s;
    if (s->nblocks >= UINT32_MAX - 1)
        return vt__pt_oom(im, -EOVERFLOW);
    if (vt__grow((void **)&s->blocks, &im->b.cap_blocks, s->nblocks + 1, sizeof *s->blocks))
        return vt__pt_oom(im, -ENOMEM);
    s->blocks[s->nblocks++] = blk;
    return 0;
}

int vt__pt_import_segment(struct imp *im, const vt__pv *seg, size_t si)
{
    const vt__pickle *p = im->p;
    vt__snapshot_data *s = im->b.s;
    if (!seg || seg->type != VT_PV_DICT)
        return fail(im, -EINVAL, "segment %zu is not a dict", si);
    uint64_t addr = vt__pickle_u64(vt__pickle_get(p, seg, "address"), 0);
    uint64_t size = vt__pickle_u64(vt__pickle_get(p, seg, "total_size"), 0);
    if (!size || addr + size < addr)
        return fail(im, -EINVAL, "segment %zu (address 0x%llx) has no valid total_size", si,
                    (unsigned long long)addr);
    if (vt__grow((void **)&s->segments, &im->b.cap_segs, s->nsegments + 1, sizeof *s->segments))
        return vt__pt_oom(im, -ENOMEM);
    vt__snap_segment g = {
        .addr = addr, .size = size,
        .stream = vt__pickle_u64(vt__pickle_get(p, seg, "stream"), 0),
        .first_block = (uint32_t)s->nblocks,
        .device = (int8_t)vt__pickle_int(vt__pickle_get(p, seg, "device"), 0),
        .pool = vt__pickle_str_is(vt__pickle_get(p, seg, "segment_type"), "small") ? VT_POOL_SMALL
                                                                                 : VT_POOL_LARGE,
        .private_pool = private_pool_id(p, vt__pickle_get(p, seg, "segment_pool_id")),
    };
    const vt__pv *blocks = vt__pickle_get(p, seg, "blocks");
    uint64_t at = addr, end = addr + size;
    size_t nb = blocks && (blocks->type == VT_PV_LIST || blocks->type == VT_PV_TUPLE) ? blocks->n : 0;
    int rc;
    for (size_t k = 0; k < nb; k++) {
        const vt__pv *bl = vt__pickle_item(p, blocks, k);
        if (!bl || bl->type != VT_PV_DICT)
            return fail(im, -EINVAL, "segment %zu: block %zu is not a dict", si, k);
        uint64_t bsize = vt__pickle_u64(vt__pickle_get(p, bl, "size"), 0);
        uint64_t baddr = vt__pickle_u64(vt__pickle_get(p, bl, "address"), at);
        if (!bsize)
            continue;
        if (baddr < at || bsize > end - baddr || baddr > end)
            return fail(im, -EINVAL, "segment %zu (0x%llx, %llu bytes): block %zu (0x%llx, %llu "
                        "bytes) overlaps another or lies outside it", si, (unsigned long long)addr,
                        (unsigned long long)size, k, (unsigned long long)baddr,
                        (unsigned long long)bsize);
        if (baddr > at && (rc = add_block(im, (vt__snap_block){ .addr = at, .size = baddr - at,
                                                          .stream = g.stream,
                                                          .state = VT_BLOCK_INACTIVE })))
            return rc;
        vt__snap_block blk = { .addr = baddr, .size = bsize, .stream = g.stream,
                         .state = block_state(vt__pickle_get(p, bl, "state")) };
        const vt__pv *frames = vt__pickle_get(p, bl, "frames");
        blk.req_size = vt__pickle_u64(vt__pickle_get(p, bl, "requested_size"), 0);
        const vt__pv *hist = vt__pickle_get(p, bl, "history"); /* 2.0-era blocks */
        const vt__pv *h0 = vt__pickle_item(p, hist, 0);
        if (h0 && h0->type == VT_PV_DICT) {
            if (!frames)
                frames = vt__pickle_get(p, h0, "frames");
            if (!blk.req_size)
                blk.req_size = vt__pickle_u64(vt__pickle_get(p, h0, "real_size"), 0);
        }
        if (blk.state == VT_BLOCK_INACTIVE)
            blk.req_size = 0;
        else if (!blk.req_size)
            blk.req_size = bsize;
        if ((rc = vt__pt_stack_of(&im->b, p, frames, &blk.stack)))
            return vt__pt_oom(im, rc);
        if ((rc = add_block(im, blk)))
            return rc;
        at = baddr + bsize;
    }
    if (at < end && (rc = add_block(im, (vt__snap_block){ .addr = at, .size = end - at,
                                                    .stream = g.stream,
                                                    .state = VT_BLOCK_INACTIVE })))
        return rc;
    g.nblocks = (uint32_t)(s->nblocks - g.first_block);
    s->segments[s->nsegments++] = g;
    return 0;
}

static uint8_t action_kind(const vt__pv *a)
{
    static const struct { const char *name; uint8_t kind; } map[] = {
        { "alloc", VT_EV_ALLOC },
        { "free_requested", VT_EV_FREE_REQUESTED },
        { "free_completed", VT_EV_FREE_COMPLETED },
        { "segment_alloc", VT_EV_SEGMENT_ALLOC },
        { "segment_free", VT_EV_SEGMENT_FREE },
        { "segment_map", VT_EV_SEGMENT_ALLOC },
        { "segment_unmap", VT_EV_SEGMENT_FREE },
        { "oom", VT_EV_OOM },
        { "snapshot", VT_EV_MARK },
        { "annotate", VT_EV_MARK },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (vt__pickle_str_is(a, map[i].name))
            return map[i].kind;
    return 0;
}

static uint64_t round_granule(uint64_t n)
{
    if (n < PYTORCH_GRANULE)
        return PYTORCH_GRANULE;
    return (n + PYTORCH_GRANULE - 1) / PYTORCH_GRANULE * PYTORCH_GRANULE;
}

/* Value index + 1 of v (0 for none), as an unfinished event keeps it. */
uint32_t vt__pt_ref_of(const vt__pickle *p, const vt__pv *v)
{
    return v ? (uint32_t)(v - p->values) + 1 : 0;
}

/* An entry's fields, read from its dict as soon as the dict is complete (it
 * may be dropped then: the sink of pickle_read.c). The event is finished
 * (its stack and strings interned) later, in time order, so that a
 * streamed import numbers strings and stacks as the whole one does. Until
 * then time_ns holds time_us, seq the position of the entry in its list
 * (or among the annotations), stack and str the frames and user_metadata
 * values (vt__pt_ref_of), aux the kind's argument (a segment's: its private
 * pool, from pool_id; an OOM's: the device's free bytes, its addr the pool
 * it was asked into), and aux2 is 1 for an annotation
 * (str then its dict). @return 0 when `en` is no trace entry. */
int vt__pt_read_entry(const vt__pickle *p, const vt__pv *en, vt__event *e)
{
    if (!en || en->type != VT_PV_DICT)
        return 0;
    const vt__pv *action = vt__pickle_get(p, en, "action");
    memset(e, 0, sizeof *e);
    e->kind = action_kind(action);
    if (!e->kind)
        return 0;
    e->time_ns = vt__pickle_u64(vt__pickle_get(p, en, "time_us"), 0);
    e->addr = vt__pickle_u64(vt__pickle_get(p, en, "addr"), 0);
    e->size = vt__pickle_u64(vt__pickle_get(p, en, "size"), 0);
    e->stream = vt__pickle_u64(vt__pickle_get(p, en, "stream"), 0);
    const vt__pv *frames = vt__pickle_get(p, en, "frames");
    if (frames && (frames->type == VT_PV_LIST || frames->type == VT_PV_TUPLE))
        e->stack = vt__pt_ref_of(p, frames);
    const vt__pv *meta = vt__pickle_get(p, en, "user_metadata");
    if (meta && (meta->type == VT_PV_STR || meta->type == VT_PV_BYTES))
        e->str = vt__pt_ref_of(p, meta);
    if (e->kind == VT_EV_OOM) {
        const vt__pv *df = vt__pickle_get(p, en, "device_free");
        e->aux = vt__pickle_u64(df ? df : vt__pickle_get(p, en, "addr"), 0);
        /* the private pool it was asked into (a graph's capture): format
         * 1.15's addr (its "addr" is the device's free bytes again) */
        e->addr = VT_OOM_IN_POOL(private_pool_id(p, vt__pickle_get(p, en, "pool_id")));
    } else if (e->kind == VT_EV_MARK) {
        e->aux = vt__pickle_str_is(action, "snapshot");
    } else if (e->kind == VT_EV_SEGMENT_ALLOC) {
        e->aux = private_pool_id(p, vt__pickle_get(p, en, "pool_id"));
    }
    return 1;
}

/* Merged by time; at one time, trace entries by device and position, then
 * annotations in order (as a stable sort of them in that order). */
int vt__pt_cmp_unfinished(const void *a, const void *b)
{
    const vt__event *x = a, *y = b;
    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    if (x->aux2 != y->aux2)
        return x->aux2 < y->aux2 ? -1 : 1;
    if (!x->aux2 && x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return vt__order(x->seq, y->seq);
}

const vt__pv *vt__pt_ref_value(const vt__pickle *p, uint32_t ref)
{
    return ref ? vt__pickle_value(p, ref - 1) : NULL;
}

/* A string of im->loc in the snapshot's table. */
static int local_str(struct imp *im, uint32_t id, uint32_t *out)
{
    *out = 0;
    return id ? vt__pt_intern_c(&im->b, vt__pt_str_at(im->loc.s, id), out) : 0;
}

/* A stack of im->loc in the snapshot's tables, interned outermost first
 * with its strings and frames as vt__pt_stack_of() interns them from the graph. */
static int local_stack(struct imp *im, uint32_t node, uint32_t *out)
{
    const vt__snapshot_data *l = im->loc.s;
    uint32_t path[MAX_FRAMES_PER_STACK + 1];
    size_t n = 0;
    int rc;
    while (node && !im->node_map[node] && n < MAX_FRAMES_PER_STACK + 1) {
        path[n++] = node;
        node = l->stack_nodes[node].parent;
    }
    uint32_t at = node ? im->node_map[node] - 1 : 0;
    while (n--) {
        uint32_t lf = l->stack_nodes[path[n]].frame, fr = im->frame_map[lf] - 1;
        if (!im->frame_map[lf]) {
            const vt__frame *f = &l->frames[lf];
            uint32_t fn, file;
            if ((rc = local_str(im, f->function, &fn)) || (rc = local_str(im, f->file, &file)) ||
                (rc = vt__pt_intern_frame(&im->b, fn, file, f->line, &fr)))
                return rc;
            im->frame_map[lf] = fr + 1;
        }
        if ((rc = vt__pt_intern_node(&im->b, at, fr, &at)))
            return rc;
        im->node_map[path[n]] = at + 1;
    }
    *out = at;
    return 0;
}

int vt__pt_finish_event(struct imp *im, vt__event *e)
{
    const vt__pickle *p = im->p;
    int rc;
    e->time_ns *= 1000;
    e->thread = 1;
    if (e->aux2) {
        /* external_annotations: {name, stage, device, time_us} */
        const vt__pv *en = vt__pt_ref_value(p, e->str);
        const vt__pv *nm = vt__pickle_get(p, en, "name"), *stage = vt__pickle_get(p, en, "stage");
        char label[512];
        snprintf(label, sizeof label, "%.*s%s%.*s",
                 nm && nm->type == VT_PV_STR ? (int)(nm->n > 400 ? 400 : nm->n) : 0,
                 nm && nm->type == VT_PV_STR ? nm->s : "",
                 stage && stage->type == VT_PV_STR ? " " : "",
                 stage && stage->type == VT_PV_STR ? (int)(stage->n > 64 ? 64 : stage->n) : 0,
                 stage && stage->type == VT_PV_STR ? stage->s : "");
        e->aux2 = 0;
        return vt__pt_intern_c(&im->b, label, &e->str);
    }
    uint64_t size = e->size;
    e->size = 0;
    if (im->loc.s) {
        if ((rc = local_stack(im, e->stack, &e->stack)) || (rc = local_str(im, e->str, &e->str)))
            return rc;
    } else {
        if ((rc = vt__pt_stack_of(&im->b, p, vt__pt_ref_value(p, e->stack), &e->stack)))
            return rc;
        if ((rc = vt__pt_intern_pv(&im->b, vt__pt_ref_value(p, e->str), &e->str)))
            return rc;
    }
    switch (e->kind) {
    case VT_EV_ALLOC:
        e->req_size = size;
        e->size = round_granule(size);
        break;
    case VT_EV_FREE_REQUESTED:
        e->req_size = size;
        e->size = round_granule(size);
        e->aux = 1; /* PyTorch counts the bytes until free_completed */
        break;
    case VT_EV_FREE_COMPLETED:
        e->req_size = size;
        e->size = round_granule(size);
        break;
    case VT_EV_SEGMENT_ALLOC:
    case VT_EV_SEGMENT_FREE:
        e->size = size;
        e->aux2 = e->kind == VT_EV_SEGMENT_ALLOC ? e->aux : 0;   /* its private pool (1.14) */
        e->aux = size == 2u << 20 ? VT_POOL_SMALL : VT_POOL_LARGE; /* kSmallBuffer segments */
        if (e->kind == VT_EV_SEGMENT_FREE)
            e->aux = 0;
        break;
    case VT_EV_OOM:
        e->req_size = size;
        break;   /* addr: its private pool, read with the entry (1.15) */
    case VT_EV_MARK:
        if (e->aux)
            rc = vt__pt_intern_c(&im->b, "torch snapshot", &e->str);
        else if (!e->str)
            rc = vt__pt_intern_c(&im->b, "annotate", &e->str);
        e->aux = 0;
        e->addr = 0;
        break;
    default:
        break;
    }
    return rc;
}

static int push_event(struct imp *im, const vt__event *e)
{
    vt__snapshot_data *s = im->b.s;
    if (s->nevents >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (vt__grow((void **)&s->events, &im->b.cap_events, s->nevents + 1, sizeof *s->events))
        return -ENOMEM;
    s->events[s->nevents++] = *e;
    return 0;
}

/* The entries still in the graph (all of them when nothing was streamed)
 * and the annotations join the streamed ones; unknown actions are dropped;
 * then all are sorted by time and finished. */
static int import_traces(struct imp *im, const vt__pv *traces, const vt__pv *annotations)
{
    const vt__pickle *p = im->p;
    vt__snapshot_data *s = im->b.s;
    size_t ndev = traces && traces->type == VT_PV_LIST ? traces->n : 0;
    vt__event e;
    int rc;
    if (!s->events && vt__grow((void **)&s->events, &im->b.cap_events, 1, sizeof *s->events))
        return vt__pt_oom(im, -ENOMEM);
    if (im->loc.s && (!(im->node_map = calloc(im->loc.s->nstack_nodes, sizeof *im->node_map)) ||
                      !(im->frame_map = calloc(im->loc.s->nframes + 1, sizeof *im->frame_map))))
        return vt__pt_oom(im, -ENOMEM);
    for (size_t d = 0; d < ndev && d < 128; d++) {
        const vt__pv *dt = vt__pickle_item(p, traces, d);
        for (size_t i = 0; dt && dt->type == VT_PV_LIST && i < dt->n; i++) {
            if (!vt__pt_read_entry(p, vt__pickle_item(p, dt, i), &e))
                continue;
            e.device = (int8_t)d;
            e.seq = i;
            if ((rc = push_event(im, &e)))
                return vt__pt_oom(im, rc);
        }
    }
    size_t nann = annotations && annotations->type == VT_PV_LIST ? annotations->n : 0;
    for (size_t i = 0; i < nann; i++) {
        const vt__pv *en = vt__pickle_item(p, annotations, i);
        if (!en || en->type != VT_PV_DICT)
            continue;
        int64_t dev = vt__pickle_int(vt__pickle_get(p, en, "device"), 0);
        e = (vt__event){ .kind = VT_EV_MARK, .aux2 = 1, .seq = i, .str = vt__pt_ref_of(p, en),
                         .time_ns = vt__pickle_u64(vt__pickle_get(p, en, "time_us"), 0),
                         .device = (int8_t)(dev >= 0 && dev < 128 ? dev : 0) };
        if ((rc = push_event(im, &e)))
            return vt__pt_oom(im, rc);
    }
    qsort(s->events, s->nevents, sizeof *s->events, vt__pt_cmp_unfinished);
    for (size_t i = 0; i < s->nevents; i++) {
        if ((rc = vt__pt_finish_event(im, &s->events[i])))
            return vt__pt_oom(im, rc);
        s->events[i].seq = i + 1;
    }
    return 0;
}

/* Alive blocks: their ALLOC event (the last at their address) gets the real
 * block size, and the block gets that event's seq. */
static int link_blocks(struct imp *im)
{
    vt__snapshot_data *s = im->b.s;
    size_t n = 1024;
    while (n < s->nevents * 2)
        n *= 2;
    struct { uint64_t addr; uint32_t ev; } *map = calloc(n, sizeof *map);
    if (!map)
        return vt__pt_oom(im, -ENOMEM);
    for (size_t i = 0; i < s->nevents; i++) {
        if (s->events[i].kind != VT_EV_ALLOC)
            continue;
        uint64_t a = s->events[i].addr;
        size_t k = vt__pt_mix(a) & (n - 1);
        while (map[k].ev && map[k].addr != a)
            k = (k + 1) & (n - 1);
        map[k].addr = a;
        map[k].ev = (uint32_t)i + 1;
    }
    for (size_t i = 0; i < s->nblocks; i++) {
        vt__snap_block *bl = &s->blocks[i];
        if (bl->state == VT_BLOCK_INACTIVE)
            continue;
        size_t k = vt__pt_mix(bl->addr) & (n - 1);
        while (map[k].ev && map[k].addr != bl->addr)
            k = (k + 1) & (n - 1);
        if (!map[k].ev)
            continue;
        vt__event *e = &s->events[map[k].ev - 1];
        bl->alloc_seq = e->seq;
        if (!bl->stack)
            bl->stack = e->stack;
        e->size = bl->size; /* the real block, not the rounded request */
    }
    free(map);
    return 0;
}

/* allocator_settings as "key=value,..." (nested dicts as key={k=v,...}). */
int vt__pt_import_settings(struct imp *im, const vt__pv *settings)
{
    const vt__pickle *p = im->p;
    if (!settings || settings->type != VT_PV_DICT)
        return 0;
    size_t cap = 4096, len = 0;
    char *txt = malloc(cap);
    if (!txt)
        return vt__pt_oom(im, -ENOMEM);
    txt[0] = 0;
    const vt__pv_container *c = &p->containers[settings->container];
    for (uint32_t k = 0; k + 1 < c->n && len + 256 < cap; k += 2) {
        const vt__pv *key = &p->values[c->items[k]], *val = &p->values[c->items[k + 1]];
        if (key->type != VT_PV_STR)
            continue;
        int w = snprintf(txt + len, cap - len, "%s%.*s=", len ? "," : "",
                         (int)(key->n > 64 ? 64 : key->n), key->s);
        len += (size_t)w;
        if (val->type == VT_PV_STR)
            w = snprintf(txt + len, cap - len, "%.*s", (int)(val->n > 128 ? 128 : val->n), val->s);
        else if (val->type == VT_PV_BOOL)
            w = snprintf(txt + len, cap - len, "%s", val->i ? "True" : "False");
        else if (val->type == VT_PV_FLOAT)
            w = snprintf(txt + len, cap - len, "%g", val->f);
        else if (val->type == VT_PV_INT || val->type == VT_PV_UINT)
            w = snprintf(txt + len, cap - len, "%lld", (long long)vt__pickle_int(val, 0));
        else if (val->type == VT_PV_NONE)
            w = snprintf(txt + len, cap - len, "None");
        else
            w = snprintf(txt + len, cap - len, "...");
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
    int rc = vt__pt_intern_c(&im->b, txt, &im->b.s->meta.config);
    free(txt);
    return rc ? vt__pt_oom(im, rc) : 0;
}

/* The metadata of a snapshot of `nevents` events, the latest at
 * `last_ns`, naming devices up to `maxdev` (-1: none). */
int vt__pt_finish_meta_of(struct imp *im, size_t nevents, uint64_t last_ns, int maxdev)
{
    vt__snapshot_data *s = im->b.s;
    vt__snapshot_meta *m = &s->meta;
    m->format_version = VT_FORMAT_VERSION;
    m->rank = -1;
    char line[1024];
    snprintf(line, sizeof line, "PyTorch memory snapshot %s", im->name);
    int rc = vt__pt_intern_c(&im->b, line, &m->command_line);
    if (!rc)
        rc = vt__pt_intern_c(&im->b, "pytorch", &m->library_version);
    if (rc)
        return vt__pt_oom(im, rc);
    /* time_us is Unix time: monotonic base 0 = realtime base 0 makes the
     * wall clock of every event its own time */
    m->clock_base_monotonic_ns = 0;
    m->clock_base_realtime_ns = 0;
    m->events_recorded = nevents;
    m->snapshot_time_ns = last_ns;
    /* one device entry per ordinal seen */
    if (maxdev >= 0) {
        s->devices = calloc((size_t)maxdev + 1, sizeof *s->devices);
        if (!s->devices)
            return vt__pt_oom(im, -ENOMEM);
        s->ndevices = (size_t)maxdev + 1;
        for (int d = 0; d <= maxdev; d++)
            s->devices[d].ordinal = d;
    }
    return 0;
}

static int finish_meta(struct imp *im)
{
    vt__snapshot_data *s = im->b.s;
    uint64_t last = 0;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].time_ns > last)
            last = s->events[i].time_ns;
    return vt__pt_finish_meta_of(im, s->nevents, last, vt__snapshot_max_device(s));
}

/* ---- streaming the trace entries (pickle.h's sink) ---------------------- */

int vt__pt_read_local(struct imp *im, const vt__pickle *p, uint32_t item, vt__event *e)
{
    if (!vt__pt_read_entry(p, vt__pickle_value(p, item), e))
        return 0;
    uint32_t stack = 0, str = 0;
    int rc = vt__pt_stack_of(&im->loc, p, vt__pt_ref_value(p, e->stack), &stack);
    if (!rc)
        rc = vt__pt_intern_pv(&im->loc, vt__pt_ref_value(p, e->str), &str);
    e->stack = stack;
    e->str = str;
    return rc ? rc : 1;
}

/* While the pickle is parsed, a streamed entry's unfinished event keeps in
 * `thread` the value index of the list it was appended to, made a device
 * number by match_streamed() once the graph is whole; its stack and str are
 * ids in im->loc (vt__pt_read_local). */
static int take_entry(void *ctx, const vt__pickle *p, uint32_t list, uint32_t item)
{
    struct imp *im = ctx;
    vt__event e;
    int rc = vt__pt_read_local(im, p, item, &e);
    if (rc == 1) {
        e.thread = list;
        e.seq = im->nstreamed++;
        rc = push_event(im, &e);
    }
    return rc ? vt__pt_oom(im, rc) : 0;
}

struct list_dev { uint32_t list, dev; };

static int cmp_list_dev(const void *a, const void *b)
{
    const struct list_dev *x = a, *y = b;
    return vt__order(x->list, y->list);
}

/* Give each streamed event its device: the position of its list in
 * `traces`. @return 0, 1 when the graph is not what the stream assumed (a
 * list met twice or not at all, entries kept in the graph: the caller then
 * parses the pickle whole), or a negative errno. */
static int match_streamed(struct imp *im, const vt__pv *traces)
{
    const vt__pickle *p = im->p;
    vt__snapshot_data *s = im->b.s;
    for (size_t d = 0; traces && traces->type == VT_PV_LIST && d < traces->n; d++) {
        const vt__pv *dt = vt__pickle_item(p, traces, d);
        if (dt && dt->type == VT_PV_LIST && dt->n)
            return 1; /* entries left in the graph: their order with the streamed is lost */
    }
    if (!s->nevents)
        return 0;
    if (!traces || traces->type != VT_PV_LIST)
        return 1;
    struct list_dev *map = malloc((traces->n ? traces->n : 1) * sizeof *map);
    if (!map)
        return -ENOMEM;
    size_t n = 0;
    for (uint32_t d = 0; d < traces->n; d++) {
        const vt__pv *dt = vt__pickle_item(p, traces, d);
        if (dt)
            map[n++] = (struct list_dev){ (uint32_t)(dt - p->values), d };
    }
    qsort(map, n, sizeof *map, cmp_list_dev);
    size_t kept = 0;
    int rc = 0;
    for (size_t i = 0; i < s->nevents && !rc; i++) {
        vt__event *e = &s->events[i];
        struct list_dev key = { e->thread, 0 }, *hit = bsearch(&key, map, n, sizeof *map,
                                                               cmp_list_dev);
        if (!hit || (hit > map && hit[-1].list == key.list) ||
            (hit + 1 < map + n && hit[1].list == key.list) || p->values[key.list].n)
            rc = 1;
        else if (hit->dev < 128) /* the whole import reads 128 devices */
            s->events[kept++] = (vt__event){ .time_ns = e->time_ns, .addr = e->addr,
                                             .size = e->size, .stream = e->stream,
                                             .stack = e->stack, .str = e->str, .aux = e->aux,
                                             .seq = e->seq, .kind = e->kind,
                                             .device = (int8_t)hit->dev };
    }
    free(map);
    if (!rc)
        s->nevents = kept;
    return rc;
}

void vt__pt_imp_free(struct imp *im)
{
    for (size_t i = 0; i < im->nruns; i++)
        vt__spill_chain_free(&im->runs[i].chain);
    free(im->runs);
    free(im->lists);
    free(im->ann);
    vt__pt_bld_free(&im->b);
    vt__pt_bld_free(&im->loc);
    vt__snapshot_free(im->loc.s);
    free(im->node_map);
    free(im->frame_map);
    vt__pickle_free((vt__pickle *)im->p);
}

int vt__pt_parts(struct imp *im, const vt__pv *root, struct pt_parts *out)
{
    const vt__pickle *p = im->p;
    *out = (struct pt_parts){ 0 };
    if (root->type == VT_PV_LIST) {
        out->segments = root; /* legacy: a bare list of segments */
        return 0;
    }
    if (root->type != VT_PV_DICT)
        return fail(im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (top level is "
                    "neither a dict nor a list)");
    out->segments = vt__pickle_get(p, root, "segments");
    out->traces = vt__pickle_get(p, root, "device_traces");
    out->annotations = vt__pickle_get(p, root, "external_annotations");
    out->settings = vt__pickle_get(p, root, "allocator_settings");
    if (!out->segments && !out->traces)
        return fail(im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (no 'segments' "
                    "or 'device_traces')");
    return 0;
}

int vt__pytorch_import_path(const void *data, size_t size, const char *name, bool stream,
                            vt__snapshot_data **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    name = name ? name : "(memory)";
    struct imp im = { .name = name, .err = err, .errlen = errlen };
    vt__pickle *p = NULL;
    vt__pickle_sink sink = { .key = "device_traces", .take = take_entry, .ctx = &im };
    im.b.s = calloc(1, sizeof *im.b.s);
    if (stream)
        im.loc.s = calloc(1, sizeof *im.loc.s);
    if (!im.b.s || (stream && (!im.loc.s || vt__pt_bld_start(&im.loc)))) {
        vt__pt_imp_free(&im);
        vt__snapshot_free(im.b.s);
        return fail(&im, -ENOMEM, "out of memory");
    }
    int rc = vt__pickle_parse_sink(data, size, name, stream ? &sink : NULL, &p, err, errlen);
    if (rc) {
        vt__pt_imp_free(&im);
        vt__snapshot_free(im.b.s);
        return rc;
    }
    im.p = p;
    im.b.p = p;
    im.b.vcache = calloc(p->nvalues ? p->nvalues : 1, sizeof *im.b.vcache);
    if (!im.b.vcache || vt__pt_bld_start(&im.b)) {
        rc = vt__pt_oom(&im, -ENOMEM);
        goto out;
    }

    const vt__pv *root = vt__pickle_value(p, p->root);
    struct pt_parts parts;
    if ((rc = vt__pt_parts(&im, root, &parts)) != 0)
        goto out;
    const vt__pv *segments = parts.segments, *traces = parts.traces;
    const vt__pv *annotations = parts.annotations, *settings = parts.settings;
    if (stream && (rc = match_streamed(&im, root->type == VT_PV_DICT ? traces : NULL)) != 0) {
        if (rc < 0)
            rc = vt__pt_oom(&im, rc);
        goto out;
    }
    size_t nseg = segments && segments->type == VT_PV_LIST ? segments->n : 0;
    for (size_t i = 0; i < nseg && !rc; i++)
        rc = vt__pt_import_segment(&im, vt__pickle_item(p, segments, i), i);
    if (!rc)
        rc = import_traces(&im, traces, annotations);
    if (!rc)
        rc = link_blocks(&im);
    if (!rc)
        rc = vt__pt_import_settings(&im, settings);
    if (!rc)
        rc = finish_meta(&im);
out:
    vt__pt_imp_free(&im);
    if (rc) {
        vt__snapshot_free(im.b.s);
        return rc;
    }
    *out = im.b.s;
    return 0;
}

/* The trace entries are streamed (the graph then holds about one batch of
 * them at a time); whatever that path cannot take as it is, or rejects, is
 * imported again whole, so that what is accepted, and every message, stays
 * the whole import's. */
int vt__pytorch_import(const void *data, size_t size, const char *name, vt__snapshot_data **out,
                       char *err, size_t errlen)
{
    if (vt__pytorch_import_path(data, size, name, true, out, err, errlen) == 0)
        return 0;
    return vt__pytorch_import_path(data, size, name, false, out, err, errlen);
}

