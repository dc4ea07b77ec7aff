/*
 * trace/check/check_report.c - how a check report is shown: the
 * human-readable report (the JSON document is check_report_json.c's); a
 * chain's one line of text is check_path_text.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "format_bytes.h"

static double rel_s(const vt__check_report *r, uint64_t t)
{
    return t >= r->start_time_ns ? (double)(t - r->start_time_ns) / 1e9
                                 : -(double)(r->start_time_ns - t) / 1e9;
}

/* A finding names the program's own code: where a stack has Python frames,
 * those (innermost first) are its lines, the native frames under them the
 * framework's and the interpreter's. */
static void print_stack(FILE *f, const vt__snapshot_data *s, uint32_t id, const char *indent)
{
    const vt__frame *all[256], *fr[8];
    size_t nall = vt__snapshot_stack_frames(s, id, all, 256), n = 0, py = 0, user = 0;
    if (nall > 256)
        nall = 256;
    for (size_t i = 0; i < nall; i++) {
        py += vt__frame_is_python(s, all[i]);
        user += vt__frame_is_user_code(s, all[i]);
    }
    /* The program's own lines lead; the libraries' Python frames inside
     * them (torch's modules) are folded into one line after them, which
     * names the innermost line of a library other than torch where there
     * is one (a framework's or a model library's: transformers' lm_head
     * call, not torch's Linear.forward every model reaches). */
    const vt__frame *inner_library = NULL;
    for (size_t i = 0; i < nall; i++) {
        if (user && vt__frame_is_python(s, all[i]) && !vt__frame_is_user_code(s, all[i])) {
            if (!inner_library)
                inner_library = all[i];
            continue;
        }
        if ((!py || vt__frame_is_python(s, all[i])) && n < 8)
            fr[n++] = all[i];
    }
    n = user ? user : py ? py : nall;
    if (!n) {
        fprintf(f, "%s(no stack)\n", indent);
        return;
    }
    for (size_t i = 0; i < n && i < 8; i++) {
        const char *fn = vt__ck_string(s, fr[i]->function);
        const char *file = vt__ck_string(s, fr[i]->file);
        const char *mod = vt__ck_string(s, fr[i]->module);
        fprintf(f, "%sat %s", indent, *fn ? fn : "??");
        uint32_t def = vt__frame_def_line(s, fr[i]);
        if (*file && def)
            fprintf(f, " (%s:%u, def at line %u)", file, fr[i]->line, def);
        else if (*file)
            fprintf(f, " (%s:%u)", file, fr[i]->line);
        else if (*mod)
            fprintf(f, " (%s+0x%" PRIx64 ")", mod, fr[i]->module_offset);
        else
            fprintf(f, " (0x%" PRIx64 ")", fr[i]->ip);
        fputc('\n', f);
    }
    if (n > 8)
        fprintf(f, "%s... %zu more %sframes\n", indent, n - 8, py ? "Python " : "");
    const vt__frame *framework = vt__snapshot_library_frame(s, id);
    if (framework)
        inner_library = framework;
    if (inner_library) {
        const char *fn = vt__ck_string(s, inner_library->function);
        fprintf(f, "%s(inside it: %s (%s:%u)", indent, *fn ? fn : "??",
                vt__ck_string(s, inner_library->file), inner_library->line);
        if (py - user > 1)
            fprintf(f, " and %zu more library Python frame%s", py - user - 1,
                    py - user - 1 == 1 ? "" : "s");
        fprintf(f, ")\n");
    }
    if (py && nall > py)
        fprintf(f, "%s(%zu native frames not shown)\n", indent, nall - py);
}

/* Whether `rules` names one rule (a verb's number agrees with it). */
static bool one_rule(unsigned rules)
{
    return !(rules & (rules - 1));
}

static void print_rules(FILE *f, unsigned rules)
{
    const char *sep = "";
    if (!rules)
        fprintf(f, "none");
    for (unsigned b = 1; b <= VT_CHECK_RULE_GROWTH; b <<= 1)
        if (rules & b) {
            fprintf(f, "%s%s", sep, vt__check_rule_name(b));
            sep = ",";
        }
}

/* Where stack ``id`` allocated, in the program's words: its innermost frame
 * of the program's own code, else its innermost Python frame, else its
 * innermost frame. */
static void site_of(const vt__snapshot_data *s, uint32_t id, char *buf, size_t len)
{
    const vt__frame *all[256], *pick = vt__snapshot_user_frame(s, id);
    size_t nall = vt__snapshot_stack_frames(s, id, all, 256);
    if (nall > 256)
        nall = 256;
    for (size_t i = 0; i < nall && !pick; i++)
        if (vt__frame_is_python(s, all[i]))
            pick = all[i];
    if (!pick && nall)
        pick = all[0];
    if (!pick) {
        snprintf(buf, len, "(no stack)");
        return;
    }
    const char *fn = vt__ck_string(s, pick->function);
    const char *file = vt__ck_string(s, pick->file);
    const char *mod = vt__ck_string(s, pick->module);
    if (*file)
        snprintf(buf, len, "%s (%s:%u)", *fn ? fn : "??", file, pick->line);
    else if (*mod)
        snprintf(buf, len, "%s (%s+0x%" PRIx64 ")", *fn ? fn : "??", mod, pick->module_offset);
    else
        snprintf(buf, len, "%s (0x%" PRIx64 ")", *fn ? fn : "??", pick->ip);
}

/* What several lines' blocks kept under one call are (check_kept_call.c). */
#define UNDER_CALL_WHY "what this call returned, kept with its autograd graph (a forward" \
                       " without torch.no_grad()), or its results kept"
/* What a loop's blocks kept until it ended may be (check_loop_kept.c). */
#define LOOP_KEPT_WHY "autograd graphs of forwards run without torch.no_grad(), kept by what" \
                      " the loop sums or keeps as tensors (`total += loss`: use" \
                      " loss.item()), or the loop's results kept until it ended"
/* Their holder: not in a trace without tensors; under track() gone with
 * the loop, before a walk could reach them (walks run at marks and
 * ticks). */
#define LOOP_KEPT_TRACKED "(not recorded: `vramtrace run --track` names the tensors)"
#define LOOP_KEPT_HOLDER "(not recorded: the loop's end let them go before a walk reached" \
                         " them; the tensors above are the ones kept)"

#define GROUPS_SHOWN 20
/* Findings of one cause shown in detail under a --top limit (the rest
 * counted). */
#define DETAILS_PER_CAUSE 3
/* A cause's findings looked at for holder chains of other shapes, at most. */
#define DETAILS_SCAN 256

/* A saved tensor that the program's saved_tensors_hooks pack hook returned
 * is labelled so by track()'s walk (vramtrace/torch/_walks.py, _PACKED_MARK);
 * a cycle through one is never freed. */
#define PACKED_MARK " (as packed by saved_tensors_hooks)"
#define PACKED_CYCLE_WHY "a cycle through the autograd graph, which the garbage collector" \
                         " cannot break (it does not see what C++ holds): a" \
                         " saved_tensors_hooks pack hook returned the tensor it was given, so" \
                         " the graph saves the tensor whose grad_fn it is; a pack hook that" \
                         " returns t.detach() saves the same data without the cycle"

/* Whether x's first holder chain is a cycle through a saved tensor a pack
 * hook returned. */
static int packed_cycle(const vt__check_finding *x)
{
    if (!x->npaths || !x->paths[0].cycle)
        return 0;
    for (size_t i = 0; i < x->paths[0].nsteps; i++) {
        const char *label = x->paths[0].steps[i].label;
        if (label && strstr(label, PACKED_MARK))
            return 1;
    }
    return 0;
}

#define NO_HOLDER_FOUND "no holder found (no object the holder walks reached refers to the " \
                        "tensor: it is held from C++, or a walk had not reached its holder yet)"

/* A cause's "held by:" line: the root of the autograd graph that keeps its
 * tensors, or else the first `len` bytes of `path`. */
static void print_held_by(FILE *f, const char *indent, const ck_group *g, const char *path,
                          int len)
{
    char buf[CK_GROUP_KEY_MAX];
    const char *root = vt__ck_group_graph_root(g, buf, sizeof buf);
    if (root)
        fprintf(f, "%sheld by: %s" CK_GRAPH_KEPT "\n", indent, root);
    else
        fprintf(f, "%sheld by: %.*s\n", indent, len, path);
}
/* Causes of minor findings listed, at most (the rest counted). */
#define MINOR_SHOWN 3

/* "and N more storages ... not judged": what the window lost of a line. */
static void print_older(FILE *f, const char *indent, const char *where, uint64_t n,
                        uint64_t bytes)
{
    char b[VT_FMT_BYTES_LEN];
    if (n)
        fprintf(f, "%sand %" PRIu64 " more storage%s (%s) allocated %s before the window, still "
                   "alive: their tensors' records left the ring (not judged)\n", indent, n,
                n == 1 ? "" : "s", vt__fmt_bytes(bytes, b), where);
}

/* " in X of blocks" after `bytes` where worth saying
 * (vt__check_blocks_worth_saying): what they keep from the program, and what
 * the floor of minor findings weighs. */
static void print_held_blocks(FILE *f, uint64_t bytes, uint64_t held)
{
    char b[VT_FMT_BYTES_LEN];
    if (vt__check_blocks_worth_saying(bytes, held))
        fprintf(f, " in %s of blocks", vt__fmt_bytes(held, b));
}

static void print_groups(FILE *f, const vt__check_report *r, const vt__snapshot_data *s,
                         uint32_t *group_of)
{
    size_t ng = 0;
    uint64_t *older = NULL;
    ck_group *g = vt__ck_groups_with_older(r, s, &ng, &older, group_of);
    if (!g || ng == r->nfindings) {   /* nothing repeats: the list says it all */
        free(g);
        free(older);
        return;
    }
    fprintf(f, "\n%zu finding%s from %zu cause%s (rule, where the tensor was made, what holds it):\n",
            r->nfindings, r->nfindings == 1 ? "" : "s", ng, ng == 1 ? "" : "s");
    char copy[CK_GROUP_KEY_MAX], b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    for (size_t k = 0; k < ng && k < GROUPS_SHOWN; k++) {
        const char *rule, *owner, *path;
        vt__ck_group_parts(&g[k], copy, sizeof copy, &rule, &owner, &path);
        fprintf(f, "  %zu \xc3\x97 [%s] %s", g[k].count, rule, vt__fmt_bytes(g[k].bytes, b1));
        print_held_blocks(f, g[k].bytes, g[k].held_bytes);
        fprintf(f, " (%s each on average), first #%zu\n",
                vt__fmt_bytes(g[k].bytes / g[k].count, b2), g[k].first + 1);
        if (!strcmp(rule, vt__check_rule_name(VT_CHECK_RULE_GROWTH))) {
            const vt__check_finding *x = &r->findings[g[k].first];
            char site[CK_GROUP_KEY_MAX];
            const char *how = x->growth_window_ns ? "through the run" : "step over step";
            if (x->under_stack) {
                /* several lines' sites under one call (check_kept_call.c) */
                site_of(s, x->under_stack, site, sizeof site);
                fprintf(f, "     call sites growing %s, allocated under %s, at %s%zu line%s"
                           " inside it: %s\n", how, site,
                        g[k].nlines == CK_GROUP_LINES_MAX ? "at least " : "", g[k].nlines,
                        g[k].nlines == 1 ? "" : "s", UNDER_CALL_WHY);
            } else {
                site_of(s, x->alloc_stack, site, sizeof site);
                fprintf(f, "     %s growing %s, allocated at %s\n",
                        g[k].count > 1 ? "call sites" : "a call site", how, site);
            }
            continue;
        }
        const vt__check_finding *x0 = &r->findings[g[k].first];
        if (x0->loop_visits && x0->under_stack) {
            /* a loop's blocks kept until it ended (check_loop_kept.c) */
            char site[CK_GROUP_KEY_MAX];
            site_of(s, x0->under_stack, site, sizeof site);
            fprintf(f, "     allocated under %s, through a loop inside it: blocks of each run"
                       " kept until the loop ended\n", site);
            if (*owner)
                fprintf(f, "     tensor '%s', and those of other lines\n", owner);
            fprintf(f, "     %s\n     held by: %s\n", LOOP_KEPT_WHY,
                    r->ntensors ? LOOP_KEPT_HOLDER : LOOP_KEPT_TRACKED);
            continue;
        }
        if (*owner) {
            /* one holder or autograd graph kept alive: its tensors, of every line */
            if (g[k].nlines > 1)
                fprintf(f, "     tensor '%s' and those of %s%zu more line%s\n", owner,
                        g[k].nlines == CK_GROUP_LINES_MAX ? "at least " : "", g[k].nlines - 1,
                        g[k].nlines == 2 ? "" : "s");
            else
                fprintf(f, "     tensor '%s'\n", owner);
            const char *held = !*path ? "(no holder recorded)"
                               : vt__check_paths_name_no_holder(&r->findings[g[k].first])
                                   ? NO_HOLDER_FOUND
                                   : path;
            print_held_by(f, "     ", &g[k], held, (int)strlen(held));
            const vt__check_finding *x = &r->findings[g[k].first];
            if (packed_cycle(x))
                fprintf(f, "     %s\n", PACKED_CYCLE_WHY);
            if (x->rule == VT_CHECK_RULE_LINGER && x->nviews_live)   /* its kept part */
                fprintf(f, "     what is kept is a small part: %s of %s in #%zu; a copy of it"
                           " (.clone(), or .cpu()) would free the rest\n",
                        vt__fmt_bytes(x->covered_bytes, b1), vt__fmt_bytes(x->bytes, b2),
                        g[k].first + 1);
            print_older(f, "     ", "at its lines", older[k], older[ng + k]);
            continue;
        }
        /* no tensor names it: its call site, or the call that kept several
         * sites' blocks; holders are track()'s to find */
        char site[CK_GROUP_KEY_MAX];
        const vt__check_finding *x = &r->findings[g[k].first];
        if (x->under_stack) {
            site_of(s, x->under_stack, site, sizeof site);
            fprintf(f, "     allocated under %s, at %s%zu line%s inside it\n", site,
                    g[k].nlines == CK_GROUP_LINES_MAX ? "at least " : "", g[k].nlines,
                    g[k].nlines == 1 ? "" : "s");
            fprintf(f, "     kept step after step, where the same lines' other blocks die within"
                       " their step: %s\n", UNDER_CALL_WHY);
        } else {
            site_of(s, x->alloc_stack, site, sizeof site);
            fprintf(f, "     allocated at %s\n", site);
        }
        fprintf(f, "     held by: %s\n",
                r->ntensors ? "(no tensor recorded for it)"
                            : "(not recorded: holders are found under track(), "
                              "`vramtrace run --track` runs the program under it)");
    }
    if (ng > GROUPS_SHOWN)
        fprintf(f, "  ... and %zu more causes\n", ng - GROUPS_SHOWN);
    free(g);
    free(older);
}

/* What holds a minor cause's tensors, where track() found it: the chain up
 * to the tensor (which the line above names), or the graph's root. Small
 * results a program keeps are not a leak report, but where they are kept
 * is what a reader looks for next. */
static void print_minor_holder(FILE *f, const ck_group *g, const char *owner, const char *path)
{
    char buf[CK_GROUP_KEY_MAX];
    if (vt__ck_group_graph_root(g, buf, sizeof buf)) {
        print_held_by(f, "      ", g, "", 0);
        return;
    }
    if (!*owner || !*path)
        return;
    /* The path's last hop is to the tensor the line above names (or a view
     * of it): left out. A path of that hop alone names no holder. */
    const char *hop = " \xe2\x86\x92 tensor '", *last = NULL;
    for (const char *at = strstr(path, hop); at; at = strstr(at + 1, hop))
        last = at;
    if (last)
        print_held_by(f, "      ", g, path, (int)(last - path));
}

/* The minor findings (check.h): how many, under which floor, and their
 * largest causes, one line each (and their holder's, where known). */
static void print_minor(FILE *f, const vt__check_report *r, const vt__snapshot_data *s)
{
    if (!r->nminor)
        return;
    vt__check_report view = *r;
    view.findings = r->minor;
    view.nfindings = r->nminor;
    size_t ng = 0;
    ck_group *g = vt__ck_group_findings(&view, s, &ng, NULL);
    char b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN], b3[VT_FMT_BYTES_LEN];
    fprintf(f, "  %zu minor finding%s (%s", r->nminor, r->nminor == 1 ? "" : "s",
            vt__fmt_bytes(r->minor_bytes, b1));
    print_held_blocks(f, r->minor_bytes, r->minor_held_bytes);   /* what the floor weighs */
    if (g)
        fprintf(f, " from %zu cause%s", ng, ng == 1 ? "" : "s");
    fprintf(f, ") under the floor of %s", vt__fmt_bytes(r->min_bytes, b2));
    if (r->min_bytes_auto) {
        char cap[VT_FMT_BYTES_LEN];
        fprintf(f, " (%g%% of the %s peak, at most %s)", VT_CHECK_MINOR_PERMILLE / 10.0,
                vt__fmt_bytes(r->peak_bytes, b3), vt__fmt_bytes(VT_CHECK_MINOR_CAP, cap));
    }
    fprintf(f, ": not counted (--min-bytes 0 counts them)\n");
    for (size_t k = 0; g && k < ng && k < MINOR_SHOWN; k++) {
        const char *rule, *owner, *path;
        char copy[CK_GROUP_KEY_MAX], site[CK_GROUP_KEY_MAX];
        vt__ck_group_parts(&g[k], copy, sizeof copy, &rule, &owner, &path);
        if (*owner)
            snprintf(site, sizeof site, "tensor '%s'", owner);
        else
            site_of(s, r->minor[g[k].first].alloc_stack, site, sizeof site);
        fprintf(f, "    [%s] %s", rule, vt__fmt_bytes(g[k].bytes, b1));
        print_held_blocks(f, g[k].bytes, g[k].held_bytes);
        fprintf(f, ": %s\n", site);
        print_minor_holder(f, &g[k], owner, path);
    }
    if (g && ng > MINOR_SHOWN)
        fprintf(f, "    ... and %zu more\n", ng - MINOR_SHOWN);
    free(g);
}

/* One holder chain of a finding, folded, on a line of at most about
 * PATH_LINE_MAX bytes: a longer one keeps its start (the root that holds
 * it) and its end (what saved the storage, the storage) and elides hops
 * between them, at arrows. */
#define PATH_LINE_MAX 2048
/* The live tensors a PINNED finding lists, or a LINGER finding whose kept
 * tensors cover a small part of its storage: "kept by: tensor 'x' (view
 * of 'big', 40 B of 4 KiB)", the largest first. */
static void print_kept_by(FILE *f, const vt__check_finding *x)
{
    char b1[VT_FMT_BYTES_LEN], b2[VT_FMT_BYTES_LEN];
    for (size_t v = 0; v < x->nviews; v++) {
        const vt__check_view *w = &x->views[v];
        fprintf(f, "   %s ", v ? "        " : "kept by:");
        if (*w->name)
            fprintf(f, "tensor '%s' (", w->name);
        else
            fprintf(f, "tensor #%" PRIu64 " (", w->id);
        if (w->base_id && *w->base_name)
            fprintf(f, "view of '%s', ", w->base_name);
        else if (w->base_id)
            fprintf(f, "view of #%" PRIu64 ", ", w->base_id);
        fprintf(f, "%s of %s)\n", vt__fmt_bytes(w->bytes, b1), vt__fmt_bytes(x->bytes, b2));
    }
    if (x->nviews_live > x->nviews)
        fprintf(f, "            ... and %u more view%s\n", x->nviews_live - (unsigned)x->nviews,
                x->nviews_live - x->nviews == 1 ? "" : "s");
}

static void print_path_line(FILE *f, const vt__check_path *path)
{
    static const char arrow[] = " \xe2\x86\x92 ";
    char line[PATH_LINE_MAX], *text = line;
    size_t need = vt__check_path_format_folded(path, line, sizeof line);
    if (need >= sizeof line) {
        if (!(text = malloc(need + 1))) {
            fprintf(f, "     %s...\n", line);
            return;
        }
        vt__check_path_format_folded(path, text, need + 1);
        /* the head up to an arrow within its first third, the tail from an
         * arrow within its last two thirds */
        size_t head = PATH_LINE_MAX / 3, tail = need - 2 * PATH_LINE_MAX / 3;
        const char *h = NULL, *t = strstr(text + tail, arrow);
        for (const char *a = strstr(text, arrow); a && (size_t)(a - text) <= head;
             a = strstr(a + 1, arrow))
            h = a;
        if (h && t && h < t) {
            fprintf(f, "     %.*s%s\xe2\x80\xa6%s\n", (int)(h - text), text, arrow, t);
            free(text);
            return;
        }
    }
    fprintf(f, "     %s\n", text);
    if (text != line)
        free(text);
}

/* A hash of the shape of finding x's first holder chain: its text up to
 * the storage (each finding's own address) with each sequence index made
 * "[*]" (a list's 18th item and its 19th hold alike; a dict's keys and the
 * attributes stay, which say where). 0: none. */
static uint64_t chain_shape(const vt__check_finding *x)
{
    if (!x->npaths)
        return 0;
    char line[PATH_LINE_MAX];
    vt__check_path_format_folded(&x->paths[0], line, sizeof line);
    line[sizeof line - 1] = '\0';
    static const char storage[] = " \xe2\x86\x92 storage ";
    char *cut = NULL;
    for (char *at = strstr(line, storage); at; at = strstr(at + 1, storage))
        cut = at;
    if (cut)
        *cut = '\0';
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (const char *c = line; *c; c++) {
        if (c[0] == '[' && c[1] >= '0' && c[1] <= '9') {
            const char *e = c + 1;
            while (*e >= '0' && *e <= '9')
                e++;
            if (*e == ']') {
                for (const char *k = "[*]"; *k; k++)
                    h = (h ^ (uint8_t)*k) * 1099511628211ull;
                c = e;
                continue;
            }
        }
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    }
    return h | 1;
}

/* Which of r's findings a limited text report details (1s, r->nfindings of
 * them; NULL when out of memory): DETAILS_PER_CAUSE of each cause at most
 * (group_of[i]: finding i's; UINT32_MAX: none, always detailed), first
 * those whose holder chains differ in shape (chain_shape) among the
 * cause's first DETAILS_SCAN, in the findings' order, then the next ones:
 * a cause that two layers' lists keep (its chain says dict[*]) shows one of
 * each layer's. (The scan is bounded: a graph kept every step is one cause
 * of thousands of findings of one shape, each a chain to format.) */
static uint8_t *details_chosen(const vt__check_report *r, const uint32_t *group_of)
{
    size_t n = r->nfindings ? r->nfindings : 1;
    uint8_t *chosen = calloc(n, 1);
    size_t *count = calloc(n, sizeof *count), *looked = calloc(n, sizeof *looked);
    uint64_t *shapes = calloc(n * DETAILS_PER_CAUSE, sizeof *shapes);   /* each cause's shown */
    if (!chosen || !count || !looked || !shapes) {
        free(chosen);
        chosen = NULL;
        goto out;
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < r->nfindings; i++) {
            uint32_t g = group_of[i];
            if (g >= n) {
                chosen[i] = 1;
                continue;
            }
            if (chosen[i] || count[g] >= DETAILS_PER_CAUSE ||
                (pass == 0 && looked[g]++ >= DETAILS_SCAN))
                continue;
            uint64_t shape = pass == 0 ? chain_shape(&r->findings[i]) : 0;
            int seen = 0;
            for (size_t k = 0; pass == 0 && k < count[g]; k++)
                seen |= shapes[g * DETAILS_PER_CAUSE + k] == shape;
            if (seen)
                continue;
            shapes[g * DETAILS_PER_CAUSE + count[g]++] = shape;
            chosen[i] = 1;
        }
out:
    free(count);
    free(looked);
    free(shapes);
    return chosen;
}

int vt__check_report_print(FILE *f, const vt__check_report *r, const vt__snapshot_data *s,
                           size_t max_findings)
{
    char b1[32], b2[32], b3[32];
    fprintf(f, "vramtrace check: %zu finding%s", r->nfindings, r->nfindings == 1 ? "" : "s");
    int any_pinned = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        any_pinned |= r->findings[i].rule == VT_CHECK_RULE_PINNED;
    if (r->nfindings) {
        fprintf(f, ", %s held after last use%s", vt__fmt_bytes(r->total_bytes, b1),
                any_pinned ? " or pinned by small views" : "");
        print_held_blocks(f, r->total_bytes, r->total_held_bytes);
        fprintf(f, " (%s)", vt__fmt_byte_seconds(r->total_byte_seconds, b2));
    }
    const char *pool = vt__snapshot_pool_note(s);
    if (pool && (s->meta.flags & VT_META_POOL_UNSEEN))
        fprintf(f, "\n  NOTE: %s", pool);
    if (r->rules_need_steps) {
        fprintf(f, "\n  NOTE: this trace has no steps (marks), and ");
        print_rules(f, r->rules_need_steps);
        fprintf(f, " %s step by step: not run. ",
                one_rule(r->rules_need_steps) ? "judges" : "judge");
        /* `vramtrace run` of PyTorch marks optimizer steps: an observed
         * program without marks made none (an evaluation, inference) */
        int observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
        fprintf(f, "%s with vramtrace.mark(\"step N\")%s",
                observed ? "The program made no optimizer step (which `vramtrace run` marks): "
                           "mark steps" : "Mark steps",
                observed ? "" : " (or record with `vramtrace run`, which marks optimizer steps)");
        /* asked by name, what runs on time instead (check.c says which) */
        unsigned on_time = r->rules_on_time & r->rules_need_steps;
        if (on_time) {
            fprintf(f, ", or name ");
            print_rules(f, on_time);
            fprintf(f, " with --rules to judge by time");
        }
    }
    fprintf(f, "\n  rules: ");
    print_rules(f, r->rules_run);
    fprintf(f, "; grace: ");
    if (r->grace_mode == VT_CHECK_GRACE_STEPS && r->grace_user)
        fprintf(f, "%u complete step%s", r->grace_steps, r->grace_steps == 1 ? "" : "s");
    else if (r->grace_mode == VT_CHECK_GRACE_STEPS)
        fprintf(f, "auto (max(1, usual gap) complete steps)");
    else if (r->grace_user)
        fprintf(f, "%.3f s", (double)r->grace_ns / 1e9);
    else
        fprintf(f, "auto (max(1 s, %dx median use gap, %d%% of the trace))",
                VT_CHECK_GAP_FACTOR, VT_CHECK_TIME_FRACTION_PCT);
    if (r->rules_run & VT_CHECK_RULE_PINNED)
        fprintf(f, "; pinned: views covering < %g%%", r->pinned_ratio * 100);
    fprintf(f, "\n  %zu storages, %zu tensors, %zu holders, %zu refs, %zu marks%s, %.3f s traced",
            r->nstorages, r->ntensors, r->nholders, r->nrefs, r->nmarks,
            r->steps_inferred ? " (the steps its backward passes tell: the program marked no "
                                "step and made no optimizer step)" : "",
            rel_s(r, r->end_time_ns));
    if (r->nignored)
        fprintf(f, ", %zu ignored", r->nignored);
    /* Linger and tape judge a storage at a mark after the step of its last
     * use: one mark in the window gives them none to judge at, and "0
     * findings" must not read as their verdict (a CPU program whose steps
     * each fill the ring, or a run of one optimizer step). */
    unsigned by_later_marks = r->rules_run & (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_TAPE);
    if (r->grace_mode == VT_CHECK_GRACE_STEPS && r->nmarks < 2 && by_later_marks) {
        fprintf(f, "\n  %s in the window: ", r->nmarks ? "one mark" : "no mark");
        print_rules(f, by_later_marks);
        bool one = one_rule(by_later_marks);
        fprintf(f, " judge%s a storage at a mark after its last use's step, so %s judged none "
                   "(a run of more steps, or a larger ring, gives %s some)",
                one ? "s" : "", one ? "it" : "they", one ? "it" : "them");
    }
    if (r->quiet_steps)
        fprintf(f, "\n  after its last mark (%.3f s) the run went on for %zu of its usual steps"
                   " without one: never-freed judges them as steps",
                rel_s(r, r->quiet_from_ns), r->quiet_steps);
    /* The ring kept the newest events: what the run made and freed before
     * them is in no rule's reach (what it made and still holds is judged,
     * "allocated before the trace window"), and "0 findings" must not read
     * as a verdict on the whole run. */
    if (s->meta.events_overwritten)
        fprintf(f, "\n  window: the ring overwrote the run's first %" PRIu64 " events: what was "
                   "made and freed before the window is not judged; a larger ring: "
                   "VRAMTRACE_CONF=ring:SIZE", s->meta.events_overwritten);
    if (r->nfindings && !r->ntensors && (s->meta.flags & VT_META_POOL_OBSERVED))
        fprintf(f, "\n  NOTE: PyTorch's blocks were seen, not its tensors: findings name where "
                   "memory was allocated, not what holds it; `vramtrace run --track` records "
                   "the tensors and names their holders");
    if (r->nhost_skipped)
        fprintf(f, "\n  %zu host storage%s (CPU tensors) not judged: device memory only"
                   " (--host judges them too)", r->nhost_skipped,
                r->nhost_skipped == 1 ? "" : "s");
    if (r->ngrowth_replaced)
        fprintf(f, "\n  %zu line%s grew only as %s value was replaced each step by a larger one "
                   "made afresh (inputs that grow: a length curriculum, progressive resizing): "
                   "not judged a leak (--rules growth judges %s)", r->ngrowth_replaced,
                r->ngrowth_replaced == 1 ? "" : "s", r->ngrowth_replaced == 1 ? "its" : "their",
                r->ngrowth_replaced == 1 ? "it" : "them");
    fputc('\n', f);
    print_minor(f, r, s);

    /* group_of[i]: finding i's cause; UINT32_MAX (none) where the groups
     * could not be made, which then cap nothing */
    uint32_t *group_of = malloc((r->nfindings ? r->nfindings : 1) * sizeof *group_of);
    if (!group_of)
        return -ENOMEM;
    memset(group_of, 0xff, (r->nfindings ? r->nfindings : 1) * sizeof *group_of);
    print_groups(f, r, s, group_of);
    /* The details: with a limit (--top N), at most DETAILS_PER_CAUSE of each
     * cause (details_chosen says which): one leak's 42 findings differ in
     * their addresses and times, and twenty of them in a row hid the other
     * causes' details (nanoGPT keeping a row of each batch's logits: 390
     * lines for one cause). */
    uint8_t *chosen = max_findings ? details_chosen(r, group_of) : NULL;
    if (max_findings && !chosen) {
        free(group_of);
        return -ENOMEM;
    }
    size_t shown = 0, capped = 0;
    for (size_t i = 0; i < r->nfindings && (!max_findings || shown < max_findings); i++) {
        if (chosen && !chosen[i]) {
            capped++;
            continue;
        }
        shown++;
        const vt__check_finding *x = &r->findings[i];
        fprintf(f, "\n#%zu [%s] storage 0x%" PRIx64, i + 1, vt__check_rule_name(x->rule), x->addr);
        if (x->device >= 0)
            fprintf(f, " on cuda:%d", x->device);
        else
            fprintf(f, " on host");
        fprintf(f, ", %s", vt__fmt_bytes(x->bytes, b1));
        if (x->block_bytes != x->bytes)   /* a growth's: the blocks it grew by */
            fprintf(f, " (block%s %s)",
                    x->rule == VT_CHECK_RULE_GROWTH || x->nallocs > 1 ? "s" : "",
                    vt__fmt_bytes(x->block_bytes, b2));
        if (x->nallocs > 1)
            fprintf(f, " in %u allocations", x->nallocs);
        if (x->nbefore_window)
            fprintf(f, " (%u made before the window, still alive)", x->nbefore_window);
        if (x->external)
            fprintf(f, ", external");
        fputc('\n', f);
        print_older(f, "   ", "at its stack", x->older_alive, x->older_alive_bytes);
        if (x->rule == VT_CHECK_RULE_LINGER || x->rule == VT_CHECK_RULE_CYCLE ||
            x->rule == VT_CHECK_RULE_TAPE) {
            if (x->owner_id) {
                fprintf(f, "   owner: tensor '%s' (#%" PRIu64, x->owner_name, x->owner_id);
                if (vt__check_owner_bytes_worth_saying(x))
                    fprintf(f, ", itself %s of the storage's %s", vt__fmt_bytes(x->owner_bytes, b1),
                            vt__fmt_bytes(x->bytes, b2));
                fprintf(f, "), %u tensor%s bound\n", x->ntensors, x->ntensors == 1 ? "" : "s");
            }
            if (x->nviews_live) {   /* LINGER: what is kept is a small part (check_pinned.c) */
                fprintf(f, "   owner dropped at seq %" PRIu64 " (%.3f s); what is kept of the"
                           " storage covers %s of %s:\n",
                        x->owner_drop_seq, rel_s(r, x->owner_drop_time_ns),
                        vt__fmt_bytes(x->covered_bytes, b1), vt__fmt_bytes(x->bytes, b2));
                print_kept_by(f, x);
                fprintf(f, "   the other %s stay allocated only for %s: a copy of what is kept"
                           " (.clone(), or .cpu()) would let them go\n",
                        vt__fmt_bytes(x->wasted_bytes, b1), x->nviews_live == 1 ? "it" : "them");
            }
        } else if (x->rule == VT_CHECK_RULE_PINNED) {
            fprintf(f, "   owner: tensor '%s' (#%" PRIu64 "), dropped at seq %" PRIu64
                       " (%.3f s), %u tensor%s bound\n", x->owner_name, x->owner_id,
                    x->owner_drop_seq, rel_s(r, x->owner_drop_time_ns), x->ntensors,
                    x->ntensors == 1 ? "" : "s");
            print_kept_by(f, x);
            fprintf(f, "   wasted: %s of %s (live views cover %s)\n",
                    vt__fmt_bytes(x->wasted_bytes, b1),
                    vt__fmt_bytes(x->bytes, b2),
                    vt__fmt_bytes(x->covered_bytes, b3));
        } else if (x->rule == VT_CHECK_RULE_OUTLIER && x->loop_visits) {
            fprintf(f, "   kept through a loop: %u blocks made at %u lines over %u runs of its"
                       " body or more, where each run's would die with it, freed together when"
                       " it ended, in the step that made them: %s\n", x->nallocs, x->kept_lines,
                    x->loop_visits, LOOP_KEPT_WHY);
        } else if (x->rule == VT_CHECK_RULE_OUTLIER && x->kept_lines) {
            fprintf(f, "   kept together: %u blocks that one step made at %u lines, whose other"
                       " blocks die within their step, freed together %u steps later: the"
                       " autograd graph a result kept (a loss or output kept as a tensor,"
                       " from a forward run without torch.no_grad()), or a step's results"
                       " kept until replaced; `vramtrace run --track` names what held"
                       " them\n", x->nallocs, x->kept_lines, x->kept_steps);
        } else if (x->rule == VT_CHECK_RULE_OUTLIER) {
            fprintf(f, "   outlived a complete step while its siblings from the same call site"
                       " died within one\n");
        } else if (x->rule == VT_CHECK_RULE_GROWTH && x->growth_window_ns) {
            /* by time: the trace cut into windows (no marks) */
            char win[VT_FMT_BYTES_LEN];
            vt__fmt_duration(x->growth_window_ns, win);
            fprintf(f, "   grows %s per %s: its live bytes went from %s at %.3f s to %s at "
                       "%.3f s (no marks: judged at the ends of %s windows of the trace, "
                       "the first %u not judged: warm-up)\n",
                    vt__fmt_bytes(x->growth_per_step, b1), win,
                    vt__fmt_bytes(x->growth_first_bytes, b2), rel_s(r, x->linger_from_time_ns),
                    vt__fmt_bytes(x->growth_last_bytes, b3),
                    rel_s(r, x->linger_from_time_ns + x->linger_ns), win, x->growth_first_mark);
        } else if (x->rule == VT_CHECK_RULE_GROWTH) {
            fprintf(f, "   grows %s per step: its live bytes at each step's end (mark) went from %s"
                       " at mark %u to %s at mark %u",
                    vt__fmt_bytes(x->growth_per_step, b1), vt__fmt_bytes(x->growth_first_bytes, b2),
                    x->growth_first_mark + 1, vt__fmt_bytes(x->growth_last_bytes, b3),
                    x->growth_last_mark + 1);
            if (x->growth_first_mark == 1)
                fprintf(f, " (mark 1 not judged: warm-up)\n");
            else
                fprintf(f, " (marks 1..%u not judged: warm-up)\n", x->growth_first_mark);
            if (x->sampled_grace_steps)
                fprintf(f, "   its line's tensors are drawn from at random (1 step in %.1f lately),"
                           " as a replay buffer's: one bounded by a capacity grows so until"
                           " it is full\n", x->sampled_mean_gap);
        } else {
            fprintf(f, "   never freed, allocated step after step by the same call site\n");
        }
        if (x->under_stack && !x->loop_visits) {
            char call[CK_GROUP_KEY_MAX];
            site_of(s, x->under_stack, call, sizeof call);
            fprintf(f, "   kept under one call with other lines' blocks: %s\n", call);
        }
        if (x->before_window)
            fprintf(f, "   allocated before the trace window\n");
        else
            fprintf(f, "   allocated: seq %" PRIu64 " at %.3f s\n", x->alloc_seq,
                    rel_s(r, x->alloc_time_ns));
        print_stack(f, s, x->alloc_stack, "     ");
        /* a tensor declared again (format 1.11): made before the window,
         * whose uses the ring overwrote, none in the window */
        if (x->last_use_before_window &&
            (x->rule == VT_CHECK_RULE_LINGER || x->rule == VT_CHECK_RULE_CYCLE ||
             x->rule == VT_CHECK_RULE_TAPE || x->rule == VT_CHECK_RULE_PINNED))
            fprintf(f, "   last use: before the trace window, by tensor '%s' (#%" PRIu64 "), "
                       "made there; unused since the window began\n",
                    x->last_use_name, x->last_use_tensor);
        if (x->rule == VT_CHECK_RULE_LINGER || x->rule == VT_CHECK_RULE_CYCLE ||
            x->rule == VT_CHECK_RULE_TAPE) {
            if (!x->last_use_before_window) {
                fprintf(f, "   last use: tensor '%s' (#%" PRIu64 ") seq %" PRIu64 " at %.3f s",
                        x->last_use_name, x->last_use_tensor, x->last_use_seq,
                        rel_s(r, x->last_use_time_ns));
                if (x->grace_mode == VT_CHECK_GRACE_STEPS) {
                    fprintf(f, ", step %u", x->last_use_step);
                    if (x->last_use_mark && *x->last_use_mark)
                        fprintf(f, " (from mark '%s')", x->last_use_mark);
                }
                fprintf(f, " (%u use%s)\n", x->nuses, x->nuses == 1 ? "" : "s");
                print_stack(f, s, x->last_use_stack, "     ");
            }
            if (x->rule == VT_CHECK_RULE_TAPE) {
                fprintf(f, "   retained inside its step: alive %.3f s after its last use "
                           "(%u%% of the step's tensor uses, a %.3f s step), through the step's "
                           "peak of %s at %.3f s\n",
                        (double)x->linger_ns / 1e9, x->step_idle_pct, (double)x->step_ns / 1e9,
                        vt__fmt_bytes(x->step_peak_bytes, b3), rel_s(r, x->linger_from_time_ns));
            } else if (x->rule == VT_CHECK_RULE_CYCLE) {
                fprintf(f, "   held by a reference cycle until gc ran: the collection at %.3f s"
                           " (seq %" PRIu64 ") freed it %.3f s after its last use",
                        rel_s(r, x->gc_time_ns), x->gc_seq, (double)x->linger_ns / 1e9);
                if (x->grace_mode == VT_CHECK_GRACE_STEPS)
                    fprintf(f, ", %u complete step%s unused", x->steps_unused,
                            x->steps_unused == 1 ? "" : "s");
                fputc('\n', f);
            } else if (x->grace_mode == VT_CHECK_GRACE_STEPS) {
                fprintf(f, "   lingering since seq %" PRIu64 " at %.3f s: %u complete step%s"
                           " unused ", x->linger_from_seq, rel_s(r, x->linger_from_time_ns),
                        x->steps_unused, x->steps_unused == 1 ? "" : "s");
                if (x->last_use_before_window)
                    fprintf(f, "(since the window began at least)\n");
                else if (x->sampled_grace_steps)
                    fprintf(f, "(its line's tensors are drawn from at random, as a replay "
                               "buffer's: 1 step in %.1f lately, grace %u steps)\n",
                            x->sampled_mean_gap, x->sampled_grace_steps);
                else if (x->usual_gap_steps)
                    fprintf(f, "(usual gap %u step%s)\n", x->usual_gap_steps,
                            x->usual_gap_steps == 1 ? "" : "s");
                else
                    fprintf(f, "(used in one step only)\n");
            }
            else
                fprintf(f, "   lingering since %.3f s (usual gap %.3f s)\n",
                        rel_s(r, x->linger_from_time_ns), (double)x->usual_gap_ns / 1e9);
        } else if (x->rule == VT_CHECK_RULE_PINNED) {
            if (!x->last_use_before_window)
                fprintf(f, "   last use: tensor '%s' (#%" PRIu64 ") seq %" PRIu64
                           " at %.3f s (%u use%s)\n",
                        x->last_use_name, x->last_use_tensor, x->last_use_seq,
                        rel_s(r, x->last_use_time_ns), x->nuses, x->nuses == 1 ? "" : "s");
            fprintf(f, "   pinned since seq %" PRIu64 " at %.3f s, a finding since seq %" PRIu64
                       " at %.3f s", x->pinned_since_seq, rel_s(r, x->pinned_since_time_ns),
                    x->linger_from_seq, rel_s(r, x->linger_from_time_ns));
            if (x->grace_mode == VT_CHECK_GRACE_STEPS)
                fprintf(f, ": %u complete step%s pinned", x->steps_unused,
                        x->steps_unused == 1 ? "" : "s");
            fputc('\n', f);
            if (x->pinned_until_seq == UINT64_MAX)
                fprintf(f, "   pinned until the end\n");
            else if (x->pinned_cut)
                fprintf(f, "   pinned until its last use at %.3f s (from there: its linger finding)\n",
                        rel_s(r, x->pinned_until_time_ns));
            else
                fprintf(f, "   pinned until seq %" PRIu64 " at %.3f s\n", x->pinned_until_seq,
                        rel_s(r, x->pinned_until_time_ns));
        }
        if (x->freed)
            fprintf(f, "   freed: seq %" PRIu64 " at %.3f s\n", x->free_seq,
                    rel_s(r, x->free_time_ns));
        else
            fprintf(f, "   still alive at the end (%.3f s)\n", rel_s(r, r->end_time_ns));
        /* the tracker's pauses are in the wall time, not in the program's */
        char paused[64] = "";
        if (x->paused_ns)
            snprintf(paused, sizeof paused, " (%.3f s of it vramtrace's pauses)",
                     (double)x->paused_ns / 1e9);
        fprintf(f, "   held %s%.3f s %s%s: %s\n", x->last_use_before_window ? "at least " : "",
                (double)x->linger_ns / 1e9,
                x->rule == VT_CHECK_RULE_LINGER    ? "after last use"
                : x->rule == VT_CHECK_RULE_CYCLE   ? "after last use, until gc freed it"
                : x->rule == VT_CHECK_RULE_TAPE    ? "after last use, within its step"
                : x->rule == VT_CHECK_RULE_OUTLIER ? (x->loop_visits ? "since allocation, until the"
                                                                       " loop ended (longest)"
                                                     : "longer than its siblings")
                : x->rule == VT_CHECK_RULE_PINNED  ? "pinned (wasted bytes x time)"
                : x->rule == VT_CHECK_RULE_GROWTH  ? (x->growth_window_ns
                                                          ? "while growing, from its first judged window"
                                                          : "while growing, from its first judged mark")
                                                   : "since allocation (longest)",
                paused, vt__fmt_byte_seconds(x->byte_seconds, b2));
        /* never-freed and outlier judge blocks: under track() their chains
         * are said where a walk found the tensors on them (a Lightning
         * module's validation outputs never cleared: the last epoch's are
         * never freed, the list keeps them) */
        if (x->rule == VT_CHECK_RULE_LINGER || x->rule == VT_CHECK_RULE_PINNED ||
            x->rule == VT_CHECK_RULE_CYCLE || x->rule == VT_CHECK_RULE_TAPE ||
            x->rule == VT_CHECK_RULE_GROWTH || x->npaths) {
            int no_holder = vt__check_paths_name_no_holder(x);   /* its paths then say nothing more */
            if (!x->npaths && !x->ntensors)
                /* PyTorch's blocks observed without track(): nothing to
                 * say who holds it, and nothing was dropped either */
                fprintf(f, "   held by: not known (no tensor was recorded on it)\n");
            else if (!x->npaths)
                fprintf(f, "   held by: no recorded reference (every tensor on it was dropped)\n");
            else
                fprintf(f, "   held by (%s):%s\n", vt__check_paths_when(x),
                        no_holder ? " " NO_HOLDER_FOUND : "");
            for (size_t p = 0; p < x->npaths && !no_holder; p++)
                print_path_line(f, &x->paths[p]);
        }
    }
    if (shown < r->nfindings) {
        fprintf(f, "\n... %zu more finding%s (", r->nfindings - shown,
                r->nfindings - shown == 1 ? "" : "s");
        if (capped)
            fprintf(f, "at most %d of each cause shown; ", DETAILS_PER_CAUSE);
        fprintf(f, "--top 0 shows all, --json has everything)\n");
    }
    free(group_of);
    free(chosen);
    fflush(f);
    return ferror(f) ? -EIO : 0;
}
