/* tensor_facts.h - what the op observer (observer.cpp, C++) tells
 * _trackfast (scripts/vramtrace/native/trackfast/, C) about each tensor of an op it hands
 * over, so that recording a tensor seen for the first time asks nothing of
 * Python: without them _trackfast makes a storage object and calls
 * data_ptr(), nbytes(), _cdata, _base, data_ptr() and nbytes on it and the
 * tensor, six to eight Python calls per new tensor (about a quarter of the
 * recording's instructions on bench_track's loop).
 *
 * Dispatcher.observed(func, args, out, facts, seq) gets them as one bytes
 * object: a vt__tensor_facts per tensor, in the order the recording meets
 * the tensors (the arguments' tensors in order, a list's items in order,
 * then the outputs'); no entry for None. Both sides are built on the same
 * machine (the observer at first use, _trackfast with vramtrace), from this
 * one header, so the layout is theirs alone: every field a 64-bit word.
 */
#ifndef VT_TENSOR_FACTS_H
#define VT_TENSOR_FACTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t storage;         /* its StorageImpl* (UntypedStorage._cdata); 0: no facts,
                               * the recording asks Python */
    uint64_t storage_ptr;     /* the storage's data pointer (not materialized: a
                               * copy-on-write storage stays as it is) */
    uint64_t storage_nbytes;
    uint64_t tensor_ptr;      /* the tensor's data pointer */
    uint64_t tensor_nbytes;   /* numel x element size */
    int64_t device;           /* CUDA device index, -1 for any other device */
    uint64_t is_view;         /* 1: a view (its _base is the one Python lookup left) */
} vt__tensor_facts;

/* The observer's trackobs_make_weak(storage): a weak handle on the
 * StorageImpl, what UntypedStorage._weak_ref() returns (freed with
 * UntypedStorage._free_weak_ref). Called with the tensor alive. */
typedef uint64_t (*vt__make_weak_fn)(uint64_t storage);

/* The observer's trackobs_storage_now(handle, out): where the storage behind a
 * weak handle is now, read without materializing a copy-on-write storage.
 * 1: alive, out = {data pointer, nbytes}; 0: gone; -1: not readable here. */
typedef int (*vt__storage_now_fn)(uint64_t handle, uint64_t *out);

/* The observer's trackobs_storage_key(impl, out): the StorageImpl of the
 * tensor whose TensorImpl is ``impl`` (torch._C._storage_id's reading,
 * without a Python call). 1: out[0] = it; -1: the tensor has none or it
 * cannot be read here (ask Python). */
typedef int (*vt__storage_key_fn)(uint64_t impl, uint64_t *out);

/* The observer's trackobs_storage_use_count(handle): the strong count of the
 * StorageImpl behind a weak handle (0: gone), read as
 * torch._C._storage_Use_Count reads it, without a Python call. */
typedef uint64_t (*vt__use_count_fn)(uint64_t handle);

/* The observer's trackobs_drain(): the ops it holds back (an autograd
 * engine thread's, observer.cpp) handed over now, with the GIL held:
 * before the books are read (Dispatcher.flush). */
typedef void (*vt__drain_fn)(void);

/* _trackfast's frames to lend an autograd engine thread running the
 * backward of the node numbered ``seq`` (the forward op's stack, named
 * "forward of"), read from ``table`` without the GIL: written when the
 * forward op is recorded. 0: not known here (the observer asks Python). */
typedef uint32_t (*vt__lent_read_fn)(const void *table, uint64_t seq);

/* _trackfast's record of an autograd engine thread's op whose outputs all
 * died before the observer handed it over (most of a backward's ops), with
 * the GIL held: a use, under ``stack``, of each input still alive (``objs``:
 * their Python objects, borrowed, n of them) and of each storage ``pairs``
 * names ((StorageImpl*, data pointer) pairs, npairs of them: inputs gone, or
 * without a Python object); ``func`` the op's OpOverload, named if the
 * recording fails. 0: recorded; 1: an input is a tensor the books do not
 * know, nothing recorded (hand the op over whole: Dispatcher.observed_engine);
 * -1: the recording failed (reported there). ``self``: the Dispatcher. */
typedef int (*vt__engine_uses_fn)(void *self, void *func, void *const *objs, size_t n,
                                  uint32_t stack, const uint64_t *pairs, size_t npairs);

/* _trackfast's hold on the cyclic collector's count (gc_schedule.c), for
 * the observer's own Python work: hold() -> token, release(token); count()
 * the count now and as_program(n): n objects made inside the hold that
 * PyTorch keeps for the program (a tensor's Python object). */
typedef struct {
    long (*hold)(void);
    void (*release)(long token);
    long (*count)(void);
    void (*as_program)(long n);
} vt__gc_hold_api;

#endif
