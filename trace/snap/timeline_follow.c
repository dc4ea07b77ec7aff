/*
 * trace/snap/timeline_follow.c - the matching followed one event at a time,
 * after a streamed build (vt__tl_follow_*, timeline.h): what a view that
 * walks the events itself asks of each, in memory that follows what is
 * alive at once.
 *
 * The streamed build (timeline_stream.c) keeps only what the events leave
 * unresolved at the end; a view that walks the events again (the checker)
 * needs, at each ALLOC and FREE_REQUESTED, the lifetime the event belongs
 * to, as the whole-snapshot build's event_owner would name it. A fresh
 * builder matches the events again, the same state machine retiring what
 * it settled (as the curves' reading does), and a lifetime the build kept
 * to the end is handed out as its final record: its fate is known only
 * there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "liveness.h"
#include "timeline.h"
#include "timeline_build.h"
#include "u64map.h"

struct retire_filter {
    const vt__u64map *left;
    void (*fn)(void *ctx, const vt__lifetime *l);
    void *ctx;
};

struct vt__tl_follow {
    const vt__timeline *tl; /* the streamed build's: the final records */
    vt__u64map left;        /* the event that made a lifetime of tl -> its index */
    vt__timeline *t2;       /* the follower's own lifetimes (slots reused) */
    struct builder b;
    struct retire_filter rf; /* vt__tl_follow_on_retire's */
};

/* The key the follower finds a final record by: the event that made it. */
static uint32_t made_at(const vt__lifetime *l)
{
    if (l->flags & VT_LT_FROM_STATE)
        return VT_TL_NONE;
    return l->alloc_event != VT_TL_NONE ? l->alloc_event : l->free_event;
}

int vt__tl_follow_open(const vt__snapshot_data *s, const vt__timeline *tl, vt__tl_follow **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    vt__tl_follow *f = calloc(1, sizeof *f);
    if (!f)
        return vt__errf(err, errlen, -ENOMEM, "timeline: out of memory");
    f->tl = tl;
    f->t2 = calloc(1, sizeof *f->t2);
    f->b = (struct builder){ .s = s, .tl = f->t2, .err = err, .errlen = errlen, .stream = 1 };
    if (!f->t2 || vt__u64map_init(&f->left, tl->nlifetimes ? tl->nlifetimes : 16) ||
        vt__u64map_init(&f->b.lmap, 1024) || vt__u64map_init(&f->b.smap, 1024) ||
        vt__free_match_init(&f->b.frees) || vt__liveness_build_state(s, &f->b.lv)) {
        vt__tl_follow_close(f);
        return vt__errf(err, errlen, -ENOMEM, "timeline: out of memory");
    }
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        uint32_t k = made_at(&tl->lifetimes[i]);
        if (k != VT_TL_NONE && vt__u64map_put(&f->left, k, (uint32_t)i)) {
            vt__tl_follow_close(f);
            return vt__errf(err, errlen, -ENOMEM, "timeline: out of memory");
        }
    }
    *out = f;
    return 0;
}

int vt__tl_follow_event(vt__tl_follow *f, const vt__event *e, uint32_t i, vt__tl_followed *out)
{
    struct builder *b = &f->b;
    out->lifetime = VT_TL_NONE;
    out->final = VT_TL_NONE;
    /* the gaps up to this event, as the first reading knew them here */
    if (vt__liveness_note_event(b->lv, i, e->seq))
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    int rc = vt__tl_match_event(b, e, i);
    if (rc)
        return rc;
    uint32_t o = b->owner;
    if (o != VT_TL_NONE && e->kind != VT_EV_SEGMENT_ALLOC && e->kind != VT_EV_SEGMENT_FREE) {
        const vt__lifetime *l = &f->t2->lifetimes[o];
        uint32_t k = made_at(l);
        uint32_t fi = k == VT_TL_NONE ? VT_TL_NONE : vt__u64map_get(&f->left, k);
        out->lifetime = o;
        out->final = fi;
        out->l = fi != VT_TL_NONE ? f->tl->lifetimes[fi] : *l;
    }
    /* after the record was copied out: retiring frees its slot */
    return vt__tl_retire(b);
}

/* The follower's builder retires every lifetime the events resolve; those
 * the streamed build kept are not its own to hand out. */
static void on_retire(void *ctx, const vt__lifetime *l)
{
    const struct retire_filter *rf = ctx;
    uint32_t k = made_at(l);
    if (k == VT_TL_NONE || vt__u64map_get(rf->left, k) == VT_TL_NONE)
        rf->fn(rf->ctx, l);
}

void vt__tl_follow_on_retire(vt__tl_follow *f, void (*fn)(void *ctx, const vt__lifetime *l),
                             void *ctx)
{
    f->rf = (struct retire_filter){ &f->left, fn, ctx };
    f->b.on_retire = fn ? on_retire : NULL;
    f->b.retire_ctx = &f->rf;
}

void vt__tl_follow_close(vt__tl_follow *f)
{
    if (!f)
        return;
    vt__u64map_free(&f->left);
    vt__tl_builder_free(&f->b);
    vt__timeline_free(f->t2);
    free(f);
}
