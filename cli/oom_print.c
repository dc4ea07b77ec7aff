/*
 * cli/oom_print.c - the OOM explanation (oom_explain.h) as text, in a
 * screenful or in the few lines `vramtrace run` prints, and as JSON.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "oom_explain.h"
#include "report_util.h"

#define SITES_SHOWN 6
#define TRIED_SHOWN 8

static double rel_s(const vt__snapshot_data *s, uint64_t t)
{
    uint64_t first = s->nevents ? s->events[0].time_ns : 0;
    return t > first ? (double)(t - first) / 1e9 : 0.0;
}

static const char *pool_name(uint8_t pool)
{
    return pool == VT_POOL_SMALL ? "small" : pool == VT_POOL_LARGE ? "large" : "uncached";
}

static void site_text(FILE *f, const vt__snapshot_data *s, const vt__frame *fr)
{
    if (fr)
        vt__report_frame_text(f, s, fr);
    else
        fputs("<no stack recorded>", f);
}

/* The libraries' lines under a line of the program that made its
 * allocations: what a framework it called (a Trainer's evaluation loop)
 * keeps, where the program's line alone says only `trainer.evaluate()`. */
static void inside_text(FILE *f, const vt__snapshot_data *s, const vt__oom_site *st)
{
    char b1[32];
    if (!st->ninside)
        return;
    fputs("                    made inside it by the libraries' lines:\n", f);
    for (uint32_t i = 0; i < st->ninside && i < VT__OOM_INSIDE_SHOWN; i++) {
        fprintf(f, "                    %10s %5u  ", vt__fmt_bytes(st->inside[i].bytes, b1),
                st->inside[i].count);
        if (st->inside[i].workspace) {
            fputs(vt__snapshot_string(s, st->inside[i].frame->function), f);
            fputs(" (a library's own workspace, kept and reused by design)", f);
        } else {
            site_text(f, s, st->inside[i].frame);
        }
        fputc('\n', f);
    }
    if (st->ninside > VT__OOM_INSIDE_SHOWN)
        fprintf(f, "                    ... %u more line%s\n", st->ninside - VT__OOM_INSIDE_SHOWN,
                st->ninside - VT__OOM_INSIDE_SHOWN == 1 ? "" : "s");
}

/* What to set, as the program would set it. */
static void fix_text(FILE *f, const vt__oom_report *r, const vt__oom_fix *x)
{
    if (x->kind == VT__OOM_FIX_SETTING)
        fprintf(f, "%s=%s", r->pytorch ? "PYTORCH_CUDA_ALLOC_CONF" : "VRAMTRACE_CONF", x->conf);
    else
        fputs(x->conf, f);
}

static void fix_outcome(FILE *f, const vt__oom_fix *x)
{
    char b1[32];
    if (x->failed)
        fprintf(f, "not checked: %s", x->err);
    else if (x->fits)
        fprintf(f, "fits, peak reserved %s", vt__fmt_bytes(x->peak_reserved, b1));
    else
        fprintf(f, "OOM at event %zu, peak reserved %s", x->oom_event,
                vt__fmt_bytes(x->peak_reserved, b1));
}

static size_t nfits(const vt__oom_report *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nfixes; i++)
        n += r->fixes[i].fits && !r->fixes[i].failed;
    return n;
}

/* "    <the fix>  (<its outcome>)": one candidate, as both lists give it. */
static void fix_line(FILE *f, const vt__oom_report *r, const vt__oom_fix *x)
{
    fputs("    ", f);
    fix_text(f, r, x);
    fputs("  (", f);
    fix_outcome(f, x);
    fputs(")\n", f);
}

/* A line's native finding (no tensors): what the checker says of its call
 * sites, under the line. */
static void site_finding_line(FILE *f, const vt__check_finding *x, bool by_time)
{
    char b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    fputs("                    check: ", f);
    if (x->rule == VT_CHECK_RULE_GROWTH && x->growth_window_ns)
        fprintf(f, "grows %s per %s", vt__fmt_bytes(x->growth_per_step, b1),
                vt__fmt_duration(x->growth_window_ns, b2));
    else if (x->rule == VT_CHECK_RULE_GROWTH)
        fprintf(f, "grows %s per step", vt__fmt_bytes(x->growth_per_step, b1));
    else if (x->rule == VT_CHECK_RULE_NEVER_FREED)
        fprintf(f, "never freed, %u allocations %s", x->nallocs,
                by_time ? "through the run" : "step after step");
    else
        fputs("outlives its siblings from the same call site", f);
    fprintf(f, " (%s)\n", vt__check_rule_name(x->rule));
}

/* The line whose memory piled up step after step before the OOM: the
 * largest alive at the OOM that the checker flags as alive after its last
 * use (track()), or, without tensors, as never freed or growing step after
 * step (judged by marks; by time, a program's one burst of allocations, a
 * fragmentation test's kept blocks, is no such evidence). NULL: none. A fix
 * that fits the request that failed only moves the OOM later while that
 * line goes on piling up, so it is said first. */
static const vt__oom_site *piled_up_site(const vt__oom_report *r)
{
    bool by_steps = r->check && r->check->nmarks > 0;
    for (size_t i = 0; i < r->nsites; i++) {
        const vt__oom_site *st = &r->sites[i];
        const vt__check_finding *x = st->site_finding;
        if (st->flagged || (by_steps && x && (x->rule == VT_CHECK_RULE_NEVER_FREED ||
                                              x->rule == VT_CHECK_RULE_GROWTH)))
            return st;
    }
    return NULL;
}

/* "  piled up before it: <line> ...": piled_up_site's line, with what the
 * checker says of it. */
static void piled_up_line(FILE *f, const vt__snapshot_data *s, const vt__oom_site *st)
{
    char b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    fputs("  piled up before it: ", f);
    site_text(f, s, st->frame);
    if (st->flagged) {
        fprintf(f, ", %u allocation%s (%s) alive after their last use", st->flagged,
                st->flagged == 1 ? "" : "s", vt__fmt_bytes(st->flagged_bytes, b1));
        if (st->finding && st->finding->npaths) {
            char path_text[512];
            vt__check_path_format(&st->finding->paths[0], path_text, sizeof path_text);
            fprintf(f, ", held by %s", path_text);
        }
    } else if (st->site_finding->rule == VT_CHECK_RULE_GROWTH) {
        fprintf(f, ", growing %s per step (%s alive at the OOM)",
                vt__fmt_bytes(st->site_finding->growth_per_step, b1),
                vt__fmt_bytes(st->bytes, b2));
    } else {
        fprintf(f, ", never freed, %u allocations step after step (%s alive at the OOM)",
                st->site_finding->nallocs, vt__fmt_bytes(st->bytes, b1));
    }
    fputs(": a fix that fits this request only moves the OOM later while it grows\n", f);
}

/* "  most of what was alive: ...": where nothing piled up, a library's line
 * that made half of what was alive or more under one line of the program
 * (a framework's: the predictions a Trainer's evaluation concatenates),
 * which the request's own line (`trainer.evaluate()`) does not say. */
static void mostly_inside_line(FILE *f, const vt__snapshot_data *s, const vt__oom_report *r)
{
    char b1[VT_FMT_BYTES_LEN];
    const vt__oom_site *st = r->nsites ? &r->sites[0] : NULL;
    if (!st || !st->ninside || st->inside[0].workspace || st->inside[0].bytes * 2 < r->alive_bytes)
        return;
    fprintf(f, "  most of what was alive: %s made under ", vt__fmt_bytes(st->inside[0].bytes, b1));
    site_text(f, s, st->frame);
    fputs(" by ", f);
    site_text(f, s, st->inside[0].frame);
    fputc('\n', f);
}

/* A library's own request next to PyTorch's cache (r->library): what made
 * it, and why the cache's free memory could not serve it. `indent` opens
 * each line. */
static void library_text(FILE *f, const vt__snapshot_data *s, const vt__oom_report *r,
                         const char *indent)
{
    char b1[32];
    const vt__frame *lib = vt__report_library_workspace(s, r->stack);
    fprintf(f, "%sa library's own allocation", indent);
    if (lib) {
        fputs(" (", f);
        vt__report_frame_text(f, s, lib);
        fputc(')', f);
    }
    fprintf(f, ", outside PyTorch's cache\n%sthe %s free in PyTorch's cache could not serve it:"
               " PyTorch gives cached blocks back to the\n%sdevice for its own requests only"
               " (torch.cuda.empty_cache() gives them back)\n",
            indent, vt__fmt_bytes(r->cache_free, b1), indent);
}

/* " (captured at LINE)": where a private pool began, `how`, where its
 * stack is known (0: nothing). */
static void pool_line(FILE *f, const vt__snapshot_data *s, const char *how, uint32_t stack)
{
    if (!stack)
        return;
    fprintf(f, " (%s ", how);
    site_text(f, s, vt__oom_site_frame(s, stack));
    fputc(')', f);
}

/* The memory of CUDA graphs' private pools (r->pools.reserved): whose it
 * is, and why the request could not use its free bytes. */
static void graph_pools_text(FILE *f, const vt__snapshot_data *s, const vt__oom_report *r,
                             const char *indent)
{
    char b1[32];
    if (r->pools.program_made) {   /* a torch.cuda.MemPool's, a graph_pool_handle()'s */
        fprintf(f, "%s%s is held by %s the program made", indent,
                vt__fmt_bytes(r->pools.reserved, b1),
                r->pools.pools == 1 ? "a private pool" : "private pools");
        pool_line(f, s, "first used at", r->pools.stack);
        fprintf(f, ":\n%sPyTorch serves from it only what is asked into it (torch.cuda.MemPool, "
                   "or CUDA graphs sharing a graph_pool_handle()), and gives it back only once "
                   "it is deleted\n", indent);
        return;
    }
    if (r->pools.compiled)
        fprintf(f, "%s%s is held by torch.compile's CUDA graphs in their private pool%s", indent,
                vt__fmt_bytes(r->pools.reserved, b1), r->pools.pools == 1 ? "" : "s");
    else
        fprintf(f, "%s%s is held by %s CUDA graph%s private pool%s", indent,
                vt__fmt_bytes(r->pools.reserved, b1),
                r->pools.pools == 1 ? "a" : "the", r->pools.pools == 1 ? "'s" : "s'",
                r->pools.pools == 1 ? "" : "s");
    pool_line(f, s, "captured at", r->pools.stack);
    fprintf(f, ":\n%sPyTorch serves from it only what is captured into it, and gives it back only"
               " once %s\n", indent,
            r->pools.compiled ? "the graphs are released (torch._dynamo.reset())"
                                : "the graph is deleted");
}

/* A request made into a private pool (r->in_pool): which, and what that
 * means for the memory it asked for. */
static void in_pool_text(FILE *f, const vt__snapshot_data *s, const vt__oom_report *r,
                         const char *indent)
{
    int kind = r->in_pool_kind;
    if (kind == VT__OOM_POOL_PROGRAM) {
        fprintf(f, "%sasked into a private pool the program made (torch.cuda.MemPool, or a "
                   "graph_pool_handle() CUDA graphs share)", indent);
    } else {
        fprintf(f, "%sasked while %s being captured", indent, kind == VT__OOM_POOL_COMPILED
                                                                  ? "torch.compile's CUDA graphs were"
                                                                  : "a CUDA graph was");
        pool_line(f, s, "captured at", r->in_pool_stack);
    }
    fprintf(f, ":\n%sPyTorch serves it from that pool only, which keeps what it takes %s\n",
            indent, kind == VT__OOM_POOL_PROGRAM ? "until the pool is deleted"
                    : kind == VT__OOM_POOL_COMPILED
                        ? "until the graphs are released (torch._dynamo.reset())"
                        : "as long as the graph lives");
}

/* The request's line, ending the line begun, and what it was: a library's
 * own allocation, a request into a private pool. */
static void request_site_text(FILE *f, const vt__snapshot_data *s, const vt__oom_report *r)
{
    site_text(f, s, vt__oom_site_frame(s, r->stack));
    fputc('\n', f);
    if (r->library)
        library_text(f, s, r, "  ");
    if (r->in_pool)
        in_pool_text(f, s, r, "  ");
}

/* "the first of 3 OOMs", "OOM 2 of 3", "the last of 2 OOMs, the one the
 * program ended with" (r->noom > 1). */
static const char *which_text(const vt__oom_report *r, char *buf, size_t len)
{
    if (r->index == 1)
        snprintf(buf, len, "the first of %zu OOMs", r->noom);
    else if (r->index == r->noom && !r->allocs_after)
        snprintf(buf, len, "the last of %zu OOMs, the one the program ended with", r->noom);
    else if (r->index == r->noom)
        snprintf(buf, len, "the last of %zu OOMs", r->noom);
    else
        snprintf(buf, len, "OOM %zu of %zu", r->index, r->noom);
    return buf;
}

static void print_brief(FILE *f, const char *path, const vt__snapshot_data *s,
                        const vt__oom_report *r)
{
    char b1[32], b2[32], b3[32], b4[32], which[96];
    fprintf(f, "vramtrace run: the program ran out of device memory: %s asked on device %d at ",
            vt__fmt_bytes(r->size, b1), r->device);
    request_site_text(f, s, r);
    /* a program that caught the error (a batch-size search) is told so: the
     * run went on, and the fixes are for the request that failed */
    if (r->allocs_after) {
        fprintf(f, "  it went on: the error was caught, %zu allocation%s after it", r->allocs_after,
                r->allocs_after == 1 ? "" : "s");
        if (r->noom > 1)
            fprintf(f, ", %zu OOMs in all (this is %s)", r->noom,
                    r->index == 1 ? "the first" : "a later one");
        fputc('\n', f);
    } else if (r->noom > 1) {
        /* the earlier ones were caught: a batch-size search, a retry */
        fprintf(f, "  %s; the earlier %s caught\n", which_text(r, which, sizeof which),
                r->noom == 2 ? "one was" : "ones were");
    }
    if (r->held_prev_bytes) {
        const char *site = r->failed_call_name;
        fprintf(f, "  %s alive here was made by %s, which ran out of memory before",
                vt__fmt_bytes(r->held_prev_bytes, b1), site);
        fputs(r->held_in_handler ? ": a retry inside the except clause\n  that caught it runs"
                                   " while the exception keeps that call's frames and tensors"
                                   " alive\n"
                                 : " and was caught\n", f);
    }
    if (r->cache_free)
        fprintf(f, "  %s allocated of %s reserved; %s free in the cache, %s of it in pieces "
                   "smaller than the request\n", vt__fmt_bytes(r->allocated, b1),
                vt__fmt_bytes(r->reserved, b2), vt__fmt_bytes(r->cache_free, b3),
                vt__fmt_bytes(r->free_smaller, b4));
    else   /* (a CUDA graph's pool's free bytes are its own: said below) */
        fprintf(f, "  %s allocated of %s reserved; nothing free in the cache\n",
                vt__fmt_bytes(r->allocated, b1), vt__fmt_bytes(r->reserved, b2));
    if (!r->library && !r->fit_where_served && r->fit_elsewhere)
        fprintf(f, "  none of the pieces big enough (%s) is on the stream that asked, in its pool:"
                   " a cached piece serves only the stream and pool it was made for\n",
                vt__fmt_bytes(r->fit_elsewhere, b1));
    if (r->pools.reserved)
        graph_pools_text(f, s, r, "  ");
    const vt__oom_site *piled = piled_up_site(r);
    if (piled)
        piled_up_line(f, s, piled);
    else
        mostly_inside_line(f, s, r);
    if (r->replayed && r->reproduced && nfits(r)) {
        fputs("  fixes that fit, checked by replaying the run:", f);
        size_t k = 0;
        for (size_t i = 0; i < r->nfixes; i++)
            if (r->fixes[i].fits && !r->fixes[i].failed) {
                fputs(k++ ? ";" : "", f);
                fputs(" ", f);
                fix_text(f, r, &r->fixes[i]);
            }
        fputc('\n', f);
    } else if (r->replayed && r->reproduced) {
        fputs("  nothing tried fits in the replay, not even a bigger device\n", f);
    } else if (r->replayed && !r->reproduced && r->events_lost && r->before_window) {
        fprintf(f, "  the replay does not run out of memory where the program did: the %s "
                   "allocated before the ring's window is made first, not as it lay in "
                   "segments then; no fix is verified\n",
                vt__fmt_bytes(r->before_window, b1));
    } else if (r->replayed && !r->reproduced) {
        fputs("  the replay does not run out of memory where the program did: no fix is "
              "verified\n", f);
    }
    fprintf(f, "  why, and what else was tried: vramtrace oom %s\n", path);
}

void vt__oom_print(FILE *f, const char *path, const vt__snapshot_data *s, const vt__oom_report *r,
                   bool brief)
{
    if (brief) {
        print_brief(f, path, s, r);
        return;
    }
    char b1[32], b2[32], b3[32], b4[32], which[96];
    fprintf(f, "OUT OF MEMORY: %s asked on device %d, stream 0x%" PRIx64 ", %.3f s into the "
               "recording (event %zu", vt__fmt_bytes(r->size, b1), r->device, r->stream,
            rel_s(s, r->time_ns), r->event);
    if (r->noom > 1)
        fprintf(f, "; %s", which_text(r, which, sizeof which));
    fputs(")\n  at ", f);
    request_site_text(f, s, r);

    if (r->total)
        fprintf(f, "device %d: %s, %s free at the OOM\n", r->device, vt__fmt_bytes(r->total, b1),
                vt__fmt_bytes(r->device_free, b2));
    else
        fprintf(f, "device %d: %s for this process (its memory in use + %s free at the OOM; the "
                   "device's total was not recorded)\n", r->device,
                vt__fmt_bytes(r->capacity, b1), vt__fmt_bytes(r->device_free, b2));
    fprintf(f, "  reserved by the cache  %s: %s allocated, %s pending free, %s free\n",
            vt__fmt_bytes(r->reserved, b1), vt__fmt_bytes(r->allocated, b2),
            vt__fmt_bytes(r->pending, b3), vt__fmt_bytes(r->cache_free, b4));
    if (r->cache_pieces) {
        fprintf(f, "  free in the cache      %s in %" PRIu64 " piece%s, the largest %s\n",
                vt__fmt_bytes(r->cache_free, b1), r->cache_pieces,
                r->cache_pieces == 1 ? "" : "s", vt__fmt_bytes(r->largest_free, b2));
        fprintf(f, "  fragmentation          %s (%.0f %% of the free bytes) in pieces smaller than "
                   "the %s asked\n", vt__fmt_bytes(r->free_smaller, b1),
                r->cache_free ? 100.0 * (double)r->free_smaller / (double)r->cache_free : 0.0,
                vt__fmt_bytes(r->size, b2));
        for (size_t i = 0; i < r->ngroups && i < 4; i++)
            fprintf(f, "    %s pool, stream 0x%" PRIx64 ": %s in %" PRIu64 " piece%s, the largest "
                       "%s\n", pool_name(r->groups[i].pool), r->groups[i].stream,
                    vt__fmt_bytes(r->groups[i].bytes, b1), r->groups[i].pieces,
                    r->groups[i].pieces == 1 ? "" : "s", vt__fmt_bytes(r->groups[i].largest, b2));
        if (r->ngroups > 4)
            fprintf(f, "    ... %zu more pools and streams\n", r->ngroups - 4);
        if (!r->library && !r->fit_where_served && r->fit_elsewhere)
            fprintf(f, "  none of it where this request is served: a cached piece serves only "
                       "the stream and pool it was made for, and the %s pool on stream 0x%" PRIx64
                       " has no piece of %s; %s in pieces that big are on other streams or in "
                       "the other pool\n", pool_name(r->pool), r->stream,
                    vt__fmt_bytes(r->size, b1), vt__fmt_bytes(r->fit_elsewhere, b2));
    }
    if (r->pools.reserved) {
        fprintf(f, "  %s %s of the reserved, %s of it free (%s in wholly free segments)\n",
                r->pools.program_made ? "private pools         " : "CUDA graph pools      ",
                vt__fmt_bytes(r->pools.reserved, b1),
                vt__fmt_bytes(r->pools.free, b2), vt__fmt_bytes(r->pools.whole, b3));
        graph_pools_text(f, s, r, "    ");
    }
    if (r->outside_reserved || r->passthrough || r->other) {
        fputs("  outside the cache     ", f);
        const char *sep = " ";
        if (r->outside_reserved) {
            fprintf(f, "%s%s held for libraries' own allocations (%s of them alive)", sep,
                    vt__fmt_bytes(r->outside_reserved, b1), vt__fmt_bytes(r->outside_allocated, b2));
            sep = "; ";
        }
        if (r->passthrough) {
            fprintf(f, "%s%s the cache did not serve (managed, VMM, pools...)", sep,
                    vt__fmt_bytes(r->passthrough, b1));
            sep = "; ";
        }
        if (r->other)
            fprintf(f, "%s%s used by other processes or contexts", sep,
                    vt__fmt_bytes(r->other, b1));
        fputc('\n', f);
    } else {
        fputs("  outside the cache      nothing seen\n", f);
    }

    fprintf(f, "alive at the OOM: %s in %zu allocation%s, by the line that made them\n",
            vt__fmt_bytes(r->alive_bytes, b1), r->alive_count, r->alive_count == 1 ? "" : "s");
    for (size_t i = 0; i < r->nsites && i < SITES_SHOWN; i++) {
        const vt__oom_site *st = &r->sites[i];
        fprintf(f, "  %10s %5u  ", vt__fmt_bytes(st->bytes, b1), st->count);
        site_text(f, s, st->frame);
        fputc('\n', f);
        if (st->flagged) {
            fprintf(f, "                    check: %u of them (%s) alive after their last use%s",
                    st->flagged, vt__fmt_bytes(st->flagged_bytes, b1),
                    st->finding && st->finding->rule == VT_CHECK_RULE_CYCLE
                        ? ", held by reference cycles until gc ran" : "");
            if (st->finding && st->finding->npaths) {
                char path_text[512];
                vt__check_path_format(&st->finding->paths[0], path_text, sizeof path_text);
                fprintf(f, "; held by %s", path_text);
            }
            fputc('\n', f);
        } else if (st->tensor) {
            fputs("                    tensor '", f);
            vt__text_str(f, vt__snapshot_string(s, st->tensor));
            fputs("'\n", f);
        } else if (st->site_finding) {
            site_finding_line(f, st->site_finding, !r->check->nmarks);
        }
        inside_text(f, s, st);
    }
    if (r->nsites > SITES_SHOWN)
        fprintf(f, "  ... %zu more lines\n", r->nsites - SITES_SHOWN);
    if (r->nflagged)
        fprintf(f, "  check flags %zu of these (%s) as alive after their last use "
                   "(vramtrace check %s)\n", r->nflagged, vt__fmt_bytes(r->flagged_bytes, b1), path);
    else if (!r->tensors && r->pytorch)
        fputs("  (no tensors recorded: which of these outlived their last use is not known; "
              "vramtrace run --track\n   records it, and then freeing them is tried too)\n", f);
    const vt__oom_site *piled = piled_up_site(r);
    if (piled)
        piled_up_line(f, s, piled);
    if (r->held_prev_bytes) {
        const char *site = r->failed_call_name;
        fprintf(f, "  %s of them (%zu allocation%s) made by %s, which ran out\n"
                   "   of memory at the OOM before (event %zu, %s asked); the program caught it",
                vt__fmt_bytes(r->held_prev_bytes, b1), r->held_prev_count,
                r->held_prev_count == 1 ? "" : "s", site, r->prev_event,
                vt__fmt_bytes(r->prev_size, b2));
        if (r->held_in_handler)
            fputs(", and while its\n   except clause runs, the exception's traceback keeps"
                  " that call's frames, and what they held,\n   alive: a retry inside the"
                  " except clause runs out with them (retry after it)\n", f);
        else
            fputs(", and they are\n   still alive, steps later (`vramtrace run --track` names"
                  " what holds them)\n", f);
    }

    if (!r->replayed) {
        fprintf(f, "what would have fit: %s\n", r->replay_err);
        return;
    }
    fprintf(f, "what would have fit, checked by replaying the recording to its end in %s "
               "(%s rules):\n", vt__fmt_bytes(r->capacity, b1),
            r->rules && !strcmp(r->rules, "pytorch") ? "PyTorch's" : "vramtrace's");
    if (r->reproduced) {
        fprintf(f, "  as recorded, the replay runs out of memory too (event %zu", r->baseline_oom_event);
        fputs(r->baseline_oom_event == r->event ? ", the same request)\n" : ")\n", f);
    } else if (r->events_lost && r->before_window) {
        /* what was made before the kept events is made first (replay_seed.c),
         * but where it lay, and what the cache held free around it, is lost */
        fprintf(f, "  as recorded, the replay does %s (peak reserved %s): the ring overwrote "
                   "the recording's first %" PRIu64 " events; the replay makes what they "
                   "allocated first (%s of it held at the OOM), but not as it lay in "
                   "segments then, so no fix is verified; a larger ring keeps it "
                   "(VRAMTRACE_CONF=ring:SIZE)\n",
                r->baseline_oom_event == SIZE_MAX ? "not run out of memory"
                                                  : "run out of memory only later",
                vt__fmt_bytes(r->baseline_peak, b1), r->events_lost,
                vt__fmt_bytes(r->before_window, b2));
    } else {
        fprintf(f, "  as recorded, the replay does %s (peak reserved %s): the replay's rules "
                   "differ from the recorded allocator's here, so no fix is verified\n",
                r->baseline_oom_event == SIZE_MAX ? "not run out of memory"
                                                  : "run out of memory only later",
                vt__fmt_bytes(r->baseline_peak, b1));
    }
    if (!r->allocs_after)
        fputs("  (the recording ends at the OOM: a fix is checked up to the request that failed;"
              " what the\n   program would have asked next was not recorded)\n", f);
    size_t nfit = r->reproduced ? nfits(r) : 0;
    if (nfit) {
        fprintf(f, "  %s:\n", nfit == 1 ? "the fix that fits" : "fixes that fit");
        for (size_t i = 0; i < r->nfixes; i++) {
            const vt__oom_fix *x = &r->fixes[i];
            if (!x->fits || x->failed)
                continue;
            fix_line(f, r, x);
        }
        bool only_device = nfit == 1 && r->fixes[0].kind == VT__OOM_FIX_DEVICE;
        if (only_device)
            fputs("  no setting and no earlier free would have fit: only more memory\n", f);
    } else if (r->reproduced) {
        fputs("  nothing tried fits\n", f);
    }
    size_t shown = 0, tried = 0;
    for (size_t i = 0; i < r->nfixes; i++)
        tried += !(r->reproduced && r->fixes[i].fits && !r->fixes[i].failed);
    if (tried)
        fprintf(f, "  %s:\n", r->reproduced ? "tried, would not fit" : "replayed, not verified");
    for (size_t i = 0; i < r->nfixes && shown < TRIED_SHOWN; i++) {
        const vt__oom_fix *x = &r->fixes[i];
        if (r->reproduced && x->fits && !x->failed)
            continue;
        fix_line(f, r, x);
        shown++;
    }
    if (tried > shown)
        fprintf(f, "    ... %zu more (--json lists them all)\n", tried - shown);
}

/* ---- JSON --------------------------------------------------------------- */

static const char *fix_kind(int k)
{
    switch (k) {
    case VT__OOM_FIX_SETTING: return "setting";
    case VT__OOM_FIX_FREE_FLAGGED: return "free_flagged";
    case VT__OOM_FIX_GC: return "gc_collect";
    case VT__OOM_FIX_RETRY_OUTSIDE: return "retry_outside";
    case VT__OOM_FIX_EMPTY_CACHE: return "empty_cache";
    case VT__OOM_FIX_GRAPHS_DELETED: return "delete_graphs";
    default: return "device";
    }
}

void vt__oom_write_json(FILE *f, const char *path, const vt__snapshot_data *s,
                        const vt__oom_report *r)
{
    fputs("{\"schema\": \"vramtrace-oom\", \"schema_version\": 1, \"file\": ", f);
    vt__json_str(f, path);
    fprintf(f, ", \"allocator\": \"%s\"", r->pytorch ? "pytorch" : "vramtrace");
    fprintf(f, ", \"request\": {\"event\": %zu, \"seq\": %" PRIu64 ", \"time_s\": %.6f, "
               "\"device\": %d, \"stream\": \"0x%" PRIx64 "\", \"size\": %" PRIu64
               ", \"line\": ", r->event, r->seq, rel_s(s, r->time_ns), r->device, r->stream,
            r->size);
    vt__report_frame_json(f, s, vt__oom_site_frame(s, r->stack));
    fprintf(f, ", \"ooms_recorded\": %zu, \"index\": %zu, \"allocations_after\": %zu"
               ", \"library\": %s, \"private_pool\": ", r->noom, r->index, r->allocs_after,
            r->library ? "true" : "false");
    /* the private pool it was asked into (a CUDA graph's capture, a MemPool) */
    if (r->in_pool) {
        static const char *const kinds[] = { [VT__OOM_POOL_CAPTURE] = "capture",
                                             [VT__OOM_POOL_COMPILED] = "compiled_capture",
                                             [VT__OOM_POOL_PROGRAM] = "program" };
        fprintf(f, "{\"id\": %" PRIu64 ", \"kind\": \"%s\", \"line\": ", r->in_pool,
                kinds[r->in_pool_kind]);
        vt__report_frame_json(f, s, r->in_pool_stack ? vt__oom_site_frame(s, r->in_pool_stack)
                                                     : NULL);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputc('}', f);
    /* an earlier OOM the program caught, whose call still holds memory */
    if (r->held_prev_bytes) {
        const char *site = r->failed_call_name;
        fprintf(f, ", \"held_since_caught\": {\"event\": %zu, \"size\": %" PRIu64 ", \"call\": ",
                r->prev_event, r->prev_size);
        vt__json_str(f, site);
        fprintf(f, ", \"bytes\": %" PRIu64 ", \"count\": %zu, \"in_handler\": %s}",
                r->held_prev_bytes, r->held_prev_count, r->held_in_handler ? "true" : "false");
    } else {
        fputs(", \"held_since_caught\": null", f);
    }
    fputs(", \"device\": {\"total\": ", f);
    if (r->total)
        fprintf(f, "%" PRIu64, r->total);
    else
        fputs("null", f);
    fprintf(f, ", \"capacity\": %" PRIu64 ", \"free\": %" PRIu64 ", \"reserved\": %" PRIu64
               ", \"allocated\": %" PRIu64 ", \"pending_free\": %" PRIu64 ", \"cache_free\": %"
               PRIu64 ", \"cache_free_pieces\": %" PRIu64 ", \"largest_free\": %" PRIu64
               ", \"free_in_smaller_pieces\": %" PRIu64 ", \"fit_where_served\": %" PRIu64
               ", \"fit_elsewhere\": %" PRIu64 ", \"free_by_pool\": [",
            r->capacity, r->device_free, r->reserved, r->allocated, r->pending, r->cache_free,
            r->cache_pieces, r->largest_free, r->free_smaller, r->fit_where_served,
            r->fit_elsewhere);
    for (size_t i = 0; i < r->ngroups; i++)
        fprintf(f, "%s{\"pool\": \"%s\", \"stream\": \"0x%" PRIx64 "\", \"bytes\": %" PRIu64
                   ", \"pieces\": %" PRIu64 ", \"largest\": %" PRIu64 "}", i ? ", " : "",
                pool_name(r->groups[i].pool), r->groups[i].stream, r->groups[i].bytes,
                r->groups[i].pieces, r->groups[i].largest);
    fprintf(f, "], \"graph_pools\": {\"reserved\": %" PRIu64 ", \"free\": %" PRIu64
               ", \"free_segments\": %" PRIu64 ", \"pools\": %zu, \"compiled\": %s, "
               "\"program_made\": %s, \"line\": ",
            r->pools.reserved, r->pools.free, r->pools.whole, r->pools.pools,
            r->pools.compiled ? "true" : "false", r->pools.program_made ? "true" : "false");
    vt__report_frame_json(f, s, r->pools.stack ? vt__oom_site_frame(s, r->pools.stack) : NULL);
    fprintf(f, "}}, \"outside\": {\"libraries_reserved\": %" PRIu64 ", \"libraries_allocated\": %"
               PRIu64 ", \"uncached\": %" PRIu64 ", \"other\": ", r->outside_reserved,
            r->outside_allocated, r->passthrough);
    if (r->total)
        fprintf(f, "%" PRIu64 "}", r->other);
    else
        fputs("null}", f);
    fprintf(f, ", \"alive\": {\"bytes\": %" PRIu64 ", \"count\": %zu, \"checked\": %s, "
               "\"flagged_bytes\": %" PRIu64 ", \"flagged\": %zu, \"lines\": [", r->alive_bytes,
            r->alive_count, r->tensors ? "true" : "false", r->flagged_bytes, r->nflagged);
    for (size_t i = 0; i < r->nsites; i++) {
        const vt__oom_site *st = &r->sites[i];
        fprintf(f, "%s{\"line\": ", i ? ", " : "");
        vt__report_frame_json(f, s, st->frame);
        fprintf(f, ", \"bytes\": %" PRIu64 ", \"count\": %u, \"tensor\": ", st->bytes, st->count);
        if (st->tensor)
            vt__json_str(f, vt__snapshot_string(s, st->tensor));
        else
            fputs("null", f);
        fputs(", \"inside\": [", f);
        for (uint32_t k = 0; k < st->ninside && k < VT__OOM_INSIDE_SHOWN; k++) {
            fprintf(f, "%s{\"line\": ", k ? ", " : "");
            vt__report_frame_json(f, s, st->inside[k].frame);
            fprintf(f, ", \"bytes\": %" PRIu64 ", \"count\": %u, \"workspace\": %s}",
                    st->inside[k].bytes, st->inside[k].count,
                    st->inside[k].workspace ? "true" : "false");
        }
        fprintf(f, "], \"inside_lines\": %u", st->ninside);
        fprintf(f, ", \"flagged\": %u, \"flagged_bytes\": %" PRIu64 ", \"held_by\": ",
                st->flagged, st->flagged_bytes);
        if (st->finding && st->finding->npaths) {
            char path_text[1024];
            vt__check_path_format(&st->finding->paths[0], path_text, sizeof path_text);
            vt__json_str(f, path_text);
        } else {
            fputs("null", f);
        }
        /* without tensors: what check says of the line's call sites */
        const vt__check_finding *x = st->site_finding;
        if (x)
            fprintf(f, ", \"site_finding\": {\"rule\": \"%s\", \"bytes\": %" PRIu64
                       ", \"allocations\": %u, \"growth_per_step\": %" PRIu64
                       ", \"growth_window_ns\": %" PRIu64 "}",
                    vt__check_rule_name(x->rule), x->bytes, x->nallocs, x->growth_per_step,
                    x->growth_window_ns);
        else
            fputs(", \"site_finding\": null", f);
        fputc('}', f);
    }
    const vt__oom_site *piled = piled_up_site(r);
    if (piled)
        fprintf(f, "], \"piled_up\": %zu}, \"replay\": ", (size_t)(piled - r->sites));
    else
        fputs("], \"piled_up\": null}, \"replay\": ", f);
    if (!r->replayed) {
        fputs("{\"error\": ", f);
        vt__json_str(f, r->replay_err);
        fputs("}", f);
    } else {
        fprintf(f, "{\"rules\": \"%s\", \"settings\": ", r->rules ? r->rules : "");
        vt__json_str(f, r->baseline_conf);
        fprintf(f, ", \"capacity\": %" PRIu64 ", \"reproduced\": %s, \"oom_event\": ",
                r->capacity, r->reproduced ? "true" : "false");
        if (r->baseline_oom_event == SIZE_MAX)
            fputs("null", f);
        else
            fprintf(f, "%zu", r->baseline_oom_event);
        fprintf(f, ", \"peak_reserved\": %" PRIu64 ", \"replays\": %zu, \"events_lost\": %" PRIu64
                   ", \"before_window_bytes\": %" PRIu64 ", \"min_capacity\": ",
                r->baseline_peak, r->nreplays, r->events_lost, r->before_window);
        if (r->min_capacity)
            fprintf(f, "%" PRIu64 "}", r->min_capacity);
        else
            fputs("null}", f);
    }
    fputs(", \"fixes\": [", f);
    for (size_t i = 0; i < r->nfixes; i++) {
        const vt__oom_fix *x = &r->fixes[i];
        fprintf(f, "%s{\"conf\": ", i ? ", " : "");
        vt__json_str(f, x->conf);
        fprintf(f, ", \"kind\": \"%s\", \"peak_reserved\": %" PRIu64 ", \"fits\": %s, "
                   "\"verified\": %s, \"capacity\": %" PRIu64, fix_kind(x->kind),
                x->peak_reserved, x->fits && !x->failed ? "true" : "false",
                x->fits && !x->failed && r->reproduced ? "true" : "false", x->capacity);
        if (x->kind == VT__OOM_FIX_FREE_FLAGGED || x->kind == VT__OOM_FIX_GC
            || x->kind == VT__OOM_FIX_RETRY_OUTSIDE)
            fprintf(f, ", \"storages\": %u, \"storage_bytes\": %" PRIu64, x->storages,
                    x->storage_bytes);
        if (!x->fits && !x->failed)
            fprintf(f, ", \"oom_event\": %zu", x->oom_event);
        if (x->failed) {
            fputs(", \"error\": ", f);
            vt__json_str(f, x->err);
        }
        fputc('}', f);
    }
    fputs("]}", f);
}
