/*
 * trace/check/check_loop_kept.c - OUTLIER, a loop's allocations kept until
 * it ended (see check.h, "Rules"): in a trace with marks, the blocks freed
 * together (one run of frees, no allocation between them)
 * in the step that made them, made at two lines of Python or more over four
 * runs or more of one call of the program, each run another iteration of a
 * loop around it. That is what an autograd graph chained through a loop
 * leaves in the allocator: an evaluation without torch.no_grad() that sums
 * its losses as a tensor (`total += loss`) keeps every batch's activations
 * until the sum is dropped when the loop ends, where each batch's would die
 * with its iteration; the step's peak grows with the number of batches (the
 * classic out of memory in validation). Freed within their step, the
 * blocks are short-lived to every other rule: "0 findings" under plain
 * `run` and under `run --track` before (its tape rule, which sees it, is
 * opt-in). With tensors the same blocks are judged (the look runs where the
 * rules are chosen or OUTLIER is named; check.c adds OUTLIER, this look
 * alone, where it found something), and the finding names a tensor on
 * them; what held them is gone with the loop, before a walk reached it.
 *
 * Pass 1 (check_model.c) hands over each storage it closes
 * (vt__ck_loop_freed) and each allocation, which ends a run of frees
 * (vt__ck_loop_boundary); a run is judged as it ends, and one that
 * qualifies is kept as a ck_loop (the retired storages keep no record).
 *
 * The iterations are told by the calls of the program the blocks were
 * made under: the innermost one all of them share (the evaluation's
 * `validate()` call) and, inside it, the line each block was made under
 * (`x = next(batches)`, `loss = model(x)`, in turn): a run of blocks under
 * one line is one visit of it. One forward's graph (its layers, however
 * many: all under one line of the call that ran the model) is one visit,
 * and one batch's graph freed at its iteration's end is too. Not one line
 * of Python (the predictions a loop gathers for a metric, on purpose): two
 * at least, as in check_kept_call.c; what a loop keeps on purpose is mostly
 * small, under the floor of minor findings. Where track() recorded the
 * blocks' uses, one line is enough when they say it is a loop's: each
 * run's blocks used for the last time before the next run's were made
 * (made_by_a_loop's by_uses), where results gathered on purpose are read
 * after the loop (made_under_the_loop says which blocks count).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

#define LOOP_MIN_VISITS 4     /* runs of one line inside the call */
#define LOOP_MIN_LINES 2      /* lines of Python the blocks were made at */
#define LOOP_MAX_HELD 4096    /* blocks of a run of frees looked at, at most */
#define LOOP_MAX_FRAMES 64    /* frames of the program per stack looked at */
#define LOOP_MAX_LINES 64     /* lines of Python counted */

typedef struct loop_member {
    ck_storage st;     /* as closed */
    uint64_t bytes;    /* vt__ck_storage_bytes(&st) */
    uint64_t last_use; /* its tensors' last use (UINT64_MAX: none recorded) */
} loop_member;

struct ck_loops {
    /* the run of frees in progress */
    loop_member *held;
    size_t nheld, capheld;
    size_t nmore;               /* members past LOOP_MAX_HELD: counted only */
    uint64_t more_bytes, more_block_bytes;
    ck_storage big;             /* its largest member, as closed */
    size_t nused;               /* members whose tensors' uses were recorded */
    uint32_t free_stack;        /* its first free's stack */
    /* what the program's frames are, asked once */
    uint8_t *user;              /* per frame: vt__snapshot_node_is_user's memo */
    vt__u64map path_of;         /* stack node -> index into path */
    uint64_t *path;
    size_t npath, cappath;
    /* the runs that qualified */
    ck_loop *found;
    size_t nfound, capfound;
};

int vt__ck_loops_init(ck_model *m)
{
    ck_loops *l = calloc(1, sizeof *l);
    if (!l || !(l->user = calloc(m->s->nframes ? m->s->nframes : 1, 1)) ||
        vt__u64map_init(&l->path_of, 256) < 0) {
        if (l)
            free(l->user);
        free(l);
        return -ENOMEM;
    }
    m->loops = l;
    return 0;
}

void vt__ck_loops_free(ck_model *m)
{
    ck_loops *l = m->loops;
    if (!l)
        return;
    free(l->held);
    free(l->user);
    vt__u64map_free(&l->path_of);
    free(l->path);
    free(l->found);
    free(l);
    m->loops = NULL;
}

int vt__ck_loop_freed(ck_model *m, const ck_storage *s, uint32_t free_stack)
{
    ck_loops *l = m->loops;
    /* not a storage closed under a new one at its address (no free seen:
     * no stack), nor host memory */
    if (!l || !free_stack || s->device < 0 || s->external || s->implicit || s->before_window)
        return 0;
    uint32_t step = (uint32_t)m->nmarks;
    if (vt__ck_step_of(m, s->alloc_seq) != step || !step)
        return 0;   /* made in an earlier step (other rules'), or before the first mark */
    if (!l->nheld && !l->nmore)
        l->free_stack = free_stack;   /* its marks end a run: all in one step */
    uint64_t bytes = vt__ck_storage_bytes(s);
    uint64_t big = vt__ck_storage_bytes(&l->big);   /* the largest, the first made of those */
    if (!(l->nheld + l->nmore) || bytes > big ||
        (bytes == big && s->alloc_seq < l->big.alloc_seq))
        l->big = *s;
    if (l->nheld == LOOP_MAX_HELD) {
        l->nmore++;
        l->more_bytes += bytes;
        l->more_block_bytes += s->size;
        return 0;
    }
    if (CK_GROW(l->held, l->capheld, l->nheld + 1) < 0)
        return -ENOMEM;
    /* its tensors' uses (a plain `run` records none) */
    uint64_t last_use = s->nuses ? s->last_use_seq : UINT64_MAX;
    l->nused += last_use != UINT64_MAX;
    l->held[l->nheld++] = (loop_member){ *s, bytes, last_use };
    return 0;
}

size_t vt__ck_loops_found(const ck_model *m)
{
    return m->loops ? m->loops->nfound : 0;
}

/* The call stack node's Python frames as one word (vt__snapshot_python_path),
 * asked once per node; 0 on ENOMEM (no path is 0 but by chance). */
static uint64_t path_at(ck_loops *l, const vt__snapshot_data *s, uint32_t node)
{
    uint32_t k = vt__u64map_get(&l->path_of, node);
    if (k != VT__U64MAP_NONE)
        return l->path[k];
    if (CK_GROW(l->path, l->cappath, l->npath + 1) < 0 ||
        vt__u64map_put(&l->path_of, node, (uint32_t)l->npath) < 0)
        return 0;
    return l->path[l->npath++] = vt__snapshot_python_path(s, node);
}

/* Stack's frames of the program, outermost first, into out (at most
 * LOOP_MAX_FRAMES, the innermost kept); how many. */
static size_t program_frames(ck_loops *l, const vt__snapshot_data *s, uint32_t stack,
                             uint32_t *out)
{
    uint32_t in[LOOP_MAX_FRAMES];
    size_t n = 0;
    for (size_t k = 0; stack && stack < s->nstack_nodes && k < s->nstack_nodes && n < LOOP_MAX_FRAMES;
         k++, stack = s->stack_nodes[stack].parent)
        if (vt__snapshot_node_is_user(s, stack, l->user))
            in[n++] = stack;
    for (size_t i = 0; i < n; i++)
        out[i] = in[n - 1 - i];
    return n;
}

/* Member i ends a visit of the loop's body: its tensors were used for the
 * last time before member i + 1 was made (uses recorded: track()). */
static bool ends_a_visit(const ck_loops *l, size_t i)
{
    return i + 1 < l->nheld && l->held[i].last_use != UINT64_MAX &&
           l->held[i].last_use < l->held[i + 1].st.alloc_seq;
}

/* The innermost call of the program that the held members share (those
 * ending a visit only, where `visit_ends`): its depth, the frames of the
 * first such member down to it in `first`; 0 where none, -ENOMEM. */
static long shared_call_depth(ck_loops *l, const vt__snapshot_data *s, bool visit_ends,
                              uint32_t *first)
{
    uint32_t fr[LOOP_MAX_FRAMES];
    size_t depth = 0, taken = 0;
    for (size_t i = 0; i < l->nheld; i++) {
        if (visit_ends && !ends_a_visit(l, i))
            continue;
        if (!taken++) {
            depth = program_frames(l, s, l->held[i].st.alloc_stack, first);
            continue;
        }
        /* as deep as this member's frames say the same */
        size_t n = program_frames(l, s, l->held[i].st.alloc_stack, fr), d = 0;
        while (d < depth && d < n) {
            uint64_t a = path_at(l, s, first[d]), b = path_at(l, s, fr[d]);
            if (!a || !b)
                return -ENOMEM;
            if (a != b)
                break;
            d++;
        }
        depth = d;
    }
    return (long)depth;
}

/* A frame's line as a key: its file's string and its line. */
static uint64_t line_key(const vt__snapshot_data *s, uint32_t node)
{
    const vt__frame *f = &s->frames[s->stack_nodes[node].frame];
    return (uint64_t)f->file << 32 | f->line;
}

static int cmp_member(const void *a, const void *b)
{
    const loop_member *x = a, *y = b;
    return vt__order(x->st.alloc_seq, y->st.alloc_seq);
}

/* Whether the run held (in allocation order) was made by a loop: two lines
 * of Python or more, and inside the innermost call of the program they all
 * share, one line visited LOOP_MIN_VISITS times or more. `by_uses`: the
 * run's members whose tensors' uses were recorded (track()), one line of
 * Python enough: a visit ends where a member was last used before the next
 * member was made (a forward's activations are used by the layer after
 * them, which makes the next; the last layer's is the iteration's last,
 * before the next iteration's first is made). A loop whose every kept
 * block is made under one line (`out = model(x)`, its data on the device
 * already) is told from one gathering its results on purpose, which are
 * used after the loop (`torch.cat(preds)`). *call: that call's node;
 * *lines, *visits. 0 no, 1 yes, -ENOMEM. */
static int made_by_a_loop(ck_loops *l, const vt__snapshot_data *s, int by_uses,
                          uint32_t *call, uint32_t *lines, uint32_t *visits)
{
    uint64_t seen[LOOP_MAX_LINES];   /* the lines counted, LOOP_MAX_LINES at most */
    size_t nseen = 0;
    for (size_t i = 0; i < l->nheld && nseen < LOOP_MAX_LINES; i++) {
        uint64_t line = vt__snapshot_python_line(s, l->held[i].st.alloc_stack);
        size_t k = 0;
        while (k < nseen && seen[k] != line)
            k++;
        if (line && k == nseen)
            seen[nseen++] = line;
    }
    if (nseen < (by_uses ? 1 : LOOP_MIN_LINES))
        return 0;
    /* the innermost call all share */
    uint32_t first[LOOP_MAX_FRAMES], fr[LOOP_MAX_FRAMES];
    long shared = shared_call_depth(l, s, false, first);
    if (shared <= 0)
        return (int)shared;
    size_t depth = (size_t)shared;
    /* by_uses: where a member was made at the innermost frame all share,
     * that frame is the loop's one line, and the call is the one above it */
    for (size_t i = 0; by_uses && depth >= 2 && i < l->nheld; i++)
        if (program_frames(l, s, l->held[i].st.alloc_stack, fr) == depth) {
            depth--;
            break;
        }
    *call = first[depth - 1];
    *lines = (uint32_t)nseen;
    if (by_uses) {
        uint32_t runs = 1;
        for (size_t i = 0; i + 1 < l->nheld; i++)
            runs += ends_a_visit(l, i);
        *visits = runs;
        return runs >= LOOP_MIN_VISITS;
    }
    /* the line inside it each member was made under, in turn: a run of
     * one line is a visit of it; the line visited most (a loop's body has
     * few lines) */
    uint64_t prev = UINT64_MAX;
    uint32_t best = 0;
    uint64_t keys[16];
    uint32_t nruns[16];
    size_t nkeys = 0;
    for (size_t i = 0; i < l->nheld; i++) {
        size_t n = program_frames(l, s, l->held[i].st.alloc_stack, fr);
        uint64_t key = n > depth ? line_key(s, fr[depth]) : 0;   /* 0: at the call's own line */
        if (key == prev)
            continue;
        prev = key;
        size_t k = 0;
        while (k < nkeys && keys[k] != key)
            k++;
        if (k == nkeys) {
            if (nkeys == 16)
                continue;   /* a seventeenth line inside one call: not a loop's body */
            keys[nkeys] = key;
            nruns[nkeys++] = 0;
        }
        if (++nruns[k] > best)
            best = nruns[k];
    }
    *visits = best;
    return best >= LOOP_MIN_VISITS;
}

/* Of the run held (in allocation order), its members whose uses were
 * recorded and that were made under the call the loop runs in, in their
 * order still, take its place (the run is judged once): the call is the
 * innermost one shared by the members used last before the next member was
 * made (each ends a visit: by_uses in made_by_a_loop). What the loop only
 * read (an evaluation's batches made on the device before it, freed with
 * its graphs as the function returned) was made elsewhere, and is not what
 * it kept. 1: some are left, 0: none, -ENOMEM. */
static int made_under_the_loop(ck_loops *l, const vt__snapshot_data *s)
{
    uint32_t first[LOOP_MAX_FRAMES], fr[LOOP_MAX_FRAMES];
    long shared = shared_call_depth(l, s, true, first);
    if (shared <= 0)
        return (int)shared;
    size_t depth = (size_t)shared;
    uint64_t call = path_at(l, s, first[depth - 1]);
    if (!call)
        return -ENOMEM;
    size_t kept = 0;
    for (size_t i = 0; i < l->nheld; i++) {
        if (l->held[i].last_use == UINT64_MAX)
            continue;
        if (program_frames(l, s, l->held[i].st.alloc_stack, fr) < depth)
            continue;   /* made above the loop's call */
        uint64_t at = path_at(l, s, fr[depth - 1]);
        if (!at)
            return -ENOMEM;
        if (at == call)
            l->held[kept++] = l->held[i];
    }
    l->nheld = kept;
    return kept >= 2 * LOOP_MIN_VISITS;
}

/* The run held (its first `nmore` members past LOOP_MAX_HELD counted too),
 * made by a loop: kept as found, `big` standing for it. 0 or -ENOMEM. */
static int found_loop(ck_loops *l, const ck_storage *big, size_t nmore, uint32_t lines,
                      uint32_t visits, uint32_t call)
{
    if (CK_GROW(l->found, l->capfound, l->nfound + 1) < 0)
        return -ENOMEM;
    ck_loop *c = &l->found[l->nfound++];
    *c = (ck_loop){ .big = *big, .n = (uint32_t)(l->nheld + nmore),
                    .bytes = nmore ? l->more_bytes : 0,
                    .block_bytes = nmore ? l->more_block_bytes : 0,
                    .lines = lines, .visits = visits, .call = call,
                    .first_seq = l->held[0].st.alloc_seq, .first_time = l->held[0].st.alloc_time };
    for (size_t i = 0; i < l->nheld; i++) {
        c->bytes += l->held[i].bytes;
        c->block_bytes += l->held[i].st.size;
        uint64_t held = c->big.free_time > l->held[i].st.alloc_time
                            ? c->big.free_time - l->held[i].st.alloc_time : 0;
        c->byte_seconds += (double)l->held[i].bytes * ((double)held / 1e9);
        if (held > c->longest)
            c->longest = held;
    }
    return 0;
}

/* The run of frees in progress ends: judged, kept where a loop made it. */
int vt__ck_loop_boundary(ck_model *m)
{
    ck_loops *l = m->loops;
    if (!l || !l->nheld)
        return 0;
    int rc = 0;
    const vt__snapshot_data *s = m->s;
    /* at least two visits' worth of blocks, freed where Python runs (not
     * as the interpreter exits) */
    if (l->nheld >= 2 * LOOP_MIN_VISITS && vt__snapshot_python_line(s, l->free_stack)) {
        qsort(l->held, l->nheld, sizeof *l->held, cmp_member);
        uint32_t call = 0, lines = 0, visits = 0;
        rc = made_by_a_loop(l, s, 0, &call, &lines, &visits);
        if (rc == 1) {
            rc = found_loop(l, &l->big, l->nmore, lines, visits, call);
        } else if (rc == 0 && l->nused >= 2 * LOOP_MIN_VISITS) {
            rc = made_under_the_loop(l, s);
            if (rc == 1)
                rc = made_by_a_loop(l, s, 1, &call, &lines, &visits);
            if (rc == 1) {
                size_t big = 0;
                for (size_t i = 1; i < l->nheld; i++)   /* in allocation order */
                    if (l->held[i].bytes > l->held[big].bytes)
                        big = i;
                rc = found_loop(l, &l->held[big].st, 0, lines, visits, call);
            }
        }
    }
    l->nheld = l->nmore = l->nused = 0;
    l->more_bytes = l->more_block_bytes = 0;
    return rc < 0 ? rc : 0;
}

int vt__ck_rule_loop_kept(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                          vt__check_report *r)
{
    ck_loops *l = m->loops;
    for (size_t i = 0; l && i < l->nfound; i++) {
        const ck_loop *c = &l->found[i];
        if (opt->nignore && vt__ck_site_ignored(m, opt, c->big.alloc_stack, c->big.device)) {
            r->nignored += c->n;
            continue;
        }
        vt__check_finding *f = vt__ck_add_finding(fs, CK_NONE);
        if (!f)
            return -ENOMEM;
        vt__ck_fill_storage(f, m, &c->big);
        f->rule = VT_CHECK_RULE_OUTLIER;
        f->nallocs = c->n;
        f->bytes = c->bytes;
        f->block_bytes = c->block_bytes;
        f->kept_lines = c->lines;
        f->loop_visits = c->visits;
        f->under_stack = c->call;
        vt__ck_fill_blocks_held(f, m, c->first_seq, c->first_time, c->longest, c->byte_seconds);
    }
    return 0;
}
