/*
 * tests/trace/test_format_gen.h - synthesize snapshots (vt__snapshot_data) in C for the format,
 * timeline and CLI tests (no recorder, no CUDA).
 *
 *   gen_small()          a hand-written snapshot using every field, with
 *                        allocations made before the retained window
 *   gen_training(n, ...) a training-like loop of about n events: a repeated
 *                        forward/backward pattern on a warm cache
 *   gen_random(rnd, n)   n random events on few addresses: everything the
 *                        timeline's matching rules reconcile
 */
#ifndef VT_TEST_FORMAT_GEN_H
#define VT_TEST_FORMAT_GEN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snap_builder.h"
#include "snapshot.h"

/* The format tests' builder is the common one (tests/common/snap_builder.h). */
static inline uint32_t gen_str(struct snap_builder *g, const char *str) { return sb_str(g, str); }

static inline uint32_t gen_frame(struct snap_builder *g, uint64_t ip, const char *module, const char *fn,
                                 const char *file, uint32_t line)
{
    uint32_t m = gen_str(g, module), id = gen_str(g, "0123456789abcdef");
    uint32_t f = fn ? gen_str(g, fn) : 0, src = file ? gen_str(g, file) : 0;
    return sb_frame(g, (vt__frame){ .ip = ip, .module_offset = ip & 0xffffff, .module = m,
                                   .build_id = id, .function = f, .file = src, .line = line });
}

static inline uint32_t gen_node(struct snap_builder *g, uint32_t parent, uint32_t frame)
{
    return sb_node(g, parent, frame);
}

static inline vt__event *gen_ev(struct snap_builder *g, uint8_t kind, uint64_t seq, uint64_t t)
{
    vt__event *e = sb_event(g);
    e->kind = kind;
    e->seq = seq;
    e->time_ns = t;
    e->thread = 1;
    return e;
}

static inline void gen_segment(struct snap_builder *g, uint64_t addr, uint64_t size, int dev, uint8_t pool,
                               uint64_t stream)
{
    uint32_t first = (uint32_t)g->s->nblocks;
    *sb_segment(g) = (vt__snap_segment){ .addr = addr, .size = size, .stream = stream,
                                         .first_block = first, .device = (int8_t)dev,
                                         .pool = pool };
}

/* Append a block to the last segment (address implied by the previous ones). */
static inline void gen_block(struct snap_builder *g, uint64_t size, uint64_t req, uint64_t stream,
                             uint64_t alloc_seq, uint32_t stack, uint8_t state)
{
    vt__snapshot_data *s = g->s;
    vt__snap_segment *sg = &s->segments[s->nsegments - 1];
    uint64_t addr = sg->addr;
    for (uint32_t i = 0; i < sg->nblocks; i++)
        addr += s->blocks[sg->first_block + i].size;
    *sb_block(g) = (vt__snap_block){ addr, size, req, stream, alloc_seq, stack, state };
    g->s->segments[g->s->nsegments - 1].nblocks++;
}

/* Allocator state: a small-pool segment of 4 KiB at addr on device 0 whose
 * first `bytes` are one allocated block (allocated at alloc_seq, requested
 * as is), the rest one free block. */
static inline void gen_segment_holding(struct snap_builder *g, uint64_t addr, uint64_t bytes,
                                       uint64_t alloc_seq)
{
    gen_segment(g, addr, 0x1000, 0, VT_POOL_SMALL, 0);
    gen_block(g, bytes, bytes, 0, alloc_seq, 0, VT_BLOCK_ACTIVE_ALLOCATED);
    if (bytes < 0x1000)
        gen_block(g, 0x1000 - bytes, 0, 0, 0, 0, VT_BLOCK_INACTIVE);
}

static inline void gen_device(struct snap_builder *g, int ord, const char *name, uint64_t total)
{
    uint32_t n = gen_str(g, name);
    *sb_device(g) = (vt__snap_device){ .ordinal = ord, .name = n, .total_bytes = total };
}

static inline struct snap_builder gen_begin(void)
{
    struct snap_builder g = { 0 };
    g.s = calloc(1, sizeof *g.s);
    gen_str(&g, "");
    gen_node(&g, 0, 0);
    vt__snapshot_meta *m = &g.s->meta;
    m->format_version = 0x10000;
    m->pid = 4242;
    m->rank = 3;
    m->host = gen_str(&g, "node-7");
    m->command_line = gen_str(&g, "python train.py --epochs 3");
    m->config = gen_str(&g, "cache:1,trace:1");
    m->library_version = gen_str(&g, "0.1.0");
    m->clock_base_monotonic_ns = 1000000000ull;
    m->clock_base_realtime_ns = 1700000000000000000ull;
    return g;
}

#define MiB (1024ull * 1024)

/* A small snapshot, every field in use:
 *  segment A (dev 0, 20 MiB large pool): block a1 8 MiB allocated before the
 *    window (state only, stack st_b), a2 4 MiB allocated in the window by
 *    ALLOC seq 12 (stack st_a), rest 8 MiB inactive
 *  segment B (dev 1, 2 MiB small pool) allocated in the window (seq 11):
 *    one 512 KiB block pending free (ALLOC seq 13, FREE_REQUESTED aux=1, seq
 *    15), rest inactive
 *  events (seq 10..): a FREE_REQUESTED of 1 MiB at 0x7000 (allocated before
 *  the window at stack st_a, which the free names: format 1.12), MARK "step 1", SEGMENT_ALLOC B, ALLOC a2, ALLOC b1, STREAM_USE
 *  b1 on stream 0x99 (twice), FREE_REQUESTED b1 (pending), ALLOC+FREE of a
 *  1 MiB temporary at 0x10000000+12MiB, OOM, BAD_FREE, TENSOR_NEW.
 *
 * Expected dev 0: initial allocated 8 MiB + 1 MiB, reserved 20 MiB; peak
 * allocated 13 MiB (after the 1 MiB temp). Dev 1: peak 512 KiB, reserved 2 MiB.
 */
static inline vt__snapshot_data *gen_small(void)
{
    struct snap_builder g = gen_begin();
    vt__snapshot_data *s = g.s;
    s->meta.snapshot_time_ns = 5000000000ull;
    s->meta.events_recorded = 120;
    s->meta.events_overwritten = 107;
    s->meta.stacks_dropped = 2;
    gen_device(&g, 0, "Simulated GPU 0", 80ull << 30);
    gen_device(&g, 1, "Simulated GPU 1", 40ull << 30);
    /* the allocator's own peaks, above what the kept window shows */
    s->meta.flags = VT_META_STATE_COMPLETE | VT_META_DEVICE_PEAKS;
    s->devices[0].peak_allocated = 30 * MiB;
    s->devices[0].peak_reserved = 40 * MiB;
    s->devices[0].peak_active = 31 * MiB;
    s->devices[1].peak_allocated = 1 * MiB;
    s->devices[1].peak_reserved = 2 * MiB;
    s->devices[1].peak_active = 1536 * 1024;

    uint32_t f_main = gen_frame(&g, 0x400100, "/usr/bin/train", "main", "train.c", 10);
    uint32_t f_fwd = gen_frame(&g, 0x400200, "/usr/bin/train", "forward", "model.c", 42);
    uint32_t f_bwd = gen_frame(&g, 0x400300, "/usr/bin/train", "backward", "model.c", 77);
    uint32_t f_malloc = gen_frame(&g, 0x7f0000001000, "/usr/lib/libvramtrace.so.0",
                                  "cudaMalloc", NULL, 0);
    uint32_t n_main = gen_node(&g, 0, f_main);
    uint32_t n_fwd = gen_node(&g, n_main, f_fwd);
    uint32_t st_a = gen_node(&g, n_fwd, f_malloc);       /* forward */
    uint32_t n_bwd = gen_node(&g, n_main, f_bwd);
    uint32_t st_b = gen_node(&g, n_bwd, f_malloc);       /* backward */

    const uint64_t A = 0x10000000, B = 0x20000000, S1 = 0x5555aaaa0000ull;
    gen_segment(&g, A, 20 * MiB, 0, VT_POOL_LARGE, S1);
    gen_block(&g, 8 * MiB, 8 * MiB - 100, S1, 3, st_b, VT_BLOCK_ACTIVE_ALLOCATED);
    gen_block(&g, 4 * MiB, 4 * MiB, S1, 13, st_a, VT_BLOCK_ACTIVE_ALLOCATED); /* ALLOC seq 13 */
    gen_block(&g, 8 * MiB, 0, S1, 0, 0, VT_BLOCK_INACTIVE);
    gen_segment(&g, B, 2 * MiB, 1, VT_POOL_SMALL, 0);
    gen_block(&g, 512 * 1024, 500 * 1000, 0, 14, st_a, VT_BLOCK_ACTIVE_PENDING_FREE);
    gen_block(&g, 2 * MiB - 512 * 1024, 0, 0, 0, 0, VT_BLOCK_INACTIVE);

    uint64_t t = 2000000000ull;
    vt__event *e;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 10, t += 1000);
    e->addr = 0x7000; e->size = 1 * MiB; e->stack = st_b; e->stream = S1; e->aux2 = st_a;
    e = gen_ev(&g, VT_EV_MARK, 11, t += 1000);
    e->str = gen_str(&g, "step 1"); e->device = -1;
    /* renumber: seq must increase strictly; 11 taken by MARK */
    e = gen_ev(&g, VT_EV_SEGMENT_ALLOC, 12, t += 1500);
    e->addr = B; e->size = 2 * MiB; e->device = 1; e->aux = VT_POOL_SMALL; e->stack = st_a;
    e = gen_ev(&g, VT_EV_ALLOC, 13, t += 700);
    e->addr = A + 8 * MiB; e->size = 4 * MiB; e->req_size = 4 * MiB; e->stream = S1;
    e->stack = st_a;
    e = gen_ev(&g, VT_EV_ALLOC, 14, t += 300);
    e->addr = B; e->size = 512 * 1024; e->req_size = 500 * 1000; e->device = 1;
    e->stack = st_a; e->thread = 2;
    e = gen_ev(&g, VT_EV_STREAM_USE, 15, t += 10);
    e->addr = B; e->stream = 0x99; e->device = 1; e->thread = 2;
    e = gen_ev(&g, VT_EV_STREAM_USE, 16, t += 10);
    e->addr = B; e->stream = 0x99; e->device = 1; e->thread = 2;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 17, t += 10);
    e->addr = B; e->size = 512 * 1024; e->device = 1; e->aux = 1; e->stack = st_b;
    e->thread = 2;
    e = gen_ev(&g, VT_EV_ALLOC, 18, t += 5);
    e->addr = A + 12 * MiB; e->size = 1 * MiB; e->req_size = 1000000; e->stream = S1;
    e->stack = st_b;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 19, t += 5);
    e->addr = A + 12 * MiB; e->size = 1 * MiB; e->stream = S1; e->stack = st_b;
    e = gen_ev(&g, VT_EV_OOM, 20, t += 5);
    e->req_size = 100ull << 30; e->aux = 1ull << 30; e->aux2 = 20 * MiB; e->stack = st_a;
    e = gen_ev(&g, VT_EV_BAD_FREE, 21, t += 5);
    e->addr = 0xdead; e->aux = VT_BAD_FREE_UNKNOWN_POINTER; e->stack = st_b;
    e = gen_ev(&g, VT_EV_TENSOR_NEW, 22, t += 5);
    e->aux = 7; e->aux2 = 0; e->addr = A + 8 * MiB; e->size = 4 * MiB;
    e->str = gen_str(&g, "weights \"w\"\n");
    e = gen_ev(&g, VT_EV_SEGMENT_ALLOC, 23, t += 5);
    e->addr = 0x30000000; e->size = 2 * MiB; e->aux = VT_POOL_SMALL;
    e = gen_ev(&g, VT_EV_SEGMENT_FREE, 24, t += 5);
    e->addr = 0x30000000; e->size = 2 * MiB;
    /* the 1 MiB block at 0x7000 was on device 0 (event device defaults 0) */
    return s;
}

/* xorshift for reproducible noise */
static inline uint64_t gen_rand(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *st = x;
}

/* A training loop of about `n` events: each step allocates L activations
 * (sizes from a fixed table, on a warm cache so the addresses repeat every
 * step), a few temporaries freed right away, then frees activations in
 * reverse while allocating gradients, plus a MARK per step. Times advance by
 * a few microseconds of noise per event. */
static inline vt__snapshot_data *gen_training(size_t n, uint64_t seed)
{
    struct snap_builder g = gen_begin();
    vt__snapshot_data *s = g.s;
    gen_device(&g, 0, "Simulated GPU 0", 80ull << 30);
    enum { L = 48 };
    uint32_t stacks[2 * L + 4];
    uint32_t f_main = gen_frame(&g, 0x401000, "/usr/bin/train", "main", "train.c", 5);
    uint32_t root = gen_node(&g, 0, f_main);
    for (int i = 0; i < 2 * L + 4; i++) {
        char fn[32];
        snprintf(fn, sizeof fn, "layer%d_%s", i % L, i < L ? "fwd" : "bwd");
        uint32_t f = gen_frame(&g, 0x402000 + 64 * (uint64_t)i, "/usr/lib/libmodel.so", fn,
                               "model.cc", 100 + (uint32_t)i);
        uint32_t f2 = gen_frame(&g, 0x7f1000000000ull + 16 * (uint64_t)i,
                                "/usr/lib/libvramtrace.so.0", "cudaMalloc", NULL, 0);
        stacks[i] = gen_node(&g, gen_node(&g, root, f), f2);
    }
    static const uint64_t table[] = { 2 * MiB, 512 * 1024, 8 * MiB, 4 * MiB, 1536, 65536,
                                      3 * MiB, 20 * MiB };
    uint64_t act_addr[L], act_size[L];
    const uint64_t base = 0x7f3a00000000ull, stream = 0x5602a8f3c0e0ull;
    uint64_t at = base;
    for (int i = 0; i < L; i++) {
        act_size[i] = table[(i * 5 + 3) % 8];
        act_addr[i] = at;
        at += act_size[i];
    }
    uint64_t grad_base = at;
    uint64_t rnd = seed | 1, seq = 1000, t = 3000000000ull;
    uint32_t mark_str = gen_str(&g, "step");
    /* the cache's segments, allocated once at the start */
    vt__event *e = gen_ev(&g, VT_EV_SEGMENT_ALLOC, seq++, t);
    e->addr = base; e->size = 4 * (grad_base - base); e->aux = VT_POOL_LARGE; e->stream = stream;
    while (s->nevents < n) {
        e = gen_ev(&g, VT_EV_MARK, seq++, t += 500 + gen_rand(&rnd) % 2000);
        e->str = mark_str; e->device = 0;
        for (int i = 0; i < L && s->nevents < n; i++) {
            e = gen_ev(&g, VT_EV_ALLOC, seq++, t += 2000 + gen_rand(&rnd) % 20000);
            e->addr = act_addr[i]; e->size = act_size[i]; e->req_size = act_size[i] - (i % 3) * 8;
            e->stream = stream; e->stack = stacks[i];
            if (i % 4 == 0) { /* a temporary */
                uint64_t ta = grad_base + 2 * (grad_base - base);
                e = gen_ev(&g, VT_EV_ALLOC, seq++, t += 500 + gen_rand(&rnd) % 3000);
                e->addr = ta; e->size = 1536; e->req_size = 1500; e->stream = stream;
                e->stack = stacks[2 * L];
                e = gen_ev(&g, VT_EV_FREE_REQUESTED, seq++, t += 500 + gen_rand(&rnd) % 3000);
                e->addr = ta; e->size = 1536; e->stream = stream; e->stack = stacks[2 * L + 1];
            }
        }
        for (int i = L - 1; i >= 0 && s->nevents < n; i--) {
            e = gen_ev(&g, VT_EV_ALLOC, seq++, t += 2000 + gen_rand(&rnd) % 20000);
            e->addr = grad_base + (act_addr[i] - base); e->size = act_size[i];
            e->req_size = act_size[i]; e->stream = stream; e->stack = stacks[L + i];
            e = gen_ev(&g, VT_EV_FREE_REQUESTED, seq++, t += 1000 + gen_rand(&rnd) % 5000);
            e->addr = act_addr[i]; e->size = act_size[i]; e->stream = stream;
            e->stack = stacks[2 * L + 2];
        }
        for (int i = 0; i < L && s->nevents < n; i++) {
            e = gen_ev(&g, VT_EV_FREE_REQUESTED, seq++, t += 300 + gen_rand(&rnd) % 2000);
            e->addr = grad_base + (act_addr[i] - base); e->size = act_size[i];
            e->stream = stream; e->stack = stacks[2 * L + 3];
        }
    }
    s->meta.events_recorded = s->nevents;
    s->meta.snapshot_time_ns = t + 1000;
    return s;
}

/* A random snapshot of n events on few addresses, with everything the
 * matching rules reconcile (lost frees, frees without their ALLOC, pending
 * frees, gaps, allocator states that do and do not agree, forks, observed
 * pools, OOMs); its state (when any) tiles segments over the same
 * addresses. */
static inline vt__snapshot_data *gen_random(uint64_t *rnd, size_t n)
{
    enum { NADDR = 12 };
    struct snap_builder g = gen_begin();
    vt__snapshot_data *s = g.s;
    s->meta.format_version = VT_FORMAT_VERSION;
    unsigned shape = (unsigned)(gen_rand(rnd) % 8);
    if (shape & 1)
        s->meta.flags |= VT_META_STATE_COMPLETE;
    if (shape & 2)
        s->meta.flags |= VT_META_POOL_OBSERVED;
    gen_device(&g, 0, "GPU 0", 80ull << 30);
    if (shape & 4)
        gen_device(&g, 1, "GPU 1", 80ull << 30);
    static const uint64_t sizes[] = { 0x100, 0x800, 0x1000 };
    uint64_t seq = 1 + gen_rand(rnd) % 50, t = 1000;
    for (size_t i = 0; i < n; i++) {
        seq += gen_rand(rnd) % 40 == 0 ? 2 + gen_rand(rnd) % 30 : 1;   /* gaps */
        t += 1 + gen_rand(rnd) % 100;
        unsigned r = (unsigned)(gen_rand(rnd) % 100);
        uint8_t kind = r < 30 ? VT_EV_ALLOC : r < 55 ? VT_EV_FREE_REQUESTED
                     : r < 65 ? VT_EV_FREE_COMPLETED : r < 71 ? VT_EV_SEGMENT_ALLOC
                     : r < 77 ? VT_EV_SEGMENT_FREE : r < 82 ? VT_EV_STREAM_USE
                     : r < 88 ? VT_EV_PASSTHROUGH : r < 92 ? VT_EV_MARK
                     : r < 93 ? VT_EV_FORK : VT_EV_OOM;
        vt__event *e = gen_ev(&g, kind, seq, t);
        e->device = (int8_t)(gen_rand(rnd) % ((shape & 4) ? 3 : 1));
        e->addr = 0x10000 + 0x1000 * (gen_rand(rnd) % NADDR);
        e->size = sizes[gen_rand(rnd) % 3];
        e->req_size = e->size;
        switch (kind) {
        case VT_EV_ALLOC:
            e->aux = gen_rand(rnd) % 2 ? VT_ALLOC_POOL_BLOCK : 0;
            break;
        case VT_EV_FREE_REQUESTED:
            e->aux = gen_rand(rnd) % 3 == 0;
            break;
        case VT_EV_SEGMENT_ALLOC:
        case VT_EV_SEGMENT_FREE:
            e->addr = 0x100000 * (1 + gen_rand(rnd) % 4);
            e->size = 0x200000;
            break;
        case VT_EV_STREAM_USE:
            e->stream = 0x99 + gen_rand(rnd) % 2;
            break;
        case VT_EV_PASSTHROUGH:
            e->aux = 1 + gen_rand(rnd) % 10;
            e->aux2 = gen_rand(rnd) % 2;
            break;
        case VT_EV_FORK:
            e->aux = 1000 + gen_rand(rnd) % 100;
            break;
        default:
            break;
        }
        seq++;
    }
    /* a state over the same addresses: blocks that agree with the events,
     * that do not, pending ones, ones allocated after the last event */
    size_t nseg = gen_rand(rnd) % 3;
    for (size_t k = 0; k < nseg; k++) {
        uint64_t base = 0x10000 + 0x1000 * (k * 4);
        gen_segment(&g, base, 4 * 0x1000, (int)(gen_rand(rnd) % 2), VT_POOL_SMALL, 0);
        if (gen_rand(rnd) % 3 == 0)   /* a private pool's (SEGMENT_POOLS, 1.14) */
            s->segments[s->nsegments - 1].private_pool = 1 + gen_rand(rnd) % 5;
        for (int j = 0; j < 4; j++) {
            uint8_t st = (uint8_t)(gen_rand(rnd) % 3);
            uint64_t aseq = 0;
            unsigned how = (unsigned)(gen_rand(rnd) % 4);
            if (how == 1 && s->nevents)
                aseq = s->events[gen_rand(rnd) % s->nevents].seq;
            else if (how == 2)
                aseq = seq + 5;
            gen_block(&g, 0x1000, st == VT_BLOCK_INACTIVE ? 0 : 0x1000, 0, aseq, 0, st);
        }
    }
    s->meta.snapshot_time_ns = t + 1;
    s->meta.events_recorded = seq;
    return s;
}

#endif /* VT_TEST_FORMAT_GEN_H */
