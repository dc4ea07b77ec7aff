/* tests/check/check_shapes.h - the traces the checker's tests run on: each
 * leak shape with its fixed twin (and the native and pinned shapes), built
 * with synth.h on the standard training loop of check_fixture.h. Shared by
 * the per-rule tests and the report tests. */
#ifndef VT_TESTS_CHECK_SHAPES_H
#define VT_TESTS_CHECK_SHAPES_H

#include "check_fixture.h"

#define ACT1 0x7f2000000000ull
#define ACT2 0x7f2000100000ull

/* Two activations made in forward: act1 (1 MiB at ACT1, tensor 100) and
 * act2 (2 MiB at ACT2, tensor 101), named as given. */
static inline void new_act_pair(synth *y, const char *name1, const char *name2)
{
    synth_new_tensor(y, 100, ACT1, 1 * MiB, name1, st_fwd);
    synth_new_tensor(y, 101, ACT2, 2 * MiB, name2, st_fwd);
}

/* Two objects linking each other, each holding an activation: freed only by
 * the gc pass in step 6. Fixed: no cycle, freed right after backward. */
static inline void gc_cycle(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            new_act_pair(y, "act1", "act2");
            synth_holder(y, 500, "A");
            synth_holder(y, 501, "B");
            synth_ref(y, 500, 100, ".saved");
            synth_ref(y, 501, 101, ".saved");
            if (!fixed) {
                synth_ref(y, 500, 501, ".next");
                synth_ref(y, 501, 500, ".prev");
            }
            synth_use_at(y, 100, st_bwd);
            synth_use_at(y, 101, st_bwd);
        }
        if (i == (fixed ? 2 : 6)) {
            if (!fixed) {   /* gc collects the cycle */
                synth_unref(y, 500, 501);
                synth_unref(y, 501, 500);
            }
            synth_release(y, 500, 100, ACT1);
            synth_release(y, 501, 101, ACT2);
        }
    }
}

#define CACHE 0x7f3000000000ull

/* A closure stored on the object captures the object itself: when the frame
 * lets go, the cycle keeps the object's cache until gc. Fixed: the closure
 * holds a weak reference (no edge), refcounting frees everything at once. */
static inline void closure_self(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 600, "frame train_step");
            synth_held(y, 601, "Trainer", 600, "['trainer']");
            synth_holder(y, 602, "<closure>");
            synth_holder(y, 603, "cell");
            synth_ref(y, 601, 602, ".hook");
            synth_ref(y, 602, 603, ".__closure__[0]");
            if (!fixed)
                synth_ref(y, 603, 601, ".cell_contents");
            synth_new_tensor(y, 110, CACHE, 8 * MiB, "cache", st_fwd);
            synth_ref(y, 601, 110, ".cache");
            synth_use(y, 110);
            synth_unref(y, 600, 601);   /* the frame returns */
        }
        if (i == (fixed ? 2 : 7)) {
            if (!fixed)   /* gc breaks the cycle */
                synth_unref(y, 603, 601);
            synth_release(y, 601, 110, CACHE);
        }
    }
}

#define BASE 0x7f4000000000ull
#define ZC 0x7f5000000000ull

/* Step i's logits (8 MiB, tensor 100 + i) made and used, then kept in the
 * list `holder` at [i - 1]: called each step, one storage a step that one
 * bug keeps. */
static inline void keep_logits(synth *y, int i, uint64_t holder)
{
    uint64_t t = 100 + (uint64_t)i;
    synth_made(y, t, 0x7f2000000000ull + (uint64_t)i * 0x10000000ull, 8 * MiB, "logits",
               st_fwd);
    synth_ref(y, holder, t, item_label(i - 1));
}

/* A 1 MiB view kept in a list pins the whole 64 MiB padded buffer after the
 * base tensor is dropped. Fixed: keep a clone, clear the list next step. */
static inline void view_pins_base(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_made(y, 10, BASE, 64 * MiB, "padded", st_fwd);
            synth_tensor(y, 11, BASE + MiB, MiB, 10, "z");   /* interior data_ptr */
            synth_use(y, 11);
            synth_holder(y, 700, "outputs");
            if (!fixed) {
                synth_ref(y, 700, 11, "[0]");
                synth_drop(y, 10);
            } else {
                synth_alloc(y, ZC, MiB, st_fwd);
                synth_tensor(y, 12, ZC, MiB, 0, "z");
                synth_ref(y, 700, 12, "[0]");
                synth_drop(y, 11);
                synth_drop(y, 10);
                synth_free(y, BASE);
            }
        }
        if (i == 3 && fixed)
            synth_release(y, 700, 12, ZC);
        if (i == 6 && !fixed)
            synth_release(y, 700, 11, BASE);
    }
}

/* A tensor renamed after its TENSOR_NEW (vt_tensor_name): the checker
 * reports the latest name the tensor has in the snapshot -- as owner, as
 * last use and in the paths -- even where the rename came after the events
 * it describes. Renames of holders and of unknown ids are ignored. */
#define RN_ADDR 0x7f2000000000ull
static inline void renamed(synth *y)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, 100, RN_ADDR, 1 * MiB, "aten.mm out[0]", st_fwd);
            synth_name(y, 100, "fc2 tmp");
            synth_tensor(y, 101, RN_ADDR, 4096, 100, "aten.slice out[0]");
            synth_holder(y, 500, "cache");
            synth_ref(y, 500, 101, "[0]");
            synth_name(y, 500, "not a tensor");     /* a holder: ignored */
            synth_name(y, 999, "nobody");           /* unknown id: ignored */
            synth_use_at(y, 101, st_bwd);
            synth_name(y, 101, "fc2 head");          /* after its last use */
            synth_drop(y, 100);
        }
        if (i == 6)
            synth_release(y, 500, 101, RN_ADDR);
    }
    synth_name(y, 100, "fc2 out");                  /* after the storage is gone */
}

#define S0 0x7f6000000000ull
#define S1 0x7f6001000000ull

/* A pipeline context keeps its sent tensors three steps after backward.
 * Fixed: the context is released right after backward. */
static inline void pipeline(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 800, "Context");
            synth_held(y, 801, "list", 800, ".output_tensors");
            synth_new_tensor(y, 20, S0, 16 * MiB, "send 0", st_fwd);
            synth_new_tensor(y, 21, S1, 32 * MiB, "send 1", st_fwd);
            synth_ref(y, 801, 20, "[0]");
            synth_ref(y, 801, 21, "[1]");
            synth_use_at(y, 20, st_bwd);
            synth_use_at(y, 21, st_bwd);
        }
        if (i == (fixed ? 2 : 5)) {
            synth_release(y, 801, 20, S0);
            synth_release(y, 801, 21, S1);
        }
    }
}

#define INTER 0x7f7000000000ull

/* A forward hook's closure -> cell -> dict of intermediates -> the hook:
 * after handle.remove() only the cycle holds the intermediates. Fixed: the
 * dict is cleared after use. */
static inline void hook_cycle(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_holder(y, 900, "Linear");
            synth_holder(y, 901, "<hook>");
            synth_holder(y, 902, "cell");
            synth_holder(y, 903, "dict");
            synth_ref(y, 900, 901, "._forward_hooks[0]");
            synth_ref(y, 901, 902, ".__closure__[0]");
            synth_ref(y, 902, 903, ".cell_contents");
            synth_ref(y, 903, 901, "['hook']");
            synth_new_tensor(y, 30, INTER, 4 * MiB, "intermediate", st_fwd);
            synth_ref(y, 903, 30, "['acts']");
            synth_use(y, 30);
            synth_unref(y, 900, 901);   /* handle.remove() */
        }
        if (i == (fixed ? 2 : 6))
            synth_release(y, 903, 30, INTER);
    }
}

/* Losses appended to a list keep their autograd graph, whose nodes keep the
 * saved activations. Fixed: append loss.item() (a float, no tensor). */
#define HID 0x7ef000000000ull
static inline void autograd_graph(synth *y, int fixed)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 1)
            synth_holder(y, 1000, "losses");
        if (i == 2) {
            synth_new_tensor(y, 1001, HID, 12 * MiB, "h", st_fwd);
            synth_holder(y, 1002, "MulBackward0");
            synth_ref(y, 1002, 1001, ".saved_self");
            synth_new_tensor(y, 1003, HID + 0x1000000, 4, "loss", st_fwd);
            synth_ref(y, 1003, 1002, ".grad_fn");
            synth_use(y, 1001);
            synth_use(y, 1003);
            if (!fixed) {
                synth_ref(y, 1000, 1003, "[1]");
            } else {
                synth_unref(y, 1003, 1002);
                synth_drop(y, 1003);
                synth_free(y, HID + 0x1000000);
                synth_unref(y, 1002, 1001);
                synth_drop(y, 1001);
                synth_free(y, HID);
            }
        }
    }
}

#define STATE 0x7f8000000000ull

/* Optimizer state used every 3 steps (1, 4, 7, 10), trace through `last`. */
static inline void every_k(synth *y, int last)
{
    setup(y);
    synth_new_tensor(y, 40, STATE, 8 * MiB, "exp_avg", st_init);
    for (int i = 1; i <= last; i++) {
        step(y, i);
        if (i % 3 == 1 && i <= 10)
            synth_use(y, 40);
    }
}

/* Writers lapped the ring copy: 5 seqs missing halfway through. */
static inline void open_a_gap(synth *y)
{
    for (size_t i = y->s.nevents / 2; i < y->s.nevents; i++)
        y->s.events[i].seq += 5;
    y->seq += 5;
}

#define LATE 0x7f9000000000ull

/* An activation last used in step `at` of 8, still alive at the end. */
static inline void ends_alive(synth *y, int at)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == at) {
            synth_made(y, 50, LATE, 3 * MiB, "late", st_fwd);
        }
    }
}

#define XT 0x7fa000000000ull

/* No marks. Weights used every 100 ms for 31 s; X used every 100 ms during
 * the first second, freed at `free_at_ms` (0: alive at the end). */
static inline void no_marks(synth *y, int free_at_ms)
{
    synth_init(y);
    stacks(y);
    y->dt = 1000;  /* 1 us per event */
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    synth_new_tensor(y, 60, XT, 10 * MiB, "x", st_fwd);
    uint64_t t0 = y->time;
    int freed = 0;
    for (int k = 0; k < 310; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (k < 10)
            synth_use(y, 60);
        if (!freed && free_at_ms && y->time - t0 >= (uint64_t)free_at_ms * 1000000ull) {
            synth_release(y, 0, 60, XT);
            freed = 1;
        }
    }
}

/* Native (unannotated) trace: a call site that never frees (a leak) and one
 * whose step-2 allocation outlives its siblings (an outlier); `fixed` is a
 * set of NATIVE_*_FIXED bits; NATIVE_NO_MARKS leaves the steps unmarked. */
enum { NATIVE_LEAK_FIXED = 1, NATIVE_OUTLIER_FIXED = 2, NATIVE_NO_MARKS = 4 };

static inline void native(synth *y, int fixed)
{
    int fixed_leak = fixed & NATIVE_LEAK_FIXED, fixed_outlier = fixed & NATIVE_OUTLIER_FIXED;
    synth_init(y);
    uint32_t s_w = synth_stack(y, "init_weights", "main", NULL);
    uint32_t s_leak = synth_stack(y, "append_history", "train_step", "main", NULL);
    uint32_t s_act = synth_stack(y, "activations", "train_step", "main", NULL);
    uint32_t s_adam = synth_stack(y, "adam_init_state", "train_step", "main", NULL);
    uint32_t s_grad = synth_stack(y, "grad_bucket", "train_step", "main", NULL);
    synth_alloc(y, W_ADDR, 4 * MiB, s_w);
    uint64_t kept = 0;
    for (int i = 1; i <= 6; i++) {
        char l[32];
        synth_tick(y, 100000000);
        snprintf(l, sizeof l, "step %d", i);
        if (!(fixed & NATIVE_NO_MARKS))
            synth_mark(y, l);
        uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
        synth_alloc(y, a, 2 * MiB, s_act);
        synth_free(y, a);
        if (i == 1)
            for (int k = 0; k < 3; k++)
                synth_alloc(y, 0x7fb000000000ull + (uint64_t)k * 0x1000000, MiB, s_adam);
        uint64_t h = 0x7fc000000000ull + (uint64_t)i * 0x1000000;
        synth_alloc(y, h, MiB, s_leak);
        if (fixed_leak)
            synth_free(y, h);
        uint64_t g = 0x7fd000000000ull + (uint64_t)i * 0x1000000;
        synth_alloc(y, g, 3 * MiB, s_grad);
        if (i == 2 && !fixed_outlier)
            kept = g;
        else
            synth_free(y, g);
        if (i == 5 && kept)
            synth_free(y, kept);
    }
}

#define BIG 0x7e8000000000ull
#define SMALL 0x7e9000000000ull
#define BIG_ID 60
#define X_ID 63

enum { PIN_LEAK, PIN_FIXED, PIN_MOSTLY_COVERED, PIN_BASE_ALIVE };

/* `x = big[:, :10]` (40 B of a 4 KiB buffer) kept on the model and used
 * every step; `big` dropped in step 2. Fixed: x is a clone in its own 40 B
 * storage and big's storage is freed. Mostly covered: the view holds 90% of
 * the buffer. Base alive: big is never dropped (still referenced). */
static inline void pinned_view(synth *y, int mode)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            synth_made(y, BIG_ID, BIG, 4096, "big", st_fwd);
            synth_holder(y, 61, "model");
            if (mode == PIN_FIXED) {
                synth_tensor(y, 62, BIG, 40, BIG_ID, "x view");
                synth_alloc(y, SMALL, 40, st_fwd);
                synth_tensor(y, X_ID, SMALL, 40, 0, "x");   /* x = big[:, :10].clone() */
                synth_drop(y, 62);
                synth_drop(y, BIG_ID);
                synth_free(y, BIG);
            } else {
                uint64_t nb = mode == PIN_MOSTLY_COVERED ? 3687 : 40;  /* 90% : ~1% */
                synth_tensor(y, X_ID, BIG, nb, BIG_ID, "x");
                if (mode != PIN_BASE_ALIVE)
                    synth_drop(y, BIG_ID);
                else
                    synth_ref(y, 61, BIG_ID, ".big");
            }
            synth_ref(y, 61, X_ID, ".x");
        }
        if (i >= 2)
            synth_use_at(y, X_ID, st_bwd);
    }
}

static inline uint64_t mark_seq_of(const synth *y, const char *label)
{
    for (size_t i = 0; i < y->s.nevents; i++) {
        const vt__event *e = &y->s.events[i];
        if (e->kind == VT_EV_MARK && !strcmp(y->s.strings_blob + y->s.string_offsets[e->str], label))
            return e->seq;
    }
    return 0;
}

/* The view is used in steps 2..4 only, then kept unused until step 8: LINGER
 * flags the storage from its last use, PINNED only up to it. */
static inline void pinned_then_lingering(synth *y, int last_use_step)
{
    setup(y);
    for (int i = 1; i <= 9; i++) {
        step(y, i);
        if (i == 2) {
            synth_new_tensor(y, BIG_ID, BIG, 4096, "big", st_fwd);
            synth_holder(y, 61, "model");
            synth_tensor(y, X_ID, BIG, 40, BIG_ID, "x");
            synth_ref(y, 61, X_ID, ".x");
            synth_drop(y, BIG_ID);
        }
        if (i >= 2 && i <= last_use_step)
            synth_use(y, X_ID);
        if (i == 8)
            synth_release(y, 61, X_ID, BIG);
    }
}

/* What the pinned shapes without marks begin with: the weights, a 64 MiB
 * base ("padded") and a 1 MiB view of it ("x"); 1 us per event. */
static inline void pinned_no_marks_begin(synth *y)
{
    synth_init(y);
    stacks(y);
    y->dt = 1000;
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    synth_new_tensor(y, BIG_ID, BIG, 64 * MiB, "padded", st_fwd);
    synth_tensor(y, X_ID, BIG, MiB, BIG_ID, "x");
}

/* No marks: weights and view used every 100 ms for 31 s; the base dropped
 * at 1 s; the view (and the storage) released at `release_ms`. */
static inline void pinned_no_marks(synth *y, int release_ms)
{
    pinned_no_marks_begin(y);
    uint64_t t0 = y->time;
    int dropped = 0, released = 0;
    for (int k = 0; k < 310; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (!released)
            synth_use(y, X_ID);
        if (!dropped && y->time - t0 >= 1000000000ull) {
            synth_drop(y, BIG_ID);
            dropped = 1;
        }
        if (!released && y->time - t0 >= (uint64_t)release_ms * 1000000ull) {
            synth_release(y, 0, X_ID, BIG);
            released = 1;
        }
    }
}

/* Python frames for stack `st` (synth_stack's frames, innermost first):
 * each function's file, as a traced PyTorch program's stacks have them. */
static inline void as_python(synth *y, uint32_t st, const char *const *files, const uint32_t *lines)
{
    const vt__frame *f[8];
    size_t n = vt__snapshot_stack_frames(&y->s, st, f, 8);
    uint32_t python = synth_str(y, "python");
    for (size_t i = 0; i < n; i++) {
        vt__frame *w = &y->s.frames[f[i] - y->s.frames];
        w->ip = w->module_offset = 0;
        w->module = python;
        w->file = synth_str(y, files[i]);
        w->line = lines[i];
    }
}

#endif /* VT_TESTS_CHECK_SHAPES_H */
