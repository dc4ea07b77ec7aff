/*
 * trace/record/symindex.c - address -> symbol for one module, by binary search.
 *
 * libdwfl's dwfl_module_addrinfo() scans the module's whole symbol table on
 * every call (elfutils' dwfl_module_addrsym.c: search_table over every
 * entry). For libtorch_cpu.so, hundreds of thousands of symbols, a
 * snapshot of a PyTorch process spent seconds there: one scan per unique
 * return address. This index reads the table once per module (per
 * snapshot), sorted by address, and answers each address by a binary search
 * plus a short walk back over the symbols that may contain it.
 *
 * It gives the name libdwfl would: among the sized symbols containing the
 * address it applies libdwfl's preference (globals and weaks first, locals
 * only when none of those contains it; then the closest start, the stronger
 * binding, the tighter size, as try_sym_value does, in symbol table order).
 * Where no sized symbol contains the address (an assembly label without a
 * size, the gap between functions), or a sizeless global sits exactly at
 * it, it asks dwfl_module_addrinfo itself, whose sizeless-symbol rules
 * depend on sections: rare, and exact.
 * tests/trace/test_stacks.c compares the two on every function of the
 * modules a test process has loaded.
 */
#include "rec_snap.h"

#include "addr_sort.h"
#include "bsearch.h"
#include "order.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>

/* Without the name: asked of libdwfl by ndx for the one symbol a lookup
 * answers. */
typedef struct sym_entry {
    uint64_t addr;         /* the symbol's address in the process */
    uint64_t size;
    uint64_t end_max;      /* max(addr + size) over this entry and those before it */
    uint32_t ndx;          /* index in the symbol table: libdwfl's tie order */
    uint8_t bind;          /* libdwfl's binding_value: global 3, weak 2, local 1 */
} sym_entry;

struct vt__symindex {
    sym_entry *syms;
    size_t n;
    uint64_t *sizeless;    /* addresses of the global and weak sizeless symbols */
    size_t nsizeless;
};

/* The longest walk back from the address before handing the lookup to
 * libdwfl: past it, a symbol spanning many others covers the address
 * (never seen for code). */
enum { MAX_WALK = 4096 };

static uint8_t binding_value(const GElf_Sym *s)
{
    switch (GELF_ST_BIND(s->st_info)) {
    case STB_GLOBAL: return 3;
    case STB_WEAK: return 2;
    case STB_LOCAL: return 1;
    default: return 0;
    }
}

/* The entries, read in table order, in address order (equal addresses in
 * table order: libdwfl's tie order) by addr_sort.h's radix sort: glibc's
 * qsort, a comparison call a step, was two thirds of the index's build for
 * libtorch_cpu.so's hundreds of thousands of symbols (perf of `vramtrace
 * run` on a program that only imports torch: 3.8% of all its samples, 0.9%
 * after). -ENOMEM: the entries are left as they were. */
static int sort_by_addr(sym_entry **entries, size_t n)
{
    vt__addr_key *keys = malloc(2 * n * sizeof *keys + 1);
    sym_entry *sorted = malloc(n * sizeof *sorted + 1);
    if (!keys || !sorted) {
        free(keys);
        free(sorted);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (vt__addr_key){ (*entries)[i].addr, (uint32_t)i };
    const vt__addr_key *order = vt__addr_keys_sort(keys, keys + n, n);
    for (size_t i = 0; i < n; i++)
        sorted[i] = (*entries)[order[i].idx];
    free(keys);
    free(*entries);
    *entries = sorted;
    return 0;
}

vt__symindex *vt__symindex_build(Dwfl_Module *mod)
{
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1)
        return NULL;
    vt__symindex *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->syms = malloc((size_t)n * sizeof *ix->syms)) ||
        !(ix->sizeless = malloc((size_t)n * sizeof *ix->sizeless))) {
        vt__symindex_free(ix);
        return NULL;
    }
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        GElf_Word shndx = 0;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, NULL, NULL);
        /* the entries search_table() considers */
        if (!name || !name[0] || sym.st_shndx == SHN_UNDEF ||
            GELF_ST_TYPE(sym.st_info) == STT_SECTION || GELF_ST_TYPE(sym.st_info) == STT_FILE ||
            GELF_ST_TYPE(sym.st_info) == STT_TLS)
            continue;
        if (sym.st_size == 0) {   /* only ever a sizeless candidate: libdwfl decides */
            if (GELF_ST_BIND(sym.st_info) != STB_LOCAL)
                ix->sizeless[ix->nsizeless++] = addr;
            continue;
        }
        ix->syms[ix->n++] = (sym_entry){ .addr = addr, .size = sym.st_size,
                                         .ndx = (uint32_t)i, .bind = binding_value(&sym) };
    }
    if (sort_by_addr(&ix->syms, ix->n) < 0) {   /* no index: libdwfl answers each lookup */
        vt__symindex_free(ix);
        return NULL;
    }
    qsort(ix->sizeless, ix->nsizeless, sizeof *ix->sizeless, vt__qsort_u64);
    uint64_t end_max = 0;
    for (size_t i = 0; i < ix->n; i++) {
        uint64_t end = ix->syms[i].addr + ix->syms[i].size;
        end_max = end > end_max ? end : end_max;
        ix->syms[i].end_max = end_max;
    }
    return ix;
}

void vt__symindex_free(vt__symindex *ix)
{
    if (ix) {
        free(ix->syms);
        free(ix->sizeless);
        free(ix);
    }
}

/* Does `s` replace the best so far (both sized, both containing the
 * address; taken in symbol table order)? libdwfl's preference: a later
 * start, or a stronger binding wherever it starts; at the same start and
 * binding, a tighter size. Otherwise the first one found stays. */
static bool better(const sym_entry *best, const sym_entry *s)
{
    if (best == NULL || best->addr < s->addr || best->bind < s->bind)
        return true;
    return best->addr == s->addr && best->bind == s->bind && s->size < best->size;
}

static int by_ndx(const void *a, const void *b)
{
    const sym_entry *x = *(const sym_entry *const *)a, *y = *(const sym_entry *const *)b;
    return x->ndx < y->ndx ? -1 : x->ndx > y->ndx;
}

static bool sizeless_at(const vt__symindex *ix, uint64_t pc)
{
    size_t at;
    VT__PARTITION_POINT(ix->nsizeless, i, ix->sizeless[i] < pc, at);
    return at < ix->nsizeless && ix->sizeless[at] == pc;
}

const char *vt__symindex_lookup(const vt__symindex *ix, Dwfl_Module *mod, uint64_t pc,
                                uint64_t *offset)
{
    const sym_entry *cands[64];
    size_t nc = 0;
    bool walk_cut = ix == NULL;
    if (ix) {
        size_t lo;   /* the entries before lo start at or below pc */
        VT__PARTITION_POINT(ix->n, i, ix->syms[i].addr <= pc, lo);
        /* back while some entry at or before i still reaches past pc */
        for (size_t i = lo, steps = 0; i-- > 0 && ix->syms[i].end_max > pc;) {
            if (++steps > MAX_WALK || nc == sizeof cands / sizeof cands[0]) {
                walk_cut = true;
                break;
            }
            if (pc - ix->syms[i].addr < ix->syms[i].size)
                cands[nc++] = &ix->syms[i];
        }
    }
    if (!walk_cut && nc > 0) {
        /* search_table's passes over the candidates in table order: the
         * globals and weaks; then, when none contained pc, the locals,
         * unless a sizeless global sits exactly at pc (libdwfl's own
         * sizeless rules then decide: asked below). */
        qsort(cands, nc, sizeof cands[0], by_ndx);
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1 && sizeless_at(ix, pc))
                break;
            const sym_entry *best = NULL;
            for (size_t i = 0; i < nc; i++)
                if ((cands[i]->bind == 1) == (pass == 1) && better(best, cands[i]))
                    best = cands[i];
            if (best) {   /* its name, as read when the index was built */
                GElf_Sym sym;
                GElf_Addr addr = 0;
                *offset = pc - best->addr;
                return dwfl_module_getsym_info(mod, (int)best->ndx, &sym, &addr, NULL, NULL,
                                               NULL);
            }
        }
    }
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(mod, pc, &off, &sym, NULL, NULL, NULL);
    *offset = off;
    return name;
}
