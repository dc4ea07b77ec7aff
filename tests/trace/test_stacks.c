/*
 * tests/trace/test_stacks.c - stack capture and symbolization: a known call
 * chain named by function, file and line, interning shared by call sites
 * and threads, C++ names demangled, the configured depth, Python frames
 * once libpython is loaded, and the symbol index against libdwfl. What the
 * capture remembers between calls is test_stacks_remembered.c's, the
 * interned tree under racing threads and when full test_stacks_tree.c's.
 *
 * Built with -g -O1 -fno-omit-frame-pointer so the chain a -> b -> c below
 * has real frames and line tables.
 */
#include "rec_snap.h"
#include "recorder.h"
#include "config.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <glob.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "stacks_test_util.h"

__attribute__((noinline)) static uint32_t chain_c(void)
{
    uint32_t id = vt__stack_capture();   /* the line the frame of chain_c names */
    KEEP();
    __atomic_fetch_add(&sink, 1, __ATOMIC_RELAXED);   /* also on threads */
    return id;
}

FRAME(chain_b, chain_c, 1)
FRAME(chain_a, chain_b, 1)

/* Bodies differ from chain_c/chain_b, or GCC folds identical functions. */
FRAME(other_leaf, vt__stack_capture, 3)
FRAME(chain_b2, other_leaf, 5)


TEST(known_call_chain_symbolizes_to_its_functions)
{
    uint32_t id = chain_a();
    ASSERT_NE(id, 0);
    vt__snapshot_data *s = snapshot_with_stack(id);
    const vt__frame *f[64];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64);
    ASSERT_GE(n, 4);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "chain_c");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[1]->function), "chain_b");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[2]->function), "chain_a");
    ASSERT_STR_EQ(vt__snapshot_string(s, f[3]->function), "test_known_call_chain_symbolizes_to_its_functions");
    for (int i = 0; i < 3; i++) {
        ASSERT_STR_CONTAINS(vt__snapshot_string(s, f[i]->file), "test_stacks.c");
        ASSERT_EQ(vt__snapshot_string(s, f[i]->file)[0], '/');   /* absolute */
        /* normalized, and naming the real file */
        ASSERT(!strstr(vt__snapshot_string(s, f[i]->file), "/../"));
        ASSERT(!strstr(vt__snapshot_string(s, f[i]->file), "/./"));
        ASSERT_EQ(access(vt__snapshot_string(s, f[i]->file), R_OK), 0);
        ASSERT_GT(f[i]->line, 0);
        ASSERT_STR_CONTAINS(vt__snapshot_string(s, f[i]->module), "test_stacks");
        ASSERT_GT(strlen(vt__snapshot_string(s, f[i]->build_id)), 16);
        ASSERT_NE(f[i]->ip, 0);
        ASSERT_LT(f[i]->module_offset, f[i]->ip);
    }
    /* chain_c's frame names the line of the capture, chain_b's the call of
     * chain_c: consecutive functions, increasing lines upward in the file. */
    ASSERT_LT(f[0]->line, f[1]->line);
    ASSERT_LT(f[1]->line, f[2]->line);
    /* main and libc's start are there too (depth 48 is plenty). */
    int saw_main = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        saw_main |= !strcmp(vt__snapshot_string(s, f[i]->function), "main");
    ASSERT(saw_main);
    vt__snapshot_free(s);
}

TEST(interning_shares_prefixes)
{
    uint32_t before = vt__stacks_count();
    const uint64_t s1[] = { 0x403, 0x402, 0x401 };   /* innermost first */
    const uint64_t s2[] = { 0x404, 0x402, 0x401 };
    const uint64_t s3[] = { 0x402, 0x401 };
    uint32_t a = vt__stack_intern_ips(s1, 3);
    ASSERT_EQ(vt__stacks_count() - before, 3);
    uint32_t b = vt__stack_intern_ips(s2, 3);
    ASSERT_EQ(vt__stacks_count() - before, 4);       /* one new leaf */
    ASSERT_NE(a, b);
    ASSERT_EQ(vt__stack_intern_ips(s1, 3), a);        /* same stack, same id */
    uint32_t c = vt__stack_intern_ips(s3, 2);        /* a prefix: no new node */
    ASSERT_EQ(vt__stacks_count() - before, 4);
    uint32_t pa, pb;
    uint64_t ipa, ipb;
    ASSERT_OK(vt__stacks_node(a, &pa, &ipa));
    ASSERT_OK(vt__stacks_node(b, &pb, &ipb));
    ASSERT_EQ(pa, pb);
    ASSERT_EQ(pa, c);
    ASSERT_EQ(ipa, 0x403);
    ASSERT_EQ(ipb, 0x404);

    /* Captured stacks: two leaves under one chain share every outer node. */
    uint32_t (*fns[2])(void) = { chain_a, chain_b2 };
    uint32_t ids[2];
    for (int i = 0; i < two; i++)       /* one call site for both */
        ids[i] = via(fns[i]);
    uint32_t x = ids[0], y = ids[1];
    vt__trace(.kind = VT_EV_ALLOC, .addr = 1, .req_size = 1, .size = 1, .stack = x);
    vt__trace(.kind = VT_EV_ALLOC, .addr = 2, .req_size = 1, .size = 1, .stack = y);
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    const vt__frame *fx[64], *fy[64];
    size_t nx = vt__snapshot_stack_frames(s, s->events[s->nevents - 2].stack, fx, 64);
    size_t ny = vt__snapshot_stack_frames(s, s->events[s->nevents - 1].stack, fy, 64);
    ASSERT_GE(nx, 6);
    ASSERT_GE(ny, 5);
    /* The exported tree holds x's nodes plus y's frames below the last one
     * it shares with x (shared = the common outer part: main, libc, ...). */
    size_t shared = 0;
    while (shared < nx && shared < ny && fx[nx - 1 - shared]->ip == fy[ny - 1 - shared]->ip)
        shared++;
    ASSERT_GE(shared, 4);
    ASSERT_EQ(s->nstack_nodes - 1, nx + ny - shared);
    vt__snapshot_free(s);
}

TEST(repeated_stack_is_answered_by_the_thread_cache)
{
    uint32_t ids[101];
    uint64_t hits = vt__stacks_cache_hits();
    for (int i = 0; i < hundred_and_one; i++)   /* one call site */
        ids[i] = via(chain_a);
    uint32_t count = vt__stacks_count();
    for (int i = 1; i < 101; i++)
        ASSERT_EQ(ids[i], ids[0]);
    ASSERT_EQ(vt__stacks_cache_hits() - hits, 100);   /* all but the first */
    uint32_t again[10];
    for (int i = 0; i < ten; i++)
        again[i] = via(chain_a);
    ASSERT_EQ(again[9], again[0]);       /* another call site: one new stack */
    ASSERT_NE(again[0], ids[0]);
    ASSERT_GT(vt__stacks_count(), count);
    ASSERT_LE(vt__stacks_count(), count + 6); /* only frames below the new site */
}

static void *thread_capture(void *arg)
{
    *(uint32_t *)arg = chain_a();
    return NULL;
}

TEST(threads_intern_the_same_stack_to_one_id)
{
    /* Called from one thread function, so everything but the thread start
     * frames is shared; the same thread function twice gives one id. */
    uint32_t ids[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(pthread_create(&t[i], NULL, thread_capture, &ids[i]));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 1; i < 4; i++)
        ASSERT_EQ(ids[i], ids[0]);
}

/* A C function under a C++ name, as PyTorch's frames are. */
uint32_t mangled_capture(void) __asm__("_ZN2vt4test7captureEv");
__attribute__((noinline)) uint32_t mangled_capture(void)
{
    uint32_t id = vt__stack_capture();
    KEEP();
    sink += 13;
    return id;
}

TEST(cxx_names_are_demangled_when_libstdcxx_is_loaded)
{
    if (!dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "libstdc++.so.6 not found: nothing to test\n");
        return;
    }
    vt__snapshot_data *s = snapshot_with_stack(mangled_capture());
    const vt__frame *f[2];
    ASSERT_GE(vt__snapshot_stack_frames(s, last_event(s)->stack, f, 2), 1);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "vt::test::capture()");
    vt__snapshot_free(s);
}

/* stack_depth:4 */
TEST(depth_limits_the_frames)
{
    uint32_t id = chain_a();
    vt__snapshot_data *s = snapshot_with_stack(id);
    const vt__frame *f[64];
    ASSERT_EQ(vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64), 4);
    ASSERT_STR_EQ(vt__snapshot_string(s, f[0]->function), "chain_c");
    vt__snapshot_free(s);
}

/* free_stacks:0 */
TEST(free_stacks_off_gives_no_free_stack)
{
    ASSERT_NE(vt__stack_capture(), 0);
    ASSERT_EQ(vt__stack_capture_free(), 0);
}

/* stack_depth:0 */
TEST(depth_zero_captures_nothing)
{
    ASSERT_EQ(chain_a(), 0);
    ASSERT_EQ(vt__stack_capture_free(), 0);
}

/* A program without Python (this one): stacks:all finds no interpreter, reads
 * no Python frames, and captures take the native path alone (same ids, same
 * caches, no Python capture counted). */
TEST(a_process_without_python_captures_native_stacks_only)
{
    ASSERT_EQ(vt__config()->stacks, VT_STACKS_ALL);
    ASSERT_EQ(vt__stacks_python_minor(), 0);
    uint32_t ids[2];
    for (int i = 0; i < two; i++)      /* one call site, twice */
        ids[i] = chain_a();
    uint32_t a = ids[0];
    ASSERT_NE(a, 0);
    ASSERT_EQ(a, ids[1]);
    vt__stack_captures st;
    vt__stacks_thread_stats(&st);
    ASSERT_EQ(st.python, 0);
    ASSERT_EQ(st.python_merges, 0);
    ASSERT_GE(st.remembered + st.unwinds + st.learns, 2);
    uint32_t parent;
    uint64_t ip;
    for (uint32_t id = a; id; id = parent) {
        ASSERT_EQ(vt__stacks_node(id, &parent, &ip), 0);
        ASSERT_EQ(ip & VT_IP_SYNTHETIC, 0);
    }
}

/* The newest pyenv libpython3.M of a version the recorder reads, or NULL. */
static const char *pyenv_libpython(char *out, size_t len, unsigned *minor)
{
    const char *root = getenv("PYENV_ROOT") ? getenv("PYENV_ROOT") : "/root/.pyenv";
    for (unsigned m = 13; m >= 10; m--) {
        char pattern[512];
        glob_t g;
        snprintf(pattern, sizeof pattern, "%s/versions/3.%u.*/lib/libpython3.%u.so.1.0", root,
                 m, m);
        if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            snprintf(out, len, "%s", g.gl_pathv[g.gl_pathc - 1]);
            globfree(&g);
            *minor = m;
            return out;
        }
        globfree(&g);
    }
    return NULL;
}

static uint32_t from_python;

/* Called by Python through ctypes: an allocation made under Python frames. */
static uint32_t allocate_for_python(void)
{
    from_python = chain_a();
    return from_python;
}

static bool stack_has_synthetic_frame(uint32_t id)
{
    uint32_t parent;
    uint64_t ip;
    for (; id; id = parent) {
        ASSERT_EQ(vt__stacks_node(id, &parent, &ip), 0);
        if (ip & VT_IP_SYNTHETIC)
            return true;
    }
    return false;
}

/* A program that embeds Python loads libpython after it has allocated: its
 * allocations before carry native frames only, those made under Python code
 * after carry the Python frames too. The program initializes Python itself;
 * the recorder only looks symbols up. The dlopen hook of libvramtrace calls
 * vt__trace_modules_loaded; this test binary has no hooks, so it calls it
 * where the hook would. */
TEST(python_loaded_after_the_first_allocation_gives_python_frames_from_then_on)
{
    char lib[512], home[512], code[1024];
    unsigned minor = 0;
    if (!pyenv_libpython(lib, sizeof lib, &minor))
        SKIP("no libpython3.10-3.13 under $PYENV_ROOT/versions (pyenv builds them shared)");
    ASSERT_EQ(vt__config()->stacks, VT_STACKS_ALL);
    uint32_t before = chain_a();
    ASSERT_NE(before, 0);
    ASSERT_EQ(vt__stacks_python_minor(), 0);
    ASSERT(!stack_has_synthetic_frame(before));

    vt__trace_modules_loaded();            /* the dlopen hook, before the load */
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    ASSERT(h != NULL);
    vt__trace_modules_loaded();            /* the dlsym hook, for each lookup */
    void (*init)(int) = NULL;
    int (*run)(const char *) = NULL;
    *(void **)&init = dlsym(h, "Py_InitializeEx");
    *(void **)&run = dlsym(h, "PyRun_SimpleString");
    ASSERT(init != NULL && run != NULL);
    /* Python finds its library from its home, not from this program's path. */
    snprintf(home, sizeof home, "%s", lib);
    *strstr(home, "/lib/libpython") = '\0';
    setenv("PYTHONHOME", home, 1);
    init(0);
    snprintf(code, sizeof code,
             "import ctypes\n"
             "callback = ctypes.CFUNCTYPE(ctypes.c_uint32)(%lu)\n"
             "def allocate_from_python():\n"
             "    return callback()\n"
             "allocate_from_python()\n",
             (unsigned long)(uintptr_t)allocate_for_python);
    ASSERT_EQ(run(code), 0);

    ASSERT_EQ(vt__stacks_python_minor(), minor);
    ASSERT_NE(from_python, 0);
    ASSERT(stack_has_synthetic_frame(from_python));
    vt__snapshot_data *s = snapshot_with_stack(from_python);
    const vt__frame *f[64];
    size_t n = vt__snapshot_stack_frames(s, last_event(s)->stack, f, 64);
    int chain = -1, python = -1;
    for (size_t i = 0; i < n && i < 64; i++) {
        const char *fn = vt__snapshot_string(s, f[i]->function);
        if (chain < 0 && !strcmp(fn, "chain_a"))
            chain = (int)i;
        if (python < 0 && !strcmp(fn, "allocate_from_python"))
            python = (int)i;
    }
    ASSERT_GE(chain, 0);
    ASSERT_GT(python, chain);              /* the Python caller is further out */
    ASSERT_STR_EQ(vt__snapshot_string(s, f[python]->file), "<string>");
    ASSERT_EQ(f[python]->line, 4);         /* return callback() */
    vt__snapshot_free(s);
    /* The stack recorded before Python came stays native. */
    ASSERT(!stack_has_synthetic_frame(before));
}

/* ---- the symbol index gives libdwfl's names ------------------------------ */

typedef struct symcheck {
    size_t compared, differed, modules, local_named;
    char first[512];
} symcheck;

/* One address: the index and dwfl_module_addrinfo must agree on the name
 * (or both have none) and on the offset. */
static void compare_at(symcheck *k, const vt__symindex *ix, Dwfl_Module *mod, uint64_t pc)
{
    uint64_t off_ix = 0;
    GElf_Off off_dw = 0;
    GElf_Sym sym;
    const char *a = vt__symindex_lookup(ix, mod, pc, &off_ix);
    const char *b = dwfl_module_addrinfo(mod, pc, &off_dw, &sym, NULL, NULL, NULL);
    k->compared++;
    bool same = (a == NULL) == (b == NULL) && (!a || (!strcmp(a, b) && off_ix == off_dw));
    if (!same && k->differed++ == 0)
        snprintf(k->first, sizeof k->first, "%#llx: index %s+%llu, libdwfl %s+%llu",
                 (unsigned long long)pc, a ? a : "(none)", (unsigned long long)off_ix,
                 b ? b : "(none)", (unsigned long long)off_dw);
    if (b && GELF_ST_BIND(sym.st_info) == STB_LOCAL)
        k->local_named++;
}

static int check_module(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start,
                        void *arg)
{
    (void)user, (void)name, (void)start;
    symcheck *k = arg;
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1)
        return DWARF_CB_OK;
    vt__symindex *ix = vt__symindex_build(mod);
    ASSERT(ix != NULL);
    k->modules++;
    /* every function of small modules, an even sample of big ones (libc's
     * thousands): its first byte, middle, last byte and the byte after it */
    int stride = n > 4000 ? n / 4000 : 1;
    for (int i = 1; i < n; i += stride) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        const char *sname = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        if (!sname || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF)
            continue;
        compare_at(k, ix, mod, addr);
        if (sym.st_size > 0) {
            compare_at(k, ix, mod, addr + sym.st_size / 2);
            compare_at(k, ix, mod, addr + sym.st_size - 1);
        }
        compare_at(k, ix, mod, addr + sym.st_size);
    }
    vt__symindex_free(ix);
    return DWARF_CB_OK;
}

TEST(symbol_index_names_what_libdwfl_names)
{
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    Dwfl *dwfl = dwfl_begin(&callbacks);
    ASSERT(dwfl != NULL);
    dwfl_report_begin(dwfl);
    ASSERT_EQ(dwfl_linux_proc_report(dwfl, getpid()), 0);
    ASSERT_EQ(dwfl_report_end(dwfl, NULL, NULL), 0);
    symcheck k = { 0 };
    ASSERT_EQ(dwfl_getmodules(dwfl, check_module, &k, 0), 0);
    dwfl_end(dwfl);
    fprintf(stderr, "%zu addresses in %zu modules compared (%zu named by a local symbol), "
            "%zu differed%s%s\n", k.compared, k.modules, k.local_named, k.differed,
            k.differed ? "; first: " : "", k.first);
    ASSERT_GE(k.modules, 3);         /* this program, libc, libdw at least */
    ASSERT_GE(k.compared, 2000);
    ASSERT_GE(k.local_named, 100);   /* this program's static functions */
    ASSERT_EQ(k.differed, 0);
}

TEST_MAIN()
