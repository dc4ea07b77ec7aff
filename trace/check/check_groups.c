/*
 * trace/check/check_groups.c - findings grouped by cause (the report's "N
 * findings from M causes", the JSON's "groups").
 *
 * One bug leaks one storage per step, each its own finding; the user wants
 * the bug. Findings group by rule, owner line (the line that made the
 * tensor, whichever op of it) and the holder their first path reaches it
 * through: the path with its indices, ids and ops blanked, its runs of
 * autograd nodes made one hop (one graph kept alive reaches its tensors
 * through chains of any length), up to the first container after its first
 * hop (an optimizer's state keeps exp_avg and exp_avg_sq of one parameter
 * under two keys; a list of model outputs keeps logits as items and a
 * key/value cache as fields of a cache object: one cause each), without the
 * root a walk came in by where the holder is an object's attribute (the
 * step method's `self`, main's `trainer`: one list). A finding with no
 * holder recorded (made after the last walk) joins the group of its rule
 * and line that has one; one whose chain into a graph has no root, the
 * graph group of its rule and line that names one. Growth findings, and
 * storages no tensor names, group by the program's line they were
 * allocated under, or by the call of the program they were kept under
 * (under_stack: check_kept_call.c).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* "kept[12] → tensor #40 → storage 0x5000 8 MiB" -> "kept[*] → tensor #*". */
static void normalize_path(const char *in, char *out, size_t len)
{
    size_t o = 0;
    int in_brackets = 0, after_hash = 0, in_quotes = 0;   /* names and keys stay as they are */
    const char *end = strstr(in, " \xe2\x86\x92 storage 0x");
    for (const char *c = in; *c && (!end || c < end) && o + 1 < len; c++) {
        int digit = *c >= '0' && *c <= '9';
        if (*c == '\'')
            in_quotes = !in_quotes;
        else if (*c == '[' && !in_quotes)
            in_brackets = 1;
        else if (*c == ']' && !in_quotes)
            in_brackets = 0;
        if (digit && !in_quotes && (in_brackets || after_hash)) {
            if (!o || out[o - 1] != '*')
                out[o++] = '*';
            continue;
        }
        after_hash = *c == '#';
        out[o++] = *c;
    }
    out[o] = 0;
}

/* "h = model(x) (train.py:40, aten.relu out[0])" -> "h = model(x) (train.py:40)":
 * the ops one line made are one cause. In place, over every tensor name. */
static void drop_ops(char *s)
{
    /* track()'s names end "(FILE:LINE, WHAT)" whatever the op's namespace
     * ("aten.relu out[0]", "backward: aten.mm out[0]", a custom op's): the
     * ", WHAT" after a line number goes */
    for (char *p = s; *p; p++) {
        if (*p != ':' || !isdigit((unsigned char)p[1]))
            continue;
        char *q = p + 1;
        while (isdigit((unsigned char)*q))
            q++;
        if (q[0] != ',' || q[1] != ' ')
            continue;
        /* to the ")" that closes it: WHAT may hold parentheses of its own
         * ("tensor (32, 64, 65) float32, made where no op showed it") */
        char *close = q;
        for (int depth = 0; *close; close++) {
            if (*close == '(')
                depth++;
            else if (*close == ')' && depth-- == 0)
                break;
        }
        if (*close)
            memmove(q, close, strlen(close) + 1);
    }
}

/* "A → B.next_functions[*] → C.next_functions[*] → D" -> "A → (autograd nodes) → D". */
static void collapse_autograd(char *s)
{
    static const char arrow[] = " \xe2\x86\x92 ", hop[] = ".next_functions[*]";
    size_t cap = strlen(s) + 1;   /* never longer: "(autograd nodes)" is shorter than a hop */
    char *out = malloc(cap);
    if (!out)
        return;
    size_t o = 0;
    int in_run = 0;
    for (char *p = s; *p;) {
        char *next = strstr(p, arrow);
        size_t n = next ? (size_t)(next - p) : strlen(p);
        int is_hop = n >= sizeof hop - 1 && !strncmp(p + n - (sizeof hop - 1), hop, sizeof hop - 1);
        if (!(is_hop && in_run)) {
            const char *text = is_hop ? "(autograd nodes)" : p;
            size_t tn = is_hop ? strlen(text) : n;
            if (o && o + sizeof arrow < cap) {
                memcpy(out + o, arrow, sizeof arrow - 1);
                o += sizeof arrow - 1;
            }
            if (o + tn < cap) {
                memcpy(out + o, text, tn);
                o += tn;
            }
        }
        in_run = is_hop;
        p = next ? next + sizeof arrow - 1 : p + n;
    }
    out[o] = 0;
    memcpy(s, out, o + 1);
    free(out);
}

/* A hop into a container ("list[*]", "dict['exp_avg']",
 * "defaultdict.key <Parameter>"), not an object's own reference. */
static int container_hop(const char *seg, size_t n)
{
    static const char key[] = ".key ";
    if (n && seg[n - 1] == ']')
        return 1;
    for (size_t i = 0; i + sizeof key - 1 <= n; i++)
        if (!memcmp(seg + i, key, sizeof key - 1))
            return 1;
    return 0;
}

/* "P → Trainer.opt → Adam.state → defaultdict[<Parameter>] → dict['exp_avg'] → tensor 't'"
 * -> "P → Trainer.opt → Adam.state": the path up to the first container after its
 * first hop (what holds the collection), or without the tensor it ends at where no
 * container holds it; "" for a path that is the tensor alone (no holder recorded).
 * Each step's model output kept in a list reaches its logits through the output's
 * items and its key/value cache through the cache object's fields: both are
 * "history → list[*] → ...", one cause. In place. */
static void holder_root(char *s)
{
    static const char arrow[] = " \xe2\x86\x92 ";
    char *cut[CK_GROUP_KEY_MAX / 4];   /* where each hop after the first begins (its arrow) */
    size_t n = 0;
    for (char *p = strstr(s, arrow); p && n < sizeof cut / sizeof *cut; p = strstr(p + 1, arrow))
        cut[n++] = p;
    if (!n) {          /* one hop: the tensor itself, or a holder whose tensor was cut off */
        if (!strncmp(s, "tensor '", 8))
            s[0] = 0;
        return;
    }
    for (size_t i = 0; i + 1 < n; i++) {   /* the hops between the first and the tensor */
        char *seg = cut[i] + sizeof arrow - 1;
        if (container_hop(seg, (size_t)(cut[i + 1] - seg))) {
            *cut[i] = 0;
            return;
        }
    }
    *cut[n - 1] = 0;   /* no container: the holder of the tensor itself */
}

/* The text of an object's attribute hop: "Trainer.preds", a type's name, a
 * dot, the attribute's (no space: not "tensor 'x'.grad_fn", "function f";
 * no subscript: not "list[*]"). */
static int attribute_hop(const char *seg, size_t n)
{
    size_t i = 0;
    if (!n || !(isalpha((unsigned char)seg[0]) || seg[0] == '_'))
        return 0;
    while (i < n && (isalnum((unsigned char)seg[i]) || seg[i] == '_'))
        i++;
    if (i + 1 >= n || seg[i] != '.')
        return 0;
    for (i++; i < n; i++)
        if (!(isalnum((unsigned char)seg[i]) || seg[i] == '_'))
            return 0;
    return 1;
}

/* "frame local 'self' in _run_batch trainer.py:107 → Trainer.preds → list[*]"
 * -> "Trainer.preds → list[*]": where the holder is an object's attribute,
 * the root a walk came in by (the frame running then, a module's global) is
 * not the cause. A walk during a step reaches the trainer through the step
 * method's `self`, one after it through main's `trainer`: one list (minGPT's
 * trainer keeping each step's predictions read as two causes). A root that
 * holds the container itself (a local list, a module's global dict) stays.
 * In place. */
static void drop_entry_root(char *s)
{
    static const char arrow[] = " \xe2\x86\x92 ";
    if (strncmp(s, "frame local '", 13) && strncmp(s, "module ", 7))
        return;
    char *next = strstr(s, arrow);
    if (!next)
        return;
    char *seg = next + sizeof arrow - 1;
    char *end = strstr(seg, arrow);
    if (attribute_hop(seg, end ? (size_t)(end - seg) : strlen(seg)))
        memmove(s, seg, strlen(seg) + 1);
}

size_t vt__check_finding_holder(const vt__check_finding *x, char *buf, size_t len)
{
    if (!len)
        return 0;
    buf[0] = 0;
    if (!x->npaths)
        return 0;
    /* Whole until its autograd nodes are one hop: a graph kept across
     * batches is thousands of them, and a chain cut first lost its end and
     * read "(autograd nodes) → ThnnFusedLstmCellBackward0.n" (a cut
     * ".next_functions[2]"), for every cause of a word_language_model. */
    size_t need = vt__check_path_format(&x->paths[0], NULL, 0);
    char *path = malloc(need + 1), *norm = malloc(need + 1);
    if (path && norm) {
        vt__check_path_format(&x->paths[0], path, need + 1);
        normalize_path(path, norm, need + 1);
        drop_ops(norm);
        collapse_autograd(norm);
        snprintf(buf, len, "%s", norm);
    }
    free(path);
    free(norm);
    return strlen(buf);
}

/* "H → list[*] → tensor 'loss'.grad_fn → (autograd nodes) → MmBackward0.SavedTensor
 * 'self' of MmBackward0 → tensor 't'" -> "H → list[*] → tensor 'loss'.grad_fn": a
 * path that reaches its tensor through an autograd graph, up to the hop into the
 * graph (its tensor's grad_fn, a node's saved tensors); 0 (s untouched) for a path
 * that does not. One graph kept alive keeps the tensors of every line of its
 * forward, each a finding: one cause. In place. */
static int graph_root(char *s)
{
    static const char arrow[] = " \xe2\x86\x92 ";
    static const char *const into[] = {".grad_fn", ".SavedTensor ", "(autograd nodes)"};
    for (char *seg = s; seg;) {
        char *next = strstr(seg, arrow);
        size_t n = next ? (size_t)(next - seg) : strlen(seg);
        for (size_t i = 0; i < sizeof into / sizeof *into; i++) {
            char *at = memmem(seg, n, into[i], strlen(into[i]));
            if (!at)
                continue;
            if (i == 0)                 /* keep the tensor whose graph it is */
                seg[n] = 0;
            else if (seg == s)          /* the path starts inside a graph: no root */
                return 0;
            else                        /* up to the hop before the graph */
                seg[-(long)(sizeof arrow - 1)] = 0;
            return 1;
        }
        seg = next ? next + sizeof arrow - 1 : NULL;
    }
    return 0;
}

static uint64_t line_hash(const char *owner)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *c = (const unsigned char *)owner; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    return h;
}

/* The key of x's group, what the report shows of it (its path in full), and
 * its owner line's hash (the group's lines). */
static void group_key(const vt__snapshot_data *s, const vt__check_finding *x, char *key,
                      char *shown, size_t len, uint64_t *line)
{
    char norm[CK_GROUP_KEY_MAX], owner[CK_GROUP_KEY_MAX], root[CK_GROUP_KEY_MAX];
    vt__check_finding_holder(x, norm, sizeof norm);
    memcpy(root, norm, sizeof root);
    int in_graph = graph_root(root);
    if (!in_graph)
        holder_root(root);
    drop_entry_root(root);
    snprintf(owner, sizeof owner, "%s", x->owner_name ? x->owner_name : "");
    drop_ops(owner);
    *line = line_hash(owner);
    const char *rule = vt__check_rule_name(x->rule);
    /* A growth finding is its call site already, and a storage no tensor
     * names (a trace without track(): never-freed, outlier, growth) is
     * known by its call site only: one group per line of the program's own
     * code it was allocated under (one line's model call allocates at every
     * layer's op: one cause, as track() names them all by that line; an
     * LSTM's graph kept across batches grows at four of its ops), else per
     * allocation stack (after a third separator, which group_parts drops). */
    int unnamed = !x->owner_name || !*x->owner_name;
    /* a loop's kept blocks (check_loop_kept.c): by the call that ran the
     * loop, whatever tensors were on them */
    int by_site = x->rule == VT_CHECK_RULE_GROWTH || unnamed || x->loop_visits;
    const vt__frame *own = by_site ? vt__snapshot_user_frame(s, x->alloc_stack) : NULL;
    /* Call sites kept under one call of the program (check_kept_call.c):
     * that call's group, its lines those the sites allocated at. */
    if (own && x->under_stack)
        *line = vt__mix64((uint64_t)own->file << 32 | own->line);
    /* One holder keeps the tensors of several lines (an output object kept
     * whole: its logits, its loss, its cache): one cause, whatever made
     * them. Without a holder, its line's group (see vt__ck_group_findings). */
    int n = own && x->under_stack
                     ? snprintf(key, len, "%s\x1f\x1f\x1funder %016" PRIx64, rule,
                                vt__snapshot_python_path(s, x->under_stack))
            : own    ? snprintf(key, len, "%s\x1f\x1f\x1fline %s:%u", rule,
                                vt__snapshot_string(s, own->file), own->line)
            : by_site  ? snprintf(key, len, "%s\x1f\x1f\x1fstack %u", rule, x->alloc_stack)
            : in_graph ? snprintf(key, len, "%s\x1f\x1egraph\x1f%s", rule, root)
            : *root    ? snprintf(key, len, "%s\x1f\x1eheld\x1f%s", rule, root)
                       : snprintf(key, len, "%s\x1f%s\x1f", rule, owner);
    if (n < 0 || (size_t)n >= len)
        key[len - 1] = 0;   /* cut: a key still, the prefix of a long path */
    n = snprintf(shown, len, "%s\x1f%s\x1f%s", rule, owner, norm);
    if (n < 0 || (size_t)n >= len)
        shown[len - 1] = 0;
}

/* key's group is of the kind ``what`` ("graph": graph_root's; "held": one
 * holder's), whose tensors come from several lines; NULL: either. */
static int is_merged_key(const char *key, const char *what)
{
    const char *a = strchr(key, '\x1f');
    return a && a[1] == '\x1e' && (!what || !strncmp(a + 2, what, strlen(what)));
}

static int is_graph_key(const char *key)
{
    return is_merged_key(key, "graph");
}

/* What follows the second separator of a group's key or shown text ("" when
 * a cut key has none). */
static const char *third_part(const char *s)
{
    const char *a = strchr(s, '\x1f');
    const char *b = a ? strchr(a + 1, '\x1f') : NULL;
    return b ? b + 1 : "";
}

/* key's group has no holder: its path part is empty. */
static int key_without_holder(const char *key)
{
    const char *b = strrchr(key, '\x1f');
    return b && !b[1];
}

/* A group whose holder chain starts inside an autograd graph, or was cut
 * before its root ("…"), or a graph's whose root is a tensor nothing
 * recorded holds (held from C++): the walk reached its tensors from a node
 * or a tensor nothing named holds, where another chain of the same graph
 * found the root. */
static int key_without_root(const char *key)
{
    const char *path = third_part(key);
    return !strncmp(path, "\xe2\x80\xa6 ", 4) || !strncmp(path, "(autograd nodes)", 16) ||
           (is_graph_key(key) && !strncmp(path, "tensor '", 8));
}

static int group_cmp_bytes(const void *a, const void *b)
{
    const ck_group *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Line hash h among grp's lines, if not there and there is room. */
static void add_line(ck_group *grp, uint64_t h)
{
    for (size_t i = 0; i < grp->nlines; i++)
        if (grp->lines[i] == h)
            return;
    if (grp->nlines < CK_GROUP_LINES_MAX)
        grp->lines[grp->nlines++] = h;
}

/* src's lines counted in dst too. */
static void merge_lines(ck_group *dst, const ck_group *src)
{
    for (size_t i = 0; i < src->nlines; i++)
        add_line(dst, src->lines[i]);
}

/* Group k counted in group j, its lines too; k left empty. */
static void join(ck_group *g, uint32_t *into, size_t k, size_t j)
{
    into[k] = (uint32_t)j;
    g[j].count += g[k].count;
    g[j].bytes += g[k].bytes;
    g[j].held_bytes += g[k].held_bytes;
    merge_lines(&g[j], &g[k]);
    g[k].count = 0;
}

/* Where a later finding of a group reaches it through another key of the
 * same container ("GAT._modules → dict['gat1'] → GraphAttentionLayer.attention_log"
 * and its dict['gat2']: one line keeps each layer's attention maps, one
 * cause), the group's shown path says "dict[*]" there, as a list's index
 * reads "list[*]": the first finding's key alone read as if one layer kept
 * them. Only paths of as many hops; other hops keep the first's text. In
 * place, on the path part of ``shown`` (after its second separator). */
static void blend_shown(char *shown, const char *other)
{
    static const char arrow[] = " \xe2\x86\x92 ";
    const char *a = third_part(shown), *b = third_part(other);
    char out[CK_GROUP_KEY_MAX];
    size_t o = 0;
    int changed = 0;
    while (*a && *b) {
        const char *an = strstr(a, arrow), *bn = strstr(b, arrow);
        if (!an != !bn)
            return;                          /* hops of another number */
        size_t la = an ? (size_t)(an - a) : strlen(a), lb = bn ? (size_t)(bn - b) : strlen(b);
        const char *open = memchr(a, '[', la);
        size_t head = open ? (size_t)(open - a) : 0;
        int blank = (la != lb || memcmp(a, b, la)) && open && container_hop(a, la) &&
                    container_hop(b, lb) && head < lb && !memcmp(a, b, head + 1) &&
                    strncmp(a + head, "[*]", 3) != 0;
        const char *text = a;
        size_t n = la;
        if (blank) {
            text = "[*]";
            n = 3;
            if (o + head < sizeof out) {
                memcpy(out + o, a, head);
                o += head;
            }
            changed = 1;
        }
        if (o + n + sizeof arrow >= sizeof out)
            return;
        memcpy(out + o, text, n);
        o += n;
        if (an) {
            memcpy(out + o, arrow, sizeof arrow - 1);
            o += sizeof arrow - 1;
        }
        a = an ? an + sizeof arrow - 1 : a + la;
        b = bn ? bn + sizeof arrow - 1 : b + lb;
    }
    if (!changed || *a || *b)
        return;
    out[o] = 0;
    char *path = (char *)third_part(shown);
    if ((size_t)(path - shown) + o < CK_GROUP_KEY_MAX)
        memcpy(path, out, o + 1);
}

/* The groups of r's findings, largest bytes first, and each finding's group
 * in group_of (when not NULL); NULL when out of memory. */
ck_group *vt__ck_group_findings(const vt__check_report *r, const vt__snapshot_data *s,
                                size_t *ngroups, uint32_t *group_of)
{
    *ngroups = 0;
    size_t ng = 0, cap = 16;
    ck_group *g = malloc(cap * sizeof *g);
    uint32_t *of = malloc((r->nfindings ? r->nfindings : 1) * sizeof *of);
    char *key = malloc(CK_GROUP_KEY_MAX), *shown = malloc(CK_GROUP_KEY_MAX);
    uint32_t *into = NULL, *order = NULL;
    ck_group *sorted = NULL;
    if (!g || !of || !key || !shown)
        goto out;
    for (size_t i = 0; i < r->nfindings; i++) {
        const vt__check_finding *x = &r->findings[i];
        uint64_t line;
        group_key(s, x, key, shown, CK_GROUP_KEY_MAX, &line);
        size_t k = 0;
        while (k < ng && strcmp(g[k].key, key) != 0)
            k++;
        if (k == ng) {
            if (ng == cap) {
                ck_group *more = realloc(g, 2 * cap * sizeof *g);
                if (!more)
                    goto out;
                g = more;
                cap *= 2;
            }
            memcpy(g[k].key, key, CK_GROUP_KEY_MAX);
            memcpy(g[k].shown, shown, CK_GROUP_KEY_MAX);
            g[k].first = i;
            g[k].count = 0;
            g[k].bytes = 0;
            g[k].held_bytes = 0;
            g[k].nlines = 0;
            ng++;
        } else {
            blend_shown(g[k].shown, shown);
        }
        g[k].count++;
        g[k].bytes += x->bytes;
        g[k].held_bytes += vt__check_held_bytes(x);
        add_line(&g[k], line);
        of[i] = (uint32_t)k;
    }
    into = malloc((ng ? ng : 1) * sizeof *into);
    order = malloc((ng ? ng : 1) * sizeof *order);
    sorted = malloc((ng ? ng : 1) * sizeof *sorted);
    if (!into || !order || !sorted) {
        free(sorted);
        sorted = NULL;
        goto out;
    }
    /* A group with no holder joins its rule's and line's group that has one
     * (shown by that group's first finding: it has a holder to show); one
     * whose chain has no root joins its rule's graph group with its line
     * whose chain has one (an LSTM's graph kept across batches reached its
     * cells' saved gates from a node, the hidden state's output, and a
     * tensor whose holder the walk cut: one graph, one cause). */
    for (size_t k = 0; k < ng; k++) {
        into[k] = (uint32_t)k;
        int rootless = !key_without_holder(g[k].key) && key_without_root(g[k].key);
        if (!key_without_holder(g[k].key) && !rootless)
            continue;
        size_t rule_owner = strlen(g[k].key);    /* "rule \x1f owner \x1f" */
        size_t rule_len = strcspn(g[k].key, "\x1f") + 1;
        for (size_t j = 0; j < ng; j++) {
            if (j == k || !g[j].count || key_without_holder(g[j].key) ||
                (rootless && (!is_graph_key(g[j].key) || key_without_root(g[j].key))))
                continue;
            /* its rule and line's group, or a graph's or holder's group of its
             * rule with its line */
            int same = !rootless && !strncmp(g[j].key, g[k].key, rule_owner);
            if (!same && is_merged_key(g[j].key, NULL) && !strncmp(g[j].key, g[k].key, rule_len))
                for (size_t l = 0; l < g[j].nlines && l < CK_GROUP_LINES_MAX && !same; l++)
                    same = g[j].lines[l] == g[k].lines[0];
            if (!same)
                continue;
            join(g, into, k, j);
            break;
        }
        /* no root named anywhere: the rootless chains of its rule and line
         * into one graph (its cells' saved input and hidden gates) are one */
        for (size_t j = 0; rootless && g[k].count && j < k; j++) {
            if (!g[j].count || !key_without_root(g[j].key) || !g[j].nlines ||
                g[j].lines[0] != g[k].lines[0] || strncmp(g[j].key, g[k].key, rule_len))
                continue;
            join(g, into, k, j);
        }
    }
    /* The tensors a list keeps are one cause with the graphs they keep: a
     * group held by "H → list[*] → tensor 'loss'" (those tensors themselves)
     * joins the graph group of "H → list[*] → tensor 'loss'.grad_fn". */
    for (size_t k = 0; k < ng; k++) {
        if (!g[k].count || is_graph_key(g[k].key) || key_without_holder(g[k].key))
            continue;
        char path[CK_GROUP_KEY_MAX];   /* without its entry root, as the graph keys are */
        snprintf(path, sizeof path, "%s", third_part(g[k].shown));
        drop_entry_root(path);
        size_t rule_len = strcspn(g[k].key, "\x1f") + 1, plen = strlen(path);
        if (!plen)
            continue;
        for (size_t j = 0; j < ng; j++) {
            if (j == k || !g[j].count || !is_graph_key(g[j].key) ||
                strncmp(g[j].key, g[k].key, rule_len))
                continue;
            const char *root = third_part(g[j].key);
            if (strncmp(root, path, plen) || strcmp(root + plen, ".grad_fn"))
                continue;
            join(g, into, k, j);
            break;
        }
    }
    size_t kept = 0;
    for (size_t k = 0; k < ng; k++)
        if (g[k].count)
            order[kept++] = (uint32_t)k;
    /* Largest bytes first, ties by first finding: insertion sort, few groups. */
    for (size_t a = 1; a < kept; a++)
        for (size_t b = a; b > 0 && group_cmp_bytes(&g[order[b]], &g[order[b - 1]]) < 0; b--) {
            uint32_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    for (size_t k = 0; k < kept; k++)
        sorted[k] = g[order[k]];
    /* A finding's group: the one its own went into, found in `sorted` by its
     * first finding (each group's own). */
    if (group_of)
        for (size_t i = 0; i < r->nfindings; i++) {
            size_t first = g[into[of[i]]].first, at = 0;
            while (at + 1 < kept && sorted[at].first != first)
                at++;
            group_of[i] = (uint32_t)at;
        }
    *ngroups = kept;
out:
    free(g), free(of), free(into), free(order), free(key), free(shown);
    return sorted;
}

ck_group *vt__ck_groups_with_older(const vt__check_report *r, const vt__snapshot_data *s,
                                   size_t *ng, uint64_t **older, uint32_t *group_of)
{
    uint32_t *of = group_of ? group_of : malloc((r->nfindings ? r->nfindings : 1) * sizeof *of);
    ck_group *g = of ? vt__ck_group_findings(r, s, ng, of) : NULL;
    *older = g ? calloc(2 * (*ng ? *ng : 1), sizeof **older) : NULL;
    if (!*older) {
        free(g);
        g = NULL;
    }
    for (size_t i = 0; g && i < r->nfindings; i++)
        if (of[i] < *ng) {
            (*older)[of[i]] += r->findings[i].older_alive;
            (*older)[*ng + of[i]] += r->findings[i].older_alive_bytes;
        }
    if (of != group_of)
        free(of);
    return g;
}

long vt__check_report_groups(const vt__check_report *r, const vt__snapshot_data *s,
                             uint32_t *group_of)
{
    size_t ng = 0;
    ck_group *g = vt__ck_group_findings(r, s, &ng, group_of);
    if (!g)
        return -ENOMEM;
    free(g);
    return (long)ng;
}

/* The key's parts: rule, owner, path (pointers into a copy). */
void vt__ck_group_parts(const ck_group *grp, char *copy, size_t len, const char **rule,
                       const char **owner, const char **path)
{
    snprintf(copy, len, "%s", grp->shown);
    *rule = copy;
    char *a = strchr(copy, '\x1f');
    char *b = a ? strchr(a + 1, '\x1f') : NULL;
    if (a)
        *a = 0;
    if (b)
        *b = 0;
    char *c = b ? strchr(b + 1, '\x1f') : NULL;
    if (c)
        *c = 0;
    *owner = a ? a + 1 : "";
    *path = b ? b + 1 : "";
}

const char *vt__ck_group_graph_root(const ck_group *grp, char *buf, size_t len)
{
    if (!is_graph_key(grp->key))
        return NULL;
    /* As the first finding's chain reaches it, the root the walk came in
     * by kept ("frame local 'prog' in run run.py:68 → Program.history →
     * ..."), where that is the key's root; else the key's own. */
    const char *root = third_part(grp->key);
    char bare[CK_GROUP_KEY_MAX];
    snprintf(buf, len, "%s", third_part(grp->shown));
    if (graph_root(buf)) {
        snprintf(bare, sizeof bare, "%s", buf);
        drop_entry_root(bare);
        if (!strcmp(bare, root))
            return buf;
    }
    snprintf(buf, len, "%s", root);
    return buf;
}
