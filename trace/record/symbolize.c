/*
 * trace/record/symbolize.c - instruction pointers to names, at export only.
 *
 * Called once per snapshot with the unique IPs the exported stacks use. Every
 * frame gets its module path, GNU build id and the offset in the module
 * (enough to symbolize offline with the same binaries); where possible also
 * the function name, and file and line where debug info exists. elfutils'
 * libdwfl reads the modules from /proc/self/maps and caches the ELF and DWARF
 * data per module; module path, build id strings and the symbols sorted by
 * address (symindex.c: libdwfl's own lookup scans them all per address) are
 * cached per module here.
 *
 * Recorded IPs are return addresses (the innermost frame we keep is already a
 * caller of ours), so the lookups use ip - 1: the call instruction, which is
 * what the source line should name.
 *
 * Synthetic frames (VT_IP_SYNTHETIC, interned by vt_stack_intern_frames from
 * strings "file:line function", or read from the interpreter by pyframes.c
 * with the function's first line in the IP) become frames with ip 0, module
 * "python".
 */
#include "rec_snap.h"
#include "demangle.h"
#include "grow.h"
#include "user_code.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct modinfo {
    Dwfl_Module *mod;
    uint32_t path;         /* string */
    uint32_t build_id;     /* string */
    Dwarf_Addr bias;       /* load bias: ip - bias = address in the ELF file */
    vt__symindex *syms;    /* its symbols by address (NULL: ask libdwfl) */
} modinfo;

typedef struct symctx {
    vt__demangle_fn demangle;   /* libstdc++'s, when the process has one (demangle.h) */
    Dwfl *dwfl;
    modinfo *mods;
    size_t nmods, capmods;
    vt__strtab *strs;
    uint32_t python;       /* string "python" */
} symctx;

static uint32_t add(symctx *c, const char *s)
{
    uint32_t i = vt__strtab_add(c->strs, s);
    return i == UINT32_MAX ? 0 : i;
}

static modinfo *module_of(symctx *c, Dwfl_Module *mod)
{
    for (size_t i = 0; i < c->nmods; i++)
        if (c->mods[i].mod == mod)
            return &c->mods[i];
    modinfo *m = vt__grow_push((void **)&c->mods, &c->capmods, &c->nmods, sizeof *m);
    if (!m)
        return NULL;
    m->mod = mod;
    Dwarf_Addr bias = 0;
    dwfl_module_getelf(mod, &bias);    /* loads the ELF, so the build id is known */
    m->bias = bias;
    const char *mainfile = NULL;
    const char *name = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &mainfile, NULL);
    m->path = add(c, name ? name : mainfile);
    const unsigned char *bits = NULL;
    GElf_Addr vaddr = 0;
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len > 0 && len <= 64) {
        char hex[129];
        for (int i = 0; i < len; i++)
            snprintf(hex + 2 * i, 3, "%02x", bits[i]);
        m->build_id = add(c, hex);
    }
    m->syms = vt__symindex_build(mod);
    return m;
}

/* "file:line function": the last ":<digits>" followed by a space or the end
 * separates file and line; the rest is the function. */
static void synthetic(symctx *c, uint64_t ip, vt__frame *f)
{
    char text[1024];
    f->ip = 0;
    f->module = c->python;
    f->first_line = (uint32_t)((ip & ~VT_IP_SYNTHETIC) >> VT_IP_FIRST_LINE_SHIFT);
    if (vt__strings_get((uint32_t)ip, text, sizeof text) < 0)
        return;
    char *func = NULL, *colon = NULL;
    for (char *p = text; *p; p++) {
        if (*p != ':' || !(p[1] >= '0' && p[1] <= '9'))
            continue;
        char *q = p + 1;
        while (*q >= '0' && *q <= '9')
            q++;
        if (*q == ' ' || *q == '\0')
            colon = p;
    }
    if (colon) {
        char *q = colon + 1;
        f->line = (uint32_t)strtoul(q, &q, 10);
        if (*q == ' ')
            func = q + 1;
        *colon = '\0';
        f->file = add(c, text);
        /* library code the path rule cannot see, told while its files are here */
        if (vt__source_is_programs(text) && vt__source_is_installed(text))
            f->flags |= VT_FRAME_INSTALLED;
    } else {
        func = text;   /* no location: the whole text names the function */
    }
    if (func) {
        while (*func == ' ')
            func++;
        f->function = add(c, func);
    }
}

static uint32_t add_function(symctx *c, const char *name)
{
    char *d = vt__demangle(c->demangle, name);
    if (d) {
        uint32_t i = add(c, d);
        free(d);
        return i;
    }
    return add(c, name);
}

/* Drop "." and "dir/.." components of an absolute path in place, lexically
 * (no file system access: the file may not exist here). "/a/build/../b.c"
 * becomes "/a/b.c". */
static void normalize_path(char *path)
{
    char *out = path;          /* path[0] is '/', kept */
    const char *in = path;
    while (*in) {
        while (*in == '/')
            in++;
        const char *end = strchr(in, '/');
        size_t len = end ? (size_t)(end - in) : strlen(in);
        if (len == 0)
            break;
        if (len == 1 && in[0] == '.') {
            /* skip */
        } else if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (out > path && *--out != '/') {}
        } else {
            *out++ = '/';
            memmove(out, in, len);
            out += len;
        }
        in += len;
    }
    if (out == path)
        *out++ = '/';
    *out = '\0';
}

/* DWARF names files as the compiler saw them, often relative to the
 * compilation directory: make them absolute so they open from anywhere. */
static uint32_t add_file(symctx *c, Dwfl_Line *line, const char *src)
{
    const char *dir = src[0] == '/' ? NULL : dwfl_line_comp_dir(line);
    char path[4096];
    if (!dir || !*dir) {
        if (src[0] != '/')
            return add(c, src);
        snprintf(path, sizeof path, "%s", src);
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, src);
    }
    if (path[0] == '/')
        normalize_path(path);
    return add(c, path);
}

static void native(symctx *c, uint64_t ip, vt__frame *f)
{
    f->ip = ip;
    uintptr_t pc = (uintptr_t)ip - 1;
    Dwfl_Module *mod = c->dwfl ? dwfl_addrmodule(c->dwfl, pc) : NULL;
    modinfo *m = mod ? module_of(c, mod) : NULL;
    if (m) {
        f->module = m->path;
        f->build_id = m->build_id;
        f->module_offset = ip - m->bias;
        uint64_t off = 0;
        const char *name = vt__symindex_lookup(m->syms, mod, pc, &off);
        if (name)
            f->function = add_function(c, name);
        Dwfl_Line *line = dwfl_module_getsrc(mod, pc);
        if (line) {
            int lineno = 0;
            const char *src = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
            if (src) {
                f->file = add_file(c, line, src);
                f->line = lineno > 0 ? (uint32_t)lineno : 0;
            }
        }
    }
    if (!f->module || !f->function) {
        /* No dwfl (or it knew nothing): the dynamic linker's view. */
        Dl_info di;
        if (dladdr((void *)pc, &di)) {
            if (!f->module && di.dli_fname) {
                f->module = add(c, di.dli_fname);
                f->module_offset = ip - (uint64_t)(uintptr_t)di.dli_fbase;
            }
            if (!f->function && di.dli_sname)
                f->function = add_function(c, di.dli_sname);
        }
    }
}

/* The process's __cxa_demangle (never loading anything into the program),
 * looked for again only when the program has loaded libraries since: a
 * lookup takes the loader's lock, which a fork in another thread must not
 * find held on every snapshot. */
static vt__demangle_fn demangler(void)
{
    static _Atomic(vt__demangle_fn) found;
    static _Atomic uint32_t looked_at = UINT32_MAX;   /* loads generation of the last look */
    vt__demangle_fn fn = atomic_load_explicit(&found, memory_order_acquire);
    uint32_t gen = vt__modules_loaded_gen();
    if (fn || atomic_load_explicit(&looked_at, memory_order_relaxed) == gen)
        return fn;
    fn = vt__demangler(false);
    atomic_store_explicit(&looked_at, gen, memory_order_relaxed);
    if (fn)
        atomic_store_explicit(&found, fn, memory_order_release);
    return fn;
}

void vt__symbolize(const uint64_t *ips, size_t n, vt__frame *frames, vt__strtab *strs)
{
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    symctx c = { .strs = strs };
    c.demangle = demangler();
    c.python = add(&c, "python");
    bool any_native = false;
    for (size_t i = 0; i < n && !any_native; i++)
        any_native = !(ips[i] & VT_IP_SYNTHETIC);
    if (any_native) {
        c.dwfl = dwfl_begin(&callbacks);
        if (c.dwfl) {
            dwfl_report_begin(c.dwfl);
            if (dwfl_linux_proc_report(c.dwfl, getpid()) != 0 ||
                dwfl_report_end(c.dwfl, NULL, NULL) != 0) {
                dwfl_end(c.dwfl);
                c.dwfl = NULL;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        memset(&frames[i], 0, sizeof frames[i]);
        if (ips[i] & VT_IP_SYNTHETIC)
            synthetic(&c, ips[i], &frames[i]);
        else
            native(&c, ips[i], &frames[i]);
    }
    for (size_t i = 0; i < c.nmods; i++)
        vt__symindex_free(c.mods[i].syms);
    if (c.dwfl)
        dwfl_end(c.dwfl);
    free(c.mods);
}
