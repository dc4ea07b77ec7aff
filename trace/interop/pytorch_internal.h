/*
 * trace/interop/pytorch_internal.h - what the PyTorch pickle's importer
 * shares between its files (the file map):
 *   pytorch_build.c    a tiny snapshot builder: interned strings, frames,
 *                      stack nodes (struct bld)
 *   pytorch_import.c   the mapping of PyTorch's shape (struct imp): the
 *                      whole import and the streamed trace entries
 *                      (vt__pytorch_import_path)
 *   pytorch_convert.c  the conversion in bounded memory into a .vtsnap
 *                      (vt__pytorch_convert): runs of records, merged by time
 */
#ifndef VT_INTEROP_PYTORCH_INTERNAL_H
#define VT_INTEROP_PYTORCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errbuf.h"
#include "pickle.h"
#include "snapshot.h"
#include "spill.h"

#define MAX_FRAMES_PER_STACK 512
#define PYTORCH_GRANULE 512   /* kMinBlockSize: every block is a multiple */

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

/* ---- pytorch_build.c ---------------------------------------------------- */

uint64_t vt__pt_mix(uint64_t h);
const char *vt__pt_str_at(const vt__snapshot_data *s, uint32_t i);
int vt__pt_intern_c(struct bld *b, const char *text, uint32_t *out);
int vt__pt_intern_pv(struct bld *b, const vt__pv *v, uint32_t *out);
int vt__pt_intern_frame(struct bld *b, uint32_t fn, uint32_t file, uint32_t line, uint32_t *out);
int vt__pt_intern_node(struct bld *b, uint32_t parent, uint32_t frame, uint32_t *out);
int vt__pt_bld_start(struct bld *b);
void vt__pt_bld_free(struct bld *b);
int vt__pt_stack_of(struct bld *b, const vt__pickle *p, const vt__pv *frames, uint32_t *out);

/* ---- pytorch_import.c --------------------------------------------------- */

/* The parts of a snapshot's top level (a dict, or a legacy bare list of
 * segments); any may be NULL. */
struct pt_parts {
    const vt__pv *segments, *traces, *annotations, *settings;
};
/* root's parts; a top level PyTorch's shape does not have: -EINVAL, said. */
int vt__pt_parts(struct imp *im, const vt__pv *root, struct pt_parts *out);
/* Trace entry `item` (a streamed one) as an unfinished event whose stack and
 * str are ids in im->loc, so that the value graph keeps nothing of it.
 * @return 1, 0 when it is no entry (skipped), or a negative errno. */
int vt__pt_read_local(struct imp *im, const vt__pickle *p, uint32_t item, vt__event *e);

int vt__pt_oom(struct imp *im, int rc);
int vt__pt_import_segment(struct imp *im, const vt__pv *seg, size_t si);
uint32_t vt__pt_ref_of(const vt__pickle *p, const vt__pv *v);
int vt__pt_read_entry(const vt__pickle *p, const vt__pv *en, vt__event *e);
int vt__pt_cmp_unfinished(const void *a, const void *b);
const vt__pv *vt__pt_ref_value(const vt__pickle *p, uint32_t ref);
int vt__pt_finish_event(struct imp *im, vt__event *e);
int vt__pt_import_settings(struct imp *im, const vt__pv *settings);
int vt__pt_finish_meta_of(struct imp *im, size_t nevents, uint64_t last_ns, int maxdev);
void vt__pt_imp_free(struct imp *im);

#endif /* VT_INTEROP_PYTORCH_INTERNAL_H */
