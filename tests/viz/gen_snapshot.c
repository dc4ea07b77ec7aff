/*
 * tests/viz/gen_snapshot.c - synthetic snapshots for the timeline tests and
 * the viz benchmark, written with vt__snapfile_write (no recorder, no CUDA).
 *
 *   gen_snapshot small OUT.vtsnap
 *       A short training run with known facts the browser test checks:
 *       weights "fc1.weight" (8 MiB) ... allocated by make_weights(), five
 *       steps separated by marks "step 1".."step 5", activations from
 *       Linear.forward, temporaries from relu, gradients from backward, and a
 *       leak: Cache.remember() keeps "cache.1".. (2 MiB each) in the dict
 *       "Cache.entries" after their only use, so `--check` finds them; and
 *       "batch.tokens", a 16 KiB view used every step, pinning the 512 KiB
 *       "batch.padded" after its base tensor is dropped (Loader.last_tokens).
 *   gen_snapshot big OUT.vtsnap NEVENTS
 *       The same shape repeated until NEVENTS events (benchmark input).
 *   gen_snapshot many OUT.vtsnap
 *       Level of detail and y-fit: "embed.weight" (16 MiB, make_weights)
 *       alive throughout; "workspace" (200 MiB, conv_workspace) alive for
 *       the first tenth only, so the later part needs a much smaller y
 *       range; 20000 buffers of 256 KiB from Tokenizer.encode, each freed
 *       40 allocations later (about 10 MiB alive at any time), every 500th
 *       named "tok.N"; every 100th token a 4 MiB "scratch" from
 *       attention_scratch that is freed right away.
 *   gen_snapshot oom OUT.vtsnap
 *       Fragmentation on a 256 MiB device: ten 20 MiB segments of four
 *       5 MiB blocks (load_batch), one of each kept, then 12 MiB blocks
 *       (forward) in segments of their own until the fifth runs out of
 *       memory (an OOM event; expandable segments fit in replay).
 *   gen_snapshot oom_leak OUT.vtsnap
 *       Fourteen marked steps on a 256 MiB device, each keeping a 16 MiB
 *       block (keep_activation) never freed, then an OOM asking 16 MiB more:
 *       the line that piled up before it.
 *   gen_snapshot oom_graph OUT.vtsnap
 *       PyTorch observed on a 256 MiB device: a CUDA graph's private pool
 *       keeps 64 MiB (32 MiB of it a free segment) when 176 MiB is asked:
 *       deleting the graph is the fix. `graph`: the same without the OOM.
 *       `oom_graph_capture`: the 176 MiB asked during that graph's capture
 *       (into its pool, format 1.15). `oom_mem_pool`: the same pool a
 *       torch.cuda.MemPool the program made (an odd id), the 176 MiB asked
 *       into it.
 *   gen_snapshot run OUT.vtsnap [LOGITS_BYTES]
 *       Shaped like a real PyTorch run (tests/torch/train_leak.py under
 *       simrun): the weights "w.0".."w.2" (8 MiB each) from setup, then
 *       3.6 s with no event (the framework's import, its kernels loading),
 *       then 30 steps "step 1".."step 30" of about 5 ms each: activations
 *       from forward, freed in backward, and the leak, one "logits" (1 MiB
 *       less 100 bytes asked for, or LOGITS_BYTES: `run OUT 4` keeps a loss)
 *       per step appended to the list "history" ("[N]") after its only
 *       use, so `--check` finds 30 storages from one cause; a 96 MiB
 *       segment the cache keeps unused (reserved far above allocated); a
 *       112-byte tracked CPU storage; the snapshot written 1 s after the
 *       last event, at exit.
 *   gen_snapshot paused OUT.vtsnap
 *       Five marked steps of a millisecond, the tool paused 40 ms at mark 2
 *       and 20 ms at mark 4 (PAUSE events, as track()'s walks record them).
 *   gen_snapshot python OUT.vtsnap
 *       Stacks as the recorder writes them in a PyTorch program: Python
 *       frames (ip 0, module "python", with their functions' first lines)
 *       spliced in at libpython's _PyEval_EvalFrameDefault frames, torch's
 *       dispatch plumbing (Module._wrapped_call_impl, _call_impl) between
 *       step() and forward(). "act.a" (at::empty) and "act.b" (at::zeros)
 *       come from forward (model.py:88, def at line 80) through two
 *       different eval-loop call sites, so folded they share one forward;
 *       "grad.w" comes from an autograd thread with no Python frames, and
 *       "c.thread" from a thread in libpython's pythread_wrapper that runs
 *       no Python code.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapfile.h"
#include "snap_builder.h"
#include "snapshot.h"

#define MiB (1024ull * 1024ull)

static vt__snapshot_data *S;
static struct snap_builder B;   /* grows S's arrays */
static uint64_t seq, now_ns = 1000000000ull, bump = 0x7f0000000000ull, reserved, reserved_used;
static uint64_t next_tensor = 1;

/* Linear dedup is fine: the generator interns a few hundred strings. */
static uint32_t str(const char *text) { return sb_str_dedup(&B, text); }

/* A stack from outermost to innermost "function@line" names; returns its id.
 * Nodes are shared by prefix like the recorder's prefix tree. */
static uint32_t stack(const char *const *fns, size_t n)
{
    uint32_t parent = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned line = 10 + 7 * (unsigned)i;
        uint32_t fname = str(fns[i]);
        uint32_t frame = UINT32_MAX;
        for (size_t f = 0; f < S->nframes; f++)
            if (S->frames[f].function == fname)
                frame = (uint32_t)f;
        if (frame == UINT32_MAX) {
            uint32_t module = str("/usr/bin/python3.11"), file = str(i == 0 ? "train.py" : "model.py");
            frame = (uint32_t)S->nframes;
            sb_frame(&B, (vt__frame){
                .ip = 0x400000 + 0x40 * frame, .module_offset = 0x40 * frame,
                .module = module, .build_id = 0, .function = fname, .file = file, .line = line,
            });
        }
        uint32_t found = 0;
        for (size_t k = 1; k < S->nstack_nodes; k++)
            if (S->stack_nodes[k].parent == parent && S->stack_nodes[k].frame == frame)
                found = (uint32_t)k;
        if (!found) {
            if (S->nstack_nodes == 0)
                sb_node(&B, 0, 0);
            found = sb_node(&B, parent, frame);
        }
        parent = found;
    }
    return parent;
}
#define STACK(...) stack((const char *const[]){ __VA_ARGS__ }, sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *))

static vt__event *ev(uint8_t kind)
{
    vt__event *e = sb_event(&B);
    now_ns += 20000 + (seq * 7919) % 30000;   /* 20-50 us apart, deterministic */
    *e = (vt__event){ .seq = ++seq, .time_ns = now_ns, .thread = 1, .kind = kind, .device = 0 };
    return e;
}

/* A block for `req` bytes asked for: 512-byte rounded, as PyTorch's cache
 * rounds. */
static uint64_t alloc_req(uint64_t req, uint32_t stk, uint64_t stream)
{
    uint64_t size = (req + 511) & ~511ull;
    if (reserved_used + size > reserved) {
        uint64_t seg = size > 32 * MiB ? size : 32 * MiB;
        vt__event *e = ev(VT_EV_SEGMENT_ALLOC);
        e->addr = bump + reserved;
        e->size = seg;
        e->aux = VT_POOL_LARGE;
        e->stream = stream;
        reserved += seg;
    }
    uint64_t addr = bump + reserved_used;
    reserved_used += size;
    vt__event *e = ev(VT_EV_ALLOC);
    e->addr = addr;
    e->size = size;
    e->req_size = req;
    e->stack = stk;
    e->stream = stream;
    return addr;
}

/* A block of `size` (rounded up to 512 bytes), 100 bytes fewer asked for. */
static uint64_t alloc(uint64_t size, uint32_t stk, uint64_t stream)
{
    return alloc_req(((size + 511) & ~511ull) - 100, stk, stream);
}

/* An allocation at a chosen address inside space already reserved. */
static uint64_t alloc_at(uint64_t addr, uint64_t size, uint32_t stk)
{
    vt__event *e = ev(VT_EV_ALLOC);
    e->addr = addr;
    e->size = size;
    e->req_size = size - 100;
    e->stack = stk;
    return addr;
}

/* Frees never hand space back to the bump pointer: addresses stay unique,
 * which is all the timeline needs (reserved grows like a cache that never
 * releases; the gap is the "unused in cache" the segments view shows). */
static void release(uint64_t addr, uint64_t size, uint32_t stk, uint64_t stream)
{
    vt__event *e = ev(VT_EV_FREE_REQUESTED);
    e->addr = addr;
    e->size = (size + 511) & ~511ull;
    e->stack = stk;
    e->stream = stream;
}

static uint64_t tensor(const char *name, uint64_t addr, uint64_t size)
{
    vt__event *e = ev(VT_EV_TENSOR_NEW);
    e->aux = next_tensor++;
    e->addr = addr;
    e->size = size;
    e->str = str(name);
    return e->aux;
}

static void mark(const char *label)
{
    ev(VT_EV_MARK)->str = str(label);
}

/* Reuse the space of a finished step in the big run (everything above the
 * weights and leaks is free again), or reserved would grow without bound. */
static void reuse_step_space(uint64_t live_floor)
{
    reserved_used = live_floor;
}

/* A new snapshot in S (built through B): the metadata of a run of
 * `command_line` as process `pid` on one simulated 16 GiB GPU. */
static void begin_snapshot(uint32_t pid, const char *command_line)
{
    S = calloc(1, sizeof *S);
    B = (struct snap_builder){ .s = S };
    str("");
    S->meta.format_version = 1;
    S->meta.pid = pid;
    S->meta.rank = -1;
    S->meta.host = str("testhost");
    S->meta.command_line = str(command_line);
    S->meta.config = str("cache:1");
    S->meta.library_version = str("0.1.0");
    S->meta.clock_base_monotonic_ns = now_ns;
    S->meta.clock_base_realtime_ns = 1700000000000000000ull;
    S->devices = calloc(1, sizeof *S->devices);
    S->ndevices = 1;
    S->devices[0] = (vt__snap_device){ .ordinal = 0, .name = str("Simulated GPU"),
                                       .total_bytes = 16384 * MiB };
}

static void generate(int big, size_t target_events)
{
    begin_snapshot(4242, big ? "python bench_train.py --events many" : "python train.py --demo");

    const uint64_t s_main = 0, s_side = 0x5000;
    uint32_t st_w = STACK("main", "setup", "make_weights");
    uint32_t st_act = STACK("main", "train_step", "forward", "Linear.forward");
    uint32_t st_relu = STACK("main", "train_step", "forward", "relu");
    uint32_t st_grad = STACK("main", "train_step", "backward", "autograd_engine");
    uint32_t st_free = STACK("main", "train_step", "backward", "free_activations");
    uint32_t st_leak = STACK("main", "train_step", "Cache.remember");
    uint32_t st_opt = STACK("main", "train_step", "optimizer_step");
    uint32_t st_use = STACK("main", "train_step", "forward", "matmul");

    /* Weights. */
    static const char *const wnames[] = { "fc1.weight", "fc2.weight", "fc3.weight", "fc4.weight" };
    uint64_t wt[4];
    for (int i = 0; i < 4; i++) {
        uint64_t a = alloc(8 * MiB - 512 * (uint64_t)i, st_w, s_main);
        wt[i] = tensor(wnames[i], a, 8 * MiB - 512 * (uint64_t)i);
    }
    uint64_t holder = next_tensor++;
    {
        vt__event *e = ev(VT_EV_HOLDER_NEW);
        e->aux = holder;
        e->str = str("Cache.entries");
    }
    /* Memory the cache does not serve, small run only: a managed grid kept to
     * the end and a pinned staging buffer released. */
    if (!big) {
        uint32_t st_grid = STACK("main", "setup", "make_managed_grid");
        vt__event *e = ev(VT_EV_PASSTHROUGH);
        e->addr = 0x7e0000000000ull;
        e->size = e->req_size = 24 * MiB;
        e->aux = VT_PASS_MANAGED;
        e->stack = st_grid;
        e = ev(VT_EV_PASSTHROUGH);
        e->addr = 0x7f1000000000ull;
        e->size = e->req_size = 2 * MiB;
        e->aux = VT_PASS_HOST;
        e->stack = st_w;
        e = ev(VT_EV_PASSTHROUGH);
        e->addr = 0x7f1000000000ull;
        e->aux = VT_PASS_HOST;
        e->aux2 = 1;
    }
    /* A second leak shape, small run only: a padded batch whose base tensor
     * is dropped while a small view of it, kept in Loader.last_tokens and
     * used every step, pins the whole buffer (the checker's "pinned" rule). */
    uint64_t pinned_view = 0;
    if (!big) {
        uint32_t st_batch = STACK("main", "load_batch", "pad_batch");
        uint64_t a = alloc(512 * 1024, st_batch, s_main);
        uint64_t base = tensor("batch.padded", a, 512 * 1024);
        pinned_view = tensor("batch.tokens", a, 16 * 1024);
        S->events[S->nevents - 1].aux2 = base;           /* a view of the batch */
        uint64_t loader = next_tensor++;
        vt__event *h = ev(VT_EV_HOLDER_NEW);
        h->aux = loader;
        h->str = str("Loader");
        vt__event *r = ev(VT_EV_REF);
        r->aux = loader;
        r->aux2 = pinned_view;
        r->str = str(".last_tokens");
        ev(VT_EV_TENSOR_DROP)->aux = base;
    }
    uint64_t live_floor = reserved_used;

    size_t nacts = big ? 60 : 3;
    uint64_t *acts = calloc(nacts, sizeof *acts), *asz = calloc(nacts, sizeof *asz);
    for (unsigned step = 1;; step++) {
        if (!big && step > 5)
            break;
        if (big && S->nevents >= target_events)
            break;
        char label[64];
        snprintf(label, sizeof label, "step %u", step);
        mark(label);
        for (int i = 0; i < 4 && (!big || step % 50 == 1); i++) {
            vt__event *u = ev(VT_EV_TENSOR_USE);   /* weights are used every step */
            u->aux = wt[i];
            u->stack = st_use;
        }
        if (pinned_view) {
            vt__event *u = ev(VT_EV_TENSOR_USE);   /* the view stays in use */
            u->aux = pinned_view;
            u->stack = st_use;
        }
        /* The leak: remembered after its only use. */
        {
            char n[32];
            snprintf(n, sizeof n, "cache.%u", step);
            uint64_t a = alloc(2 * MiB, st_leak, s_main);
            if (!big || step % 50 == 1) {
                uint64_t t = tensor(n, a, 2 * MiB);
                vt__event *r = ev(VT_EV_REF);
                r->aux = holder;
                r->aux2 = t;
                char lab[48];
                snprintf(lab, sizeof lab, "['%s']", n);
                r->str = str(lab);   /* only the dict keeps it after this */
            }
            live_floor = reserved_used;
        }
        for (size_t i = 0; i < nacts; i++) {
            asz[i] = (big ? (256 + 97 * ((i * 31 + step) % 64)) * 1024ull : 4 * MiB);
            acts[i] = alloc(asz[i], st_act, s_main);
            if (!big) {
                char n[32];
                snprintf(n, sizeof n, "act%zu", i + 1);
                uint64_t t = tensor(n, acts[i], asz[i]);
                vt__event *u = ev(VT_EV_TENSOR_USE);
                u->aux = t;
                u->stack = st_use;
            }
            uint64_t tmp = alloc(1 * MiB, st_relu, s_main);
            release(tmp, 1 * MiB, st_relu, s_main);
        }
        uint64_t g = alloc(big ? 3 * MiB : 6 * MiB, st_grad, s_side);
        {
            vt__event *e = ev(VT_EV_STREAM_USE);
            e->addr = g;
            e->stream = s_main;
        }
        for (size_t i = nacts; i-- > 0;)
            release(acts[i], asz[i], st_free, s_main);
        uint64_t o = alloc(big ? 512 * 1024 : 2 * MiB, st_opt, s_main);
        release(o, big ? 512 * 1024 : 2 * MiB, st_opt, s_main);
        release(g, big ? 3 * MiB : 6 * MiB, st_grad, s_side);
        if (big)
            reuse_step_space(live_floor);
    }
    mark("end");
    free(acts);
    free(asz);
    S->meta.snapshot_time_ns = now_ns + 1000000;
    S->meta.events_recorded = S->nevents;
}

static void generate_many(void)
{
    begin_snapshot(4343, "python tokenize.py --many-small");

    uint32_t st_w = STACK("main", "setup", "make_weights");
    uint32_t st_ws = STACK("main", "warmup", "conv_workspace");
    uint32_t st_tok = STACK("main", "load_batch", "Tokenizer.encode");
    uint32_t st_tfree = STACK("main", "load_batch", "Tokenizer.release");
    uint32_t st_scr = STACK("main", "forward", "attention_scratch");

    uint64_t w = alloc(16 * MiB, st_w, 0);
    tensor("embed.weight", w, 16 * MiB);
    uint64_t ws_seg = bump + reserved;   /* alloc() reserves a segment of its own for it */
    uint64_t ws = alloc(200 * MiB, st_ws, 0);
    tensor("workspace", ws, 200 * MiB);
    mark("start");

    /* Tokens live in a ring of WINDOW slots and the scratch in one more, in
     * a segment of their own: a slot is freed before it is used again. */
    enum { NTOK = 20000, WINDOW = 40 };
    static uint64_t ring[WINDOW];
    uint64_t region = bump + reserved;
    {
        vt__event *e = ev(VT_EV_SEGMENT_ALLOC);
        e->addr = region;
        e->size = 16 * MiB;
        e->aux = VT_POOL_LARGE;
        reserved += 16 * MiB;
    }
    for (unsigned i = 0; i < NTOK; i++) {
        if (i == NTOK / 10) {
            release(ws, 200 * MiB, st_ws, 0);
            vt__event *e = ev(VT_EV_SEGMENT_FREE);   /* and the cache hands it back */
            e->addr = ws_seg;
            e->size = 200 * MiB;
            e->aux = VT_POOL_LARGE;
            mark("workspace freed");
        }
        if (i >= WINDOW)
            release(ring[i % WINDOW], 256 * 1024, st_tfree, 0);
        ring[i % WINDOW] = alloc_at(region + (i % WINDOW) * 256 * 1024, 256 * 1024, st_tok);
        if (i % 500 == 0) {
            char n[32];
            snprintf(n, sizeof n, "tok.%u", i);
            tensor(n, ring[i % WINDOW], 256 * 1024);
        }
        if (i % 100 == 50) {
            uint64_t a = alloc_at(region + 12 * MiB, 4 * MiB, st_scr);
            release(a, 4 * MiB, st_scr, 0);
        }
    }
    mark("end");
    S->meta.snapshot_time_ns = now_ns + 1000000;
    S->meta.events_recorded = S->nevents;
}

/* One frame of the "python" snapshot: a Python one when `module` is NULL
 * (file:line function, first line `first`), else a native one. */
static uint32_t frame_of(const char *module, const char *file, unsigned line, const char *fn,
                         unsigned first)
{
    uint64_t ip = module ? 0x7f1000000000ull + 0x100 * S->nframes : 0;
    return sb_frame(&B, (vt__frame){
        .ip = ip, .module_offset = ip ? 0x100 * S->nframes : 0,
        .module = str(module ? module : "python"), .function = str(fn),
        .file = file ? str(file) : 0, .line = line, .first_line = first,
    });
}

/* A stack of frames given outermost first, nodes shared by prefix. */
static uint32_t stack_frames(const uint32_t *frames, size_t n)
{
    uint32_t parent = 0;
    if (S->nstack_nodes == 0)
        sb_node(&B, 0, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t found = 0;
        for (size_t k = 1; k < S->nstack_nodes && !found; k++)
            if (S->stack_nodes[k].parent == parent && S->stack_nodes[k].frame == frames[i])
                found = (uint32_t)k;
        parent = found ? found : sb_node(&B, parent, frames[i]);
    }
    return parent;
}
#define FRAMES(...) stack_frames((const uint32_t[]){ __VA_ARGS__ }, \
                                 sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t))

static void generate_python(void)
{
    S = calloc(1, sizeof *S);
    B = (struct snap_builder){ .s = S };
    str("");
    S->meta.pid = 4444;
    S->meta.rank = -1;
    S->meta.host = str("testhost");
    S->meta.command_line = str("python train.py");
    S->meta.config = str("cache:1,stacks:all");
    S->meta.library_version = str("0.1.0");
    S->meta.clock_base_monotonic_ns = now_ns;
    S->devices = calloc(1, sizeof *S->devices);
    S->ndevices = 1;
    S->devices[0] = (vt__snap_device){ .ordinal = 0, .name = str("Simulated GPU"),
                                       .total_bytes = 16384 * MiB };

    const char *py = "/usr/lib/libpython3.11.so.1.0", *exe = "/usr/bin/python3.11";
    const char *torch = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so";
    const char *mod = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py";
    uint32_t start = frame_of(exe, NULL, 0, "_start", 0);
    uint32_t run_main = frame_of(py, NULL, 0, "Py_RunMain", 0);
    uint32_t eval_a = frame_of(py, NULL, 0, "_PyEval_EvalFrameDefault", 0);
    uint32_t eval_b = frame_of(py, NULL, 0, "_PyEval_EvalFrameDefault", 0);   /* another call site */
    uint32_t eval_c = frame_of(py, NULL, 0, "_PyEval_EvalFrameDefault", 0);
    uint32_t vectorcall = frame_of(py, NULL, 0, "_PyObject_Vectorcall", 0);
    uint32_t top = frame_of(NULL, "train.py", 41, "<module>", 1);
    uint32_t step = frame_of(NULL, "train.py", 30, "step", 28);
    uint32_t wrapped = frame_of(NULL, mod, 1736, "_wrapped_call_impl", 1734);
    uint32_t call_impl = frame_of(NULL, mod, 1747, "_call_impl", 1740);
    uint32_t forward = frame_of(NULL, "model.py", 88, "forward", 80);
    uint32_t empty = frame_of(torch, NULL, 0, "at::empty", 0);
    uint32_t zeros = frame_of(torch, NULL, 0, "at::zeros", 0);
    uint32_t thread = frame_of("/usr/lib/libc.so.6", NULL, 0, "start_thread", 0);
    uint32_t engine = frame_of(torch, NULL, 0, "torch::autograd::Engine::thread_main", 0);

    uint32_t st_a = FRAMES(start, run_main, eval_a, top, step, eval_b, wrapped, call_impl, eval_c,
                           forward, vectorcall, empty);
    uint32_t st_b = FRAMES(start, run_main, eval_a, top, step, eval_c, wrapped, call_impl, eval_b,
                           forward, vectorcall, zeros);
    uint32_t st_grad = FRAMES(thread, engine, empty);
    /* A thread the interpreter started that runs no Python code: nothing of
     * its stack is folded, the interpreter's frame included. */
    uint32_t st_cthread = FRAMES(thread, frame_of(py, NULL, 0, "pythread_wrapper", 0), empty);

    uint64_t a = alloc(24 * MiB, st_a, 0);
    tensor("act.a", a, 24 * MiB);
    uint64_t b = alloc(8 * MiB, st_b, 0);
    tensor("act.b", b, 8 * MiB);
    uint64_t g = alloc(4 * MiB, st_grad, 0);
    S->events[S->nevents - 1].thread = 2;   /* the autograd thread */
    tensor("grad.w", g, 4 * MiB);
    uint64_t c = alloc(2 * MiB, st_cthread, 0);
    S->events[S->nevents - 1].thread = 3;
    tensor("c.thread", c, 2 * MiB);
    /* Made inside a framework the program's line called (transformers'
     * Trainer gathering every batch's logits): the call site names both. */
    uint32_t gather = frame_of(NULL, "/venv/lib/python3.11/site-packages/transformers/"
                               "trainer_pt_utils.py", 86, "torch_pad_and_concatenate", 70);
    uint32_t st_lib = FRAMES(start, run_main, eval_a, top, step, eval_b, gather, vectorcall, empty);
    uint64_t d = alloc(1 * MiB, st_lib, 0);
    tensor("logits.all", d, 1 * MiB);
    S->meta.snapshot_time_ns = now_ns + 1000000;
    S->meta.events_recorded = S->nevents;
}

/* Degenerate snapshots the page must still draw cleanly: "empty" (no event
 * at all), "one" (a single allocation, never freed), "marks" (only marks, no
 * allocation), "huge" (a 2000-character tensor name, mark labels and
 * function names, a 300-frame stack). */
static void generate_run(uint64_t logits_bytes)
{
    begin_snapshot(4444, "python train_leak.py leak --steps 30");
    uint32_t st_w = STACK("<module>", "setup", "Linear.__init__");
    uint32_t st_act = STACK("<module>", "step", "forward", "linear");
    uint32_t st_logits = STACK("<module>", "step", "forward", "logits");
    uint32_t st_grad = STACK("<module>", "step", "backward", "autograd_engine");
    uint32_t st_cpu = STACK("<module>", "setup", "seed_table");
    uint64_t w[3];
    for (int i = 0; i < 3; i++) {
        char n[16];
        snprintf(n, sizeof n, "w.%d", i);
        w[i] = tensor(n, alloc(8 * MiB, st_w, 0), 8 * MiB);
    }
    {
        vt__event *e = ev(VT_EV_STORAGE_EXTERNAL);   /* a tiny CPU tensor under track() */
        e->addr = 0x5500000000ull;
        e->size = 112;
        e->device = -1;
        e->stack = st_cpu;
    }
    uint64_t history = next_tensor++;
    {
        vt__event *e = ev(VT_EV_HOLDER_NEW);
        e->aux = history;
        e->str = str("history");
    }
    now_ns += 3600000000ull;   /* the quiet start */
    {
        vt__event *e = ev(VT_EV_SEGMENT_ALLOC);   /* kept by the cache, never used */
        e->addr = 0x7a0000000000ull;
        e->size = 96 * MiB;
        e->aux = VT_POOL_LARGE;
    }
    for (unsigned step = 1; step <= 30; step++) {
        char label[32];
        snprintf(label, sizeof label, "step %u", step);
        mark(label);
        for (int i = 0; i < 3; i++) {
            vt__event *u = ev(VT_EV_TENSOR_USE);
            u->aux = w[i];
            u->stack = st_act;
        }
        uint64_t acts[4];
        for (int i = 0; i < 4; i++)
            acts[i] = alloc(4 * MiB, st_act, 0);
        uint64_t a = alloc_req(logits_bytes, st_logits, 0);
        uint64_t t = tensor("logits", a, logits_bytes);
        vt__event *u = ev(VT_EV_TENSOR_USE);
        u->aux = t;
        u->stack = st_logits;
        uint64_t g = alloc(6 * MiB, st_grad, 0);
        for (int i = 4; i-- > 0;)
            release(acts[i], 4 * MiB, st_grad, 0);
        release(g, 6 * MiB, st_grad, 0);
        vt__event *r = ev(VT_EV_REF);
        r->aux = history;
        r->aux2 = t;
        char lab[16];
        snprintf(lab, sizeof lab, "[%u]", step - 1);
        r->str = str(lab);
        now_ns += 5000000;   /* the step's kernels */
    }
    S->meta.snapshot_time_ns = now_ns + 1000000000ull;
    S->meta.events_recorded = S->nevents;
}

static void generate_edge(const char *kind)
{
    S = calloc(1, sizeof *S);
    B = (struct snap_builder){ .s = S };
    str("");
    S->meta.format_version = 1;
    S->meta.pid = 7;
    S->meta.rank = -1;
    S->meta.host = str("testhost");
    S->meta.command_line = str(kind);
    S->meta.clock_base_monotonic_ns = now_ns;
    S->devices = calloc(1, sizeof *S->devices);
    S->ndevices = 1;
    S->devices[0] = (vt__snap_device){ .ordinal = 0, .name = str("Simulated GPU"),
                                       .total_bytes = 16384 * MiB };
    if (!strcmp(kind, "one")) {
        uint64_t a = alloc(3 * MiB, STACK("main", "only_alloc"), 0);
        tensor("the.only", a, 3 * MiB);
    } else if (!strcmp(kind, "marks")) {
        mark("step 1");
        mark("step 2");
        mark("step 3");
    } else if (!strcmp(kind, "oom")) {
        /* A cache pinned by one 5 MiB block in every 20 MiB segment runs
         * out of memory for a 12 MiB one on a 256 MiB device (as
         * tests/replay/frag_prog.c's "pins", which expandable segments fit) */
        S->devices[0].total_bytes = 256 * MiB;
        uint32_t st_small = STACK("main", "load_batch"), st_big = STACK("main", "forward");
        uint32_t st_drop = STACK("main", "drop_batch");
        uint64_t base = bump, res = 0;
        for (int s = 0; s < 10; s++) {
            vt__event *g = ev(VT_EV_SEGMENT_ALLOC);
            g->addr = base + res;
            g->size = 20 * MiB;
            g->aux = VT_POOL_LARGE;
            for (int b = 0; b < 4; b++)
                alloc_at(base + res + (uint64_t)b * 5 * MiB, 5 * MiB, st_small);
            res += 20 * MiB;
        }
        for (int s = 0; s < 10; s++)
            for (int b = 0; b < 4; b++)
                if (b != 1)
                    release(base + (uint64_t)s * 20 * MiB + (uint64_t)b * 5 * MiB, 5 * MiB,
                            st_drop, 0);
        for (int k = 0; k < 4; k++) {
            vt__event *g = ev(VT_EV_SEGMENT_ALLOC);
            g->addr = base + res;
            g->size = 12 * MiB;
            g->aux = VT_POOL_LARGE;
            alloc_at(base + res, 12 * MiB, st_big);
            res += 12 * MiB;
        }
        vt__event *o = ev(VT_EV_OOM);
        o->req_size = o->size = 12 * MiB;
        o->stack = st_big;
        o->aux = 256 * MiB - res;   /* the device's free bytes */
        o->aux2 = res;              /* reserved by the cache */
    } else if (!strcmp(kind, "oom_graph") || !strcmp(kind, "graph") ||
               !strcmp(kind, "oom_graph_capture") || !strcmp(kind, "oom_mem_pool")) {
        /* PyTorch observed on a 256 MiB device: a 32 MiB tensor in its
         * default pool, a step captured in a CUDA graph whose private pool
         * (SEGMENT_ALLOC aux2, format 1.14) keeps two 32 MiB segments, one
         * holding the graph's output, the other freed; then 176 MiB asked:
         * deleting the graph is the fix. */
        S->devices[0].total_bytes = 256 * MiB;
        S->meta.flags |= VT_META_POOL_OBSERVED;
        uint32_t st_x = STACK("main", "make_input"), st_cap = STACK("main", "capture_step");
        uint32_t st_big = STACK("main", "load_table");
        const uint64_t base = 0x7f0000000000ull, seg = 32 * MiB;
        /* the graph's own pool (even: {3, 0}), or a MemPool's (odd: {3, 1}) */
        const uint64_t pool = !strcmp(kind, "oom_mem_pool") ? 7 : 6;
        for (int s = 0; s < 3; s++) {
            vt__event *g = ev(VT_EV_SEGMENT_ALLOC);
            g->addr = base + (uint64_t)s * seg;
            g->size = seg;
            g->aux = VT_POOL_LARGE;
            g->aux2 = s ? pool : 0;
            g->stack = s ? st_cap : st_x;
            alloc_at(g->addr, seg, s ? st_cap : st_x);
            S->events[S->nevents - 1].aux = VT_ALLOC_POOL_BLOCK;
        }
        release(base + 2 * seg, seg, st_cap, 0);   /* the capture's intermediate */
        if (!strcmp(kind, "graph"))
            goto done;   /* no OOM: a page the streamed render writes */
        vt__event *o = ev(VT_EV_OOM);
        o->req_size = o->size = 176 * MiB;
        o->addr = VT_OOM_FRAMEWORK;     /* PyTorch's own request */
        if (!strcmp(kind, "oom_graph_capture") || !strcmp(kind, "oom_mem_pool"))
            o->addr |= VT_OOM_IN_POOL(pool);   /* asked during the capture, into the pool */
        o->stack = st_big;
        o->aux = 256 * MiB - 3 * seg;   /* the device's free bytes */
        o->aux2 = 3 * seg;              /* reserved by the cache */
    } else if (!strcmp(kind, "oom_leak")) {
        /* A training loop that keeps a 16 MiB activation each step and never
         * frees it (its temporaries come and go) runs out of memory on a
         * 256 MiB device: the kept line piled up before the OOM. */
        S->devices[0].total_bytes = 256 * MiB;
        uint32_t st_keep = STACK("main", "train_step", "keep_activation");
        uint32_t st_tmp = STACK("main", "train_step", "temporary");
        uint32_t st_drop = STACK("main", "train_step", "drop_temporary");
        uint64_t req = 0;
        for (int step = 1; step <= 14; step++) {
            char lab[16];
            snprintf(lab, sizeof lab, "step %d", step);
            mark(lab);
            uint64_t t = alloc(MiB, st_tmp, 0);
            alloc(16 * MiB, st_keep, 0);
            release(t, MiB, st_drop, 0);
            req = 16 * MiB;
        }
        vt__event *o = ev(VT_EV_OOM);
        o->req_size = o->size = req;
        o->stack = st_keep;
        o->aux = 256 * MiB - reserved;   /* the device's free bytes */
        o->aux2 = reserved;              /* reserved by the cache */
    } else if (!strcmp(kind, "observed")) {
        /* `vramtrace run` on a torch program: PyTorch's caching allocator
         * observed. Its tensors' blocks (VT_ALLOC_POOL_BLOCK) in a segment
         * it reserved; beside them cuBLAS's own: a 32 MiB workspace kept
         * and two 8 MiB ones in turn (at most 40 MiB at once), outside its
         * pool; PyTorch's cuBLASLt workspace, a block of its pool no tensor
         * owns; and a pinned host buffer the cache never served. */
        S->meta.flags |= VT_META_POOL_OBSERVED;
        uint32_t st_fwd = STACK("main", "forward"), st_blas = STACK("main", "forward", "cublasCreate_v2");
        for (int i = 0; i < 3; i++) {
            uint64_t a = alloc(2 * MiB, st_fwd, 0);
            S->events[S->nevents - 1].aux = VT_ALLOC_POOL_BLOCK;   /* alloc's ALLOC */
            tensor("activation", a, 2 * MiB);
        }
        alloc(4 * MiB, STACK("main", "forward", "at::cuda::getCUDABlasLtWorkspace()"), 0);
        S->events[S->nevents - 1].aux = VT_ALLOC_POOL_BLOCK;
        uint64_t lib = 0x7e8000000000ull;
        uint64_t ws[3] = { 32 * MiB, 8 * MiB, 8 * MiB };
        for (int i = 0; i < 3; i++) {
            if (i == 2) {   /* cudaFree of the second: its block and its segment */
                release(lib - ws[1], ws[1], st_blas, 0);
                vt__event *f = ev(VT_EV_SEGMENT_FREE);
                f->addr = lib - ws[1];
                f->size = ws[1];
                f->aux = VT_POOL_LARGE;
            }
            vt__event *g = ev(VT_EV_SEGMENT_ALLOC);
            g->addr = lib;
            g->size = ws[i];
            g->aux = VT_POOL_LARGE;
            alloc_at(lib, ws[i], st_blas);
            lib += ws[i];
        }
        vt__event *e = ev(VT_EV_PASSTHROUGH);
        e->addr = 0x7f1000000000ull;
        e->size = e->req_size = 3 * MiB;
        e->aux = VT_PASS_HOST;
        e->stack = st_fwd;
    } else if (!strcmp(kind, "paused")) {
        /* Five marked steps of about a millisecond; the tracker walked for
         * holders at marks 2 and 4 (PAUSE: its end time and its length),
         * 40 and 20 ms of the tool's time inside the program's. */
        uint32_t st_fwd = STACK("main", "forward");
        for (int step = 1; step <= 5; step++) {
            char label[16];
            snprintf(label, sizeof label, "step %d", step);
            mark(label);
            if (step == 2 || step == 4) {
                uint64_t len = step == 2 ? 40000000ull : 20000000ull;
                vt__event *p = ev(VT_EV_PAUSE);
                now_ns += len;
                p->time_ns = now_ns;
                p->aux = len;
            }
            uint64_t a = alloc(2 * MiB, st_fwd, 0);
            now_ns += 1000000;
            release(a, 2 * MiB, st_fwd, 0);
        }
    } else if (!strcmp(kind, "by_hand")) {
        /* A training loop that steps its parameters by hand (no optimizer
         * step: no mark): each step a forward's block, then its backward
         * pass's, made and freed under the autograd engine's thread; a
         * last forward after the fourth pass. */
        uint32_t st_fwd = STACK("main", "forward");
        uint32_t st_bwd = STACK("torch::autograd::Engine::thread_main", "MmBackward0::apply", "mm");
        for (int step = 0; step < 4; step++) {
            uint64_t a = alloc(2 * MiB, st_fwd, 0);
            uint64_t g = alloc(MiB, st_bwd, 0);
            release(g, MiB, st_bwd, 0);
            release(a, 2 * MiB, st_fwd, 0);
        }
        alloc(2 * MiB, st_fwd, 0);
    } else if (!strcmp(kind, "huge")) {
        static char big[2001];
        memset(big, 'x', sizeof big - 1);
        memcpy(big, "huge_", 5);
        const char *deep[300];
        for (int i = 0; i < 300; i++)
            deep[i] = i % 2 ? "recurse" : "descend";
        deep[0] = "main";
        deep[299] = big;   /* a 2000-character function name */
        uint32_t st_deep = stack(deep, 300);
        mark(big);
        for (int i = 0; i < 6; i++) {
            uint64_t a = alloc((uint64_t)(i + 1) * MiB, st_deep, 0);
            tensor(big, a, (uint64_t)(i + 1) * MiB);
            mark(big);
            if (i % 2)
                release(a, (uint64_t)(i + 1) * MiB, STACK("main", "drop"), 0);
        }
    }
done:
    S->meta.snapshot_time_ns = now_ns + 1000000;
    S->meta.events_recorded = S->nevents;
}

int main(int argc, char **argv)
{
    static const char *const kinds[] = { "small", "big", "many", "empty", "one", "marks", "huge",
                                         "python", "oom", "oom_leak", "oom_graph", "oom_graph_capture", "oom_mem_pool", "graph", "run",
                                         "observed",
                                         "by_hand", "paused" };
    int known = 0;
    for (size_t i = 0; argc >= 3 && i < sizeof kinds / sizeof *kinds; i++)
        known |= !strcmp(argv[1], kinds[i]);
    if (!known) {
        fprintf(stderr, "usage: gen_snapshot small OUT | gen_snapshot big OUT NEVENTS | gen_snapshot many OUT\n"
                        "       gen_snapshot empty|one|marks|huge|python|oom|oom_leak|oom_graph|graph|observed|by_hand|paused OUT | gen_snapshot run OUT [LOGITS_BYTES]\n");
        return 2;
    }
    int big = !strcmp(argv[1], "big");
    if (!strcmp(argv[1], "many"))
        generate_many();
    else if (!strcmp(argv[1], "python"))
        generate_python();
    else if (!strcmp(argv[1], "run"))
        generate_run(argc > 3 ? (uint64_t)strtoull(argv[3], NULL, 10) : MiB - 100);
    else if (strcmp(argv[1], "small") && !big)
        generate_edge(argv[1]);
    else
        generate(big, big && argc > 3 ? (size_t)strtoull(argv[3], NULL, 10) : 0);
    char err[512];
    int rc = vt__snapfile_write(S, argv[2], err, sizeof err);
    if (rc) {
        fprintf(stderr, "gen_snapshot: %s\n", err);
        return 1;
    }
    printf("%s: %zu events, %zu stack nodes, %zu strings\n", argv[2], S->nevents, S->nstack_nodes, S->nstrings);
    vt__snapshot_free(S);
    return 0;
}
