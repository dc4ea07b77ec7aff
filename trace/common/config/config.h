/*
 * trace/common/config/config.h - the one configuration of libvramtrace.so.
 *
 * Read once from VRAMTRACE_CONF="key:value,key:value" (the syntax of
 * PYTORCH_CUDA_ALLOC_CONF). All keys and their defaults live in one table in
 * config.c. An unknown key or a bad value prints one line on stderr naming it
 * and the valid choices; the key keeps its default and nothing else changes.
 *
 * Why a folder of its own: the keys belong to three parts of the library,
 * the allocator (alloc/), the hooks (alloc/hooks/) and the recorder
 * (trace/record/), and one table is what makes an unknown key an error and
 * every default visible in one place. Kept in either part, the other would
 * reach into its folder for it, against the arrow between them (alloc/ ->
 * trace/record/). So it sits below both, with the helpers every product
 * shares (trace/common/), in a folder of its own that depends on nothing of
 * ours (alloc/replay/ reads it too, to replay with a snapshot's settings):
 *
 *     alloc/, alloc/hooks/ --> trace/record/
 *              \                  /
 *               +--> trace/common/config/ <---+
 *
 * Each part sees this folder through its own include directories
 * (config_inc in meson.build); a product that does not read the
 * configuration does not see it.
 */
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* VRAMTRACE_CONF stacks: what a recorded stack holds, as PyTorch's
 * _record_memory_history(stacks=...) chooses. */
enum {
    VT_STACKS_ALL = 0,     /* native frames, Python frames interleaved where Python runs */
    VT_STACKS_NATIVE = 1,  /* native frames only */
    VT_STACKS_PYTHON = 2,  /* Python frames only (native where a thread has none) */
};

/* VRAMTRACE_CONF torch: what `vramtrace run` does in a Python process that
 * uses PyTorch's CUDA allocator (vramtrace/_autorun.py reads it; the library
 * only checks it). */
enum {
    VT_TORCH_OBSERVE = 0,  /* observe its caching allocator, mark optimizer steps */
    VT_TORCH_TRACK = 1,    /* that, and the whole program under vramtrace.torch.track() */
    VT_TORCH_OFF = 2,      /* nothing: PyTorch's segments only, as any program's */
};

/* VRAMTRACE_CONF ipc_safe: whether cudaMalloc blocks sit at the start of a
 * device allocation of their own, so that a legacy IPC handle exports
 * exactly them (alloc/alloc_ipc.c). */
enum {
    VT_IPC_SAFE_OFF = 0,   /* blocks share segments (a raw importer may see the wrong bytes) */
    VT_IPC_SAFE_ON = 1,    /* always */
    VT_IPC_SAFE_AUTO = 2,  /* when the program may export (it references cudaIpcGetMemHandle
                              or cuIpcGetMemHandle), or after a first export inside a segment */
};

typedef struct vt__conf {
    /* allocator */
    bool cache;                        /* false: every call goes to the device */
    uint64_t max_split_size;           /* bytes; UINT64_MAX = unlimited */
    unsigned roundup_power2_divisions; /* 0 = off */
    double garbage_collection_threshold; /* 0 = off, else fraction of the cap */
    double per_process_memory_fraction;  /* cap on reserved bytes, of device total */
    bool expandable_segments;          /* one growable virtual range per stream and pool
                                          (alloc/alloc_expandable.c) */
    unsigned ipc_safe;                 /* VT_IPC_SAFE_*: a segment per cudaMalloc block */
    /* hooks */
    bool free_sync;                    /* plain cudaFree synchronizes like CUDA */
    /* tracing */
    bool trace;                        /* record events */
    uint64_t max_events;               /* ring capacity (also set by ring:SIZE) */
    unsigned stack_depth;              /* frames captured per stack */
    bool free_stacks;                  /* capture stacks on free too */
    unsigned stacks;                   /* what a stack holds: VT_STACKS_* */
    unsigned torch;                    /* a PyTorch process under run: VT_TORCH_* */
    int signal;                        /* snapshot on this signal, 0 = none */
    bool dump_on_oom;                  /* snapshot when an allocation fails */
    unsigned oom_snapshots;            /* files for OOMs; the last keeps the latest */
} vt__conf;

/* The process-wide configuration, parsed from VRAMTRACE_CONF on first call
 * (thread-safe, never calls CUDA). Never NULL. */
const vt__conf *vt__config(void);

/* Replace the process-wide configuration (a replay of a recorded run sets
 * the settings it replays under). Call it before the allocator's first use
 * in the process, from one thread: heaps read some keys once, when they are
 * set up. */
void vt__config_install(const vt__conf *c);

/* Parse `text` over the defaults into *out. Problems are reported on `err`
 * (one line each, may be NULL). @return the number of problems. */
int vt__config_parse(const char *text, vt__conf *out, FILE *err);

/* vt__config_parse for a command that refuses bad settings (`run --conf`,
 * `replay --conf`): parses `text` over *out (over the defaults when out is
 * NULL); @return 0, or the number of problems with the first one in msg,
 * one line that says only what is wrong (not the library's "vramtrace: ...;
 * keeping the default": the command says what it does instead). */
int vt__config_check(const char *text, vt__conf *out, char *msg, size_t len);

/* The defaults. */
void vt__config_defaults(vt__conf *out);

/* The ring's memory per event (trace/record/ring.c asserts its slot is this
 * size): `ring:SIZE` keeps the most events whose slots fit in SIZE. */
#define VT_RING_EVENT_BYTES 80

/* A size as people write it: "256MB", "1.5GiB", "512M", "40G", "123" (bytes);
 * K, M, G, T and KiB... are binary, KB, MB... decimal. @return 0, or -EINVAL. */
int vt__parse_bytes(const char *v, uint64_t *out);

/* Normalized "key:value,..." of every key, for snapshots. @return length. */
size_t vt__config_format(const vt__conf *c, char *buf, size_t len);

#endif /* VT_CONFIG_H */
