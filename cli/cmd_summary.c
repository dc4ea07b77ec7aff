/*
 * cli/cmd_summary.c - `vramtrace summary FILE`: the one-screen overview.
 *
 * Output (stable; tests and scripts read it):
 *   snapshot FILE
 *     format 1.0, pid P, rank R, host H
 *     command: CMD
 *     events: N in the window (seq A..B, T s), R recorded, O overwritten, D stacks dropped
 *     gaps: G inside the window (M events missing); F allocations freed where the
 *           events do not show it, counted as freed, not alive      (only with gaps/F)
 *     counts: allocs N, frees N, segment allocs N, segment frees N, segments alive N,
 *             OOMs N, bad frees N, marks N
 *   not served by the cache (passed through), per kind:           (only when some exist)
 *     KIND: N allocations, peak X, alive Y in M
 *   device D (NAME, TOTAL):
 *     allocated: peak X (seq S) in the kept events, current Y
 *     pending free: Y (freed, waiting for stream events); active peak X (allocated + pending)
 *     reserved:  peak X (seq S) in the kept events, current Y
 *     true peaks (allocator, whole run): allocated X, reserved Y, active Z   (format >= 1.2)
 *     at the snapshot (allocator state): allocated X in N blocks, pending Y, reserved Z
 *     fragmentation: X reserved but unallocated at the allocated peak (P%), Y now (Q%)
 *     CUDA graph pools: X of the reserved now, Y of it free: ...   (format >= 1.14, when any)
 *     top call sites by bytes at peak (seq S):
 *       BYTES  N allocation(s)  FN FILE:LINE (MODULE+0xOFF)
 *                 inside it, most by a library: BYTES  FN FILE:LINE  (of N lines)
 * Sizes are human-readable (B, KiB, MiB, GiB: powers of 1024).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "oom_explain.h"
#include "order.h"
#include "report_util.h"

#define TOP_SITES 10

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_SUMMARY "\n"
    "\n"
    "Peak and current allocated/reserved bytes per device, event counts,\n"
    "fragmentation (reserved but unallocated bytes at the allocated peak and\n"
    "at the snapshot) and the call sites holding the most bytes at the peak.\n"
    "A stack's call site is its innermost Python line where Python ran (the\n"
    "program's own, where it ran; under one that called a framework, the\n"
    "library's line that made most of its bytes is named too).\n"
    "\n"
    "  --all-frames  call sites from native frames even where Python ran\n"
    VT_EXIT_HELP;

struct site {
    uint64_t key;            /* (frame index + 1, 0 = no stack) * 2 + workspace */
    uint64_t bytes, count;
    uint32_t stack;          /* one representative stack */
    vt__report_inside in;    /* what a library made of it under the line; once merged,
                                the largest such line's */
    uint32_t ninside;        /* once merged: how many such lines */
};

static int cmp_site_stack(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    return vt__order(x->stack, y->stack);
}

static int cmp_site_key(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    return vt__order(x->key, y->key);
}

static int cmp_site_bytes(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    return vt__report_cmp_bytes(x->bytes, x->key, y->bytes, y->key);
}

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void top_sites(const vt__snapshot_data *s, const vt__timeline *tl, const vt__tl_device *d)
{
    const vt__tl_point *pk = &d->points[d->peak_allocated_point];
    struct site *v = malloc((tl->nlifetimes + 1) * sizeof *v);
    if (!v)
        return;
    size_t n = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->device != d->device || !vt__lifetime_allocated_at(l, pk->event))
            continue;
        const vt__frame *f = vt__report_site_frame(s, l->alloc_stack);
        v[n++] = (struct site){ .key = (f ? (uint64_t)(f - s->frames) + 1 : 0) * 2,
                                .bytes = l->size, .count = 1, .stack = l->alloc_stack };
    }
    /* A library's handle or workspace (cuBLAS's, first needed at the
     * program's line) is a site of its own, said as such: the line did not
     * ask for those bytes. Looked up once per stack. */
    qsort(v, n, sizeof *v, cmp_site_stack);
    vt__report_inside in = { 0 };
    for (size_t i = 0; i < n; i++) {
        if (!i || v[i].stack != v[i - 1].stack)
            in = v[i].stack ? vt__report_inside_of(s, v[i].stack, 0) : (vt__report_inside){ 0 };
        v[i].key |= in.workspace;
        v[i].in = in;
        v[i].in.bytes = v[i].bytes;
    }
    qsort(v, n, sizeof *v, cmp_site_key);
    /* Under a line that called a framework (`trainer.evaluate()`), the
     * library's line that made most of it (without room to sum them: the
     * sites alone, as before). */
    vt__report_inside *items = malloc((n ? n : 1) * sizeof *items);
    size_t m = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && v[j].key == v[i].key; j++)
            if (items)
                items[j - i] = v[j].in;
        struct site g = v[i];
        for (size_t k = i + 1; k < j; k++)
            g.bytes += v[k].bytes;
        g.count = j - i;
        g.ninside = 0;
        if (items && !(g.key & 1) && vt__report_sum_inside(s, items, j - i, &g.in, 1, &g.ninside))
            g.ninside = 0;
        v[m++] = g;
    }
    free(items);
    qsort(v, m, sizeof *v, cmp_site_bytes);
    char b[32];
    if (pk->event == VT_TL_NONE)
        printf("  top call sites by bytes at peak (before the first event):\n");
    else
        printf("  top call sites by bytes at peak (seq %" PRIu64 "):\n", pk->seq);
    if (!m)
        printf("    (none)\n");
    bool has_python = vt__report_snapshot_has_python(s);
    for (size_t i = 0; i < m && i < TOP_SITES; i++) {
        printf("    %10s  %" PRIu64 " allocation%s  ", vt__fmt_bytes(v[i].bytes, b), v[i].count,
               v[i].count == 1 ? " " : "s");
        if (v[i].key >> 1)
            vt__report_frame_text(stdout, s, &s->frames[(v[i].key >> 1) - 1]);
        else
            fputs("<no stack recorded>", stdout);
        const vt__frame *lib = v[i].key & 1 ? vt__report_library_workspace(s, v[i].stack) : NULL;
        if (lib && (!(v[i].key >> 1) || lib != &s->frames[(v[i].key >> 1) - 1]))   /* not the site */
            printf("  [a library's own: %s]", *vt__snapshot_string(s, lib->function)
                                                ? vt__snapshot_string(s, lib->function) : "??");
        /* The site's first stack stands for all: one site, one thread kind. */
        if ((v[i].key >> 1) && has_python && vt__report_stack_without_python(s, v[i].stack))
            fputs("  [thread without Python frames]", stdout);
        putchar('\n');
        if (v[i].ninside && !v[i].in.workspace) {
            printf("                inside it, most by a library: %s  ", vt__fmt_bytes(v[i].in.bytes, b));
            vt__report_frame_text(stdout, s, v[i].in.frame);
            if (v[i].ninside > 1)
                printf("  (of %u lines)", v[i].ninside);
            putchar('\n');
        }
    }
    if (m > TOP_SITES)
        printf("    ... %zu more call sites\n", m - TOP_SITES);
    free(v);
}

struct step {
    uint32_t event;
    uint8_t kind;
    int64_t delta;
};

static int cmp_step(const void *a, const void *b)
{
    const struct step *x = a, *y = b;
    if (x->event != y->event)
        return x->event < y->event ? -1 : 1;
    return (x->delta > y->delta) - (x->delta < y->delta);   /* releases first */
}

/* Memory the cache did not serve, per kind: how many allocations, the most
 * bytes alive at once among the kept events, what is alive at the end. */
static void passthrough_kinds(const vt__timeline *tl)
{
    if (!tl->npassthrough)
        return;
    uint64_t count[VT_PTK_COUNT] = { 0 }, alive[VT_PTK_COUNT] = { 0 };
    uint64_t nalive[VT_PTK_COUNT] = { 0 }, peak[VT_PTK_COUNT] = { 0 }, cur[VT_PTK_COUNT] = { 0 };
    struct step *st = malloc(2 * tl->npassthrough * sizeof *st);
    const int have_peak = st != NULL;
    size_t n = 0;
    for (size_t i = 0; i < tl->npassthrough; i++) {
        const vt__passthrough *u = &tl->passthrough[i];
        count[u->kind]++;
        if (u->alive) {
            alive[u->kind] += u->size;
            nalive[u->kind]++;
        }
        if (st) {
            st[n++] = (struct step){ u->alloc_event, u->kind, (int64_t)u->size };
            if (!u->alive)
                st[n++] = (struct step){ u->free_event, u->kind, -(int64_t)u->size };
        }
    }
    if (st) {
        qsort(st, n, sizeof *st, cmp_step);
        for (size_t i = 0; i < n; i++) {
            cur[st[i].kind] += (uint64_t)st[i].delta;
            if (cur[st[i].kind] > peak[st[i].kind])
                peak[st[i].kind] = cur[st[i].kind];
        }
        free(st);
    }
    char b1[32], b2[32];
    printf("not served by the cache (passed through), per kind:\n");
    for (int k = 0; k < VT_PTK_COUNT; k++) {
        if (!count[k])
            continue;
        printf("  %s: %" PRIu64 " allocation%s, peak %s, alive %s in %" PRIu64 "\n",
               vt__passthrough_kind_name((enum vt__passthrough_kind)k), count[k], count[k] == 1 ? "" : "s",
               have_peak ? vt__fmt_bytes(peak[k], b1) : "?", vt__fmt_bytes(alive[k], b2),
               nalive[k]);
    }
}

/* The CUDA graphs' private pools at the end of device `dev` (format 1.14):
 * their free bytes are reserved but unallocated, yet no request but a
 * capture's uses them, and PyTorch keeps them until the graphs are gone. */
static void graph_pools_now(const vt__snapshot_data *s, const vt__timeline *tl, int dev)
{
    vt__graph_pools p;
    if (!tl->nevents || vt__oom_graph_pools(s, tl, dev, tl->nevents - 1, &p) || !p.reserved)
        return;   /* none (or no memory for the line: it is left out) */
    char b1[32], b2[32];
    bool own = p.program_made;   /* torch.cuda.MemPool, graph_pool_handle() */
    printf("  %s: %s of the reserved now, %s of it free: %s (given back once %s deleted)\n",
           own ? "private pools the program made" : "CUDA graph pools",
           vt__fmt_bytes(p.reserved, b1), vt__fmt_bytes(p.free, b2),
           own ? "served only to what is asked into them"
               : "kept for the graphs' replays, no other request's",
           own ? "they are" : "the graphs are");
}

static void print_summary(const char *path, const vt__snapshot_data *s, const vt__timeline *tl)
{
    const vt__snapshot_meta *m = &s->meta;
    char b1[32], b2[32];
    printf("snapshot %s\n", path);
    printf("  format %u.%u, pid %d, rank %d, host %s\n", m->format_version >> 16,
           m->format_version & 0xffff, m->pid, m->rank, vt__snapshot_string(s, m->host));
    printf("  command: %s\n", vt__snapshot_string(s, m->command_line));
    double span = (double)(tl->last_time_ns - tl->first_time_ns) * 1e-9;
    printf("  events: %zu in the window (seq %" PRIu64 "..%" PRIu64 ", %.3f s), %" PRIu64
           " recorded, %" PRIu64 " overwritten, %" PRIu64 " stacks dropped\n",
           tl->nevents, tl->first_seq, tl->last_seq, span, m->events_recorded,
           m->events_overwritten, m->stacks_dropped);
    if (m->events_overwritten) {
        /* The ring kept the newest events: the window's first step has lost
         * its start unless the window begins at a mark. */
        size_t first_mark = tl->nmarks ? tl->marks[0].event : 0;
        if (first_mark > 0)
            printf("  window: it starts inside a step: the %zu event%s before the first mark "
                   "'%s' (%.3f s) %s the end of a step whose start was overwritten (a larger "
                   "ring: VRAMTRACE_CONF=ring:SIZE)\n", first_mark, first_mark == 1 ? "" : "s",
                   vt__snapshot_string(s, tl->marks[0].label),
                   (double)(tl->marks[0].time_ns - tl->first_time_ns) * 1e-9,
                   first_mark == 1 ? "is" : "are");
    }
    if (m->stacks_truncated)
        printf("  stacks: %" PRIu64 " events have truncated stacks (the recorder's stack table "
               "was full: they keep only their outer callers)\n", m->stacks_truncated);
    if (tl->ngaps || tl->nfree_unseen)
        printf("  gaps: %zu inside the window (%" PRIu64 " events missing); %zu allocation%s "
               "freed where the events do not show it, counted as freed, not alive\n",
               tl->ngaps, tl->events_missing, tl->nfree_unseen,
               tl->nfree_unseen == 1 ? "" : "s");
    const uint64_t *k = tl->kind_counts;
    size_t alive = 0;
    for (size_t i = 0; i < tl->nsegments; i++)
        alive += (tl->segments[i].flags & VT_LT_ALIVE) != 0;
    printf("  counts: allocs %" PRIu64 ", frees %" PRIu64 ", segment allocs %" PRIu64
           ", segment frees %" PRIu64 ", segments alive %zu, OOMs %" PRIu64 ", bad frees %" PRIu64
           ", marks %" PRIu64 "\n",
           k[VT_EV_ALLOC], k[VT_EV_FREE_REQUESTED], k[VT_EV_SEGMENT_ALLOC], k[VT_EV_SEGMENT_FREE],
           alive, k[VT_EV_OOM], k[VT_EV_BAD_FREE], k[VT_EV_MARK]);
    if (tl->fork_seq) {
        uint64_t n = 0, bytes = 0;
        for (size_t i = 0; i < tl->nlifetimes; i++)
            if ((tl->lifetimes[i].flags & (VT_LT_INHERITED | VT_LT_ALIVE)) ==
                (VT_LT_INHERITED | VT_LT_ALIVE)) {
                n++;
                bytes += tl->lifetimes[i].size;
            }
        printf("  forked from pid %" PRIu64 " at seq %" PRIu64 ": %s in %" PRIu64
               " allocations still alive are the parent's (inherited, not leaks of this "
               "process; counted in allocated)\n", tl->fork_parent_pid, tl->fork_seq,
               vt__fmt_bytes(bytes, b1), n);
    }
    const char *pool = vt__snapshot_pool_note(s);
    if (pool)
        printf("  %s%s\n", (s->meta.flags & VT_META_POOL_UNSEEN) ? "NOTE: " : "", pool);
    passthrough_kinds(tl);
    if (!tl->ndevices)
        printf("no device memory recorded\n");
    for (size_t i = 0; i < tl->ndevices; i++) {
        const vt__tl_device *d = &tl->devices[i];
        const char *name = "";
        uint64_t total = 0;
        for (size_t j = 0; j < s->ndevices; j++)
            if (s->devices[j].ordinal == d->device) {
                name = vt__snapshot_string(s, s->devices[j].name);
                total = s->devices[j].total_bytes;
            }
        printf("device %d", d->device);
        if (*name || total)
            printf(" (%s%s%s)", name, *name && total ? ", " : "",
                   total ? vt__fmt_bytes(total, b1) : "");
        printf(":\n");
        const vt__tl_point *pa = &d->points[d->peak_allocated_point];
        const vt__tl_point *pr = &d->points[d->peak_reserved_point];
        printf("  allocated: peak %s (seq %" PRIu64 ") in the kept events, current %s\n",
               vt__fmt_bytes(d->peak_allocated, b1), pa->seq,
               vt__fmt_bytes(d->final_allocated, b2));
        printf("  pending free: %s (freed, waiting for stream events); active peak %s "
               "(allocated + pending)\n", vt__fmt_bytes(d->final_pending, b1),
               vt__fmt_bytes(d->peak_active, b2));
        printf("  reserved:  peak %s (seq %" PRIu64 ") in the kept events, current %s\n",
               vt__fmt_bytes(d->peak_reserved, b1), pr->seq,
               vt__fmt_bytes(d->final_reserved, b2));
        const vt__snap_device *info = vt__report_device(s, d->device);
        if (info && (m->flags & VT_META_DEVICE_PEAKS)) {
            char b3[32];
            printf("  true peaks (allocator, whole run): allocated %s, reserved %s, active %s\n",
                   vt__fmt_bytes(info->peak_allocated, b1),
                   vt__fmt_bytes(info->peak_reserved, b2),
                   vt__fmt_bytes(info->peak_active, b3));
        }
        if (tl->state_complete) {
            vt__state_totals st;
            char b3[32];
            vt__report_state_totals(s, d->device, &st);
            printf("  at the snapshot (allocator state): allocated %s in %" PRIu64
                   " block%s, pending %s, reserved %s\n", vt__fmt_bytes(st.allocated, b1),
                   st.allocated_blocks, st.allocated_blocks == 1 ? "" : "s",
                   vt__fmt_bytes(st.pending, b2), vt__fmt_bytes(st.reserved, b3));
        }
        uint64_t fp = pa->reserved > pa->allocated ? pa->reserved - pa->allocated : 0;
        uint64_t fe = d->final_reserved > d->final_allocated
                          ? d->final_reserved - d->final_allocated : 0;
        printf("  fragmentation: %s reserved but unallocated at the allocated peak (%.1f%%), "
               "%s now (%.1f%%)\n", vt__fmt_bytes(fp, b1), pct(fp, pa->reserved),
               vt__fmt_bytes(fe, b2), pct(fe, d->final_reserved));
        graph_pools_now(s, tl, d->device);
        top_sites(s, tl, d);
    }
}

static int view_summary(const char *path, const vt__snapshot_data *s, const vt__timeline *tl,
                        bool all_frames)
{
    (void)all_frames;   /* read through vt__report_all_frames */
    print_summary(path, s, tl);
    return 0;
}

int vt__cmd_summary(int argc, char **argv)
{
    return vt__report_run_streamed("summary", argc, argv, usage_text, "--all-frames",
                                   &vt__report_all_frames, VT_TL_STREAM_CURVES, view_summary);
}
