/*
 * trace/interop/pytorch_import.c - a PyTorch snapshot pickle into vt__snapshot_data
 * (the mapping is documented in pytorch.h). The pickle is parsed by the safe
 * reader (pickle_read.c); this file only walks PyTorch's fixed shape: it
 * never recurses on the data, so a self-containing list cannot loop it.
 * The trace entries, the bulk of a snapshot, are read into unfinished
 * events as the parser hands each batch over (its sink), so the value graph
 * never holds them all; a pickle not shaped for that is imported again
 * through its whole graph, the reference the streamed way is tested against.
 * The converter at the end (vt__pytorch_convert) goes further for the views:
 * it never holds the events either (runs of records in a temporary file,
 * merged by time into a .vtsnap written as they come).
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

#define MAX_FRAMES_PER_STACK 512
#define PYTORCH_GRANULE 512   /* kMinBlockSize: every block is a multiple */

/* ---- a tiny snapshot builder: interned strings, frames, stack nodes ---- */

struct slot { uint64_t h; uint32_t v; }; /* v = index + 1, 0 = empty */

struct table {
    struct slot *slots;
    size_t n, used;
};

struct bld {
    vt__snapshot_data *s;
    size_t cap_blob, cap_offs, cap_frames, cap_nodes, cap_events, cap_segs, cap_blocks;
    struct table strs, frames, nodes;
    /* per pickle value: its interned string or frame id + 1 (0 = not yet).
     * Pickles memoize repeated strings (and shared frame dicts), so most
     * lookups end here instead of hashing text again. */
    const vt__pickle *p;
    uint32_t *vcache;
};

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h | 1; /* never 0 */
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return mix(h);
}

static int table_grow(struct table *t)
{
    if ((t->used + 1) * 2 <= t->n)
        return 0;
    size_t n = t->n ? t->n * 2 : 1024;
    struct slot *s = calloc(n, sizeof *s);
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < t->n; i++) {
        if (!t->slots[i].v)
            continue;
        size_t k = t->slots[i].h & (n - 1);
        while (s[k].v)
            k = (k + 1) & (n - 1);
        s[k] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->n = n;
    return 0;
}

static const char *str_at(const vt__snapshot_data *s, uint32_t i)
{
    return s->strings_blob + s->string_offsets[i];
}

/* Intern n bytes (a NUL inside is cut there: strings are C strings). */
static int intern(struct bld *b, const char *p, size_t n, uint32_t *out)
{
    const char *nul = memchr(p, 0, n);
    if (nul)
        n = (size_t)(nul - p);
    if (n == 0) {
        *out = 0;
        return 0;
    }
    if (table_grow(&b->strs))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = hash_bytes(p, n);
    size_t k = h & (b->strs.n - 1);
    for (; b->strs.slots[k].v; k = (k + 1) & (b->strs.n - 1)) {
        if (b->strs.slots[k].h != h)
            continue;
        const char *t = str_at(s, b->strs.slots[k].v - 1);
        if (!strncmp(t, p, n) && !t[n]) {
            *out = b->strs.slots[k].v - 1;
            return 0;
        }
    }
    if (s->strings_blob_size + n + 1 > UINT32_MAX || s->nstrings >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (vt__grow((void **)&s->strings_blob, &b->cap_blob, s->strings_blob_size + n + 1, 1) ||
        vt__grow((void **)&s->string_offsets, &b->cap_offs, s->nstrings + 1, sizeof(uint32_t)))
        return -ENOMEM;
    s->string_offsets[s->nstrings] = (uint32_t)s->strings_blob_size;
    memcpy(s->strings_blob + s->strings_blob_size, p, n);
    s->strings_blob[s->strings_blob_size + n] = 0;
    s->strings_blob_size += n + 1;
    *out = (uint32_t)s->nstrings++;
    b->strs.slots[k] = (struct slot){ h, *out + 1 };
    b->strs.used++;
    return 0;
}

static int intern_c(struct bld *b, const char *text, uint32_t *out)
{
    return intern(b, text, strlen(text), out);
}

static uint32_t *cache_slot(struct bld *b, const vt__pv *v)
{
    if (!b->vcache || v < b->p->values || v >= b->p->values + b->p->nvalues)
        return NULL;
    return &b->vcache[v - b->p->values];
}

static int intern_pv(struct bld *b, const vt__pv *v, uint32_t *out)
{
    *out = 0;
    if (!v || (v->type != VT_PV_STR && v->type != VT_PV_BYTES))
        return 0;
    uint32_t *slot = cache_slot(b, v);
    if (slot && *slot) {
        *out = *slot - 1;
        return 0;
    }
    int rc = intern(b, v->s, v->n, out);
    if (!rc && slot)
        *slot = *out + 1;
    return rc;
}

static int intern_frame(struct bld *b, uint32_t fn, uint32_t file, uint32_t line, uint32_t *out)
{
    if (table_grow(&b->frames))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = mix(((uint64_t)fn << 32 | file) * 31 + line);
    size_t k = h & (b->frames.n - 1);
    for (; b->frames.slots[k].v; k = (k + 1) & (b->frames.n - 1)) {
        const vt__frame *f = &s->frames[b->frames.slots[k].v - 1];
        if (f->function == fn && f->file == file && f->line == line) {
            *out = b->frames.slots[k].v - 1;
            return 0;
        }
    }
    if (vt__grow((void **)&s->frames, &b->cap_frames, s->nframes + 1, sizeof *s->frames))
        return -ENOMEM;
    /* A Python (or symbolized C++) frame has no instruction pointer. A
     * Python one (its file a .py) is marked as the recorder marks the
     * frames it reads from the interpreter (module "python"), so that the
     * reports find the program's own lines in an imported stack too. */
    uint32_t module = 0;
    const char *path = str_at(s, file);
    size_t plen = strlen(path);
    if (plen > 3 && !strcmp(path + plen - 3, ".py")) {
        int rc = intern(b, "python", 6, &module);
        if (rc)
            return rc;
    }
    s->frames[s->nframes] = (vt__frame){ .function = fn, .file = file, .line = line,
                                        .module = module };
    *out = (uint32_t)s->nframes++;
    b->frames.slots[k] = (struct slot){ h, *out + 1 };
    b->frames.used++;
    return 0;
}

static int intern_node(struct bld *b, uint32_t parent, uint32_t frame, uint32_t *out)
{
    if (table_grow(&b->nodes))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = mix((uint64_t)parent << 32 | frame);
    size_t k = h & (b->nodes.n - 1);
    for (; b->nodes.slots[k].v; k = (k + 1) & (b->nodes.n - 1)) {
        const vt__stack_node *nd = &s->stack_nodes[b->nodes.slots[k].v - 1];
        if (nd->parent == parent && nd->frame == frame) {
            *out = b->nodes.slots[k].v - 1;
            return 0;
        }
    }
    if (s->nstack_nodes >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (vt__grow((void **)&s->stack_nodes, &b->cap_nodes, s->nstack_nodes + 1, sizeof *s->stack_nodes))
        return -ENOMEM;
    s->stack_nodes[s->nstack_nodes] = (vt__stack_node){ parent, frame };
    *out = (uint32_t)s->nstack_nodes++;
    b->nodes.slots[k] = (struct slot){ h, *out + 1 };
    b->nodes.used++;
    return 0;
}

/* String 0 is "" (intern() never stores it), stack node 0 the root. */
static int bld_start(struct bld *b)
{
    if (vt__grow((void **)&b->s->strings_blob, &b->cap_blob, 1, 1) ||
        vt__grow((void **)&b->s->string_offsets, &b->cap_offs, 1, sizeof(uint32_t)) ||
        vt__grow((void **)&b->s->stack_nodes, &b->cap_nodes, 1, sizeof(vt__stack_node)))
        return -ENOMEM;
    b->s->strings_blob[0] = 0;
    b->s->strings_blob_size = 1;
    b->s->string_offsets[0] = 0;
    b->s->nstrings = 1;
    b->s->stack_nodes[0] = (vt__stack_node){ 0, 0 };
    b->s->nstack_nodes = 1;
    return 0;
}

static void bld_free_tables(struct bld *b)
{
    free(b->strs.slots);
    free(b->frames.slots);
    free(b->nodes.slots);
    free(b->vcache);
}

/* PyTorch's `frames`: innermost first. Stack nodes are built outermost first. */
static int stack_of(struct bld *b, const vt__pickle *p, const vt__pv *frames, uint32_t *out)
{
    *out = 0;
    if (!frames || (frames->type != VT_PV_LIST && frames->type != VT_PV_TUPLE))
        return 0;
    size_t n = frames->n < MAX_FRAMES_PER_STACK ? frames->n : MAX_FRAMES_PER_STACK;
    uint32_t node = 0;
    for (size_t i = n; i-- > 0;) {
        const vt__pv *f = vt__pickle_item(p, frames, i);
        if (!f || f->type != VT_PV_DICT)
            continue;
        uint32_t fn, file, fr;
        uint32_t *slot = cache_slot(b, f);
        int rc;
        if (slot && *slot) {
            if ((rc = intern_node(b, node, *slot - 1, &node)))
                return rc;
            continue;
        }
        rc = intern_pv(b, vt__pickle_get(p, f, "name"), &fn);
        if (!rc)
            rc = intern_pv(b, vt__pickle_get(p, f, "filename"), &file);
        if (rc)
            return rc;
        int64_t line = vt__pickle_int(vt__pickle_get(p, f, "line"), 0);
        if (line < 0 || line > UINT32_MAX)
            line = 0;
        if ((rc = intern_frame(b, fn, file, (uint32_t)line, &fr)) ||
            (rc = intern_node(b, node, fr, &node)))
            return rc;
        if (slot)
            *slot = fr + 1;
    }
    *out = node;
    return 0;
}

/* ---- the mapping ------------------------------------------------------- */

/* A run: entries of one list in the order they were appended, their times
 * never going back, kept as records in the temporary file until the end.
 * A list whose time goes back starts a new run, and the merge of all runs
 * by time (cmp_unfinished) orders the events as the whole import's sort
 * does. A record: the kind, then varints of the time (us) and the position
 * in the list as deltas from the run's last, the address's zigzag delta,
 * size, stream, stack and str (ids of im->loc) and aux. */
#define RUN_CHUNK (32u << 10)
#define RUN_RECORD 96          /* a record's most bytes: a kind and 9 varints */
#define MAX_RUNS 256           /* more (or more lists): imported whole */

struct run {
    vt__spill_chain chain;
    size_t list;               /* its list (im->lists) */
    uint64_t last_time, last_seq, last_addr;   /* the last record's: deltas */
};

struct plist {                 /* a list that entries were appended to */
    uint32_t value;            /* its value index (pickle.h's moved() moves it) */
    int device;                /* its position in device_traces, once matched */
    uint64_t n;                /* entries so far: the next one's position */
    size_t run;                /* its current run (SIZE_MAX: none yet) */
};

struct imp {
    struct bld b;
    const vt__pickle *p;
    const char *name;
    char *err;
    size_t errlen;
    uint64_t nstreamed;    /* entries taken so far: their order in the file */
    /* Streamed entries' stacks and metadata, interned as they are read in
     * tables of their own (loc.s: strings, frames, nodes), since the
     * snapshot's numbering follows time order: finish_event() interns them
     * again in that order, as the whole import does. */
    struct bld loc;
    uint32_t *node_map, *frame_map;  /* loc's id -> the snapshot's + 1 (0: not yet) */
    /* Converting (vt__pytorch_convert): the streamed entries go to runs in
     * a temporary file instead of s->events. */
    vt__spill *spill;
    struct run *runs;        size_t nruns, cap_runs;
    struct plist *lists;     size_t nlists, cap_lists;
    vt__event *ann;          size_t nann;   /* the annotations, unfinished, by time */
    bool refused;            /* not shaped for converting: it is imported whole */
    const unsigned char *map;  /* the input, when a file mapping its pages may leave */
    size_t dropped;          /* bytes of map let go in this walk */
};

/* "NAME: message" into the caller's buffer; returns rc. */
#define fail(im, rc, ...) vt__errf_in((im)->err, (im)->errlen, rc, (im)->name, __VA_ARGS__)

static int oom(struct imp *im, int rc)
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

static int add_block(struct imp *im, vt__snap_block blk)
{
    vt__snapshot_data *s = im->b.s;
    if (s->nblocks >= UINT32_MAX - 1)
        return oom(im, -EOVERFLOW);
    if (vt__grow((void **)&s->blocks, &im->b.cap_blocks, s->nblocks + 1, sizeof *s->blocks))
        return oom(im, -ENOMEM);
    s->blocks[s->nblocks++] = blk;
    return 0;
}

static int import_segment(struct imp *im, const vt__pv *seg, size_t si)
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
        return oom(im, -ENOMEM);
    vt__snap_segment g = {
        .addr = addr, .size = size,
        .stream = vt__pickle_u64(vt__pickle_get(p, seg, "stream"), 0),
        .first_block = (uint32_t)s->nblocks,
        .device = (int8_t)vt__pickle_int(vt__pickle_get(p, seg, "device"), 0),
        .pool = vt__pickle_str_is(vt__pickle_get(p, seg, "segment_type"), "small") ? VT_POOL_SMALL
                                                                                 : VT_POOL_LARGE,
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
        if ((rc = stack_of(&im->b, p, frames, &blk.stack)))
            return oom(im, rc);
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
static uint32_t ref_of(const vt__pickle *p, const vt__pv *v)
{
    return v ? (uint32_t)(v - p->values) + 1 : 0;
}

/* An entry's fields, read from its dict as soon as the dict is complete (it
 * may be dropped then: the sink of pickle_read.c). The event is finished
 * (its stack and strings interned) later, in time order, so that a
 * streamed import numbers strings and stacks as the whole one does. Until
 * then time_ns holds time_us, seq the position of the entry in its list
 * (or among the annotations), stack and str the frames and user_metadata
 * values (ref_of), aux the kind's argument, and aux2 is 1 for an annotation
 * (str then its dict). @return 0 when `en` is no trace entry. */
static int read_entry(const vt__pickle *p, const vt__pv *en, vt__event *e)
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
        e->stack = ref_of(p, frames);
    const vt__pv *meta = vt__pickle_get(p, en, "user_metadata");
    if (meta && (meta->type == VT_PV_STR || meta->type == VT_PV_BYTES))
        e->str = ref_of(p, meta);
    if (e->kind == VT_EV_OOM) {
        const vt__pv *df = vt__pickle_get(p, en, "device_free");
        e->aux = vt__pickle_u64(df ? df : vt__pickle_get(p, en, "addr"), 0);
    } else if (e->kind == VT_EV_MARK) {
        e->aux = vt__pickle_str_is(action, "snapshot");
    }
    return 1;
}

/* Merged by time; at one time, trace entries by device and position, then
 * annotations in order (as a stable sort of them in that order). */
static int cmp_unfinished(const void *a, const void *b)
{
    const vt__event *x = a, *y = b;
    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    if (x->aux2 != y->aux2)
        return x->aux2 < y->aux2 ? -1 : 1;
    if (!x->aux2 && x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static const vt__pv *ref_value(const vt__pickle *p, uint32_t ref)
{
    return ref ? vt__pickle_value(p, ref - 1) : NULL;
}

/* A string of im->loc in the snapshot's table. */
static int local_str(struct imp *im, uint32_t id, uint32_t *out)
{
    *out = 0;
    return id ? intern_c(&im->b, str_at(im->loc.s, id), out) : 0;
}

/* A stack of im->loc in the snapshot's tables, interned outermost first
 * with its strings and frames as stack_of() interns them from the graph. */
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
                (rc = intern_frame(&im->b, fn, file, f->line, &fr)))
                return rc;
            im->frame_map[lf] = fr + 1;
        }
        if ((rc = intern_node(&im->b, at, fr, &at)))
            return rc;
        im->node_map[path[n]] = at + 1;
    }
    *out = at;
    return 0;
}

static int finish_event(struct imp *im, vt__event *e)
{
    const vt__pickle *p = im->p;
    int rc;
    e->time_ns *= 1000;
    e->thread = 1;
    if (e->aux2) {
        /* external_annotations: {name, stage, device, time_us} */
        const vt__pv *en = ref_value(p, e->str);
        const vt__pv *nm = vt__pickle_get(p, en, "name"), *stage = vt__pickle_get(p, en, "stage");
        char label[512];
        snprintf(label, sizeof label, "%.*s%s%.*s",
                 nm && nm->type == VT_PV_STR ? (int)(nm->n > 400 ? 400 : nm->n) : 0,
                 nm && nm->type == VT_PV_STR ? nm->s : "",
                 stage && stage->type == VT_PV_STR ? " " : "",
                 stage && stage->type == VT_PV_STR ? (int)(stage->n > 64 ? 64 : stage->n) : 0,
                 stage && stage->type == VT_PV_STR ? stage->s : "");
        e->aux2 = 0;
        return intern_c(&im->b, label, &e->str);
    }
    uint64_t size = e->size;
    e->size = 0;
    if (im->loc.s) {
        if ((rc = local_stack(im, e->stack, &e->stack)) || (rc = local_str(im, e->str, &e->str)))
            return rc;
    } else {
        if ((rc = stack_of(&im->b, p, ref_value(p, e->stack), &e->stack)))
            return rc;
        if ((rc = intern_pv(&im->b, ref_value(p, e->str), &e->str)))
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
        e->aux = size == 2u << 20 ? VT_POOL_SMALL : VT_POOL_LARGE; /* kSmallBuffer segments */
        if (e->kind == VT_EV_SEGMENT_FREE)
            e->aux = 0;
        break;
    case VT_EV_OOM:
        e->req_size = size;
        e->addr = 0;
        break;
    case VT_EV_MARK:
        if (e->aux)
            rc = intern_c(&im->b, "torch snapshot", &e->str);
        else if (!e->str)
            rc = intern_c(&im->b, "annotate", &e->str);
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
        return oom(im, -ENOMEM);
    if (im->loc.s && (!(im->node_map = calloc(im->loc.s->nstack_nodes, sizeof *im->node_map)) ||
                      !(im->frame_map = calloc(im->loc.s->nframes + 1, sizeof *im->frame_map))))
        return oom(im, -ENOMEM);
    for (size_t d = 0; d < ndev && d < 128; d++) {
        const vt__pv *dt = vt__pickle_item(p, traces, d);
        for (size_t i = 0; dt && dt->type == VT_PV_LIST && i < dt->n; i++) {
            if (!read_entry(p, vt__pickle_item(p, dt, i), &e))
                continue;
            e.device = (int8_t)d;
            e.seq = i;
            if ((rc = push_event(im, &e)))
                return oom(im, rc);
        }
    }
    size_t nann = annotations && annotations->type == VT_PV_LIST ? annotations->n : 0;
    for (size_t i = 0; i < nann; i++) {
        const vt__pv *en = vt__pickle_item(p, annotations, i);
        if (!en || en->type != VT_PV_DICT)
            continue;
        int64_t dev = vt__pickle_int(vt__pickle_get(p, en, "device"), 0);
        e = (vt__event){ .kind = VT_EV_MARK, .aux2 = 1, .seq = i, .str = ref_of(p, en),
                         .time_ns = vt__pickle_u64(vt__pickle_get(p, en, "time_us"), 0),
                         .device = (int8_t)(dev >= 0 && dev < 128 ? dev : 0) };
        if ((rc = push_event(im, &e)))
            return oom(im, rc);
    }
    qsort(s->events, s->nevents, sizeof *s->events, cmp_unfinished);
    for (size_t i = 0; i < s->nevents; i++) {
        if ((rc = finish_event(im, &s->events[i])))
            return oom(im, rc);
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
        return oom(im, -ENOMEM);
    for (size_t i = 0; i < s->nevents; i++) {
        if (s->events[i].kind != VT_EV_ALLOC)
            continue;
        uint64_t a = s->events[i].addr;
        size_t k = mix(a) & (n - 1);
        while (map[k].ev && map[k].addr != a)
            k = (k + 1) & (n - 1);
        map[k].addr = a;
        map[k].ev = (uint32_t)i + 1;
    }
    for (size_t i = 0; i < s->nblocks; i++) {
        vt__snap_block *bl = &s->blocks[i];
        if (bl->state == VT_BLOCK_INACTIVE)
            continue;
        size_t k = mix(bl->addr) & (n - 1);
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
static int import_settings(struct imp *im, const vt__pv *settings)
{
    const vt__pickle *p = im->p;
    if (!settings || settings->type != VT_PV_DICT)
        return 0;
    size_t cap = 4096, len = 0;
    char *txt = malloc(cap);
    if (!txt)
        return oom(im, -ENOMEM);
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
    int rc = intern_c(&im->b, txt, &im->b.s->meta.config);
    free(txt);
    return rc ? oom(im, rc) : 0;
}

/* The metadata of a snapshot of `nevents` events, the latest at
 * `last_ns`, naming devices up to `maxdev` (-1: none). */
static int finish_meta_of(struct imp *im, size_t nevents, uint64_t last_ns, int maxdev)
{
    vt__snapshot_data *s = im->b.s;
    vt_snapshot_meta *m = &s->meta;
    m->format_version = VT_FORMAT_VERSION;
    m->rank = -1;
    char line[1024];
    snprintf(line, sizeof line, "PyTorch memory snapshot %s", im->name);
    int rc = intern_c(&im->b, line, &m->command_line);
    if (!rc)
        rc = intern_c(&im->b, "pytorch", &m->library_version);
    if (rc)
        return oom(im, rc);
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
            return oom(im, -ENOMEM);
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
    return finish_meta_of(im, s->nevents, last, vt__snapshot_max_device(s));
}

/* ---- streaming the trace entries (pickle.h's sink) ---------------------- */

/* While the pickle is parsed, a streamed entry's unfinished event keeps in
 * `thread` the value index of the list it was appended to, made a device
 * number by match_streamed() once the graph is whole; its stack and str are
 * ids in im->loc, so that the graph keeps nothing of it. */
static int take_entry(void *ctx, const vt__pickle *p, uint32_t list, uint32_t item)
{
    struct imp *im = ctx;
    vt__event e;
    if (!read_entry(p, vt__pickle_value(p, item), &e))
        return 0;
    uint32_t stack = 0, str = 0;
    int rc = stack_of(&im->loc, p, ref_value(p, e.stack), &stack);
    if (!rc)
        rc = intern_pv(&im->loc, ref_value(p, e.str), &str);
    e.stack = stack;
    e.str = str;
    e.thread = list;
    e.seq = im->nstreamed++;
    if (!rc)
        rc = push_event(im, &e);
    return rc ? oom(im, rc) : 0;
}

struct list_dev { uint32_t list, dev; };

static int cmp_list_dev(const void *a, const void *b)
{
    const struct list_dev *x = a, *y = b;
    return (x->list > y->list) - (x->list < y->list);
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

static void imp_free(struct imp *im)
{
    for (size_t i = 0; i < im->nruns; i++)
        vt__spill_chain_free(&im->runs[i].chain);
    free(im->runs);
    free(im->lists);
    free(im->ann);
    bld_free_tables(&im->b);
    bld_free_tables(&im->loc);
    vt__snapshot_free(im->loc.s);
    free(im->node_map);
    free(im->frame_map);
    vt__pickle_free((vt__pickle *)im->p);
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
    if (!im.b.s || (stream && (!im.loc.s || bld_start(&im.loc)))) {
        imp_free(&im);
        vt__snapshot_free(im.b.s);
        return fail(&im, -ENOMEM, "out of memory");
    }
    int rc = vt__pickle_parse_sink(data, size, name, stream ? &sink : NULL, &p, err, errlen);
    if (rc) {
        imp_free(&im);
        vt__snapshot_free(im.b.s);
        return rc;
    }
    im.p = p;
    im.b.p = p;
    im.b.vcache = calloc(p->nvalues ? p->nvalues : 1, sizeof *im.b.vcache);
    if (!im.b.vcache || bld_start(&im.b)) {
        rc = oom(&im, -ENOMEM);
        goto out;
    }

    const vt__pv *root = vt__pickle_value(p, p->root);
    const vt__pv *segments = NULL, *traces = NULL, *annotations = NULL, *settings = NULL;
    if (root->type == VT_PV_LIST) {
        segments = root; /* legacy: a bare list of segments */
    } else if (root->type == VT_PV_DICT) {
        segments = vt__pickle_get(p, root, "segments");
        traces = vt__pickle_get(p, root, "device_traces");
        annotations = vt__pickle_get(p, root, "external_annotations");
        settings = vt__pickle_get(p, root, "allocator_settings");
        if (!segments && !traces) {
            rc = fail(&im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (no 'segments' "
                      "or 'device_traces')");
            goto out;
        }
    } else {
        rc = fail(&im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (top level is "
                  "neither a dict nor a list)");
        goto out;
    }
    if (stream && (rc = match_streamed(&im, root->type == VT_PV_DICT ? traces : NULL)) != 0) {
        if (rc < 0)
            rc = oom(&im, rc);
        goto out;
    }
    size_t nseg = segments && segments->type == VT_PV_LIST ? segments->n : 0;
    for (size_t i = 0; i < nseg && !rc; i++)
        rc = import_segment(&im, vt__pickle_item(p, segments, i), i);
    if (!rc)
        rc = import_traces(&im, traces, annotations);
    if (!rc)
        rc = link_blocks(&im);
    if (!rc)
        rc = import_settings(&im, settings);
    if (!rc)
        rc = finish_meta(&im);
out:
    imp_free(&im);
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

/* ---- converting in bounded memory --------------------------------------- */

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
    if (!read_entry(p, vt__pickle_value(p, item), &e))
        return 0;
    uint32_t stack = 0, str = 0;
    if (stack_of(&im->loc, p, ref_value(p, e.stack), &stack) ||
        intern_pv(&im->loc, ref_value(p, e.str), &str))
        return refuse(im);
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
    k += put_v(at + k, stack);
    k += put_v(at + k, str);
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
    return cmp_unfinished(&m->src[m->heap[a]].head, &m->src[m->heap[b]].head) < 0;
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
    size_t k = mix(addr) & (n - 1);
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
        if ((rc = finish_event(im, &e)))
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
    const vt__pv *segments = NULL, *traces = NULL, *annotations = NULL, *settings = NULL;
    if (root->type == VT_PV_LIST) {
        segments = root; /* legacy: a bare list of segments */
    } else if (root->type == VT_PV_DICT) {
        segments = vt__pickle_get(p, root, "segments");
        traces = vt__pickle_get(p, root, "device_traces");
        annotations = vt__pickle_get(p, root, "external_annotations");
        settings = vt__pickle_get(p, root, "allocator_settings");
        if (!segments && !traces)
            return fail(im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (no "
                        "'segments' or 'device_traces')");
    } else {
        return fail(im, -EINVAL, "a pickle, but not a PyTorch memory snapshot (top level is "
                    "neither a dict nor a list)");
    }
    if (match_lists(im, root->type == VT_PV_DICT ? traces : NULL))
        return 1;
    int rc = 0;
    size_t nseg = segments && segments->type == VT_PV_LIST ? segments->n : 0;
    for (size_t i = 0; i < nseg && !rc; i++)
        rc = import_segment(im, vt__pickle_item(p, segments, i), i);
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
            .kind = VT_EV_MARK, .aux2 = 1, .seq = i, .str = ref_of(p, en),
            .time_ns = vt__pickle_u64(vt__pickle_get(p, en, "time_us"), 0),
            .device = (int8_t)(dev >= 0 && dev < 128 ? dev : 0) };
    }
    qsort(im->ann, im->nann, sizeof *im->ann, cmp_unfinished);
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
        rc = import_settings(im, settings);
    if (!rc)
        rc = finish_meta_of(im, nevents, last_ns, maxdev);
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
    if (!im.b.s || !im.loc.s || bld_start(&im.loc) || vt__spill_open(&spill, err, errlen))
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
    rc = !im.b.vcache || bld_start(&im.b) ? 1 : convert_rest(&im, vt__pickle_value(p, p->root), fd,
                                                           opts->plain);
out:
    imp_free(&im);
    vt__snapshot_free(im.b.s);
    vt__spill_close(&spill);
    if (rc == 1 && errlen)
        err[0] = 0;
    return rc;
}
