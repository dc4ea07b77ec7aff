/*
 * tests/trace/test_view_commands.c - run the built `vramtrace` (VRAMTRACE_EXE) on
 * generated snapshots and check summary/leaks/json output and exit codes.
 */
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "harness.h"
#include "../hostile_names.h"
#include "checksum.h"
#include "snapfile.h"
#include "test_format_gen.h"

static char dir[64];
static char out[1 << 20];
static char errout[1 << 16];

static const char *exe(void)
{
    const char *e = getenv("VRAMTRACE_EXE");
    ASSERT_MSG(e && *e, "VRAMTRACE_EXE is not set");
    return e;
}

static void cleanup(void)
{
    char cmd[128];
    if (dir[0] && strncmp(dir, "/tmp/vt-test-cli-", 17) == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
}

/* The test's own directory, made on first use: tests run in parallel, so
 * nothing they write may have a shared name. */
static const char *test_dir(void)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/vt-test-cli-XXXXXX");
        ASSERT(mkdtemp(dir));
        atexit(cleanup);
    }
    return dir;
}

static const char *write_snap(vt__snapshot_data *s, const char *name)
{
    static char path[256];
    char err[512];
    test_dir();
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_free(s);
    return path;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
}

/* Run `vramtrace ARGS` (a shell-quoted string); stdout -> out, stderr ->
 * errout; returns the exit status. */
static int run(const char *args)
{
    char cmd[2048], o[128], e[128];
    snprintf(o, sizeof o, "%s/stdout", test_dir());
    snprintf(e, sizeof e, "%s/stderr", test_dir());
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", exe(), args, o, e);
    int st = system(cmd);
    slurp(o, out, sizeof out);
    slurp(e, errout, sizeof errout);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Every one of the strings is in the last command's stdout. */
#define OUT_HAS(...) out_has_all((const char *const[]){ __VA_ARGS__, NULL })

static void out_has_all(const char *const *want)
{
    for (; *want; want++)
        ASSERT_STR_CONTAINS(out, *want);
}

/* Run `vramtrace CMD 'PATH' EXTRA` (EXTRA may be empty), as run() does. */
static int view(const char *cmd, const char *path, const char *extra)
{
    char args[1024];
    snprintf(args, sizeof args, "%s '%s'%s%s", cmd, path, *extra ? " " : "", extra);
    return run(args);
}

TEST(cli_summary_reports_peaks_counts_fragmentation_sites)
{
    const char *p = write_snap(gen_small(), "small.vtsnap");
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT_STR_EQ(errout, "");
    char head[128];   /* the writer's own version */
    snprintf(head, sizeof head, "format %d.%d, pid 4242, rank 3, host node-7\n", VT_FORMAT_MAJOR,
             VT_FORMAT_MINOR);
    OUT_HAS(
        head,
        "  command: python train.py --epochs 3\n",
        "  events: 15 in the window (seq 10..24, 0.000 s), 120 recorded, "
            "107 overwritten, 2 stacks dropped\n",
        "  counts: allocs 3, frees 3, segment allocs 2, segment frees 1, "
            "segments alive 2, OOMs 1, bad frees 1, marks 1\n",
        /* the ring overwrote 107 events and the window's first is no mark */
        "  window: it starts inside a step: the 1 event before the first mark 'step 1' (0.000 s) "
            "is the end of a step whose start was overwritten (a larger ring: "
            "VRAMTRACE_CONF=ring:SIZE)\n",
        "device 0 (Simulated GPU 0, 80 GiB):\n"
            "  allocated: peak 13 MiB (seq 18) in the kept events, "
            "current 12 MiB\n"
            "  pending free: 0 B (freed, waiting for stream events); active "
            "peak 13 MiB (allocated + pending)\n"
            "  reserved:  peak 22 MiB (seq 23) in the kept events, "
            "current 20 MiB\n"
            "  true peaks (allocator, whole run): allocated 30 MiB, "
            "reserved 40 MiB, active 31 MiB\n"
            "  at the snapshot (allocator state): allocated 12 MiB in 2 "
            "blocks, pending 0 B, reserved 20 MiB\n"
            "  fragmentation: 7 MiB reserved but unallocated at the "
            "allocated peak (35.0%), 8 MiB now (40.0%)\n"
            "  top call sites by bytes at peak (seq 18):\n"
            "         9 MiB  2 allocations  backward model.c:77 "
            "(/usr/bin/train+0x400300)\n"
            "         4 MiB  1 allocation   forward model.c:42 "
            "(/usr/bin/train+0x400200)\n");
    /* a pending free is freed: not allocated, a figure of its own */
    ASSERT_STR_CONTAINS(out, "device 1 (Simulated GPU 1, 40 GiB):\n"
                             "  allocated: peak 512 KiB (seq 14) in the kept events, "
                             "current 0 B\n"
                             "  pending free: 512 KiB (freed, waiting for stream events); "
                             "active peak 512 KiB (allocated + pending)\n");
    ASSERT(strstr(out, "gaps:") == NULL);
}

/* Events whose stack the recorder had to cut short (its stack table was
 * full) are counted in the file, and summary says how many. */
TEST(cli_summary_counts_events_with_truncated_stacks)
{
    vt__snapshot_data *s = gen_small();
    s->meta.stacks_truncated = 3;
    const char *p = write_snap(s, "truncated.vtsnap");
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT_STR_EQ(errout, "");
    ASSERT_STR_CONTAINS(out, "  stacks: 3 events have truncated stacks (the recorder's stack "
                             "table was full: they keep only their outer callers)\n");
    /* none truncated: no such line */
    p = write_snap(gen_small(), "whole.vtsnap");
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT(strstr(out, "truncated stacks") == NULL);
}

TEST(cli_leaks_groups_alive_allocations_by_stack)
{
    const char *p = write_snap(gen_small(), "small.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_EQ(errout, "");
    const char *want =
        "Leak of 8 MiB in 1 allocation from:\n"
        "    #0 0x00007f0000001000 in cudaMalloc (/usr/lib/libvramtrace.so.0+0x1000)\n"
        "    #1 0x0000000000400300 in backward model.c:77 (/usr/bin/train+0x400300)\n"
        "    #2 0x0000000000400100 in main train.c:10 (/usr/bin/train+0x400100)\n"
        "  (allocated before the retained window)\n"
        "\n"
        "Leak of 4 MiB in 1 allocation from:\n"
        "    #0 0x00007f0000001000 in cudaMalloc (/usr/lib/libvramtrace.so.0+0x1000)\n"
        "    #1 0x0000000000400200 in forward model.c:42 (/usr/bin/train+0x400200)\n"
        "    #2 0x0000000000400100 in main train.c:10 (/usr/bin/train+0x400100)\n"
        "\n"
        "SUMMARY: vramtrace: 12 MiB alive in 2 allocations from 2 stacks.\n";
    ASSERT_STR_EQ(out, want);
}

TEST(cli_leaks_of_clean_run_says_none)
{
    struct snap_builder g = gen_begin();
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, 1, 100);
    e->addr = 0x1000; e->size = 512;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 2, 200);
    e->addr = 0x1000; e->size = 512;
    const char *p = write_snap(g.s, "clean.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_EQ(out, "SUMMARY: vramtrace: no allocations alive at the snapshot.\n");
}

/* A snapshot whose ring overwrote the run's first events: check says what
 * its window leaves out, so that "0 findings" does not read as a verdict on
 * the whole run; a snapshot that kept every event says nothing of it. */
TEST(cli_check_of_a_wrapped_ring_says_what_its_window_leaves_out)
{
    const char *p = write_snap(gen_small(), "wrapped.vtsnap");   /* 107 overwritten */
    int rc = view("check", p, "");
    ASSERT_MSG(rc == 0 || rc == 1, "check exited %d: %s", rc, errout);
    OUT_HAS("  window: the ring overwrote the run's first 107 events: what was made and freed "
            "before the window is not judged; a larger ring: VRAMTRACE_CONF=ring:SIZE\n");
    ASSERT_MSG(view("check", p, "--json") == rc, "%s", errout);
    ASSERT_STR_CONTAINS(out, "\"events_overwritten\":107,");
    struct snap_builder g = gen_begin();
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, 1, 100);
    e->addr = 0x1000; e->size = 512;
    p = write_snap(g.s, "whole.vtsnap");
    rc = view("check", p, "");
    ASSERT_MSG(rc == 0 || rc == 1, "check exited %d: %s", rc, errout);
    ASSERT(strstr(out, "window:") == NULL);
}

/* A snapshot taken under load: a gap in the events, the allocator state
 * complete. leaks must list what the state holds, nothing the gap hides. */
TEST(cli_leaks_of_a_snapshot_with_gaps_agree_with_the_allocator_state)
{
    struct snap_builder g = gen_begin();
    vt__event *e;
    e = gen_ev(&g, VT_EV_ALLOC, 1, 10); e->addr = 0x1000; e->size = 512;
    e = gen_ev(&g, VT_EV_ALLOC, 2, 20); e->addr = 0x2000; e->size = 1024;   /* freed in the gap */
    e = gen_ev(&g, VT_EV_ALLOC, 10, 100); e->addr = 0x3000; e->size = 2048;
    e = gen_ev(&g, VT_EV_MARK, 11, 110); e->device = -1;
    gen_device(&g, 0, "GPU", 1 << 30);
    g.s->meta.flags = VT_META_STATE_COMPLETE;
    gen_segment_holding(&g, 0x1000, 512, 1);
    gen_segment_holding(&g, 0x3000, 2048, 10);
    const char *p = write_snap(g.s, "gaps.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    OUT_HAS(
        "(1 allocation without a free among the kept events is not "
            "listed: the allocator state at the snapshot does not hold it)\n",
        "SUMMARY: vramtrace: 2.5 KiB alive in 2 allocations");
    ASSERT_EQ(view("summary", p, ""), 0);
    OUT_HAS(
        "  gaps: 1 inside the window (7 events missing); 1 allocation "
            "freed where the events do not show it, counted as freed, not "
            "alive\n",
        "  at the snapshot (allocator state): allocated 2.5 KiB in 2 "
            "blocks, pending 0 B, reserved 8 KiB\n");
}

TEST(cli_json_is_valid_and_complete)
{
    const char *p = write_snap(gen_small(), "small.vtsnap");
    ASSERT_EQ(view("json", p, "--events"), 0);
    OUT_HAS(
        "{\"schema\":\"vramtrace-snapshot\",\"schema_version\":2,",
        "\"host\":\"node-7\"",
        "\"str\":\"weights \\\"w\\\"\\n\"",
        "\"peak_allocated\":13631488,\"peak_allocated_seq\":18",
        "\"flags\":[\"pending_free\"],\"streams\":[\"0x99\"]",
        "\"final_allocated\":0,\"final_reserved\":2097152,"
            "\"final_pending\":524288,\"peak_active\":524288,"
            "\"true_peak_allocated\":1048576,\"true_peak_reserved\":2097152,"
            "\"true_peak_active\":1572864,\"state\":{\"allocated\":0,"
            "\"allocated_blocks\":0,\"pending\":524288,\"reserved\":2097152}",
        "\"gaps\":0,\"events_missing\":0,\"free_unseen\":0}",
        "\"kind\":\"STREAM_USE\"");
    /* a real JSON parser agrees, when python3 is around */
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                 "assert len(d[\"events\"])==15 and len(d[\"lifetimes\"])==5 and "
                 "d[\"devices\"][0][\"final_allocated\"]==12*2**20' '%s/stdout'", dir);
        ASSERT_EQ(system(cmd), 0);
    }
    /* without --events: no events list */
    ASSERT_EQ(view("json", p, ""), 0);
    ASSERT(strstr(out, "\"events\":[") == NULL);
}

/* One exit-status convention (cli/commands.h): a file that cannot be read
 * exits 2 with one line in every command that reads one, as bad usage does. */
TEST(cli_bad_input_exits_2_with_one_message_in_every_command)
{
    char args[1024];
    ASSERT_EQ(run("summary /nonexistent.vtsnap"), 2);
    ASSERT_STR_EQ(out, "");
    ASSERT_STR_CONTAINS(errout, "vramtrace summary: /nonexistent.vtsnap: cannot open");
    write_snap(gen_small(), "x");   /* creates dir */
    char path[256];
    snprintf(path, sizeof path, "%s/garbage.vtsnap", dir);
    FILE *f = fopen(path, "w");
    fputs("hello, not a snapshot\n", f);
    fclose(f);
    const char *cmds[] = { "summary", "leaks", "json", "check", "viz", "compare", "export" };
    for (int i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++) {
        const char *extra = !strcmp(cmds[i], "export") ? "--format perfetto -o /dev/null"
                            : !strcmp(cmds[i], "compare") ? path : "";
        if (!strcmp(cmds[i], "viz"))
            snprintf(args, sizeof args, "viz '%s' -o '%s/garbage.html'", path, dir);
        else
            snprintf(args, sizeof args, "%s %s '%s'", cmds[i], extra, path);
        ASSERT_MSG(run(args) == 2, "%s: %s", args, errout);
        ASSERT_STR_CONTAINS(errout, "not a vramtrace snapshot");
        ASSERT_EQ(strchr(errout, '\n') - errout + 1, (long)strlen(errout)); /* one line */
        snprintf(args, sizeof args, "%s", cmds[i]);
        ASSERT_EQ(run(args), 2);
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        ASSERT_EQ(run(args), 0);
        ASSERT_STR_CONTAINS(out, "usage: vramtrace ");
        ASSERT_STR_CONTAINS(out, "exit status: 0 ");
    }
}

/* Every command words an option it does not know the same way, on one line. */
TEST(cli_unknown_option_is_one_line_worded_alike_in_every_command)
{
    const char *cmds[] = { "summary", "leaks", "json", "check", "viz", "compare",
                           "export", "import", "replay", "run" };
    for (int i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++) {
        char args[256], want[256];
        snprintf(args, sizeof args, "%s --bogus x", cmds[i]);
        ASSERT_MSG(run(args) == 2, "%s: %s", args, errout);
        snprintf(want, sizeof want,
                 "vramtrace %s: unknown option '--bogus' (try vramtrace %s --help)\n", cmds[i],
                 cmds[i]);
        ASSERT_STR_EQ(errout, want);
        ASSERT_STR_EQ(out, "");
    }
}

TEST(cli_summary_of_training_loop)
{
    const char *p = write_snap(gen_training(50000, 3), "train.vtsnap");
    ASSERT_EQ(view("summary", p, ""), 0);
    OUT_HAS(
        "top call sites by bytes at peak",
        "layer",
        "_fwd model.cc:");
}

/* A forked child's snapshot: what the parent allocated before the FORK
 * event is inherited, not the child's leak. */
TEST(cli_leaks_leaves_out_what_a_forked_child_inherited)
{
    struct snap_builder g = gen_begin();
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, 1, 100);
    e->addr = 0x100000; e->size = 1024 * 1024;
    e = gen_ev(&g, VT_EV_FORK, 2, 200);
    e->aux = 4241;
    e = gen_ev(&g, VT_EV_ALLOC, 3, 300);
    e->addr = 0x400000; e->size = 2 * 1024 * 1024;
    const char *p = write_snap(g.s, "forked.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "Leak of 2 MiB in 1 allocation from:");
    ASSERT(!strstr(out, "Leak of 1 MiB"));
    ASSERT_STR_CONTAINS(out, "SUMMARY: vramtrace: 2 MiB alive in 1 allocation from 1 stack.\n"
                             "(not listed: 1 MiB in 1 allocation inherited at fork from the "
                             "parent process, pid 4241)\n");
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "forked from pid 4241 at seq 2: 1 MiB in 1 allocations still "
                             "alive are the parent's");
    ASSERT_EQ(view("json", p, ""), 0);
    OUT_HAS(
        "\"inherited\"",
        "\"FORK\"");
}

/* Memory a library's Python code allocated on a thread of its own (the
 * DataLoader's pin-memory thread: torch's pin_memory.py under threading's
 * bootstrap, no line of the program): leaks names it by those Python lines,
 * the native frames inside and under them folded as where the program's
 * own lines lead (they printed as 17 demangled C++ frames first). */
TEST(cli_leaks_names_a_library_threads_memory_by_its_python_lines)
{
    struct snap_builder g = gen_begin();
    static const char pin[] = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/"
                              "pin_memory.py";
    uint32_t clone = gen_frame(&g, 0x7f1000002000, "/usr/lib/libc.so.6", "clone3", NULL, 0);
    uint32_t boot = gen_frame(&g, 0, "python", "_bootstrap",
                              "/usr/lib/python3.11/threading.py", 1002);
    uint32_t loop = gen_frame(&g, 0, "python", "_pin_memory_loop", pin, 52);
    uint32_t pinning = gen_frame(&g, 0, "python", "pin_memory", pin, 57);
    uint32_t op = gen_frame(&g, 0x7f2000003000, "/venv/lib/libtorch_cpu.so",
                            "at::native::_pin_memory(at::Tensor const&, std::optional<c10::Device>)",
                            NULL, 0);
    uint32_t host = gen_frame(&g, 0x7f0000001000, "/usr/lib/libvramtrace.so.0", "cudaHostAlloc",
                              NULL, 0);
    uint32_t st = gen_node(&g, gen_node(&g, gen_node(&g, gen_node(&g, gen_node(&g, 0, clone),
                                                                  boot), loop), pinning), op);
    st = gen_node(&g, st, host);
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, 1, 100);
    e->addr = 0x100000; e->size = 1024 * 1024; e->stack = st;
    const char *p = write_snap(g.s, "pinned.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "Leak of 1 MiB in 1 allocation from:\n"
                             "    #2 pin_memory /venv/lib/python3.11/site-packages/torch/utils/"
                             "data/_utils/pin_memory.py:57\n");
    ASSERT_STR_CONTAINS(out, "    #4 _bootstrap /usr/lib/python3.11/threading.py:1002\n");
    ASSERT_STR_CONTAINS(out, "(3 native frames under them hidden; --all-frames shows them)");
    ASSERT_MSG(!strstr(out, " 0x"), "%s", out);
    ASSERT_EQ(view("leaks", p, "--all-frames"), 0);
    ASSERT_STR_CONTAINS(out, "#1 0x00007f2000003000 in at::native::_pin_memory(");
}

/* Pinned host memory PyTorch's host cache made (a pinned batch's `.to()`
 * under the program's line) is the cache's, kept for reuse, listed after
 * the program's own and before the libraries' workspaces; a cudaHostAlloc
 * of the program's own stays its own. */
TEST(cli_leaks_lists_pytorchs_pinned_host_cache_apart)
{
    struct snap_builder g = gen_begin();
    uint32_t user = gen_frame(&g, 0, "python", "train", "/home/me/train.py", 30);
    uint32_t mine = gen_frame(&g, 0, "python", "stage", "/home/me/train.py", 12);
    uint32_t cache = gen_frame(&g, 0x7f2000004000, "/venv/lib/libtorch_cuda.so",
                               "at::cuda::(anonymous namespace)::CUDACachingHostAllocatorImpl::"
                               "allocate_host_memory_slowpath(unsigned long, void**)", NULL, 0);
    uint32_t blas = gen_frame(&g, 0x7f2000005000, "/venv/lib/libtorch_cuda.so",
                              "at::cuda::getCurrentCUDABlasHandle()", NULL, 0);
    uint32_t host = gen_frame(&g, 0x7f0000001000, "/usr/lib/libvramtrace.so.0", "cudaHostAlloc",
                              NULL, 0);
    uint32_t malloc_ = gen_frame(&g, 0x7f0000001100, "/usr/lib/libvramtrace.so.0", "cudaMalloc",
                                 NULL, 0);
    uint32_t n_user = gen_node(&g, 0, user);
    uint32_t st_cache = gen_node(&g, gen_node(&g, n_user, cache), host);
    uint32_t st_mine = gen_node(&g, gen_node(&g, 0, mine), host);
    uint32_t st_blas = gen_node(&g, gen_node(&g, n_user, blas), malloc_);
    vt__event *e = gen_ev(&g, VT_EV_PASSTHROUGH, 1, 100);
    e->addr = 0x9000; e->size = 4 * MiB; e->aux = VT_PASS_HOST; e->stack = st_cache;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 2, 200);
    e->addr = 0xa00000; e->size = 1 * MiB; e->aux = VT_PASS_HOST; e->stack = st_mine;
    e = gen_ev(&g, VT_EV_ALLOC, 3, 300);
    e->addr = 0x100000; e->size = 2 * MiB; e->stack = st_blas;
    const char *p = write_snap(g.s, "host_cache.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    OUT_HAS(
        "Leak of 1 MiB (pinned host) in 1 allocation from:\n"
            "    #1 stage /home/me/train.py:12\n",
        "PyTorch's pinned host memory cache, its blocks kept for reuse (the tensors on them are "
            "not seen: alive or cached), each at the line whose pinned tensor made it: 4 MiB\n\n"
            "Leak of 4 MiB (pinned host) in 1 allocation from:\n"
            "    #2 train /home/me/train.py:30\n",
        "The libraries' own handles and workspaces (cuBLAS, cuDNN, NCCL), kept and reused by "
            "design: 2 MiB\n");
    ASSERT_STR_CONTAINS(out, "SUMMARY: vramtrace: 7 MiB alive in 3 allocations from 3 stacks.\n");
}

/* A device of our own as root: should a check ever break, the machine's
 * /dev/null must not be what is lost. */
static void char_device(char *dev, size_t len)
{
    snprintf(dev, len, "%s/null", test_dir());
    if (geteuid() == 0)
        ASSERT_OK(mknod(dev, S_IFCHR | 0666, makedev(1, 3)));
    else
        snprintf(dev, len, "/dev/null");
}

/* What a checked writer must not write over: a FIFO, a symbolic link to a
 * file not there (target), a character device and a directory. */
typedef struct special_outputs {
    char fifo[128], link[128], target[128], dev[128];
    const char *refused[4];            /* the four, in the order of special_why */
} special_outputs;

static const char *const special_why[] = { "FIFO", "symbolic link", "character device",
                                           "directory" };

/* Made in the test's directory, named with the extension `ext`. */
static void special_outputs_make(special_outputs *o, const char *ext)
{
    snprintf(o->fifo, sizeof o->fifo, "%s/fifo.%s", test_dir(), ext);
    snprintf(o->link, sizeof o->link, "%s/link.%s", dir, ext);
    snprintf(o->target, sizeof o->target, "%s/target.%s", dir, ext);
    ASSERT_OK(mkfifo(o->fifo, 0600));
    ASSERT_OK(symlink(o->target, o->link));
    char_device(o->dev, sizeof o->dev);
    o->refused[0] = o->fifo;
    o->refused[1] = o->link;
    o->refused[2] = o->dev;
    o->refused[3] = dir;
}

/* Each is still what it was, and nothing was written through the link. */
static void special_outputs_untouched(const special_outputs *o)
{
    struct stat st;
    ASSERT(lstat(o->fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    ASSERT(lstat(o->link, &st) == 0 && S_ISLNK(st.st_mode));
    ASSERT(lstat(o->dev, &st) == 0 && S_ISCHR(st.st_mode));
    ASSERT(access(o->target, F_OK) != 0);
}

/* `viz -o` renames a temporary file into place: only over a regular file. */
TEST(cli_viz_refuses_a_special_file_as_output)
{
    const char *p = write_snap(gen_small(), "small.vtsnap");
    char args[1024];
    special_outputs o;
    special_outputs_make(&o, "html");
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "viz -q '%s' -o '%s'", p, o.refused[i]);
        ASSERT_MSG(run(args) != 0, "viz -o %s: accepted (%s)", o.refused[i], errout);
        ASSERT_STR_CONTAINS(errout, special_why[i]);
        ASSERT_MSG(strchr(errout, '\n') == errout + strlen(errout) - 1, "one line: %s", errout);
    }
    special_outputs_untouched(&o);
    snprintf(args, sizeof args, "viz -q '%s' -o '%s'", p, o.target);   /* a new regular file */
    ASSERT_EQ(run(args), 0);
    struct stat st;
    ASSERT(lstat(o.target, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 1000);
}

/* Memory the cache did not serve: managed 16 MiB and pinned host 5 MiB
 * (allocated + registered) alive, a pitched allocation freed through
 * cudaFree (a foreign free), an array destroyed, and a VMM mapping (not
 * memory of its own). */
static vt__snapshot_data *gen_uncached(void)
{
    struct snap_builder g = gen_begin();
    uint32_t f_main = gen_frame(&g, 0x400100, "/usr/bin/app", "main", "app.c", 10);
    uint32_t f_mgd = gen_frame(&g, 0x400200, "/usr/bin/app", "make_grid", "app.c", 20);
    uint32_t n_main = gen_node(&g, 0, f_main);
    uint32_t st_m = gen_node(&g, n_main, f_mgd);
    vt__event *e;
    uint64_t t = 1000;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 1, t += 10);
    e->addr = 0x7000000; e->size = 16 * MiB; e->aux = VT_PASS_MANAGED; e->stack = st_m;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 2, t += 10);
    e->addr = 0x9000; e->size = 4 * MiB; e->aux = VT_PASS_HOST; e->stack = n_main;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 3, t += 10);
    e->addr = 0xa000; e->size = 1 * MiB; e->aux = VT_PASS_HOST_REGISTER; e->stack = n_main;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 4, t += 10);
    e->addr = 0x8000000; e->size = 2 * MiB; e->aux = VT_PASS_PITCH; e->stack = n_main;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 5, t += 10);
    e->addr = 0x5501; e->size = 3 * MiB; e->aux = VT_PASS_ARRAY; e->stack = n_main;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 6, t += 10);
    e->addr = 0x20000000; e->size = 2 * MiB; e->aux = VT_PASS_VMM_MAP;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 7, t += 10);
    e->addr = 0x8000000; e->aux = VT_PASS_FOREIGN_FREE; e->aux2 = 1;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 8, t += 10);
    e->addr = 0x5501; e->aux = VT_PASS_ARRAY; e->aux2 = 1;
    e = gen_ev(&g, VT_EV_PASSTHROUGH, 9, t += 10);
    e->addr = 0x20000000; e->aux = VT_PASS_VMM_MAP; e->aux2 = 1;
    return g.s;
}

TEST(cli_views_show_memory_the_cache_did_not_serve_as_kinds)
{
    const char *p = write_snap(gen_uncached(), "uncached.vtsnap");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_EQ(errout, "");
    OUT_HAS(
        "Leak of 16 MiB (managed) in 1 allocation from:\n"
            "    #0 0x0000000000400200 in make_grid app.c:20",
        "Leak of 5 MiB (pinned host) in 2 allocations from:\n");
    ASSERT(!strstr(out, "(pitched)") && !strstr(out, "(array)"));   /* freed */
    ASSERT_STR_CONTAINS(out, "SUMMARY: vramtrace: 21 MiB alive in 3 allocations from 2 stacks.\n"
                             "(of which not served by the cache: managed 16 MiB, pinned host "
                             "5 MiB)\n");
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "not served by the cache (passed through), per kind:\n"
                             "  managed: 1 allocation, peak 16 MiB, alive 16 MiB in 1\n"
                             "  pinned host: 2 allocations, peak 5 MiB, alive 5 MiB in 2\n"
                             "  pitched: 1 allocation, peak 2 MiB, alive 0 B in 0\n"
                             "  array: 1 allocation, peak 3 MiB, alive 0 B in 0\n");
    ASSERT(!strstr(out, "  vmm:"));
    ASSERT_EQ(view("json", p, ""), 0);
    OUT_HAS(
        "\"uncached\":[\n {\"addr\":\"0x7000000\",\"size\":16777216,"
            "\"kind\":\"managed\",\"call\":1,",
        "\"kind\":\"pitched\",\"call\":7,\"device\":0,\"stream\":\"0x0\","
            "\"alloc_seq\":4,\"alloc_time_ns\":1040,\"free_seq\":7,"
            "\"free_time_ns\":1070,");
}

/* A file of the previous minor (1.2) recorded managed and pinned memory
 * already: the views of 1.3 read it and show them the same way. */
TEST(cli_views_show_passthrough_kinds_of_a_1_2_file)
{
    const char *p = write_snap(gen_uncached(), "old.vtsnap");
    FILE *f = fopen(p, "r+b");
    ASSERT(f != NULL);
    unsigned char h[64];
    ASSERT_EQ(fread(h, 1, 64, f), 64);
    h[10] = 2;
    h[11] = 0;
    uint32_t crc = vt__crc32c(0, h, 60);
    for (int i = 0; i < 4; i++)
        h[60 + i] = (unsigned char)(crc >> (8 * i));
    ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
    ASSERT_EQ(fwrite(h, 1, 64, f), 64);
    ASSERT_EQ(fclose(f), 0);
    ASSERT_EQ(view("summary", p, ""), 0);
    ASSERT_STR_EQ(errout, "");
    OUT_HAS(
        "format 1.2,",
        "  managed: 1 allocation, peak 16 MiB, alive 16 MiB in 1\n");
    ASSERT_EQ(view("leaks", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "Leak of 16 MiB (managed) in 1 allocation from:\n");
}

/* Output that cannot be written (stdout on a full disk) fails the command,
 * whichever command it is: never exit 0 with truncated output. */
TEST(cli_stdout_on_a_full_disk_exits_2_in_every_command)
{
    if (access("/dev/full", W_OK) != 0)
        SKIP("no writable /dev/full");
    const char *p = write_snap(gen_small(), "small.vtsnap");
    const char *cmds[] = { "summary", "leaks", "json", "check", "compare", "compare --json",
                           "replay", "replay --json" };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[2048], e[128];
        snprintf(e, sizeof e, "%s/stderr", dir);
        snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/full 2>'%s'", exe(), cmds[i], p, e);
        int st = system(cmd);
        slurp(e, errout, sizeof errout);
        ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s on a full disk: status %d (%s)",
                   cmds[i], st, errout);
        ASSERT_STR_CONTAINS(errout, "cannot write");
    }
}

/* A snapshot without a single allocation (a rank that only marked steps):
 * compare says so instead of sorting nothing. */
TEST(cli_compare_of_snapshots_without_allocations)
{
    struct snap_builder g = gen_begin();
    vt__event *e = gen_ev(&g, VT_EV_MARK, 1, 1000);
    e->str = gen_str(&g, "step 1");
    e->device = -1;
    char a[256], args[1024];
    snprintf(a, sizeof a, "%s", write_snap(g.s, "a.vtsnap"));
    const char *b = write_snap(gen_begin().s, "b.vtsnap");
    snprintf(args, sizeof args, "compare '%s' '%s'", a, b);
    ASSERT_MSG(run(args) == 0, "%s", errout);
    OUT_HAS("no device memory recorded", "none: every call site holds the same bytes");
    snprintf(args, sizeof args, "compare --json '%s' '%s'", a, b);
    ASSERT_MSG(run(args) == 0, "%s", errout);
    OUT_HAS("\"sites\":[]}");
    ASSERT_STR_EQ(errout, "");
}

/* Rank `rank` of a job of `steps` marked steps: every step makes and frees
 * its activations; with `leak`, keep_recv_buffer() keeps `leak` bytes more
 * every step. */
static vt__snapshot_data *gen_rank(int rank, int steps, uint64_t leak)
{
    struct snap_builder g = gen_begin();
    g.s->meta.rank = rank;
    uint32_t f_main = gen_frame(&g, 0x400100, "/usr/bin/train", "main", "train.c", 10);
    uint32_t f_fwd = gen_frame(&g, 0x400200, "/usr/bin/train", "forward", "model.c", 42);
    uint32_t f_keep = gen_frame(&g, 0x400300, "/usr/bin/train", "keep_recv_buffer", "stage.c", 41);
    uint32_t n_main = gen_node(&g, 0, f_main);
    uint32_t st_fwd = gen_node(&g, n_main, f_fwd), st_keep = gen_node(&g, n_main, f_keep);
    uint64_t seq = 1, t = 2000000000ull;
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, seq++, t);
    e->addr = 0x10000000; e->size = e->req_size = 8 * MiB; e->stack = st_fwd;   /* weights */
    for (int i = 0; i < steps; i++) {
        e = gen_ev(&g, VT_EV_ALLOC, seq++, t += 1000000);
        e->addr = 0x20000000; e->size = e->req_size = 4 * MiB; e->stack = st_fwd;
        e = gen_ev(&g, VT_EV_FREE_REQUESTED, seq++, t += 1000000);
        e->addr = 0x20000000; e->size = 4 * MiB; e->stack = st_fwd;
        if (leak) {
            e = gen_ev(&g, VT_EV_ALLOC, seq++, t += 1000);
            e->addr = 0x40000000 + (uint64_t)i * leak; e->size = e->req_size = leak;
            e->stack = st_keep;
        }
        e = gen_ev(&g, VT_EV_MARK, seq++, t += 1000);
        char label[32];
        snprintf(label, sizeof label, "step %d", i + 1);
        e->str = gen_str(&g, label);
        e->device = -1;
    }
    return g.s;
}

/* compare lines the ranks up by mark and names the rank that grows, with
 * its line and its growth per step; a rank with more marks is compared on
 * its first ones; with no leak, no rank is named. */
TEST(cli_compare_aligns_ranks_by_mark_and_names_the_rank_that_grows)
{
    char args[4096] = "compare", name[64];
    for (int r = 0; r < 4; r++) {
        snprintf(name, sizeof name, "grow%d.vtsnap", r);
        const char *p = write_snap(gen_rank(r, r == 0 ? 10 : 8, r == 3 ? MiB : 0), name);
        snprintf(args + strlen(args), sizeof args - strlen(args), " '%s'", p);
    }
    ASSERT_MSG(run(args) == 0, "%s", errout);
    OUT_HAS("rank 0 has 10 marks: its first 8 are compared",
            "  8     step 8                 8 MiB       8 MiB       8 MiB      16 MiB\n",
            "  per step (marks 3..8; the first 2 a warm-up): rank 0 0 B, rank 1 0 B, rank 2 0 B,"
            " rank 3 +1 MiB\n",
            "\nrank 3 grows 1 MiB per step from keep_recv_buffer stage.c:41 (the ranks' median:"
            " 0 B per step)\n",
            "    +1 MiB per step  keep_recv_buffer stage.c:41  (3 MiB at mark 3, 8 MiB at mark 8;"
            " the other ranks: 0 B per step)\n",
            "\nthe others are flat\n");
    ASSERT_MSG(!strstr(out, "rank 0 grows") && !strstr(out, "rank 1 grows") &&
               !strstr(out, "rank 2 grows"), "%s", out);
    char json[4200];
    snprintf(json, sizeof json, "compare --json%s", args + strlen("compare"));
    ASSERT_MSG(run(json) == 0, "%s", errout);
    OUT_HAS("\"growth\":{\"marks\":8,\"labels\":[\"step 1\",",
            "{\"rank\":3,\"label\":\"rank 3\",\"marks\":8,\"alive\":[9437184,10485760,",
            "\"per_step\":1048576,\"judged\":{\"first_mark\":2,\"last_mark\":7},"
            "\"flat\":false,\"differs\":true,\"sites\":[{\"site\":\"keep_recv_buffer stage.c:41\","
            "\"per_step\":1048576,\"others_per_step\":0,",
            /* recorded without track(): nothing known to hold it */
            "\"first_bytes\":3145728,\"last_bytes\":8388608,\"held_by\":null}");
    ASSERT_MSG(!strstr(strstr(out, "\"differs\":true") + 1, "\"differs\":true"), "%s", out);
    /* the fixed twin */
    snprintf(args, sizeof args, "compare");
    for (int r = 0; r < 4; r++) {
        snprintf(name, sizeof name, "flat%d.vtsnap", r);
        const char *p = write_snap(gen_rank(r, 8, 0), name);
        snprintf(args + strlen(args), sizeof args - strlen(args), " '%s'", p);
    }
    ASSERT_MSG(run(args) == 0, "%s", errout);
    OUT_HAS("no rank's growth differs from the others': every rank is flat\n");
    ASSERT_MSG(!strstr(out, " grows "), "%s", out);
}

/* `import x.vtsnap` would write x.vtsnap.vtsnap: it says what import is for
 * and writes nothing; with -o it copies. */
/* Every rank keeping a little every step, each step under the bound that
 * tells ranks apart (64 KiB), over the run far more (32 KiB a step, 40
 * steps: minGPT-ddp keeping each step's predictions on both ranks read
 * "every rank is flat"): they grow alike. */
TEST(cli_compare_of_ranks_keeping_a_little_every_step_says_they_grow_alike)
{
    char args[1024] = "compare", name[64];
    for (int r = 0; r < 2; r++) {
        snprintf(name, sizeof name, "slow%d.vtsnap", r);
        const char *p = write_snap(gen_rank(r, 40, 32 * 1024), name);
        snprintf(args + strlen(args), sizeof args - strlen(args), " '%s'", p);
    }
    ASSERT_MSG(run(args) == 0, "%s", errout);
    OUT_HAS("rank 0 +32 KiB, rank 1 +32 KiB\n",
            "no rank's growth differs from the others': they grow alike\n");
    ASSERT_MSG(!strstr(out, "flat"), "%s", out);
    char json[1100];
    snprintf(json, sizeof json, "compare --json%s", args + strlen("compare"));
    ASSERT_MSG(run(json) == 0, "%s", errout);
    OUT_HAS("\"flat\":false,\"differs\":false");
}

TEST(cli_import_of_a_vtsnap_says_it_is_one_already)
{
    const char *a = write_snap(gen_begin().s, "already.vtsnap");
    char args[1024], twice[600];
    snprintf(args, sizeof args, "import '%s'", a);
    ASSERT_MSG(run(args) == 2, "%s", errout);
    ASSERT_STR_CONTAINS(errout, "is a vramtrace snapshot already; import reads PyTorch's");
    snprintf(twice, sizeof twice, "%s.vtsnap", a);
    ASSERT_MSG(access(twice, F_OK) != 0, "%s was written", twice);
    snprintf(args, sizeof args, "import '%s' -o '%s.copy.vtsnap'", a, a);
    ASSERT_MSG(run(args) == 0, "%s", errout);
}

/* replay --help names every allocator setting --conf takes and --sweep tries. */
TEST(cli_replay_help_names_expandable_segments)
{
    ASSERT_MSG(run("replay --help") == 0, "%s", errout);
    OUT_HAS("expandable_segments, cache)", "garbage_collection_threshold,\n"
            "                   expandable_segments),");
}

/* A snapshot whose names are not UTF-8 (a Latin-1 source path, stray lead
 * bytes in a label): every machine-readable output still decodes strictly. */
static vt__snapshot_data *gen_not_utf8(void)
{
    struct snap_builder g = gen_begin();
    uint32_t f = gen_frame(&g, 0x400100, "/usr/bin/app", "main", "/home/jos\xe9/caf\xe9.py", 10);
    uint32_t st = gen_node(&g, 0, f);
    vt__event *e = gen_ev(&g, VT_EV_MARK, 1, 1000);
    e->str = gen_str(&g, "step \xf8\x88\x80\x80\x80 \xff\xbf\xbf");
    e->device = -1;
    e = gen_ev(&g, VT_EV_ALLOC, 2, 2000);
    e->addr = 0x10000000; e->size = e->req_size = MiB; e->stack = st;
    return g.s;
}

TEST(cli_outputs_of_names_that_are_not_utf8_decode_strictly)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0)
        SKIP("python3 not found");
    const char *p = write_snap(gen_not_utf8(), "latin1.vtsnap");
    char args[1024], cmd[2048];
    ASSERT_EQ(view("json", p, "--events"), 0);
    snprintf(cmd, sizeof cmd, "%s/snap.json", dir);
    FILE *f = fopen(cmd, "w");
    ASSERT(f && fputs(out, f) >= 0 && fclose(f) == 0);
    snprintf(args, sizeof args, "export --format perfetto '%s' -o '%s/t.json'", p, dir);
    ASSERT_MSG(run(args) == 0, "%s", errout);
    snprintf(args, sizeof args, "export --format torch '%s' -o '%s/t.pickle'", p, dir);
    ASSERT_MSG(run(args) == 0, "%s", errout);
    /* json.loads of bytes and pickle.load both insist on valid UTF-8 */
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,pickle,sys; d=sys.argv[1]; "
             "j=json.loads(open(d+\"/snap.json\",\"rb\").read().decode(\"utf-8\")); "
             "assert j[\"marks\"][0][\"label\"].startswith(\"step \\ufffd\"), j[\"marks\"]; "
             "json.loads(open(d+\"/t.json\",\"rb\").read().decode(\"utf-8\")); "
             "t=pickle.load(open(d+\"/t.pickle\",\"rb\")); "
             "assert \"caf\\ufffd.py\" in repr(t), t' '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

/* Each rank's mark labels and file name are data in the page of several
 * ranks: a label that closes the <script> element must stay a label. */
TEST(cli_viz_of_several_ranks_keeps_hostile_labels_and_names_inside_their_script)
{
    static const char evil[] = "</script><script>document.title='pwned'</script><!--";
    struct snap_builder g = gen_begin();
    vt__event *e = gen_ev(&g, VT_EV_MARK, 1, 1000);
    e->str = gen_str(&g, evil);
    e->device = -1;
    e = gen_ev(&g, VT_EV_ALLOC, 2, 2000);
    e->addr = 0x10000000; e->size = e->req_size = MiB;
    char a[256], page[256], args[1024];
    snprintf(a, sizeof a, "%s", write_snap(g.s, "a<script>.vtsnap"));
    const char *b = write_snap(gen_small(), "b.vtsnap");
    snprintf(page, sizeof page, "%s/ranks.html", dir);
    snprintf(args, sizeof args, "viz -q '%s' '%s' -o '%s'", a, b, page);
    ASSERT_MSG(run(args) == 0, "%s", errout);
    static char html[1 << 20];
    slurp(page, html, sizeof html);
    const char *open_tag = "<script id=\"vt-ranks\" type=\"application/json\">";
    char *data = strstr(html, open_tag);
    ASSERT(data);
    data += strlen(open_tag);
    char *end = strstr(data, "</script>");
    ASSERT(end);
    *end = 0;
    ASSERT_MSG(!strchr(data, '<') && !strchr(data, '>'), "raw markup in the data: %.300s", data);
    ASSERT(strstr(data, "\\u003c/script\\u003e"));
    /* the page's scripts are its own: the data, one page per rank, the code */
    *end = '<';
    size_t nscripts = 0;
    for (const char *q = html; (q = strstr(q, "<script")) != NULL; q++)
        nscripts++;
    ASSERT_EQ(nscripts, 4);
    ASSERT(!strstr(html, "pwned'</script>"));
}

/* Creates a character device of our own as root, else names /dev/null (which
 * then cannot be replaced anyway): the machine's own must never be lost. */
/* `export -o` and `viz A B -o` write through the checked writer, as `viz -o`
 * does: never over a device, FIFO, directory or symbolic link, and never
 * through a symbolic link planted at the temporary name. */
TEST(cli_export_and_viz_of_several_ranks_refuse_special_files_and_planted_links)
{
    const char *p = write_snap(gen_small(), "small.vtsnap");
    char args[1024];
    special_outputs o;
    special_outputs_make(&o, "out");
    const char *cmds[] = { "export --format torch '%s' -o '%s'",
                           "export --format perfetto '%s' -o '%s'",
                           "viz -q '%1$s' '%1$s' -o '%2$s'" };
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
        for (int i = 0; i < 4; i++) {
            snprintf(args, sizeof args, cmds[c], p, o.refused[i]);
            ASSERT_MSG(run(args) == 2, "%s: accepted (%s)", args, errout);
            ASSERT_STR_CONTAINS(errout, special_why[i]);
            ASSERT_MSG(strchr(errout, '\n') == errout + strlen(errout) - 1, "one line: %s", errout);
        }
    special_outputs_untouched(&o);
    /* a link planted at OUT.tmp.PID (the shell's pid is the command's: exec) */
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char outp[128], cmd[2048], inner[1024];
        snprintf(outp, sizeof outp, "%s/planted%zu.out", dir, c);
        snprintf(inner, sizeof inner, cmds[c], p, outp);
        snprintf(cmd, sizeof cmd, "sh -c 'ln -s \"%s\" \"%s.tmp.$$\" && exec \"%s\" %s' 2>/dev/null",
                 o.target, outp, exe(), inner);
        int rc = system(cmd);
        ASSERT_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "%s: status %d", inner, rc);
        ASSERT_MSG(access(o.target, F_OK) != 0, "%s wrote through the planted link", inner);
        ASSERT(access(outp, F_OK) != 0);
    }
}

/* Snapshots, pages and exports carry the command line, the host name and
 * absolute paths: only their owner may read them, whatever the umask. */
TEST(cli_outputs_are_readable_by_their_owner_only)
{
    umask(022);
    const char *p = write_snap(gen_small(), "small.vtsnap");
    struct stat st;
    ASSERT(stat(p, &st) == 0);
    ASSERT_MSG((st.st_mode & 0777) == 0600, "%s: mode %o", p, st.st_mode & 0777);
    const char *cmds[] = { "viz -q '%s' -o '%s/one.html'",
                           "viz -q '%1$s' '%1$s' -o '%2$s/two.html'",
                           "export --format torch '%s' -o '%s/t.pickle'",
                           "export --format perfetto '%s' -o '%s/t.json'",
                           "import '%s/t.pickle' -o '%s/back.vtsnap'" };
    const char *made[] = { "one.html", "two.html", "t.pickle", "t.json", "back.vtsnap" };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[1024], f[256];
        if (i == 4)
            snprintf(args, sizeof args, cmds[i], dir, dir);
        else
            snprintf(args, sizeof args, cmds[i], p, dir);
        ASSERT_MSG(run(args) == 0, "%s: %s", args, errout);
        snprintf(f, sizeof f, "%s/%s", dir, made[i]);
        ASSERT(stat(f, &st) == 0);
        ASSERT_MSG((st.st_mode & 0777) == 0600, "%s: mode %o", f, st.st_mode & 0777);
    }
}

/* summary, leaks and compare print function, file and module names, the
 * host and command line as they are recorded: escaped, not obeyed. */
TEST(cli_text_views_escape_control_characters_in_names)
{
    vt__snapshot_data *s = gen_small();
    poison_names(s);
    char p[256], clean[300];
    snprintf(p, sizeof p, "%s", write_snap(s, "hostile.vtsnap"));
    snprintf(clean, sizeof clean, "'%s'", write_snap(gen_small(), "clean.vtsnap"));
    const char *cmds[] = { "summary", "leaks", "compare" };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ASSERT_EQ(view(cmds[i], p, i == 2 ? clean : ""), 0);
        assert_terminal_safe(cmds[i], out, 1);
    }
    /* JSON keeps the names as recorded, in its own escaping */
    ASSERT_EQ(view("json", p, ""), 0);
    ASSERT_STR_CONTAINS(out, "\\u001b]0;pwned\\u0007\\u001b[2J\\nSUMMARY: vramtrace: no leaks.\\r\xc2\x9b" "31m\x7f");
}

TEST_MAIN()
