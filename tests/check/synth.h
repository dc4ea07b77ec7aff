/* tests/check/synth.h - build synthetic snapshots in memory for the checker.
 *
 * A `synth` owns a vt__snapshot_data whose arrays it grows as events are added
 * (through tests/common/snap_builder.h).
 * Every event gets the next seq (from 1) and advances the clock by `dt`
 * (default 1 ms); synth_tick() moves the clock further. Stacks are built from
 * function names (innermost first). Everything aborts on out-of-memory: tests
 * only.
 */
#ifndef VT_TESTS_CHECK_SYNTH_H
#define VT_TESTS_CHECK_SYNTH_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snap_builder.h"
#include "snapshot.h"

typedef struct synth {
    vt__snapshot_data s;
    struct snap_builder b;  /* grows s's arrays (b.s == &s) */
    uint64_t seq;       /* last seq used */
    uint64_t time;      /* current clock, ns */
    uint64_t dt;        /* clock advance per event */
} synth;

static inline uint32_t synth_str(synth *y, const char *str) { return sb_str_dedup(&y->b, str); }

/* A string interned without the linear search (for big traces). */
static inline uint32_t synth_str_fast(synth *y, const char *str) { return sb_str(&y->b, str); }

static inline void synth_init(synth *y)
{
    memset(y, 0, sizeof *y);
    y->b.s = &y->s;
    y->dt = 1000000;
    y->time = 1000000000;
    synth_str_fast(y, "");
    vt__snapshot_data *s = &y->s;
    sb_node(&y->b, 0, 0);   /* node 0: no stack */
    s->meta.format_version = 1;
    s->meta.pid = 4242;
    s->meta.rank = -1;
    s->meta.host = synth_str(y, "synthhost");
    s->meta.command_line = synth_str(y, "python train.py");
    s->meta.library_version = synth_str(y, "0.1.0");
}

/* Stack of the given functions, innermost first, NULL-terminated. Frames
 * are not shared between stacks (fine for tests). */
static inline uint32_t synth_stack(synth *y, const char *fn, ...)
{
    const char *names[32];
    size_t n = 0;
    va_list ap;
    va_start(ap, fn);
    for (const char *f = fn; f && n < 32; f = va_arg(ap, const char *))
        names[n++] = f;
    va_end(ap);
    vt__snapshot_data *s = &y->s;
    uint32_t parent = 0;
    for (size_t i = n; i-- > 0;) {   /* outermost first */
        uint32_t module = synth_str(y, "/usr/bin/train"), function = synth_str(y, names[i]);
        uint32_t file = synth_str(y, "train.c");
        uint32_t fr = sb_frame(&y->b, (vt__frame){
            .ip = 0x400000 + 16 * s->nframes, .module_offset = 16 * s->nframes,
            .module = module, .function = function, .file = file, .line = (uint32_t)(10 + i) });
        parent = sb_node(&y->b, parent, fr);
    }
    return parent;
}

static inline vt__event *synth_ev(synth *y, uint8_t kind)
{
    vt__snapshot_data *s = &y->s;
    vt__event *e = sb_event(&y->b);
    e->seq = ++y->seq;
    y->time += y->dt;
    e->time_ns = y->time;
    e->kind = kind;
    e->thread = 1;
    e->device = 0;
    s->meta.events_recorded = s->nevents;
    s->meta.snapshot_time_ns = y->time;
    return e;
}

/* The next event: p, with synth_ev()'s seq, time, kind and thread. */
static inline vt__event *synth_put(synth *y, uint8_t kind, vt__event p)
{
    vt__event *e = synth_ev(y, kind);
    p.seq = e->seq;
    p.time_ns = e->time_ns;
    p.kind = e->kind;
    p.thread = e->thread;
    *e = p;
    return e;
}

/* The next event, of `kind`, saying what the designated initializers say
 * (device 0 unless given). */
#define SYNTH_EV(y, kind, ...) synth_put((y), (kind), (vt__event){ __VA_ARGS__ })

static inline void synth_tick(synth *y, uint64_t ns) { y->time += ns; y->s.meta.snapshot_time_ns = y->time; }

static inline vt__event *synth_alloc(synth *y, uint64_t addr, uint64_t size, uint32_t stack)
{
    return SYNTH_EV(y, VT_EV_ALLOC, .addr = addr, .req_size = size,
                    .size = (size + 511) / 512 * 512, .stack = stack);
}

static inline void synth_free(synth *y, uint64_t addr)
{
    SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = addr);
}

static inline void synth_mark(synth *y, const char *label)
{
    uint32_t l = synth_str(y, label);
    synth_ev(y, VT_EV_MARK)->str = l;
}

/* The start of step i: 100 ms on, a mark "step i". */
static inline void synth_step_mark(synth *y, int i)
{
    char l[32];
    synth_tick(y, 100000000);
    snprintf(l, sizeof l, "step %d", i);
    synth_mark(y, l);
}

static inline void synth_tensor(synth *y, uint64_t id, uint64_t addr, uint64_t nbytes, uint64_t base,
                         const char *name)
{
    uint32_t n = name ? synth_str(y, name) : 0;
    SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = id, .aux2 = base, .addr = addr, .size = nbytes, .str = n);
}

static inline void synth_use_at(synth *y, uint64_t id, uint32_t stack)
{
    SYNTH_EV(y, VT_EV_TENSOR_USE, .aux = id, .stack = stack);
}

static inline void synth_use(synth *y, uint64_t id) { synth_use_at(y, id, 0); }

static inline void synth_drop(synth *y, uint64_t id) { synth_ev(y, VT_EV_TENSOR_DROP)->aux = id; }

/* TENSOR_NAME (format 1.1): tensor `id` is called `name` from now on. */
static inline void synth_name(synth *y, uint64_t id, const char *name)
{
    uint32_t n = name ? synth_str(y, name) : 0;
    SYNTH_EV(y, VT_EV_TENSOR_NAME, .aux = id, .str = n, .device = -1);
}

static inline void synth_ext(synth *y, uint64_t addr, uint64_t size)
{
    SYNTH_EV(y, VT_EV_STORAGE_EXTERNAL, .addr = addr, .size = size, .device = -1);
}

static inline void synth_ext_free(synth *y, uint64_t addr)
{
    SYNTH_EV(y, VT_EV_STORAGE_EXTERNAL_FREE, .addr = addr, .device = -1);
}

static inline void synth_holder(synth *y, uint64_t id, const char *name)
{
    uint32_t n = synth_str(y, name);
    SYNTH_EV(y, VT_EV_HOLDER_NEW, .aux = id, .str = n);
}

static inline void synth_ref(synth *y, uint64_t from, uint64_t to, const char *label)
{
    uint32_t l = label ? synth_str(y, label) : 0;
    SYNTH_EV(y, VT_EV_REF, .aux = from, .aux2 = to, .str = l);
}

/* "[k]": the label of a list's item k (synth_ref copies it; good until the
 * next call). */
static inline const char *item_label(int k)
{
    static char label[16];
    snprintf(label, sizeof label, "[%d]", k);
    return label;
}

static inline void synth_unref(synth *y, uint64_t from, uint64_t to)
{
    SYNTH_EV(y, VT_EV_UNREF, .aux = from, .aux2 = to);
}

/* Shortcut: `holder` lets go of tensor `id` (no edge to remove when 0), the
 * tensor is dropped and its storage at `addr` freed. */
static inline void synth_release(synth *y, uint64_t holder, uint64_t id, uint64_t addr)
{
    if (holder)
        synth_unref(y, holder, id);
    synth_drop(y, id);
    synth_free(y, addr);
}

/* Shortcut: allocation + tensor on it (+ the tensor's creation is a use). */
static inline void synth_new_tensor(synth *y, uint64_t id, uint64_t addr, uint64_t nbytes,
                             const char *name, uint32_t stack)
{
    synth_alloc(y, addr, nbytes, stack);
    synth_tensor(y, id, addr, nbytes, 0, name);
}

/* Shortcut: holder `id` (an object of type `name`), which `from` refers to
 * under `label`. */
static inline void synth_held(synth *y, uint64_t id, const char *name, uint64_t from,
                              const char *label)
{
    synth_holder(y, id, name);
    synth_ref(y, from, id, label);
}

/* Shortcut: a new tensor (synth_new_tensor) used by the op that made it. */
static inline void synth_made(synth *y, uint64_t id, uint64_t addr, uint64_t nbytes,
                              const char *name, uint32_t stack)
{
    synth_new_tensor(y, id, addr, nbytes, name, stack);
    synth_use(y, id);
}

/* The window lost its start: the state at the snapshot lists every block
 * the events leave alive (with its stack and seq) and `nold` more of
 * `size` bytes each at `old_addr` onward, allocated at `stack` before the
 * first event (seq unknown), still alive. */
static inline void synth_lost_start(synth *y, uint32_t stack, int nold, uint64_t old_addr,
                                    uint64_t size)
{
    size_t n = 0, cap = y->s.nevents + (size_t)nold;
    vt__snap_block *b = calloc(cap ? cap : 1, sizeof *b);
    vt__snap_segment *g = calloc(cap ? cap : 1, sizeof *g);
    if (!b || !g)
        abort();
    for (size_t i = 0; i < y->s.nevents; i++) {
        const vt__event *e = &y->s.events[i];
        if (e->kind == VT_EV_ALLOC)
            b[n++] = (vt__snap_block){ .addr = e->addr, .size = e->size, .req_size = e->size,
                                       .alloc_seq = e->seq, .stack = e->stack,
                                       .state = VT_BLOCK_ACTIVE_ALLOCATED };
        for (size_t k = 0; e->kind == VT_EV_FREE_REQUESTED && k < n; k++)
            if (b[k].addr == e->addr) {
                b[k] = b[--n];
                break;
            }
    }
    for (int k = 0; k < nold; k++)
        b[n++] = (vt__snap_block){ .addr = old_addr + (uint64_t)k * 0x1000000, .size = size,
                                   .req_size = size, .stack = stack,
                                   .state = VT_BLOCK_ACTIVE_ALLOCATED };
    for (size_t k = 0; k < n; k++)
        g[k] = (vt__snap_segment){ .addr = b[k].addr, .size = b[k].size,
                                   .first_block = (uint32_t)k, .nblocks = 1 };
    y->s.segments = g;
    y->s.blocks = b;
    y->s.nsegments = y->s.nblocks = n;
    y->s.meta.flags |= VT_META_STATE_COMPLETE;
    y->s.meta.events_overwritten = 1000;
}

/* Release everything (the arrays are the synth's own). */
static inline void synth_fini(synth *y)
{
    vt__snapshot_free_arrays(&y->s);
    memset(y, 0, sizeof *y);
}

#endif /* VT_TESTS_CHECK_SYNTH_H */
