/*
 * cli/cmd_compare.c - `vramtrace compare A B ... [--json] [--top N]`: one
 * snapshot per rank, side by side.
 *
 * Per rank: peak allocated and reserved bytes (the highest device of that
 * rank) and when (seconds since the rank's first event, and wall clock, so
 * ranks line up); the spread of the peaks across ranks; and the call sites
 * whose bytes at each rank's allocated peak differ most between ranks (a
 * site is the frame summary/leaks show: the innermost frame that is not
 * vramtrace, CUDA or the C runtime, named "function file:line").
 *
 * Output (stable; tests and scripts read it):
 *   rank R  FILE
 *     allocated: peak X at T s (W: UTC wall clock, as "2026-11-28 09:15:03.123 UTC"), now Y
 *     reserved:  peak X at T s, now Y
 *   spread of peak allocated: MIN (rank a) .. MAX (rank b), +D
 *   spread of peak reserved:  MIN (rank a) .. MAX (rank b), +D
 *   call sites whose bytes at the peak differ most between ranks:
 *     +D  SITE   rank 0: X, rank 1: Y, ...
 *   growth across steps (...):       the ranks aligned by step (compare_growth.c)
 *     mark  label  rank 0  rank 1 ...    bytes allocated at each mark
 *     per step (marks A..B; ...): rank 0 +X, rank 1 +Y, ...
 *   rank R grows +X per step (the ranks' median: +M) from SITE
 *       +X per step  SITE  (...; the other ranks: +Y per step)
 *   the others are flat
 * A snapshot without a rank (RANK unset when it was taken) is numbered by
 * its position on the command line. Arguments with * or ? are globbed.
 */
#include <glob.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "compare_growth.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace compare SNAPSHOT SNAPSHOT... [--json] [--top N]\n"
    "\n"
    "Compare the snapshots of several ranks (.vtsnap or PyTorch pickles; a quoted\n"
    "glob such as 'rank*.vtsnap' is expanded): per rank, peak allocated and\n"
    "reserved bytes and when; the spread across ranks; the call sites whose bytes\n"
    "at the allocated peak differ most between ranks. Then growth across steps,\n"
    "the ranks aligned by their marks (the k-th mark of each is the same step):\n"
    "the bytes allocated at each mark per rank, the ranks whose growth per step\n"
    "differs from the others' median, and their call sites that grow.\n"
    "  --json    one JSON document instead of text\n"
    "  --top N   call sites to list (default 10; growth: per rank)\n"
    VT_EXIT_HELP;

struct rank_info {
    const char *file;
    int rank;
    vt__snapshot_data *s;
    vt__timeline *tl;
    const vt__tl_device *dev;     /* the device with the highest allocated peak */
    uint64_t peak_alloc, peak_resv, final_alloc, final_resv;
    uint64_t peak_alloc_time, peak_resv_time; /* ns, monotonic */
};

struct site {
    char *name;
    uint64_t *bytes;    /* per rank */
    uint64_t spread;
};

static double rel_s(const struct rank_info *r, uint64_t t)
{
    return t > r->tl->first_time_ns ? (double)(t - r->tl->first_time_ns) / 1e9 : 0.0;
}

/* "2026-11-28 09:15:03.123 UTC": when, on the clock a user compares logs by. */
static const char *wall_text(uint64_t ns, char *buf, size_t len)
{
    time_t sec = (time_t)(ns / 1000000000u);
    struct tm tm;
    if (!gmtime_r(&sec, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm)) {
        snprintf(buf, len, "%" PRIu64 " ns", ns);
        return buf;
    }
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, ".%03u UTC", (unsigned)(ns / 1000000u % 1000u));
    return buf;
}

static uint64_t wall_ns(const struct rank_info *r, uint64_t t)
{
    return t - r->s->meta.clock_base_monotonic_ns + r->s->meta.clock_base_realtime_ns;
}

/* Sites by name: an open-addressing index over the site array, so that a
 * snapshot with many call sites stays linear. */
struct site_set {
    struct site *v;
    size_t n, cap;
    int32_t *index;     /* site number + 1, 0 = empty */
    size_t nindex;
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int find_site(struct site_set *ss, const char *name, size_t nranks)
{
    if ((ss->n + 1) * 2 > ss->nindex) {
        size_t ni = ss->nindex ? ss->nindex * 2 : 256;
        int32_t *idx = calloc(ni, sizeof *idx);
        if (!idx)
            return -1;
        for (size_t i = 0; i < ss->n; i++) {
            size_t k = hash_name(ss->v[i].name) & (ni - 1);
            while (idx[k])
                k = (k + 1) & (ni - 1);
            idx[k] = (int32_t)i + 1;
        }
        free(ss->index);
        ss->index = idx;
        ss->nindex = ni;
    }
    size_t k = hash_name(name) & (ss->nindex - 1);
    for (; ss->index[k]; k = (k + 1) & (ss->nindex - 1))
        if (!strcmp(ss->v[ss->index[k] - 1].name, name))
            return ss->index[k] - 1;
    if (ss->n == ss->cap) {
        size_t c = ss->cap ? ss->cap * 2 : 64;
        struct site *nv = realloc(ss->v, c * sizeof *nv);
        if (!nv)
            return -1;
        ss->v = nv;
        ss->cap = c;
    }
    struct site *st = &ss->v[ss->n];
    st->name = strdup(name);
    st->bytes = calloc(nranks, sizeof *st->bytes);
    st->spread = 0;
    if (!st->name || !st->bytes) {
        free(st->name);
        free(st->bytes);
        return -1;
    }
    ss->index[k] = (int32_t)ss->n + 1;
    return (int)ss->n++;
}

static int cmp_spread(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    if (x->spread != y->spread)
        return x->spread < y->spread ? 1 : -1;
    return strcmp(x->name, y->name);
}

static int cmp_rank(const void *a, const void *b)
{
    const struct rank_info *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static void free_sites(struct site *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].bytes);
    }
    free(v);
}

int vt__cmd_compare(int argc, char **argv)
{
    int json = 0;
    long top = 10;
    glob_t g = { 0 };
    int globbed = 0, status = VT_EXIT_FAILURE;
    char **files = calloc((size_t)argc, sizeof *files);
    size_t nfiles = 0;
    if (!files)
        return VT_EXIT_FAILURE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            free(files);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--top")) {
            char *end;
            if (++i >= argc || (top = strtol(argv[i], &end, 10), *end || top < 0)) {
                fprintf(stderr, "vramtrace compare: --top needs a count\n");
                free(files);
                return VT_EXIT_FAILURE;
            }
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option("compare", a);
            free(files);
            return VT_EXIT_FAILURE;
        } else if (strpbrk(a, "*?[")) {
            if (glob(a, globbed ? GLOB_APPEND : 0, NULL, &g) == 0)
                globbed = 1;
            else
                files[nfiles++] = argv[i]; /* no match: reported as unreadable below */
        } else {
            files[nfiles++] = argv[i];
        }
    }
    size_t total = nfiles + (globbed ? g.gl_pathc : 0);
    if (total < 1) {
        fprintf(stderr, "vramtrace compare: no SNAPSHOT given (try --help)\n");
        free(files);
        return VT_EXIT_FAILURE;
    }
    struct rank_info *r = calloc(total, sizeof *r);
    struct site_set ss = { 0 };
    vt__growth_rank *gr = NULL;
    vt__growth *growth = NULL;
    if (!r) {
        fprintf(stderr, "vramtrace compare: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < total; i++) {
        r[i].file = i < nfiles ? files[i] : g.gl_pathv[i - nfiles];
        if (vt__report_load("compare", r[i].file, &r[i].s, &r[i].tl))
            goto out;
        if (!json && vt__report_text_names(r[i].s) != 0) {
            fprintf(stderr, "vramtrace compare: out of memory\n");
            goto out;
        }
        r[i].rank = r[i].s->meta.rank >= 0 ? r[i].s->meta.rank : (int)i;
        for (size_t d = 0; d < r[i].tl->ndevices; d++) {
            const vt__tl_device *dv = &r[i].tl->devices[d];
            if (!r[i].dev || dv->peak_allocated > r[i].dev->peak_allocated)
                r[i].dev = dv;
            if (dv->peak_reserved >= r[i].peak_resv) {
                r[i].peak_resv = dv->peak_reserved;
                r[i].peak_resv_time = dv->points[dv->peak_reserved_point].time_ns;
            }
            r[i].final_alloc += dv->final_allocated;
            r[i].final_resv += dv->final_reserved;
        }
        if (r[i].dev) {
            r[i].peak_alloc = r[i].dev->peak_allocated;
            r[i].peak_alloc_time = r[i].dev->points[r[i].dev->peak_allocated_point].time_ns;
        }
    }
    qsort(r, total, sizeof *r, cmp_rank);
    gr = calloc(total, sizeof *gr);
    if (!gr) {
        fprintf(stderr, "vramtrace compare: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < total; i++)
        gr[i] = (vt__growth_rank){ r[i].rank, r[i].s, r[i].tl };
    if (vt__growth_build(gr, total, &growth) != 0) {
        fprintf(stderr, "vramtrace compare: out of memory\n");
        goto out;
    }
    /* bytes per call site at each rank's allocated peak */
    for (size_t i = 0; i < total; i++) {
        if (!r[i].dev)
            continue;
        uint32_t ev = r[i].dev->points[r[i].dev->peak_allocated_point].event;
        for (size_t k = 0; k < r[i].tl->nlifetimes; k++) {
            const vt__lifetime *l = &r[i].tl->lifetimes[k];
            if (l->device != r[i].dev->device || !vt__lifetime_allocated_at(l, ev))
                continue;
            char name[512];
            vt__report_site_name(r[i].s, vt__report_site_frame(r[i].s, l->alloc_stack), name,
                                 sizeof name);
            int si = find_site(&ss, name, total);
            if (si < 0) {
                fprintf(stderr, "vramtrace compare: out of memory\n");
                goto out;
            }
            ss.v[si].bytes[i] += l->size;
        }
    }
    struct site *sites = ss.v;
    size_t nsites = ss.n;
    for (size_t k = 0; k < nsites; k++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < total; i++) {
            lo = sites[k].bytes[i] < lo ? sites[k].bytes[i] : lo;
            hi = sites[k].bytes[i] > hi ? sites[k].bytes[i] : hi;
        }
        sites[k].spread = hi - lo;
    }
    if (nsites)   /* none when no rank allocated anything: qsort wants an array */
        qsort(sites, nsites, sizeof *sites, cmp_spread);
    size_t lo_a = 0, hi_a = 0, lo_r = 0, hi_r = 0;
    for (size_t i = 1; i < total; i++) {
        if (r[i].peak_alloc < r[lo_a].peak_alloc) lo_a = i;
        if (r[i].peak_alloc > r[hi_a].peak_alloc) hi_a = i;
        if (r[i].peak_resv < r[lo_r].peak_resv) lo_r = i;
        if (r[i].peak_resv > r[hi_r].peak_resv) hi_r = i;
    }
    size_t nshow = (size_t)top < nsites ? (size_t)top : nsites;
    char b1[32], b2[32], b3[32];
    if (json) {
        printf("{\"ranks\":[");
        for (size_t i = 0; i < total; i++) {
            printf("%s\n {\"rank\":%d,\"file\":", i ? "," : "", r[i].rank);
            vt__json_str(stdout, r[i].file);
            printf(",\"device\":%d,\"peak_allocated\":%" PRIu64 ",\"peak_allocated_time_s\":%.6f,"
                   "\"peak_allocated_wall_ns\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
                   ",\"peak_reserved_time_s\":%.6f,\"peak_reserved_wall_ns\":%" PRIu64
                   ",\"final_allocated\":%" PRIu64 ",\"final_reserved\":%" PRIu64 "}",
                   r[i].dev ? r[i].dev->device : -1, r[i].peak_alloc,
                   rel_s(&r[i], r[i].peak_alloc_time), wall_ns(&r[i], r[i].peak_alloc_time),
                   r[i].peak_resv, rel_s(&r[i], r[i].peak_resv_time),
                   wall_ns(&r[i], r[i].peak_resv_time), r[i].final_alloc, r[i].final_resv);
        }
        printf("],\n\"spread\":{\"peak_allocated\":{\"min\":%" PRIu64 ",\"min_rank\":%d,\"max\":%"
               PRIu64 ",\"max_rank\":%d,\"difference\":%" PRIu64 "},\"peak_reserved\":{\"min\":%"
               PRIu64 ",\"min_rank\":%d,\"max\":%" PRIu64 ",\"max_rank\":%d,\"difference\":%" PRIu64
               "}},\n\"sites\":[",
               r[lo_a].peak_alloc, r[lo_a].rank, r[hi_a].peak_alloc, r[hi_a].rank,
               r[hi_a].peak_alloc - r[lo_a].peak_alloc, r[lo_r].peak_resv, r[lo_r].rank,
               r[hi_r].peak_resv, r[hi_r].rank, r[hi_r].peak_resv - r[lo_r].peak_resv);
        for (size_t k = 0; k < nshow; k++) {
            printf("%s\n {\"site\":", k ? "," : "");
            vt__json_str(stdout, sites[k].name);
            printf(",\"spread\":%" PRIu64 ",\"bytes\":{", sites[k].spread);
            for (size_t i = 0; i < total; i++)
                printf("%s\"%d\":%" PRIu64, i ? "," : "", r[i].rank, sites[k].bytes[i]);
            printf("}}");
        }
        printf("],\n\"growth\":");
        vt__growth_json(stdout, growth, (size_t)top);
        printf("}\n");
    } else {
        for (size_t i = 0; i < total; i++) {
            printf("rank %d  ", r[i].rank);
            vt__text_str(stdout, r[i].file);   /* a globbed name is anyone's */
            putchar('\n');
            if (!r[i].dev) {
                printf("  no device memory recorded\n");
                continue;
            }
            char wall[64];
            printf("  allocated: peak %s at %.3f s (%s), now %s\n",
                   vt__fmt_bytes(r[i].peak_alloc, b1), rel_s(&r[i], r[i].peak_alloc_time),
                   wall_text(wall_ns(&r[i], r[i].peak_alloc_time), wall, sizeof wall),
                   vt__fmt_bytes(r[i].final_alloc, b2));
            printf("  reserved:  peak %s at %.3f s, now %s\n", vt__fmt_bytes(r[i].peak_resv, b1),
                   rel_s(&r[i], r[i].peak_resv_time), vt__fmt_bytes(r[i].final_resv, b2));
        }
        printf("spread of peak allocated: %s (rank %d) .. %s (rank %d), +%s\n",
               vt__fmt_bytes(r[lo_a].peak_alloc, b1), r[lo_a].rank,
               vt__fmt_bytes(r[hi_a].peak_alloc, b2), r[hi_a].rank,
               vt__fmt_bytes(r[hi_a].peak_alloc - r[lo_a].peak_alloc, b3));
        printf("spread of peak reserved:  %s (rank %d) .. %s (rank %d), +%s\n",
               vt__fmt_bytes(r[lo_r].peak_resv, b1), r[lo_r].rank,
               vt__fmt_bytes(r[hi_r].peak_resv, b2), r[hi_r].rank,
               vt__fmt_bytes(r[hi_r].peak_resv - r[lo_r].peak_resv, b3));
        printf("call sites whose bytes at the peak differ most between ranks:\n");
        size_t shown = 0;
        for (size_t k = 0; k < nshow; k++) {
            if (!sites[k].spread)
                break;
            printf("  +%-10s %s  ", vt__fmt_bytes(sites[k].spread, b1), sites[k].name);
            for (size_t i = 0; i < total; i++)
                printf("%s rank %d: %s", i ? "," : "", r[i].rank,
                       vt__fmt_bytes(sites[k].bytes[i], b2));
            printf("\n");
            shown++;
        }
        if (!shown)
            printf("  none: every call site holds the same bytes on every rank\n");
        vt__growth_print(stdout, growth, (size_t)top);
    }
    status = 0;
out:
    if (r)
        for (size_t i = 0; i < total; i++) {
            vt__timeline_free(r[i].tl);
            vt__snapshot_free(r[i].s);
        }
    free(r);
    free(gr);
    vt__growth_free(growth);
    free_sites(ss.v, ss.n);
    free(ss.index);
    free(files);
    if (globbed)
        globfree(&g);
    return status;
}
