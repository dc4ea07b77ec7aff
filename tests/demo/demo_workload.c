/*
 * tests/demo/demo_workload.c - the example CUDA program ./scripts/demo runs.
 *
 * An ordinary CUDA runtime program, linked against the toolkit's
 * libcudart.so and knowing nothing of vramtrace: a small "training loop"
 * with a forward pass that allocates activations, a backward pass that
 * frees them on a second stream, and weights that live for the whole run.
 * It has one deliberate bug, the kind vramtrace exists to find: every step
 * it keeps the last activation in a "history" array and only releases it
 * when the history wraps around, so a slice of memory stays alive long
 * after its last use; and at exit it forgets the history altogether.
 *
 * When vramtrace is preloaded the program also labels its steps and its
 * tensors through the optional C API, looked up with dlsym so the program
 * still runs without it.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 12
#define LAYERS 6
#define HISTORY 8

static int (*mark_fn)(const char *);
static uint64_t (*tensor_new_fn)(const void *, size_t, uint64_t, const char *);
static void (*tensor_use_fn)(uint64_t);
static void (*tensor_drop_fn)(uint64_t);
static uint64_t (*holder_new_fn)(const char *);
static int (*ref_fn)(uint64_t, uint64_t, const char *);
static int (*unref_fn)(uint64_t, uint64_t);

/* POSIX's way to store a dlsym result in a function pointer without a
 * pedantic object-to-function cast. */
#define LOOKUP(var, name) (*(void **)&(var) = dlsym(RTLD_DEFAULT, name))

static void find_vramtrace(void)
{
    LOOKUP(mark_fn, "vt_mark");
    LOOKUP(tensor_new_fn, "vt_tensor_new");
    LOOKUP(tensor_use_fn, "vt_tensor_use");
    LOOKUP(tensor_drop_fn, "vt_tensor_drop");
    LOOKUP(holder_new_fn, "vt_holder_new");
    LOOKUP(ref_fn, "vt_ref");
    LOOKUP(unref_fn, "vt_unref");
}

static void mark(const char *label) { if (mark_fn) mark_fn(label); }
static uint64_t tensor_new(const void *p, size_t n, const char *name)
{
    return tensor_new_fn ? tensor_new_fn(p, n, 0, name) : 0;
}
static void tensor_use(uint64_t id) { if (tensor_use_fn && id) tensor_use_fn(id); }
static void tensor_drop(uint64_t id) { if (tensor_drop_fn && id) tensor_drop_fn(id); }

#define CHECK(call)                                                          \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));      \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

struct buffer { void *ptr; size_t bytes; uint64_t tensor; };

/* Inlined, so that each allocation is attributed to its caller: forward,
 * backward or main (the timeline colours bands by call site). */
__attribute__((always_inline)) static inline struct buffer make(size_t bytes, const char *name,
                                                                cudaStream_t s)
{
    struct buffer b = { NULL, bytes, 0 };
    CHECK(cudaMalloc(&b.ptr, bytes));
    CHECK(cudaMemsetAsync(b.ptr, 0, bytes, s));
    b.tensor = tensor_new(b.ptr, bytes, name);
    tensor_use(b.tensor);
    return b;
}

static void release(struct buffer *b)
{
    tensor_drop(b->tensor);
    CHECK(cudaFree(b->ptr));
    b->ptr = NULL;
}

/* Kept out of line so the call sites show up as their own frames. */
__attribute__((noinline)) static void forward(struct buffer *acts, struct buffer *weights,
                                              cudaStream_t s)
{
    for (int l = 0; l < LAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d out", l);
        acts[l] = make((size_t)(l + 1) << 20, name, s);
        tensor_use(weights[l].tensor);
    }
}

__attribute__((noinline)) static void backward(struct buffer *acts, struct buffer *weights,
                                               cudaStream_t s)
{
    for (int l = LAYERS - 1; l >= 0; l--) {
        struct buffer grad = make(acts[l].bytes, "grad", s);
        tensor_use(acts[l].tensor);
        tensor_use(weights[l].tensor);
        release(&grad);
    }
}

int main(void)
{
    find_vramtrace();
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    cudaStream_t compute;
    CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

    struct buffer weights[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        weights[l] = make(4u << 20, "weight", compute);

    /* The bug: the last activation of every step is kept in `history`. */
    struct buffer history[HISTORY] = { 0 };
    uint64_t history_holder = holder_new_fn ? holder_new_fn("Trainer.history") : 0;

    for (int step = 0; step < STEPS; step++) {
        char label[32];
        snprintf(label, sizeof label, "step %d", step);
        mark(label);

        struct buffer acts[LAYERS];
        forward(acts, weights, compute);
        backward(acts, weights, compute);
        for (int l = 0; l < LAYERS - 1; l++)
            release(&acts[l]);

        struct buffer *slot = &history[step % HISTORY];
        if (slot->ptr) {
            if (unref_fn) unref_fn(history_holder, slot->tensor);
            release(slot);
        }
        *slot = acts[LAYERS - 1];
        if (ref_fn) {
            char idx[16];
            snprintf(idx, sizeof idx, "[%d]", step % HISTORY);
            ref_fn(history_holder, slot->tensor, idx);
        }
        CHECK(cudaStreamSynchronize(compute));
    }
    mark("end");

    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    printf("demo: %d steps on %d device(s), %zu MiB free of %zu MiB at the end\n",
           STEPS, ndev, free_b >> 20, total_b >> 20);

    /* The history is never released: the second bug, a plain leak. */
    for (int l = 0; l < LAYERS; l++)
        release(&weights[l]);
    CHECK(cudaStreamDestroy(compute));
    return 0;
}
