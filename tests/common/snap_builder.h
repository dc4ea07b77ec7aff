/* tests/common/snap_builder.h - the one way tests build a vt__snapshot_data in
 * memory: strings, frames, stack nodes, events, segments, blocks and devices
 * appended to growing arrays. The per-area builders (tests/check/synth.h for
 * the checker, tests/trace/test_format_gen.h for the format and the views,
 * tests/viz/gen_snapshot.c for the viz) are shapes on top of it.
 * Out of memory ends the test (exit 99): tests only. */
#ifndef VT_TESTS_SNAP_BUILDER_H
#define VT_TESTS_SNAP_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

struct snap_builder {
    vt__snapshot_data *s;     /* the snapshot being built (not owned) */
    size_t cap_blob, cap_str, cap_ev, cap_node, cap_frame, cap_seg, cap_blk, cap_dev;
};

static inline void *sb_grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    p = realloc(p, n * elem);
    if (!p) {
        fprintf(stderr, "snap_builder: out of memory\n");
        exit(99);
    }
    *cap = n;
    return p;
}

/* Append a string (no search: repeated texts get new indexes). */
static inline uint32_t sb_str(struct snap_builder *b, const char *text)
{
    vt__snapshot_data *s = b->s;
    size_t len = strlen(text) + 1;
    s->strings_blob = sb_grow(s->strings_blob, &b->cap_blob, s->strings_blob_size + len, 1);
    s->string_offsets = sb_grow(s->string_offsets, &b->cap_str, s->nstrings + 1,
                                sizeof *s->string_offsets);
    memcpy(s->strings_blob + s->strings_blob_size, text, len);
    s->string_offsets[s->nstrings] = (uint32_t)s->strings_blob_size;
    s->strings_blob_size += len;
    return (uint32_t)s->nstrings++;
}

/* The index of `text`, appended only when absent (linear search: for the
 * few hundred strings of a test). */
static inline uint32_t sb_str_dedup(struct snap_builder *b, const char *text)
{
    const vt__snapshot_data *s = b->s;
    for (size_t i = 0; i < s->nstrings; i++)
        if (!strcmp(s->strings_blob + s->string_offsets[i], text))
            return (uint32_t)i;
    return sb_str(b, text);
}

static inline uint32_t sb_frame(struct snap_builder *b, vt__frame f)
{
    vt__snapshot_data *s = b->s;
    s->frames = sb_grow(s->frames, &b->cap_frame, s->nframes + 1, sizeof *s->frames);
    s->frames[s->nframes] = f;
    return (uint32_t)s->nframes++;
}

static inline uint32_t sb_node(struct snap_builder *b, uint32_t parent, uint32_t frame)
{
    vt__snapshot_data *s = b->s;
    s->stack_nodes = sb_grow(s->stack_nodes, &b->cap_node, s->nstack_nodes + 1,
                             sizeof *s->stack_nodes);
    s->stack_nodes[s->nstack_nodes] = (vt__stack_node){ parent, frame };
    return (uint32_t)s->nstack_nodes++;
}

/* A zeroed element appended to the snapshot's array `arr` (count `n`,
 * capacity b->cap): one rule for every array the builder grows. */
#define SB_APPEND(b, arr, n, cap)                                              \
    ((b)->s->arr = sb_grow((b)->s->arr, &(b)->cap, (b)->s->n + 1, sizeof *(b)->s->arr), \
     memset(&(b)->s->arr[(b)->s->n], 0, sizeof *(b)->s->arr), &(b)->s->arr[(b)->s->n++])

/* A zeroed event at the end. */
static inline vt__event *sb_event(struct snap_builder *b)
{
    return SB_APPEND(b, events, nevents, cap_ev);
}

static inline vt__snap_segment *sb_segment(struct snap_builder *b)
{
    return SB_APPEND(b, segments, nsegments, cap_seg);
}

static inline vt__snap_block *sb_block(struct snap_builder *b)
{
    return SB_APPEND(b, blocks, nblocks, cap_blk);
}

static inline vt__snap_device *sb_device(struct snap_builder *b)
{
    return SB_APPEND(b, devices, ndevices, cap_dev);
}

#endif /* VT_TESTS_SNAP_BUILDER_H */
