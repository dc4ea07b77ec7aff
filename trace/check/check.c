/*
 * trace/check/check.c - the checker's entry points (see check.h): options
 * parsing, ranking and vt__check_run, which orchestrates the passes; what the
 * rules share lives in check_findings.c.
 *
 * vt__check_run_stream builds the model from the snapshot's event stream
 * (pass 1, check_model.c; vt__check_run streams a whole snapshot's array),
 * runs the rules on each storage's uses and lifetime (check_linger.c,
 * check_pinned.c, check_native.c, check_growth.c), finds the retention paths
 * (pass 2, check_paths.c) and ranks the findings. Nothing is quadratic: 1M
 * events cost well under a second.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "event_stream.h"
#include "check_internal.h"

/* ------------------------------------------------------------------------ */
/*  Entry points                                                            */
/* ------------------------------------------------------------------------ */

void vt__check_options_init(vt__check_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->grace_mode = VT_CHECK_GRACE_AUTO;
    opt->rules = VT_CHECK_RULES_AUTO;
    opt->max_paths = 3;
    opt->max_visit = 4096;
    opt->pinned_ratio = VT_CHECK_PINNED_RATIO;
}

const char *vt__check_rule_name(unsigned rule)
{
    switch (rule) {
    case VT_CHECK_RULE_LINGER: return "linger";
    case VT_CHECK_RULE_NEVER_FREED: return "never-freed";
    case VT_CHECK_RULE_OUTLIER: return "outlier";
    case VT_CHECK_RULE_PINNED: return "pinned";
    case VT_CHECK_RULE_CYCLE: return "cycle";
    case VT_CHECK_RULE_TAPE: return "tape";
    case VT_CHECK_RULE_GROWTH: return "growth";
    default: return "?";
    }
}

int vt__check_parse_rules(const char *text, unsigned *rules)
{
    if (!text || !*text)
        return -EINVAL;
    unsigned acc = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 6 && !strncmp(p, "linger", n)) acc |= VT_CHECK_RULE_LINGER;
        else if (n == 11 && !strncmp(p, "never-freed", n)) acc |= VT_CHECK_RULE_NEVER_FREED;
        else if (n == 7 && !strncmp(p, "outlier", n)) acc |= VT_CHECK_RULE_OUTLIER;
        else if (n == 6 && !strncmp(p, "pinned", n)) acc |= VT_CHECK_RULE_PINNED;
        else if (n == 5 && !strncmp(p, "cycle", n)) acc |= VT_CHECK_RULE_CYCLE;
        else if (n == 4 && !strncmp(p, "tape", n)) acc |= VT_CHECK_RULE_TAPE;
        else if (n == 6 && !strncmp(p, "growth", n)) acc |= VT_CHECK_RULE_GROWTH;
        else if (n == 3 && !strncmp(p, "all", n)) acc |= VT_CHECK_RULES_ALL;
        else if (n == 4 && !strncmp(p, "auto", n)) acc |= 0;
        else return -EINVAL;
        p += n;
        if (*p == ',')
            p++;
    }
    *rules = acc;
    return 0;
}

int vt__check_parse_pinned_ratio(const char *text, double *ratio)
{
    if (!text || !*text || !ratio || text[0] == '-' || text[0] == '+')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text)
        return -EINVAL;
    if (!strcmp(end, "%"))
        v /= 100;
    else if (*end)
        return -EINVAL;
    if (!(v > 0) || v > 1)
        return -EINVAL;
    *ratio = v;
    return 0;
}

int vt__check_parse_grace(const char *text, vt__check_options *opt)
{
    if (!text || !*text)
        return -EINVAL;
    if (!strcmp(text, "auto")) {
        opt->grace_mode = VT_CHECK_GRACE_AUTO;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0) || v > 1e12 || text[0] == '-' || text[0] == '+')
        return -EINVAL;
    if (!*end || !strcmp(end, "steps") || !strcmp(end, "step")) {
        if (v != (double)(uint32_t)v)
            return -EINVAL;
        opt->grace_mode = VT_CHECK_GRACE_STEPS;
        opt->grace_steps = (uint32_t)v;
        return 0;
    }
    double scale;
    if (!strcmp(end, "s")) scale = 1e9;
    else if (!strcmp(end, "ms")) scale = 1e6;
    else if (!strcmp(end, "us")) scale = 1e3;
    else if (!strcmp(end, "ns")) scale = 1;
    else if (!strcmp(end, "m") || !strcmp(end, "min")) scale = 60e9;
    else return -EINVAL;
    double ns = v * scale;
    if (ns > 1.8e19)
        return -EINVAL;
    opt->grace_mode = VT_CHECK_GRACE_TIME;
    opt->grace_ns = (uint64_t)(ns + 0.5);
    return 0;
}

static int cmp_rank(const void *a, const void *b)
{
    const vt__check_finding *x = a, *y = b;
    if (x->byte_seconds != y->byte_seconds)
        return x->byte_seconds > y->byte_seconds ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->linger_from_seq < y->linger_from_seq ? -1 : x->linger_from_seq > y->linger_from_seq;
}

static void findings_free(vt__check_finding *fs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        vt__check_finding *f = &fs[i];
        for (size_t p = 0; p < f->npaths; p++)
            free(f->paths[p].steps);
        free(f->paths);
        free(f->views);
    }
    free(fs);
}

void vt__check_report_free(vt__check_report *r)
{
    if (!r)
        return;
    findings_free(r->findings, r->nfindings);
    findings_free(r->minor, r->nminor);
    free(r);
}

static uint64_t counted_bytes(const vt__check_finding *x)
{
    return x->rule == VT_CHECK_RULE_PINNED ? x->wasted_bytes : x->bytes;
}

/* The same with the finding's block where larger (vt__check_held_bytes): what
 * it keeps from the program. */
static uint64_t counted_held_bytes(const vt__check_finding *x)
{
    return x->rule == VT_CHECK_RULE_PINNED ? x->wasted_bytes : vt__check_held_bytes(x);
}

/* The findings of the causes under the floor (check.h, "Minor findings")
 * move to r->minor, in rank order; the others keep theirs. */
static int split_minor(vt__check_report *r, const vt__snapshot_data *s, const ck_model *m,
                       const vt__check_options *opt)
{
    r->peak_bytes = m->any_device ? m->peak_device : m->peak_host;
    uint64_t floor = opt->min_bytes;
    r->min_bytes_auto = floor == VT_CHECK_MIN_BYTES_AUTO;
    if (floor == VT_CHECK_MIN_BYTES_AUTO) {
        floor = r->peak_bytes / 1000 * VT_CHECK_MINOR_PERMILLE;
        if (floor > VT_CHECK_MINOR_CAP)
            floor = VT_CHECK_MINOR_CAP;
    } else if (floor == VT_CHECK_MIN_BYTES_NONE) {
        floor = 0;
    }
    r->min_bytes = floor;
    if (!floor || !r->nfindings)
        return 0;
    size_t ng = 0;
    uint32_t *group_of = malloc(r->nfindings * sizeof *group_of);
    ck_group *g = group_of ? vt__ck_group_findings(r, s, &ng, group_of) : NULL;
    vt__check_finding *minor = g ? malloc(r->nfindings * sizeof *minor) : NULL;
    if (!minor) {
        free(group_of), free(g);
        return -ENOMEM;
    }
    size_t kept = 0, nminor = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        if (g[group_of[i]].held_bytes < floor)
            minor[nminor++] = r->findings[i];
        else
            r->findings[kept++] = r->findings[i];
    }
    free(group_of), free(g);
    if (!nminor) {
        free(minor);
        return 0;
    }
    r->nfindings = kept;
    r->minor = minor;
    r->nminor = nminor;
    for (size_t i = 0; i < nminor; i++) {
        r->minor_bytes += counted_bytes(&minor[i]);
        r->minor_held_bytes += counted_held_bytes(&minor[i]);
    }
    return 0;
}

int vt__check_run(const vt__snapshot_data *s, const vt__check_options *opt,
                  vt__check_report **out, char *err, size_t errlen)
{
    if (!s || !out) {
        (void)vt__errf(err, errlen, 0, "vt__check_run: no snapshot");
        return -EINVAL;
    }
    *out = NULL;
    if (s->nevents > UINT32_MAX / 2 || s->nblocks > UINT32_MAX / 2) {
        (void)vt__errf(err, errlen, 0, "vt__check_run: snapshot too large (%zu events)", s->nevents);
        return -EOVERFLOW;
    }
    vt__event_stream *es;
    if (vt__event_stream_of(s, &es) < 0) {
        (void)vt__errf(err, errlen, 0, "vt__check_run: out of memory");
        return -ENOMEM;
    }
    int rc = vt__check_run_stream(s, es, opt, out, err, errlen);
    vt__event_stream_close(es);
    return rc;
}

int vt__check_run_stream(const vt__snapshot_data *s, vt__event_stream *es,
                         const vt__check_options *opt_in, vt__check_report **out, char *err,
                         size_t errlen)
{
    if (!s || !es || !out) {
        (void)vt__errf(err, errlen, 0, "vt__check_run: no snapshot");
        return -EINVAL;
    }
    *out = NULL;
    vt__check_options opt;
    if (opt_in)
        opt = *opt_in;
    else
        vt__check_options_init(&opt);
    if (!opt.max_paths)
        opt.max_paths = 3;
    if (!opt.max_visit)
        opt.max_visit = 4096;
    if (s->nblocks > UINT32_MAX / 2) {
        (void)vt__errf(err, errlen, 0, "vt__check_run: snapshot too large (%zu blocks)", s->nblocks);
        return -EOVERFLOW;
    }

    ck_model m;
    memset(&m, 0, sizeof m);
    m.s = s;
    m.es = es;
    m.err = err;
    m.errlen = errlen;
    m.rules_asked = opt.rules & VT_CHECK_RULES_ALL;
    m.keep_records = opt.keep_records != 0;
    if (errlen)
        err[0] = 0;
    vt__check_report *r = calloc(1, sizeof *r);
    ck_findings fs = { 0 };
    int rc = -ENOMEM;
    if (!r)
        goto fail;
    if ((rc = vt__ck_model_build(&m)) < 0)
        goto fail;
    if ((rc = vt__ck_quiet_tail(&m)) < 0)
        goto fail;
    rc = -ENOMEM;
    if (opt.host == VT_CHECK_HOST_AUTO)
        m.skip_host = m.any_device;

    unsigned rules = opt.rules & VT_CHECK_RULES_ALL;
    if (!rules)
        rules = m.ntensors ? (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED |
                              (m.ngc_collections ? VT_CHECK_RULE_CYCLE : 0))
                           : (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER);
    /* Tensors recorded, and a quiet time after the last mark: LINGER does
     * not judge that time, NEVER-FREED does, there alone (m.quiet_only). */
    if (!(opt.rules & VT_CHECK_RULES_ALL) && m.ntensors && m.quiet_steps) {
        rules |= VT_CHECK_RULE_NEVER_FREED;
        m.quiet_only = 1;
    }
    /* Tensors recorded, and a loop's kept until it ended (check_loop_kept.c:
     * they die within the step that made them, which no tensor rule
     * judges): OUTLIER's look for them runs, its others do not. */
    if (m.ntensors && vt__ck_loops_found(&m) &&
        (!(opt.rules & VT_CHECK_RULES_ALL) || (rules & VT_CHECK_RULE_OUTLIER))) {
        m.loop_only = !(rules & VT_CHECK_RULE_OUTLIER);
        rules |= VT_CHECK_RULE_OUTLIER;
    }
    /* Without steps, accumulation step after step cannot be told from setup,
     * nor an outlier from a sibling of another phase: the automatic choice
     * says so instead of guessing by time (asked by name, they run on time).
     * Except NEVER-FREED on the blocks of an observed PyTorch allocator: a
     * program without optimizer steps (an evaluation, inference) is judged
     * by time there, as `run --track` judges its tensors by ticks. A call
     * site's blocks alive at the end and allocated over at least 5 % of the
     * trace are what a loop keeping its outputs leaves (setup allocates in
     * one go), and small results kept on purpose stay under the floor of
     * minor findings. */
    if (!(opt.rules & VT_CHECK_RULES_ALL) && !m.nmarks && !m.ntensors) {
        unsigned by_time = m.pool_by_time ? VT_CHECK_RULE_NEVER_FREED : 0;
        r->rules_need_steps = rules & (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER) & ~by_time;
        r->rules_on_time = r->rules_need_steps;
        rules &= ~r->rules_need_steps;
    }
    /* Growth is judged at step ends only, after a warm-up: automatic when
     * there are enough of them; asked by name without, it says so. */
    int growth_by_time = m.nwin != 0;   /* set for an observed pool without marks only */
    if (!(opt.rules & VT_CHECK_RULES_ALL) &&
        (m.nmarks >= VT_CHECK_GROWTH_MIN_MARKS || growth_by_time))
        rules |= VT_CHECK_RULE_GROWTH;
    if ((rules & VT_CHECK_RULE_GROWTH) && m.nmarks < VT_CHECK_GROWTH_MIN_MARKS &&
        !growth_by_time) {
        r->rules_need_steps |= VT_CHECK_RULE_GROWTH;
        rules &= ~VT_CHECK_RULE_GROWTH;
    }
    r->rules_run = rules;
    r->grace_mode = opt.grace_mode;
    r->grace_user = opt.grace_mode != VT_CHECK_GRACE_AUTO;
    if (opt.grace_mode == VT_CHECK_GRACE_STEPS)
        r->grace_steps = opt.grace_steps;
    if (opt.grace_mode == VT_CHECK_GRACE_TIME)
        r->grace_ns = opt.grace_ns;
    r->nmarks = m.nmarks;
    r->steps_inferred = m.steps_inferred;
    r->quiet_steps = (rules & VT_CHECK_RULE_NEVER_FREED) ? m.quiet_steps : 0;
    r->quiet_from_ns = m.quiet_from;
    r->nstorages = m.nst_all;
    r->ntensors = m.ntensors;
    r->nholders = m.nholders;
    r->nrefs = m.nrefs;
    r->start_time_ns = m.start_time;
    r->end_time_ns = m.end_time;
    r->pinned_ratio = opt.pinned_ratio > 0 && opt.pinned_ratio <= 1 ? opt.pinned_ratio
                                                                    : VT_CHECK_PINNED_RATIO;

    /* The time rules search the events by time. */
    if ((opt.grace_mode == VT_CHECK_GRACE_TIME || !m.nmarks) && (rc = vt__ck_model_times(&m)) < 0)
        goto fail;
    rc = -ENOMEM;
    /* What a replay buffer's entries are: LINGER's grace, GROWTH's word. */
    if (m.nmarks && opt.grace_mode != VT_CHECK_GRACE_TIME &&
        (rules & (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_GROWTH)) &&
        vt__ck_sampled_init(&m.drawn, &m) < 0)
        goto fail;
    /* Before LINGER: a storage only a collection freed is its finding alone. */
    if (rules & VT_CHECK_RULE_CYCLE)
        if (vt__ck_rule_cycle(&m, &opt, &fs, r) < 0)
            goto fail;
    if (rules & VT_CHECK_RULE_LINGER) {
        if (vt__ck_rule_linger(&m, &opt, &fs, r) < 0)
            goto fail;
    } else {
        r->grace_mode = opt.grace_mode == VT_CHECK_GRACE_TIME || !m.nmarks
                            ? VT_CHECK_GRACE_TIME : VT_CHECK_GRACE_STEPS;
    }
    /* After LINGER: it cuts the pinned intervals of the storages it flagged. */
    if (rules & VT_CHECK_RULE_PINNED)
        if (vt__ck_rule_pinned(&m, &opt, &fs, r) < 0)
            goto fail;
    /* After LINGER and CYCLE: it judges only what they left. */
    if (rules & VT_CHECK_RULE_TAPE)
        if (vt__ck_rule_tape(&m, &opt, &fs, r) < 0)
            goto fail;
    unsigned native = rules & ~(m.loop_only ? VT_CHECK_RULE_OUTLIER : 0u);
    if (native & (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER))
        if (vt__ck_rule_native(&m, &opt, native, &fs, r) < 0)
            goto fail;
    if ((rules & VT_CHECK_RULE_OUTLIER) && m.nmarks && !m.ntensors)
        if (vt__ck_rule_kept_call(&m, &opt, &fs, r) < 0)
            goto fail;
    if (rules & VT_CHECK_RULE_OUTLIER)
        if (vt__ck_rule_loop_kept(&m, &opt, &fs, r) < 0)
            goto fail;
    /* Last: one finding per storage, what the others left. */
    if (rules & VT_CHECK_RULE_GROWTH)
        if (vt__ck_rule_growth(&m, &opt, &fs, r) < 0)
            goto fail;
    /* The call several lines' findings were made under (the loop's name
     * theirs already). */
    if ((rules & (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER | VT_CHECK_RULE_GROWTH)) &&
        m.nmarks && !m.ntensors)
        if (vt__ck_kept_under_call(&m, &fs) < 0)
            goto fail;

    /* What the window cannot judge: at the tensor rules' stacks, counted. */
    if (vt__ck_older_alive(&m, &fs) < 0)
        goto fail;

    r->findings = fs.f;
    r->nfindings = fs.n;
    fs.f = NULL;
    if (vt__ck_paths(&m, r, fs.fst, &opt) < 0)
        goto fail;

    if (r->nfindings)
        qsort(r->findings, r->nfindings, sizeof *r->findings, cmp_rank);
    if (split_minor(r, s, &m, &opt) < 0)
        goto fail;
    for (size_t i = 0; i < r->nfindings; i++) {
        r->total_bytes += counted_bytes(&r->findings[i]);
        r->total_held_bytes += counted_held_bytes(&r->findings[i]);
        r->total_byte_seconds += r->findings[i].byte_seconds;
    }
    free(fs.fst);
    vt__ck_model_free(&m);
    *out = r;
    return 0;

fail:
    if (rc == -ENOMEM || !err || !err[0])
        (void)vt__errf(err, errlen, 0, "vt__check_run: out of memory");
    free(fs.f);
    free(fs.fst);
    vt__check_report_free(r);
    vt__ck_model_free(&m);
    return rc;
}
