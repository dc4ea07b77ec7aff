/*
 * trace/check/check_report_json.c - a check report as a JSON document (the
 * schema in check.h), beside the text report of check_report.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "json_str.h"

/* {"id":ID,"name":NAME}, or null for id 0 (a view's base, a storage's
 * owner that is not known). */
static void json_tensor_ref(FILE *f, uint64_t id, const char *name)
{
    if (!id) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"id\":%" PRIu64 ",\"name\":", id);
    vt__json_str(f, name);
    fputc('}', f);
}

static void json_num(FILE *f, double v)
{
    if (!isfinite(v))
        v = 0;
    fprintf(f, "%.17g", v);
}

static void json_stack(FILE *f, const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[256];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 256);
    if (n > 256)
        n = 256;
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s{\"function\":", i ? "," : "");
        vt__json_str(f, vt__ck_string(s, fr[i]->function));
        fprintf(f, ",\"file\":");
        vt__json_str(f, vt__ck_string(s, fr[i]->file));
        fprintf(f, ",\"line\":%u,\"first_line\":%u,\"module\":", fr[i]->line,
                fr[i]->first_line);
        vt__json_str(f, vt__ck_string(s, fr[i]->module));
        fprintf(f, ",\"ip\":\"0x%" PRIx64 "\",\"user_code\":%s}", fr[i]->ip,
                vt__frame_is_user_code(s, fr[i]) ? "true" : "false");
    }
    fputc(']', f);
}

static const char *kind_name(uint8_t k)
{
    return k == VT_CHECK_NODE_HOLDER ? "holder" : k == VT_CHECK_NODE_TENSOR ? "tensor" : "storage";
}

static void json_path(FILE *f, const vt__check_path *p)
{
    char line[4096];
    vt__check_path_format(p, line, sizeof line);
    fprintf(f, "{\"text\":");
    vt__json_str(f, line);
    fprintf(f, ",\"cycle\":%s,\"truncated\":%s,\"steps\":[", p->cycle ? "true" : "false",
            p->truncated ? "true" : "false");
    for (size_t i = 0; i < p->nsteps; i++) {
        const vt__check_step *s = &p->steps[i];
        fprintf(f, "%s{\"kind\":\"%s\",", i ? "," : "", kind_name(s->kind));
        if (s->kind == VT_CHECK_NODE_STORAGE)
            fprintf(f, "\"id\":\"0x%" PRIx64 "\"", s->id);
        else
            fprintf(f, "\"id\":%" PRIu64, s->id);
        fprintf(f, ",\"name\":");
        vt__json_str(f, s->name);
        fprintf(f, ",\"label\":");
        vt__json_str(f, s->label);
        if (s->kind == VT_CHECK_NODE_TENSOR && s->base_id) {
            fprintf(f, ",\"view_of\":{\"id\":%" PRIu64 ",\"name\":", s->base_id);
            vt__json_str(f, s->base_name);
            fputc('}', f);
        }
        if (s->kind == VT_CHECK_NODE_STORAGE)
            fprintf(f, ",\"bytes\":%" PRIu64, s->bytes);
        fputc('}', f);
    }
    fprintf(f, "]}");
}

/* "covered_bytes", "wasted_bytes", "views_live" and "views" of a PINNED
 * finding, or of a LINGER one's kept part. */
static void json_kept_views(FILE *f, const vt__check_finding *x)
{
    fprintf(f, "\"covered_bytes\":%" PRIu64 ",\"wasted_bytes\":%" PRIu64
               ",\"views_live\":%u,\"views\":[",
            x->covered_bytes, x->wasted_bytes, x->nviews_live);
    for (size_t v = 0; v < x->nviews; v++) {
        const vt__check_view *w = &x->views[v];
        fprintf(f, "%s{\"id\":%" PRIu64 ",\"name\":", v ? "," : "", w->id);
        vt__json_str(f, w->name);
        fprintf(f, ",\"view_of\":");
        json_tensor_ref(f, w->base_id, w->base_name);
        fprintf(f, ",\"addr\":\"0x%" PRIx64 "\",\"bytes\":%" PRIu64 ",\"covered_bytes\":%" PRIu64 "}",
                w->addr, w->bytes, w->covered_bytes);
    }
    fputc(']', f);
}

static void json_pinned(FILE *f, const vt__check_finding *x)
{
    fprintf(f, "{\"owner_dropped\":{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "},\"since\":",
            x->owner_drop_seq, x->owner_drop_time_ns);
    fprintf(f, "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "},\"until\":",
            x->pinned_since_seq, x->pinned_since_time_ns);
    if (x->pinned_until_seq == UINT64_MAX)
        fprintf(f, "\"end\"");
    else
        fprintf(f, "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "}", x->pinned_until_seq,
                x->pinned_until_time_ns);
    fprintf(f, ",\"cut_at_last_use\":%s,", x->pinned_cut ? "true" : "false");
    json_kept_views(f, x);
    fputc('}', f);
}

/* A LINGER finding's small kept part (vt__ck_linger_pinning): the owner's
 * drop and the live tensors, as PINNED gives them. */
static void json_kept_part(FILE *f, const vt__check_finding *x)
{
    fprintf(f, "{\"owner_dropped\":{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "},",
            x->owner_drop_seq, x->owner_drop_time_ns);
    json_kept_views(f, x);
    fputc('}', f);
}

/* One finding as a JSON object, after `sep`. */
/* One finding; `group` its index among the report's groups (its cause),
 * negative for a minor one (listed apart, in no group). */
static void json_finding(FILE *f, const vt__snapshot_data *s, const vt__check_finding *x,
                         long group, const char *sep)
{
    fprintf(f, "%s\n{\"rule\":\"%s\",", sep, vt__check_rule_name(x->rule));
    if (group >= 0)
        fprintf(f, "\"group\":%ld,", group);
    fprintf(f, "\"addr\":\"0x%" PRIx64 "\",\"device\":%d,"
               "\"external\":%s,\"before_window\":%s,\"bytes\":%" PRIu64
               ",\"block_bytes\":%" PRIu64 ",\"allocations\":%u,"
               "\"allocations_before_window\":%u,\"older_alive\":{\"storages\":%u,"
               "\"bytes\":%" PRIu64 "},\"kept_lines\":%u,\"kept_steps\":%u,\"loop_visits\":%u,"
               "\"owner\":",
            x->addr, x->device,
            x->external ? "true" : "false", x->before_window ? "true" : "false",
            x->bytes, x->block_bytes, x->nallocs, x->nbefore_window, x->older_alive,
            x->older_alive_bytes, x->kept_lines, x->kept_steps, x->loop_visits);
    json_tensor_ref(f, x->owner_id, x->owner_name);
    fprintf(f, ",\"owner_bytes\":%" PRIu64, x->owner_bytes);
    fprintf(f, ",\"tensors\":%u,\"alloc\":{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64
               ",\"stack\":", x->ntensors, x->alloc_seq, x->alloc_time_ns);
    json_stack(f, s, x->alloc_stack);
    fprintf(f, ",\"under_call\":");
    if (x->under_stack)
        json_stack(f, s, x->under_stack);
    else
        fputs("null", f);
    fprintf(f, "},\"last_use\":{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"step\":%u,"
               "\"tensor\":%" PRIu64 ",\"name\":",
            x->last_use_seq, x->last_use_time_ns, x->last_use_step, x->last_use_tensor);
    vt__json_str(f, x->last_use_name);
    fprintf(f, ",\"mark\":");
    vt__json_str(f, x->last_use_mark ? x->last_use_mark : "");
    fprintf(f, ",\"stack\":");
    json_stack(f, s, x->last_use_stack);
    fprintf(f, ",\"before_window\":%s", x->last_use_before_window ? "true" : "false");
    fprintf(f, "},\"uses\":%u,\"usual_gap_steps\":%u,\"usual_gap_ns\":%" PRIu64,
            x->nuses, x->usual_gap_steps, x->usual_gap_ns);
    if (x->sampled_grace_steps)
        fprintf(f, ",\"drawn\":{\"mean_gap_steps\":%.3f,\"grace_steps\":%u}",
                x->sampled_mean_gap, x->sampled_grace_steps);
    else
        fprintf(f, ",\"drawn\":null");
    fprintf(f, ",\"steps_unused\":%u,\"lingering_from\":{\"seq\":%" PRIu64
               ",\"time_ns\":%" PRIu64 "},\"freed\":",
            x->steps_unused, x->linger_from_seq, x->linger_from_time_ns);
    if (x->freed) {
        fprintf(f, "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"stack\":", x->free_seq,
                x->free_time_ns);
        json_stack(f, s, x->free_stack);
        fputc('}', f);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\"linger_ns\":%" PRIu64 ",\"paused_ns\":%" PRIu64 ",\"byte_seconds\":",
            x->linger_ns, x->paused_ns);
    json_num(f, x->byte_seconds);
    fprintf(f, ",\"wasted_bytes\":%" PRIu64 ",\"pinned\":", x->wasted_bytes);
    if (x->rule == VT_CHECK_RULE_PINNED)
        json_pinned(f, x);
    else
        fprintf(f, "null");
    fprintf(f, ",\"kept_part\":");
    if (x->rule == VT_CHECK_RULE_LINGER && x->nviews_live)
        json_kept_part(f, x);
    else
        fprintf(f, "null");
    if (x->rule == VT_CHECK_RULE_CYCLE)
        fprintf(f, ",\"collected_by_gc\":{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "}",
                x->gc_seq, x->gc_time_ns);
    else
        fprintf(f, ",\"collected_by_gc\":null");
    if (x->rule == VT_CHECK_RULE_TAPE)
        fprintf(f, ",\"step\":{\"ns\":%" PRIu64 ",\"peak_bytes\":%" PRIu64
                   ",\"idle_pct\":%u}", x->step_ns, x->step_peak_bytes, x->step_idle_pct);
    else
        fprintf(f, ",\"step\":null");
    if (x->rule == VT_CHECK_RULE_GROWTH) {
        fprintf(f, ",\"growth\":{\"per_step\":%" PRIu64 ",\"first_mark\":%u,\"last_mark\":%u,"
                   "\"first_bytes\":%" PRIu64 ",\"last_bytes\":%" PRIu64,
                x->growth_per_step, x->growth_first_mark, x->growth_last_mark,
                x->growth_first_bytes, x->growth_last_bytes);
        if (x->growth_window_ns)   /* by time: the "marks" are window ends */
            fprintf(f, ",\"window_ns\":%" PRIu64, x->growth_window_ns);
        fputc('}', f);
    } else {
        fprintf(f, ",\"growth\":null");
    }
    fprintf(f, ",\"paths_at\":");
    if (x->path_seq == UINT64_MAX)
        fprintf(f, "\"end\"");
    else
        fprintf(f, "%" PRIu64, x->path_seq);
    fprintf(f, ",\"paths\":[");
    for (size_t p = 0; p < x->npaths; p++) {
        if (p)
            fputc(',', f);
        json_path(f, &x->paths[p]);
    }
    fprintf(f, "]}");
}

int vt__check_report_write_json(FILE *f, const vt__check_report *r, const vt__snapshot_data *s)
{
    /* the causes first: each finding names its own ("group"), and nothing
     * is written where there is no memory to group them */
    size_t ng = 0;
    uint64_t *older = NULL;
    uint32_t *group_of = malloc((r->nfindings ? r->nfindings : 1) * sizeof *group_of);
    ck_group *g = group_of ? vt__ck_groups_with_older(r, s, &ng, &older, group_of) : NULL;
    if (!g) {
        free(group_of);
        return -ENOMEM;
    }
    fprintf(f, "{\"vramtrace_check\":1,\"rules_run\":[");
    const char *sep = "";
    for (unsigned b = 1; b <= VT_CHECK_RULE_GROWTH; b <<= 1)
        if (r->rules_run & b) {
            fprintf(f, "%s\"%s\"", sep, vt__check_rule_name(b));
            sep = ",";
        }
    fprintf(f, "],\"rules_need_steps\":[");
    sep = "";
    for (unsigned b = 1; b <= VT_CHECK_RULE_GROWTH; b <<= 1)
        if (r->rules_need_steps & b) {
            fprintf(f, "%s\"%s\"", sep, vt__check_rule_name(b));
            sep = ",";
        }
    fprintf(f, "],\"grace\":{\"mode\":\"%s\",\"steps\":",
            r->grace_mode == VT_CHECK_GRACE_STEPS ? "steps" : "time");
    if (r->grace_mode == VT_CHECK_GRACE_STEPS && r->grace_user)
        fprintf(f, "%u", r->grace_steps);
    else
        fprintf(f, "null");
    fprintf(f, ",\"seconds\":");
    if (r->grace_mode == VT_CHECK_GRACE_TIME && r->grace_user)
        json_num(f, (double)r->grace_ns / 1e9);
    else
        fprintf(f, "null");
    fprintf(f, "},\"pinned_ratio\":");
    json_num(f, r->pinned_ratio);
    fprintf(f, ",\"steps_inferred\":%s", r->steps_inferred ? "true" : "false");
    fprintf(f, ",\"marks\":%zu,\"quiet_steps\":%zu,\"storages\":%zu,\"tensors\":%zu,"
               "\"holders\":%zu,\"refs\":%zu,"
               "\"ignored\":%zu,\"host_skipped\":%zu,\"growth_replaced\":%zu,"
               "\"events_overwritten\":%" PRIu64
               ",\"start_time_ns\":%" PRIu64 ",\"end_time_ns\":%" PRIu64
               ",\"total_bytes\":%" PRIu64 ",\"total_held_bytes\":%" PRIu64
               ",\"total_byte_seconds\":",
            r->nmarks, r->quiet_steps, r->nstorages, r->ntensors, r->nholders, r->nrefs,
            r->nignored,
            r->nhost_skipped, r->ngrowth_replaced, s->meta.events_overwritten, r->start_time_ns,
            r->end_time_ns,
            r->total_bytes, r->total_held_bytes);
    json_num(f, r->total_byte_seconds);
    fprintf(f, ",\"findings\":[");
    for (size_t i = 0; i < r->nfindings; i++)
        json_finding(f, s, &r->findings[i], (long)group_of[i], i ? "," : "");
    fprintf(f, "],\"min_bytes\":%" PRIu64 ",\"peak_bytes\":%" PRIu64 ",\"minor_bytes\":%" PRIu64
               ",\"minor_held_bytes\":%" PRIu64 ",\"minor\":[", r->min_bytes, r->peak_bytes,
            r->minor_bytes, r->minor_held_bytes);
    for (size_t i = 0; i < r->nminor; i++)
        json_finding(f, s, &r->minor[i], -1, i ? "," : "");
    fprintf(f, "],\"groups\":[");
    for (size_t k = 0; k < ng; k++) {
        const char *rule, *owner, *path;
        char copy[CK_GROUP_KEY_MAX];
        vt__ck_group_parts(&g[k], copy, sizeof copy, &rule, &owner, &path);
        fprintf(f, "%s{\"rule\":\"%s\",\"count\":%zu,\"bytes\":%" PRIu64 ",\"held_bytes\":%" PRIu64
                   ",\"first\":%zu,\"lines\":%zu,\"older_alive\":{\"storages\":%" PRIu64
                   ",\"bytes\":%" PRIu64 "},\"owner\":", k ? "," : "", rule, g[k].count, g[k].bytes,
                g[k].held_bytes, g[k].first, g[k].nlines, older[k], older[ng + k]);
        vt__json_str(f, owner);
        fprintf(f, ",\"path\":");
        vt__json_str(f, path);
        /* as the text's cause says it: a graph's holder and the graph */
        char buf[CK_GROUP_KEY_MAX], held[CK_GROUP_KEY_MAX + sizeof CK_GRAPH_KEPT];
        const char *root = vt__ck_group_graph_root(&g[k], buf, sizeof buf);
        if (root)
            snprintf(held, sizeof held, "%s" CK_GRAPH_KEPT, root);
        fprintf(f, ",\"held_by\":");
        vt__json_str(f, root ? held : path);
        fprintf(f, ",\"under_call\":");
        if (r->findings[g[k].first].under_stack)
            json_stack(f, s, r->findings[g[k].first].under_stack);
        else
            fputs("null", f);
        fputc('}', f);
    }
    free(g);
    free(older);
    free(group_of);
    fprintf(f, "]}\n");
    fflush(f);
    return ferror(f) ? -EIO : 0;
}
