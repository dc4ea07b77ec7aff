/*
 * viz/render_findings.c - the findings of the HTML page: each of the
 * checker's findings and each FINDING event the snapshot recorded, as one
 * JSON item naming the allocation it is about (its page position), its
 * title and, by rule, why it was kept, since when, and the retention paths.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "format_bytes.h"
#include "json_str.h"
#include "order.h"
#include "render_internal.h"

/* The external storage a finding is about: the one opened at its alloc_seq
 * (they are in allocation order), else the last one at its address. */
uint32_t vt__viz_external_of(const struct render *r, const vt__check_finding *f)
{
    size_t lo;
    VT__PARTITION_POINT(r->nx, i, r->xs[i].alloc_seq < f->alloc_seq, lo);
    if (f->alloc_seq && lo < r->nx && r->xs[lo].alloc_seq == f->alloc_seq && r->xs[lo].addr == f->addr)
        return (uint32_t)(r->nl + lo);
    for (size_t k = r->nx; k-- > 0;)
        if (r->xs[k].addr == f->addr)
            return (uint32_t)(r->nl + k);
    return NONE;
}

static uint32_t finding_lifetime(const struct render *r, const vt__check_finding *f)
{
    const vt__timeline *tl = r->tl;
    if (f->external)
        return vt__viz_external_of(r, f);
    if (f->alloc_seq) {
        uint32_t ev = event_by_seq(r->s, f->alloc_seq);
        if (ev != NONE && tl->event_owner && ev < tl->nevents && tl->event_owner[ev] < tl->nlifetimes)
            return tl->event_owner[ev];
    }
    uint32_t at = NONE;
    if (f->last_use_seq)
        at = event_by_seq(r->s, f->last_use_seq);
    if (at == NONE && r->s->nevents)
        at = (uint32_t)r->s->nevents - 1;
    const vt__lifetime *lt = vt__timeline_find(tl, f->addr, at);
    if (!lt)
        lt = vt__timeline_find(tl, f->addr, NONE);
    return lt ? (uint32_t)(lt - tl->lifetimes) : NONE;
}

/* One allocation of a call-site finding: its page position, from when. */
struct ls { uint32_t pos; uint64_t t; };

static int cmp_ls(const void *a, const void *b)
{
    const struct ls *x = a, *y = b;
    return vt__order(x->pos, y->pos);
}

static void fmt_secs(uint64_t ns, char *buf, size_t len)
{
    if (ns >= 1000000000ull)
        snprintf(buf, len, "%.3g s", (double)ns / 1e9);
    else if (ns >= 1000000ull)
        snprintf(buf, len, "%.3g ms", (double)ns / 1e6);
    else
        snprintf(buf, len, "%.3g us", (double)ns / 1e3);
}

int64_t vt__viz_finding_pos(const struct render *r, const vt__check_finding *f)
{
    uint32_t li = finding_lifetime(r, f);
    return li == NONE ? -1 : (int64_t)r->rank[li];
}

void vt__viz_add_check_finding(struct render *r, const vt__check_finding *f, uint32_t group,
                               int64_t pos)
{
    const vt__timeline *tl = r->tl;
    vt__buf *b = &r->findings;
    char bytes[64], dur[32], title[512];
    vt__fmt_bytes(f->bytes, bytes);
    /* a finding of several blocks (a call site's, a growth's) says them as
     * the report does; one storage's block is on its line of the panel */
    uint64_t held = vt__check_held_bytes(f);
    if ((f->nallocs > 1 || f->rule == VT_CHECK_RULE_GROWTH) &&
        vt__check_blocks_worth_saying(f->bytes, held)) {
        char blocks[VT_FMT_BYTES_LEN];
        size_t n = strlen(bytes);
        snprintf(bytes + n, sizeof bytes - n, " in %s of blocks", vt__fmt_bytes(held, blocks));
    }
    fmt_secs(f->linger_ns, dur, sizeof dur);
    /* an owner much smaller than its storage says its own bytes, as the
     * report does ('loss' itself 8 B of the storage's 75.02 KiB) */
    char size[160];
    if (f->owner_name[0] && vt__check_owner_bytes_worth_saying(f)) {
        char own[VT_FMT_BYTES_LEN];
        snprintf(size, sizeof size, "itself %s of the storage's %s",
                 vt__fmt_bytes(f->owner_bytes, own), bytes);
    } else
        snprintf(size, sizeof size, "%s", bytes);
    const char *rule = vt__check_rule_name(f->rule);
    if (f->rule == VT_CHECK_RULE_LINGER)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) alive %s after its last use%s", rule,
                 f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", size, dur, f->freed ? "" : ", never freed");
    else if (f->rule == VT_CHECK_RULE_PINNED) {
        char wasted[32];
        vt__fmt_bytes(f->wasted_bytes, wasted);
        snprintf(title, sizeof title, "%s: %s%s%s (%s) kept by %u small view%s, %s wasted for %s",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", bytes, f->nviews_live,
                 f->nviews_live == 1 ? "" : "s", wasted, dur);
    } else if (f->rule == VT_CHECK_RULE_CYCLE)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) held by a reference cycle until gc ran, %s after its last use",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", size, dur);
    else if (f->rule == VT_CHECK_RULE_TAPE)
        snprintf(title, sizeof title, "%s: %s%s%s (%s) idle after its last use for %u%% of its step's tensor uses, alive at the step's peak",
                 rule, f->owner_name[0] ? "'" : "", f->owner_name[0] ? f->owner_name : "storage",
                 f->owner_name[0] ? "'" : "", size, f->step_idle_pct);
    else if (f->rule == VT_CHECK_RULE_NEVER_FREED)
        snprintf(title, sizeof title, "%s: %u allocation%s (%s) from one call site never freed", rule,
                 f->nallocs, f->nallocs == 1 ? "" : "s", bytes);
    else if (f->rule == VT_CHECK_RULE_GROWTH) {
        char per[32];
        vt__fmt_bytes(f->growth_per_step, per);
        snprintf(title, sizeof title, "%s: one call site's live bytes grow %s per step (%s over %u steps)",
                 rule, per, bytes, f->growth_last_mark - f->growth_first_mark);
    } else
        snprintf(title, sizeof title, "%s: %s outlived its call site's siblings by %s", rule, bytes, dur);

    if (r->nfindings++)
        vt__put_str(b, ",");
    vt__put_printf(b, "{\"l\":%" PRId64 ",\"src\":\"check\",\"kind\":", pos);
    vt__put_json_str(b, rule, 1);
    vt__put_printf(b, ",\"g\":%" PRIu32 ",\"bytes\":%" PRIu64 ",\"held\":%" PRIu64, group, f->bytes,
                   held);
    vt__put_str(b, ",\"title\":");
    vt__put_json_str(b, title, 1);
    int used = f->rule == VT_CHECK_RULE_LINGER || f->rule == VT_CHECK_RULE_CYCLE ||
               f->rule == VT_CHECK_RULE_TAPE;
    if (f->external)
        vt__put_str(b, ",\"ext\":true");
    if (used) {
        char msg[512];
        snprintf(msg, sizeof msg, "%u use%s; last by tensor '%s'", f->nuses, f->nuses == 1 ? "" : "s",
                 f->last_use_name);
        if (f->steps_unused)
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; %u complete step%s unused after it",
                     f->steps_unused, f->steps_unused == 1 ? "" : "s");
        if (f->rule == VT_CHECK_RULE_LINGER && f->sampled_grace_steps)   /* a replay buffer's */
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                     "; its line's tensors are drawn from at random: grace %u steps",
                     f->sampled_grace_steps);
        if (f->rule == VT_CHECK_RULE_LINGER && f->nviews_live) {   /* its kept part */
            char cb[32];
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                     "; owner dropped, what is kept covers %s of it: a copy would free the rest",
                     vt__fmt_bytes(f->covered_bytes, cb));
        }
        vt__put_str(b, ",\"msg\":");
        vt__put_json_str(b, msg, 1);
        if (f->last_use_seq)
            vt__put_printf(b, ",\"lastUse\":%" PRIu64, rel(r, f->last_use_time_ns));
    }
    if (f->rule == VT_CHECK_RULE_CYCLE) {
        char gc[32], why[256];
        fmt_secs(rel(r, f->gc_time_ns), gc, sizeof gc);
        snprintf(why, sizeof why, "held by a reference cycle until gc ran: the collection at %s freed it %s after its last use",
                 gc, dur);
        vt__put_str(b, ",\"why\":");
        vt__put_json_str(b, why, 1);
    }
    if (f->rule == VT_CHECK_RULE_TAPE) {
        char step[32], peak[32], why[256];
        fmt_secs(f->step_ns, step, sizeof step);
        vt__fmt_bytes(f->step_peak_bytes, peak);
        snprintf(why, sizeof why, "retained inside its step: alive %s after its last use (%u%% of the step's tensor uses, a %s step), through the step's peak of %s",
                 dur, f->step_idle_pct, step, peak);
        vt__put_str(b, ",\"why\":");
        vt__put_json_str(b, why, 1);
        vt__put_printf(b, ",\"peak\":%" PRIu64, rel(r, f->linger_from_time_ns));
    }
    if (f->rule == VT_CHECK_RULE_PINNED && f->nviews) {
        /* Which views keep it: the detail panel shows this line. */
        char msg[512], vb[32], cb[32];
        const vt__check_view *v = &f->views[0];
        vt__fmt_bytes(v->bytes, vb);
        vt__fmt_bytes(f->covered_bytes, cb);
        snprintf(msg, sizeof msg, "base tensor dropped; live views cover %s; largest: tensor '%s'%s%s%s (%s)",
                 cb, v->name[0] ? v->name : "?", v->base_name[0] ? " (view of '" : "",
                 v->base_name, v->base_name[0] ? "')" : "", vb);
        vt__put_str(b, ",\"msg\":");
        vt__put_json_str(b, msg, 1);
    }
    /* Hatched from: when it became a finding; a cycle's and a tape's bytes
     * count from the last use (the collection and the peak come later). */
    if ((f->rule == VT_CHECK_RULE_CYCLE || f->rule == VT_CHECK_RULE_TAPE) && f->last_use_seq)
        vt__put_printf(b, ",\"from\":%" PRIu64, rel(r, f->last_use_time_ns));
    else if (f->linger_from_seq || f->linger_from_time_ns)
        vt__put_printf(b, ",\"from\":%" PRIu64, rel(r, f->linger_from_time_ns));
    /* A call-site finding covers every allocation of the site still alive. */
    if (f->rule == VT_CHECK_RULE_NEVER_FREED && f->nallocs > 1 && f->alloc_stack) {
        /* In page order: a streamed timeline holds its lifetimes in no
         * particular order (a whole one's is the page's). */
        vt__put_str(b, ",\"ls\":[");
        size_t n = 0;
        struct ls *ls = malloc((tl->nlifetimes + 1) * sizeof *ls);
        for (size_t i = 0; ls && i < tl->nlifetimes; i++) {
            const vt__lifetime *l = &tl->lifetimes[i];
            if (l->alloc_stack != f->alloc_stack || !(l->flags & VT_LT_ALIVE) || l->alloc_event == NONE)
                continue;
            ls[n++] = (struct ls){ r->rank[i], rel(r, l->alloc_time_ns) };
        }
        if (n > 1)
            qsort(ls, n, sizeof *ls, cmp_ls);
        for (size_t i = 0; i < n; i++)
            vt__put_printf(b, "%s[%" PRIu32 ",%" PRIu64 "]", i ? "," : "", ls[i].pos, ls[i].t);
        if (!ls)
            b->oom = 1;
        free(ls);
        vt__put_str(b, "]");
    }
    if (f->npaths) {
        /* When the chains were seen, as `vramtrace check` says it. */
        vt__put_str(b, ",\"pathAt\":");
        vt__put_json_str(b, vt__check_paths_when(f), 1);
        vt__put_str(b, ",\"path\":[");
        for (size_t p = 0; p < f->npaths; p++) {
            /* As the text report shows it (runs and cycles of the same
             * hops once, with their count), whole: a deep chain may need
             * more than the line buffer. */
            char line[2048], *text = line;
            size_t need = vt__check_path_format_folded(&f->paths[p], line, sizeof line);
            if (need >= sizeof line && (text = malloc(need + 1)) != NULL)
                vt__check_path_format_folded(&f->paths[p], text, need + 1);
            if (p)
                vt__put_str(b, ",");
            vt__put_json_str(b, text ? text : line, 1);
            if (text != line)
                free(text);
        }
        vt__put_str(b, "]");
    }
    vt__put_str(b, "}");
}

void vt__viz_add_event_finding(struct render *r, const vt__event *e, int64_t pos)
{
    vt__buf *b = &r->findings;
    if (r->nfindings++)
        vt__put_str(b, ",");
    vt__put_printf(b, "{\"l\":%" PRId64 ",\"src\":\"snapshot\",\"kind\":\"recorded\",\"title\":",
                   pos);
    const char *text = vt__snapshot_string(r->s, e->str);
    vt__put_json_str(b, text[0] ? text : "finding recorded in the snapshot", 1);
    vt__put_printf(b, ",\"from\":%" PRIu64 "}", rel(r, e->time_ns));
}

void vt__viz_add_event_findings(struct render *r)
{
    const vt__snapshot_data *s = r->s;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind != VT_EV_FINDING)
            continue;
        const vt__lifetime *lt = vt__timeline_find(r->tl, e->addr, (uint32_t)i);
        vt__viz_add_event_finding(r, e, lt ? (int64_t)r->rank[lt - r->tl->lifetimes] : -1);
    }
}
