/*
 * cli/oom_caught.c - an OOM that comes after one the program caught: what
 * the call that ran out of memory then still holds.
 *
 * A program that catches an out-of-memory error and retries with less (a
 * smaller batch) inside its except clause runs the retry while the
 * exception is being handled: its traceback keeps the frames of the call
 * that failed, and every tensor they held (the failed forward's
 * activations, its graph). The retry then runs out too, with the first
 * attempt's memory still allocated (PyTorch's FAQ, "My out of memory
 * exception handler can't allocate memory": retry after the except clause).
 *
 * That call is the outermost Python frame of the earlier OOM's stack that
 * the later OOM's stack does not share (`<module> train.py:37`, where the
 * retry runs at line 41 of the handler). What it made and still holds at the
 * later OOM: the allocations alive then whose Python frames begin with the
 * earlier OOM's up to that call, made after the last mark before the
 * earlier OOM (a loop's earlier iterations of the same line are not that
 * call) and before it; a library's own workspace, kept by design, is not.
 * The replay of a retry after the except clause frees them right after the
 * earlier OOM. Where a step began between the two (a mark), the later OOM
 * is no retry in the handler: what the call still holds is said, not why
 * (a batch-size probe that kept a tensor, a cache it filled).
 */
#include <errno.h>
#include <stdlib.h>

#include "grow.h"
#include "oom_explain.h"
#include "u64map.h"

/* The Python frames of stack `id`, outermost first (*out malloc'd), their
 * number; 0 with *out NULL when it has none or memory ran out. */
static size_t python_frames(const vt__snapshot_data *s, uint32_t id, const vt__frame ***out)
{
    *out = NULL;
    size_t n = vt__snapshot_stack_frames(s, id, NULL, 0);
    const vt__frame **all = n ? malloc(n * sizeof *all) : NULL;
    if (!all)
        return 0;
    vt__snapshot_stack_frames(s, id, all, n);
    size_t k = 0;
    for (size_t i = n; i-- > 0;)        /* innermost first: reversed */
        if (vt__frame_is_python(s, all[i]))
            all[k++] = all[i];
    if (!k) {
        free(all);
        return 0;
    }
    *out = all;
    return k;
}

static bool same_frame(const vt__frame *a, const vt__frame *b)
{
    return a == b || (a->function == b->function && a->file == b->file && a->line == b->line);
}

/* Whether the Python frames of stack `id` begin with call[0..depth]. */
static bool made_under(const vt__snapshot_data *s, uint32_t id, const vt__frame *const *call,
                       size_t depth)
{
    const vt__frame **f = NULL;
    size_t n = python_frames(s, id, &f);
    bool under = n > depth;
    for (size_t i = 0; under && i <= depth; i++)
        under = same_frame(f[i], call[i]);
    free(f);
    return under;
}

int vt__oom_held_since_caught(const vt__snapshot_data *s, const vt__timeline *tl,
                              vt__oom_report *r)
{
    if (r->prev_event == SIZE_MAX)
        return 0;
    const vt__frame **prev = NULL, **now = NULL;
    size_t np = python_frames(s, s->events[r->prev_event].stack, &prev);
    size_t nn = python_frames(s, r->stack, &now);
    size_t d = 0;
    while (d < np && d < nn && same_frame(prev[d], now[d]))
        d++;
    free(now);
    if (d >= np) {   /* retried from the same line: no call of its own */
        free(prev);
        return 0;
    }
    r->held_in_handler = true;
    for (size_t i = r->prev_event + 1; i < r->event; i++)
        if (s->events[i].kind == VT_EV_MARK)
            r->held_in_handler = false;
    vt__report_site_name(s, prev[d], r->failed_call_name, sizeof r->failed_call_name);
    size_t from = 0;   /* the last mark before the earlier OOM */
    for (size_t i = r->prev_event; i-- > 0;)
        if (s->events[i].kind == VT_EV_MARK) {
            from = i;
            break;
        }
    bool observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    vt__u64map verdict = { 0 };   /* stack -> 1 made under the call, 2 not */
    vt__replay_free_at *v = NULL;
    size_t cap = 0, n = 0;
    int rc = vt__u64map_init(&verdict, 64) ? -ENOMEM : 0;
    for (size_t i = 0; !rc && i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->device != r->device || !vt__lifetime_allocated_at(l, (uint32_t)r->event)
            || (observed && (l->flags & VT_LT_OUTSIDE_POOL)) || l->alloc_event == VT_TL_NONE
            || l->alloc_event <= from || l->alloc_event >= r->prev_event)
            continue;
        uint32_t known = vt__u64map_get(&verdict, l->alloc_stack);
        if (known == VT__U64MAP_NONE) {
            known = made_under(s, l->alloc_stack, prev, d)
                    && !vt__report_library_workspace(s, l->alloc_stack) ? 1 : 2;
            if (vt__u64map_put(&verdict, l->alloc_stack, known)) {
                rc = -ENOMEM;
                break;
            }
        }
        if (known != 1)
            continue;
        if (vt__grow_from((void **)&v, &cap, n + 1, sizeof *v, 64)) {
            rc = -ENOMEM;
            break;
        }
        v[n++] = (vt__replay_free_at){ .alloc_event = l->alloc_event,
                                       .at_event = r->prev_event };
        r->held_prev_bytes += l->size;
    }
    vt__u64map_free(&verdict);
    free(prev);
    if (rc || !n) {
        free(v);
        r->held_prev_bytes = 0;
        return rc;
    }
    r->held_frees = v;
    r->held_prev_count = n;
    return 0;
}
