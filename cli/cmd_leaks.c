/*
 * cli/cmd_leaks.c - `vramtrace leaks FILE`: allocations still alive at the
 * snapshot, grouped by allocation stack, largest group first, in the manner
 * of a sanitizer's leak report:
 *
 *   Leak of 64 MiB in 3 allocations from:
 *       #0 0x00000000004011d6 in fwd model.c:42 (/usr/bin/train+0x11d6)
 *       ...
 *     (2 of them allocated before the retained window)
 *
 *   SUMMARY: vramtrace: 72 MiB alive in 5 allocations from 2 stacks.
 *
 * The program's own allocations come first; PyTorch's pinned host cache's
 * blocks after them (kept for reuse: the hooks see the block, not whether a
 * tensor is on it), then the libraries' handles and workspaces (cuBLAS,
 * cuDNN, NCCL: kept and reused by design), each part under a line that
 * says so. `--top N` lists the N largest groups of each.
 *
 * Memory the cache did not serve (managed, pinned host, pitched, arrays,
 * explicit pools, VMM: trace/snap/passthrough.h) is listed the same way, its
 * kind in parentheses ("Leak of 24.0 MiB (managed) in 1 allocation from:"),
 * counted in the SUMMARY total, and named per kind on the line after it.
 *
 * Blocks freed but waiting for stream events (pending frees) are not leaks
 * and are not listed; nor are, in a forked child, the parent's allocations
 * it inherited (counted on one line). Exit status 0 whether or not anything is alive (this is
 * a report, not a check): 2 only when the file cannot be read (commands.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "order.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_LEAKS "\n"
    "\n"
    "Allocations alive at the snapshot, grouped by allocation stack, largest\n"
    "first: the program's own, then PyTorch's pinned host cache's blocks, then\n"
    "the libraries' handles and workspaces (cuBLAS, cuDNN, NCCL). Pending frees\n"
    "(freed, waiting for stream events) are not listed.\n"
    "\n"
    "  --all-frames  every frame: where the program's own Python code is on a\n"
    "                stack only its lines are shown (innermost first); this adds\n"
    "                the libraries' Python frames, the native frames and the\n"
    "                interpreter's\n"
    "  --top N       the N largest groups of each part (default 0: all)\n"
    VT_EXIT_HELP;

#define CACHED_KIND 0xff   /* a block of the cache (struct group.kind) */

/* The parts of the report, in order. */
enum part {
    PART_PROGRAM,            /* the program's own */
    PART_HOST_CACHE,         /* PyTorch's pinned host cache's blocks */
    PART_WORKSPACE,          /* the libraries' handles and workspaces */
};

struct group {
    uint32_t stack;
    uint8_t kind;            /* enum vt__passthrough_kind, or CACHED_KIND */
    uint8_t part;            /* enum part */
    uint64_t bytes, count, before;
};

static size_t top_groups;    /* --top N; 0: all */

static int cmp_stack(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    int c = vt__order(x->kind, y->kind);
    return c ? c : vt__order(x->stack, y->stack);
}

/* The program's groups first, then PyTorch's host cache's, then the
 * libraries' workspaces; largest first. */
static int cmp_bytes(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return vt__report_cmp_bytes(x->bytes, x->stack, y->bytes, y->stack);
}

static void print_group(const vt__snapshot_data *s, const struct group *g, bool has_python)
{
    char b[32];
    printf("Leak of %s", vt__fmt_bytes(g->bytes, b));
    if (g->kind != CACHED_KIND)
        printf(" (%s)", vt__passthrough_kind_name((enum vt__passthrough_kind)g->kind));
    printf(" in %" PRIu64 " allocation%s from:\n", g->count, g->count == 1 ? "" : "s");
    const vt__frame *lib = g->part == PART_WORKSPACE ? vt__report_library_workspace(s, g->stack)
                           : NULL;
    if (lib && !vt__report_all_frames) {
        printf("    the library's: ");
        vt__report_frame_text(stdout, s, lib);
        putchar('\n');
    }
    vt__report_stack(stdout, s, g->stack, "    ");
    if (has_python && vt__report_stack_without_python(s, g->stack))
        printf("  (from a thread running no Python code: no Python frames, e.g. PyTorch's "
               "autograd engine during backward)\n");
    if (g->before == g->count)
        printf("  (allocated before the retained window)\n");
    else if (g->before)
        printf("  (%" PRIu64 " of them allocated before the retained window)\n", g->before);
    putchar('\n');
}

static int view_leaks(const char *path, const vt__snapshot_data *s, const vt__timeline *tl,
                      bool all_frames)
{
    (void)all_frames;   /* read through vt__report_all_frames */
    struct group *g = malloc((tl->nlifetimes + tl->npassthrough + 1) * sizeof *g);
    if (!g) {
        fprintf(stderr, "vramtrace leaks: out of memory\n");
        return VT_EXIT_FAILURE;
    }
    size_t n = 0;
    uint64_t inherited = 0, inherited_bytes = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (!(l->flags & VT_LT_ALIVE))
            continue;   /* freed, pending, or freed where the events do not show it */
        if (l->flags & VT_LT_INHERITED) {    /* the parent's, not this process's */
            inherited++;
            inherited_bytes += l->size;
            continue;
        }
        g[n++] = (struct group){ .stack = l->alloc_stack, .kind = CACHED_KIND, .bytes = l->size,
                                 .count = 1, .before = (l->flags & VT_LT_BEFORE_WINDOW) ? 1 : 0 };
    }
    /* Memory the cache did not serve, each kind apart (passthrough.h). */
    uint64_t kind_bytes[VT_PTK_COUNT] = { 0 };
    for (size_t i = 0; i < tl->npassthrough; i++) {
        const vt__passthrough *u = &tl->passthrough[i];
        if (!u->alive)
            continue;
        if (u->inherited) {
            inherited++;
            inherited_bytes += u->size;
            continue;
        }
        kind_bytes[u->kind] += u->size;
        g[n++] = (struct group){ .stack = u->alloc_stack, .kind = u->kind, .bytes = u->size,
                                 .count = 1 };
    }
    qsort(g, n, sizeof *g, cmp_stack);
    size_t m = 0;
    uint64_t total = 0, count = n;
    for (size_t i = 0; i < n; i++) {
        total += g[i].bytes;
        if (m && g[m - 1].stack == g[i].stack && g[m - 1].kind == g[i].kind) {
            g[m - 1].bytes += g[i].bytes;
            g[m - 1].count++;
            g[m - 1].before += g[i].before;
        } else {
            g[m++] = g[i];
        }
    }
    for (size_t i = 0; i < m; i++)
        g[i].part = vt__report_library_workspace(s, g[i].stack) ? PART_WORKSPACE
                    : g[i].kind == VT_PTK_PINNED_HOST && vt__report_host_cache(s, g[i].stack)
                        ? PART_HOST_CACHE
                        : PART_PROGRAM;
    qsort(g, m, sizeof *g, cmp_bytes);
    char b[32];
    bool has_python = vt__report_snapshot_has_python(s);
    size_t shown = 0, hidden = 0;
    for (size_t i = 0; i < m; i++) {
        if (g[i].part != PART_PROGRAM && (!i || g[i - 1].part != g[i].part)) {
            uint64_t part_bytes = 0;
            for (size_t k = i; k < m && g[k].part == g[i].part; k++)
                part_bytes += g[k].bytes;
            if (g[i].part == PART_HOST_CACHE)
                printf("PyTorch's pinned host memory cache, its blocks kept for reuse (the tensors "
                       "on them are not seen: alive or cached), each at the line whose pinned "
                       "tensor made it: %s\n\n", vt__fmt_bytes(part_bytes, b));
            else
                printf("The libraries' own handles and workspaces (cuBLAS, cuDNN, NCCL), kept and "
                       "reused by design: %s\n\n", vt__fmt_bytes(part_bytes, b));
            shown = 0;
        }
        if (top_groups && shown == top_groups) {
            hidden++;
            continue;
        }
        shown++;
        print_group(s, &g[i], has_python);
    }
    if (hidden)
        printf("(%zu smaller group%s not listed: --top 0 lists all)\n\n", hidden,
               hidden == 1 ? "" : "s");
    if (tl->nfree_unseen)
        printf("(%zu allocation%s without a free among the kept events %s not listed: %s%s)\n\n",
               tl->nfree_unseen, tl->nfree_unseen == 1 ? "" : "s",
               tl->nfree_unseen == 1 ? "is" : "are",
               tl->state_complete ? "the allocator state at the snapshot does not hold "
                                  : "gaps in the events hide ",
               tl->nfree_unseen == 1 ? (tl->state_complete ? "it" : "its fate")
                                     : (tl->state_complete ? "them" : "their fate"));
    if (m)
        printf("SUMMARY: vramtrace: %s alive in %" PRIu64 " allocation%s from %zu stack%s.\n",
               vt__fmt_bytes(total, b), count, count == 1 ? "" : "s", m, m == 1 ? "" : "s");
    else
        printf("SUMMARY: vramtrace: no allocations alive at the snapshot.\n");
    int sep = 0;
    for (int k = 0; k < VT_PTK_COUNT; k++) {
        if (!kind_bytes[k])
            continue;
        printf("%s%s %s", sep ? ", " : "(of which not served by the cache: ",
               vt__passthrough_kind_name((enum vt__passthrough_kind)k), vt__fmt_bytes(kind_bytes[k], b));
        sep = 1;
    }
    if (sep)
        printf(")\n");
    if (inherited)
        printf("(not listed: %s in %" PRIu64 " allocation%s inherited at fork from the parent "
               "process, pid %" PRIu64 ")\n", vt__fmt_bytes(inherited_bytes, b), inherited,
               inherited == 1 ? "" : "s", tl->fork_parent_pid);
    const char *pool = vt__snapshot_pool_note(s);
    if (pool && (s->meta.flags & VT_META_POOL_UNSEEN))
        printf("NOTE: %s.\n", pool);
    free(g);
    return 0;
}

int vt__cmd_leaks(int argc, char **argv)
{
    /* --top N here; the rest as every report command takes it. */
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    if (!rest) {
        fprintf(stderr, "vramtrace leaks: out of memory\n");
        return VT_EXIT_FAILURE;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        if (i > 0 && !strcmp(argv[i], "--top")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vramtrace leaks: --top needs a number\n%s", usage_text);
                free(rest);
                return VT_EXIT_FAILURE;
            }
            v = argv[++i];
        } else if (i > 0 && !strncmp(argv[i], "--top=", 6)) {
            v = argv[i] + 6;
        }
        if (!v) {
            rest[n++] = argv[i];
            continue;
        }
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-' || x > 1000000) {
            fprintf(stderr, "vramtrace leaks: bad --top '%s' (a number of groups, 0: all)\n", v);
            free(rest);
            return VT_EXIT_FAILURE;
        }
        top_groups = (size_t)x;
    }
    rest[n] = NULL;
    int rc = vt__report_run_streamed("leaks", n, rest, usage_text, "--all-frames",
                                     &vt__report_all_frames, 0, view_leaks);
    free(rest);
    return rc;
}
