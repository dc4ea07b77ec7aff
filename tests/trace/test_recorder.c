/*
 * tests/trace/test_recorder.c - the event ring, snapshots and their triggers.
 *
 * Linked with the recorder's objects directly (internal functions). The
 * configuration of each test comes from VRAMTRACE_CONF / VRAMTRACE_OUT set by
 * tests/trace/meson.build, since the recorder reads them before main().
 */
#include "rec_snap.h"
#include "snapfile.h"
#include "vramtrace.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "../harness.h"
#include "rec_files.h"
#include "snap_compare.h"

static vt__snapshot_data *build(void)
{
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    ASSERT(s != NULL);
    return s;
}

/* s written to a file and read back. */
static vt__snapshot_data *through_a_file(const vt__snapshot_data *s)
{
    char path[] = "/tmp/vt-recorder-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    char err[256];
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    vt__snapshot_data *r = NULL;
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    unlink(path);
    return r;
}

/* max_events:1024 */
TEST(ring_overflow_keeps_the_newest_n_in_order)
{
    const uint64_t n = 1024, k = 100;
    ASSERT_EQ(vt__ring_capacity(), n);
    for (uint64_t i = 0; i < n + k; i++)
        ASSERT_EQ(vt__trace(.kind = VT_EV_ALLOC, .stream = 7, .addr = 0x1000 + i, .req_size = i,
                            .size = i, .aux = i), i + 1);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->meta.events_recorded, n + k);
    ASSERT_EQ(s->meta.events_overwritten, k);
    ASSERT_EQ(s->nevents, n);
    for (size_t i = 0; i < s->nevents; i++) {
        ASSERT_EQ(s->events[i].seq, k + i + 1);
        ASSERT_EQ(s->events[i].aux, k + i);
        ASSERT_EQ(s->events[i].addr, 0x1000 + k + i);
        ASSERT_EQ(s->events[i].stream, 7);
        ASSERT_EQ(s->events[i].kind, VT_EV_ALLOC);
    }
    vt__snapshot_free(s);
}

/* Whether the page holding `p` is resident (committed). */
static bool resident(const void *p)
{
    unsigned char v = 0;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
    return mincore(page, 4096, &v) == 0 && (v & 1);
}

/* Default capacity (a million events). The writers commit the ring's pages a
 * chunk ahead of themselves instead of faulting them in one by one: the
 * chunk after the one being written is resident before any event lands in
 * it; the ring far beyond stays uncommitted (its memory is only committed as
 * the first lap reaches it). "Far": half the ring away, 40 MiB, beyond any
 * transparent huge page the kernel may have backed the written part with. */
TEST(the_ring_is_committed_a_chunk_ahead_of_the_writers)
{
    const uint64_t chunk = VT_RING_CHUNK_SLOTS;
    ASSERT(vt__ring_capacity() > 8 * chunk);
    char probe[8192] __attribute__((aligned(4096)));
    if (madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) != 0)
        SKIP("this kernel has no MADV_POPULATE_WRITE (Linux 5.14): pages fault in as written");
    uint64_t seq = vt__ring_head();
    ASSERT(seq < chunk);   /* nothing has recorded much yet */
    const uint64_t far = vt__ring_capacity() / 2;
    ASSERT(resident(vt__ring_slot(chunk + chunk / 2)));
    ASSERT(!resident(vt__ring_slot(far)));
    while (seq < 3 * chunk)
        seq = vt__trace(.kind = VT_EV_ALLOC, .stream = 1, .addr = 0x1000 + seq, .size = 512);
    /* the writer of seq 3*chunk began chunk 3 and committed chunk 4 */
    ASSERT(resident(vt__ring_slot(4 * chunk + chunk / 2)));
    ASSERT(resident(vt__ring_slot(5 * chunk - 1)));
    ASSERT(!resident(vt__ring_slot(far)));
}

#define WRITERS 8
#define PER_WRITER 50000

/* Every field is derived from (writer, i), so a torn event is detectable. */
static void *writer(void *arg)
{
    uint64_t w = (uint64_t)(uintptr_t)arg;
    for (uint64_t i = 0; i < PER_WRITER; i++) {
        uint64_t v = w << 32 | i;
        vt__trace(.kind = VT_EV_ALLOC, .device = (int)w, .stream = v ^ 0x5555, .addr = v * 3,
                  .req_size = v + 1, .size = v + 2, .aux = v, .aux2 = ~v);
    }
    return NULL;
}

static void check_event(const vt__event *e)
{
    uint64_t v = e->aux;
    ASSERT_EQ(e->aux2, ~v);
    ASSERT_EQ(e->addr, v * 3);
    ASSERT_EQ(e->req_size, v + 1);
    ASSERT_EQ(e->size, v + 2);
    ASSERT_EQ(e->stream, v ^ 0x5555);
    ASSERT_EQ(e->device, (int)(v >> 32));
    ASSERT_EQ(e->kind, VT_EV_ALLOC);
}

/* default max_events (1000000) holds all 400000 */
TEST(eight_writers_lose_and_tear_nothing)
{
    pthread_t t[WRITERS];
    for (uintptr_t w = 0; w < WRITERS; w++)
        ASSERT_OK(pthread_create(&t[w], NULL, writer, (void *)w));
    for (int w = 0; w < WRITERS; w++)
        pthread_join(t[w], NULL);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->meta.events_recorded, WRITERS * PER_WRITER);
    ASSERT_EQ(s->meta.events_overwritten, 0);
    ASSERT_EQ(s->nevents, WRITERS * PER_WRITER);
    uint64_t next[WRITERS] = { 0 };
    uint32_t thread_of[WRITERS] = { 0 };
    uint64_t last_time[WRITERS] = { 0 };
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        ASSERT_EQ(e->seq, i + 1);          /* unique and dense */
        check_event(e);
        unsigned w = (unsigned)(e->aux >> 32);
        ASSERT_LT(w, WRITERS);
        ASSERT_EQ(e->aux & 0xffffffff, next[w]);   /* each writer's order kept */
        next[w]++;
        if (!thread_of[w])
            thread_of[w] = e->thread;
        ASSERT_EQ(e->thread, thread_of[w]);
        ASSERT_GE(e->thread, 1);
        ASSERT_LE(e->thread, WRITERS + 1);
        /* One writer's time stamps never go back (taken before its seq). */
        ASSERT_GT(e->time_ns, 0);
        ASSERT_GE(e->time_ns, last_time[w]);
        last_time[w] = e->time_ns;
    }
    for (int w = 0; w < WRITERS; w++)
        ASSERT_EQ(next[w], PER_WRITER);
    vt__snapshot_free(s);
}

static atomic_bool stop_writers;

static void *endless_writer(void *arg)
{
    uint64_t w = (uint64_t)(uintptr_t)arg, i = 0;
    while (!atomic_load(&stop_writers)) {
        uint64_t v = w << 32 | (i++ & 0xffffffff);
        vt__trace(.kind = VT_EV_ALLOC, .device = (int)w, .stream = v ^ 0x5555, .addr = v * 3,
                  .req_size = v + 1, .size = v + 2, .aux = v, .aux2 = ~v);
    }
    return NULL;
}

/* max_events:1024, stack_depth:0: writers lap the ring while snapshots copy it */
TEST(snapshots_during_overflow_see_no_torn_events)
{
    pthread_t t[4];
    for (uintptr_t w = 0; w < 4; w++)
        ASSERT_OK(pthread_create(&t[w], NULL, endless_writer, (void *)w));
    for (int round = 0; round < 30; round++) {
        vt__snapshot_data *s = build();
        ASSERT_LE(s->nevents, 1024);
        /* Every recorded event is either kept or counted as overwritten. */
        ASSERT_EQ(s->meta.events_overwritten + s->nevents, s->meta.events_recorded);
        for (size_t i = 0; i < s->nevents; i++) {
            check_event(&s->events[i]);
            if (i)
                ASSERT_GT(s->events[i].seq, s->events[i - 1].seq);
        }
        vt__snapshot_free(s);
    }
    atomic_store(&stop_writers, true);
    for (int w = 0; w < 4; w++)
        pthread_join(t[w], NULL);
}

/* trace:0 */
TEST(trace_off_records_nothing)
{
    ASSERT(!vt__trace_enabled());
    ASSERT_EQ(vt__trace(.kind = VT_EV_ALLOC, .addr = 1, .req_size = 2, .size = 3), 0);
    ASSERT_EQ(vt__stack_capture(), 0);
    ASSERT_EQ(vt__stack_capture_free(), 0);
    ASSERT_EQ(vt_mark("x"), 0);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 0);
    ASSERT_EQ(s->meta.events_recorded, 0);
    ASSERT_EQ(s->nstack_nodes, 1);
    vt__snapshot_free(s);
}

TEST(output_path_patterns_expand)
{
    char out[512], want[512], host[256] = "";
    setenv("RANK", "3", 1);
    gethostname(host, sizeof host - 1);
    ASSERT_OK(vt__expand_path("snap-%p-%h-%r-%n-%%-%q.vtsnap", 7, out, sizeof out));
    snprintf(want, sizeof want, "snap-%d-%s-3-7-%%-%%q.vtsnap", (int)getpid(), host);
    ASSERT_STR_EQ(out, want);
    unsetenv("RANK");
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r5");
    setenv("SLURM_PROCID", "6", 1);          /* below RANK and OMPI_COMM_WORLD_RANK */
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r5");
    unsetenv("OMPI_COMM_WORLD_RANK");
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r6");
    setenv("LOCAL_RANK", "2", 1);            /* node-local: the last resort */
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r6");
    unsetenv("SLURM_PROCID");
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r2");
    unsetenv("LOCAL_RANK");
    ASSERT_OK(vt__expand_path("r%r", 0, out, sizeof out));
    ASSERT_STR_EQ(out, "r0");
    ASSERT_OK(vt__expand_path("%t", 0, out, sizeof out));
    ASSERT_EQ(strlen(out), 15);              /* YYYYmmdd-HHMMSS */
    ASSERT_EQ(out[8], '-');
    ASSERT_EQ(vt__expand_path("%h%h%h", 0, out, 4), -ENAMETOOLONG);
}

/* ---- snapshot round trip ------------------------------------------------ */

static uint32_t block_stack;

static int fake_provider(vt__snapshot_data *snap)
{
    if (!snap)
        return 0;
    ASSERT_OK(vt__snapshot_add_device(snap, 0, "Simulated H100", UINT64_C(80) << 30));
    vt__snap_segment seg = { .addr = 0x7f0000000000, .size = 2 << 20, .stream = 9,
                       .device = 0, .pool = VT_POOL_SMALL };
    ASSERT_OK(vt__snapshot_add_segment(snap, &seg));
    vt__snap_block b1 = { .addr = 0x7f0000000000, .size = 1 << 20, .req_size = 1000000,
                    .stream = 9, .alloc_seq = 2, .stack = block_stack,
                    .state = VT_BLOCK_ACTIVE_ALLOCATED };
    vt__snap_block b2 = { .addr = 0x7f0000100000, .size = 1 << 20, .stream = 9,
                    .state = VT_BLOCK_INACTIVE };
    ASSERT_OK(vt__snapshot_add_block(snap, &b1));
    ASSERT_OK(vt__snapshot_add_block(snap, &b2));
    return 0;
}

__attribute__((noinline)) static uint32_t capture_here(void)
{
    uint32_t id = vt__stack_capture();
    __asm__ volatile("" ::: "memory");
    return id;
}

TEST(snapshot_round_trips_through_the_reader)
{
    block_stack = capture_here();
    ASSERT_NE(block_stack, 0);
    vt__trace_set_state_provider(fake_provider);
    vt__trace(.kind = VT_EV_SEGMENT_ALLOC, .stream = 9, .addr = 0x7f0000000000,
              .req_size = 2 << 20, .size = 2 << 20, .aux = VT_POOL_SMALL);
    vt__trace(.kind = VT_EV_ALLOC, .stream = 9, .addr = 0x7f0000000000, .req_size = 1000000,
              .size = 1 << 20, .stack = block_stack);
    vt_mark("epoch 1");
    vt__trace(.kind = VT_EV_FREE_REQUESTED, .stream = 9, .addr = 0x7f0000100000, .req_size = 5,
              .size = 512, .stack = capture_here(), .aux = 1);
    vt__trace(.kind = VT_EV_OOM, .device = 1, .req_size = UINT64_C(1) << 40, .aux = 123,
              .aux2 = 456);

    vt__snapshot_data *a = build();
    char dir[64], path[128], err[256] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/a.vtsnap", dir);
    ASSERT_OK(vt__snapfile_write(a, path, err, sizeof err));
    vt__snapshot_data *b = NULL;
    int rc = vt__snapfile_read(path, &b, err, sizeof err);
    ASSERT_MSG(rc == 0, "read: %s", err);

    ASSERT_EQ(a->meta.pid, getpid());
    snap_same_meta(a, b, SNAP_STRINGS_BY_TEXT);
    ASSERT_STR_CONTAINS(vt__snapshot_string(b, b->meta.command_line), "test_recorder");
    ASSERT_STR_CONTAINS(vt__snapshot_string(b, b->meta.config), "trace:1");
    ASSERT_STR_EQ(vt__snapshot_string(b, b->meta.library_version), VRAMTRACE_VERSION_STRING);

    ASSERT_EQ(a->nevents, 5);
    snap_same_events(a, b, SNAP_STRINGS_BY_TEXT);
    ASSERT_EQ(a->events[2].kind, VT_EV_MARK);
    ASSERT_STR_EQ(vt__snapshot_string(b, b->events[2].str), "epoch 1");
    ASSERT_EQ(a->events[3].aux, 1);
    ASSERT_NE(a->events[3].stack, 0);
    ASSERT_EQ(a->events[4].device, 1);
    ASSERT_EQ(a->events[4].aux2, 456);

    snap_same_stack_nodes(a, b);
    ASSERT_GT(a->nframes, 0);
    snap_same_frames(a, b, SNAP_STRINGS_BY_TEXT);
    const vt__frame *f[64];
    size_t nf = vt__snapshot_stack_frames(b, b->events[1].stack, f, 64);
    ASSERT_GE(nf, 2);
    ASSERT_STR_EQ(vt__snapshot_string(b, f[0]->function), "capture_here");

    ASSERT_EQ(b->ndevices, 1);
    ASSERT_EQ(b->devices[0].ordinal, 0);
    ASSERT_EQ(b->devices[0].total_bytes, UINT64_C(80) << 30);
    ASSERT_STR_EQ(vt__snapshot_string(b, b->devices[0].name), "Simulated H100");
    ASSERT_EQ(b->nsegments, 1);
    ASSERT_EQ(b->segments[0].addr, 0x7f0000000000);
    ASSERT_EQ(b->segments[0].size, 2 << 20);
    ASSERT_EQ(b->segments[0].stream, 9);
    ASSERT_EQ(b->segments[0].first_block, 0);
    ASSERT_EQ(b->segments[0].nblocks, 2);
    ASSERT_EQ(b->segments[0].device, 0);
    ASSERT_EQ(b->segments[0].pool, VT_POOL_SMALL);
    ASSERT_EQ(b->nblocks, 2);
    snap_same_blocks(a, b);
    /* The block's stack was remapped like the event's that shares it. */
    ASSERT_EQ(b->blocks[0].stack, b->events[1].stack);
    ASSERT_EQ(b->blocks[0].state, VT_BLOCK_ACTIVE_ALLOCATED);
    ASSERT_EQ(b->blocks[1].stack, 0);
    snap_same_strings(a, b);

    vt__snapshot_free(a);
    vt__snapshot_free(b);
    unlink(path);
    rmdir(dir);
}

TEST(public_snapshot_writes_a_readable_file)
{
    char dir[64], path[128], err[256] = "";
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/pub.vtsnap", dir);
    ASSERT_OK(vt_mark("hello"));
    ASSERT_OK(vt_snapshot(path));
    vt__snapshot_data *s = NULL;
    int rc = vt__snapfile_read(path, &s, err, sizeof err);
    ASSERT_MSG(rc == 0, "read: %s", err);
    ASSERT_EQ(s->nevents, 1);
    ASSERT_STR_EQ(vt__snapshot_string(s, s->events[0].str), "hello");
    vt__snapshot_free(s);
    ASSERT(vt_snapshot("/nonexistent-dir/x.vtsnap") < 0);
    unlink(path);
    rmdir(dir);
}

/* VRAMTRACE_CONF=signal:SIGUSR2, VRAMTRACE_OUT=<builddir>/sig-%p.vtsnap */
TEST(signal_snapshot_is_written_by_the_background_thread)
{
    const char *out = getenv("VRAMTRACE_OUT");
    ASSERT(out != NULL);
    char pat[512], path[512];
    snprintf(pat, sizeof pat, "%.*s-signal-1.vtsnap", (int)(strlen(out) - 7), out);
    ASSERT_OK(vt__expand_path(pat, 1, path, sizeof path));
    unlink(path);
    ASSERT_OK(vt_mark("before signal"));
    ASSERT_OK(raise(SIGUSR2));
    struct stat st;
    for (int i = 0; i < 500 && stat(path, &st) != 0; i++)
        usleep(10000);
    ASSERT_MSG(stat(path, &st) == 0, "no snapshot at %s", path);
    ASSERT_EQ(has_mark(path, "before signal"), 1);
    unlink(path);
    unsetenv("VRAMTRACE_OUT");     /* no exit snapshot left behind */
}

/* VRAMTRACE_OUT=<builddir>/exit-%p.vtsnap */
TEST(exit_snapshot_goes_to_VRAMTRACE_OUT)
{
    const char *out = getenv("VRAMTRACE_OUT");
    ASSERT(out != NULL);
    pid_t pid = fork();
    if (pid == 0) {
        vt_mark("child at exit");
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char pat[512], path[1100];
    snprintf(pat, sizeof pat, "%s", out);
    char *pp = strstr(pat, "%p");
    ASSERT(pp != NULL);
    *pp = '\0';
    snprintf(path, sizeof path, "%s%d%s", pat, (int)pid, pp + 2);
    ASSERT_EQ(has_mark(path, "child at exit"), 1);
    unlink(path);
    unsetenv("VRAMTRACE_OUT");     /* the test process writes none itself */
}

/* dump_on_oom:1, VRAMTRACE_OUT unset: vramtrace-%p-%n.vtsnap in the cwd */
TEST(out_of_memory_snapshot_when_asked)
{
    char dir[64], path[256];
    make_tmpdir(dir, sizeof dir);
    ASSERT_OK(chdir(dir));
    vt_mark("before oom");
    vt__trace_out_of_memory();
    snprintf(path, sizeof path, "%s/vramtrace-%d-1.vtsnap", dir, (int)getpid());
    ASSERT_EQ(has_mark(path, "before oom"), 1);
    unlink(path);
    rmdir(dir);
}

/* Interns strings without pause until told to stop. */
static atomic_bool interning;
static void *intern_forever(void *arg)
{
    (void)arg;
    char name[32];
    for (unsigned i = 0; atomic_load(&interning); i++) {
        snprintf(name, sizeof name, "name %u", i % 4096);
        vt__string_intern(name);
    }
    return NULL;
}

/* GCC 12's AddressSanitizer runtime takes no allocator lock around fork(): a
 * child forked while another thread is inside its malloc inherits that lock
 * held and hangs in its first malloc (seen: __sanitizer::Mutex::Lock under
 * asan_calloc in the child). glibc's malloc is fork-safe, so these tests run
 * in the plain and ThreadSanitizer builds, where they test our locks and not
 * the sanitizer's (the snapshot writer's test in the plain build only: see
 * there). */
static void skip_fork_during_malloc_under_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
    SKIP("the AddressSanitizer runtime's allocator is not fork-safe while another thread allocates");
#endif
}

/* 50 children forked while `busy` runs on another thread (until *running
 * is cleared), each doing `in_child` (0: done) under a 5 s alarm: a lock of
 * the recorder's that the busy thread held at a fork, and that the fork
 * left held, hangs the child. */
static void fork_while_busy(void *(*busy)(void *), atomic_bool *running, int (*in_child)(void))
{
    atomic_store(running, true);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, busy, NULL), 0);
    for (int i = 0; i < 50; i++) {
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            alarm(5);
            _exit(in_child() == 0 ? 0 : 3);
        }
        int status = wait_child(pid);
        ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                   "child %d: status 0x%x (hung: killed by SIGALRM)", i, status);
    }
    atomic_store(running, false);
    pthread_join(t, NULL);
}

/* A child that records (a DataLoader worker naming a tensor). */
static int intern_in_child(void)
{
    return vt__string_intern("from the child") != 0 ? 0 : 3;
}

TEST(fork_while_another_thread_interns_does_not_hang_the_child)
{
    skip_fork_during_malloc_under_asan();
    fork_while_busy(intern_forever, &interning, intern_in_child);
}

/* The observed allocator's settings, set again and again (the lock a
 * snapshot's metadata reads them under, pool_observe.c). */
static atomic_bool setting;
static void *set_settings_forever(void *arg)
{
    (void)arg;
    static char text[900];
    memset(text, 'x', sizeof text - 1);
    while (atomic_load(&setting))
        vt_pool_settings(text);
    return NULL;
}

static int set_settings_in_child(void)
{
    return vt_pool_settings("from the child");
}

TEST(fork_while_another_thread_sets_the_pool_settings_does_not_hang_the_child)
{
    fork_while_busy(set_settings_forever, &setting, set_settings_in_child);
}

/* A file outside site-packages asked again and again whether it is the
 * program's (installed_code.c's lookup, under its lock: a snapshot's
 * frames' files). */
static atomic_bool classifying;
static void *classify_forever(void *arg)
{
    (void)arg;
    while (atomic_load(&classifying))
        vt_source_is_programs("/tmp/vt-no-such-dir/a/b/c/d/train.py");
    return NULL;
}

static int classify_in_child(void)
{
    return vt_source_is_programs("/tmp/vt-no-such-dir/a/b/c/d/train.py") >= 0 ? 0 : 3;
}

TEST(fork_while_another_thread_classifies_a_file_does_not_hang_the_child)
{
    skip_fork_during_malloc_under_asan();
    fork_while_busy(classify_forever, &classifying, classify_in_child);
}

/* Writes snapshots to `arg` without pause until told to stop. */
static atomic_bool snapping;
static void *snapshot_forever(void *arg)
{
    while (atomic_load(&snapping))
        vt_snapshot((const char *)arg);
    return NULL;
}

/* stack_depth:0. The snapshot write is serialized by a lock; a fork while
 * another thread held it left it held in the child, whose own snapshot then
 * hung forever. */
TEST(fork_while_another_thread_writes_a_snapshot_does_not_hang_the_child)
{
    skip_fork_during_malloc_under_asan();
#if defined(__SANITIZE_THREAD__)
    /* Caught with gdb in a hung child (1 run in 150 under load): the
     * child's realloc of the ring's copy (160 KB, ThreadSanitizer's
     * LargeMmapAllocator) spun on that allocator's lock, which the parent's
     * writing thread held at the fork: this libtsan (GCC 12's) does not
     * hold it across a fork (nor its dlopen interceptor's lock, an earlier
     * hang of this test's children). The plain build runs this test (the
     * other hang caught, pool_observe.c's settings lock, was vramtrace's). */
    SKIP("ThreadSanitizer's large allocator is not fork-safe while another thread allocates");
#endif
    char dir[64], path[128], cpath[160];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/busy.vtsnap", dir);
    for (int i = 0; i < 2000; i++)
        vt__trace(.kind = VT_EV_ALLOC, .stream = 1, .addr = 0x1000 + (uint64_t)i,
                  .req_size = 512, .size = 512);
    atomic_store(&snapping, true);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, snapshot_forever, path), 0);
    for (int i = 0; i < 40; i++) {
        usleep(1000 + (useconds_t)(i * 137) % 3000);
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            alarm(5);
            snprintf(cpath, sizeof cpath, "%s/child-%d.vtsnap", dir, (int)getpid());
            int rc = vt_snapshot(cpath);
            unlink(cpath);
            _exit(rc == 0 ? 0 : 3);
        }
        int status = wait_child(pid);
        ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                   "child %d: status 0x%x (hung: killed by SIGALRM)", i, status);
    }
    atomic_store(&snapping, false);
    pthread_join(t, NULL);
    unlink(path);
    rmdir(dir);
}

/* A file matching `prefix`*`suffix` that holds a mark `label`. */
static int find_snapshot_with_mark(const char *prefix, const char *suffix, const char *label)
{
    char pattern[700];
    snprintf(pattern, sizeof pattern, "%s*%s", prefix, suffix);
    glob_t g;
    int found = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !found; i++)
            found = has_mark(g.gl_pathv[i], label) == 1;
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
    return found;
}

/* VRAMTRACE_CONF=signal:SIGUSR2, VRAMTRACE_OUT=<builddir>/rec-sigfork-%p.vtsnap.
 * A forked child inherited the handler and the pipe but not the thread: its
 * signal woke the parent's thread, which wrote the PARENT's snapshot.
 *
 * The child's snapshot appears by rename, whole, when it is written; the
 * child waits for exactly that file, as long as the meson timeout allows (a
 * snapshot symbolizes every library of the process: seconds under ASan on a
 * busy machine, which an earlier 3 s wait did not allow). Not built under
 * ThreadSanitizer, which cannot start the child's thread (meson.build). */
TEST(signal_in_a_forked_child_snapshots_the_child)
{
    /* seen under ASan: the child's snapshot thread hung in asan_calloc on an
     * allocator lock another thread of the parent held at the fork */
    skip_fork_during_malloc_under_asan();
    const char *out = getenv("VRAMTRACE_OUT");
    ASSERT(out != NULL && strstr(out, "%p") != NULL);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strstr(out, "%p") - out), out);
    vt_mark("parent");
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        alarm(50);
        char mine[600];
        snprintf(mine, sizeof mine, "%s%d-signal-1.vtsnap", prefix, (int)getpid());
        vt_mark("in the child");
        raise(SIGUSR2);
        struct stat st;
        while (stat(mine, &st) != 0)
            usleep(10000);
        _exit(has_mark(mine, "in the child") == 1 ? 0 : 4);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the child's signal wrote no snapshot of the child (status 0x%x)", status);
    char mine[600];
    snprintf(mine, sizeof mine, "%s%d-signal-1.vtsnap", prefix, (int)pid);
    unlink(mine);
    /* ... and woke nothing in the parent: its thread would have written this. */
    char parent[600];
    snprintf(parent, sizeof parent, "%s%d-signal-", prefix, (int)getpid());
    usleep(100000);
    ASSERT(!find_snapshot_with_mark(parent, ".vtsnap", "parent"));
    unsetenv("VRAMTRACE_OUT");
}

/* VRAMTRACE_CONF=trace:0,dump_on_oom:1, VRAMTRACE_OUT=<builddir>/rec-off-%p.vtsnap.
 * The header promises snapshots at exit and on OOM, and vt_snapshot() works
 * with trace:0 (the allocator state, no events); with tracing off neither the
 * exit nor the OOM snapshot used to be written. */
TEST(tracing_off_still_writes_exit_and_oom_snapshots)
{
    const char *out = getenv("VRAMTRACE_OUT");
    ASSERT(out != NULL && strstr(out, "%p") != NULL);
    ASSERT(!vt__trace_enabled());
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strstr(out, "%p") - out), out);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        vt__trace_out_of_memory();
        exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char path[700], err[256];
    const char *kinds[] = { ".vtsnap", "-oom-1.vtsnap" };
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s%d%s", prefix, (int)pid, kinds[k]);
        vt__snapshot_data *s = NULL;
        int rc = vt__snapfile_read(path, &s, err, sizeof err);
        ASSERT_MSG(rc == 0, "%s: %s", path, err);
        ASSERT_EQ(s->nevents, 0);
        ASSERT_EQ(s->meta.pid, pid);
        vt__snapshot_free(s);
        unlink(path);
    }
    unsetenv("VRAMTRACE_OUT");
}

TEST(version_matches_the_header)
{
    ASSERT_EQ(vt_version_number(), VRAMTRACE_VERSION_NUMBER);
    ASSERT_STR_EQ(vt_version_string(), VRAMTRACE_VERSION_STRING);
}

/* max_events:1024. An observed framework allocator (PyTorch's) reports its
 * segments and blocks through vt_pool_event; the ring overwrites the early
 * ones, and the snapshot still lists what is alive: the framework's
 * segments (FRAMEWORK_*), tiled by its live blocks (with their seq and
 * state) and the free space between them; what it freed is gone; an
 * unmapped range of an expandable segment keeps the parts outside it. */
TEST(observed_pool_state_lists_what_the_ring_overwrote)
{
    /* the allocator's code: any shared object's (libc's here; no hook runs) */
    ASSERT_EQ(vt_pool_observe(dlsym(RTLD_DEFAULT, "strlen"), NULL), 0);
    const uint64_t seg = 0x7f0000000000, small = 0x7f0000400000;
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, seg, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, small, 0x200000, 0, VT_POOL_SMALL), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, seg, 1000, 0, 1024), 0);         /* kept */
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, seg + 0x1000, 0x2000, 0, 0), 0); /* freed */
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, small + 0x200, 512, 0, 0), 0);   /* pending */
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_REQUESTED, 0, seg + 0x1000, 0x2000, 0, 0), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_COMPLETED, 0, seg + 0x1000, 0x2000, 0, 0), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_REQUESTED, 0, small + 0x200, 512, 0, 0), 0);
    /* an expandable segment's two mapped ranges, then the middle unmapped */
    const uint64_t ex = 0x7f0001000000;
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, ex, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, ex + 0x400000, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_FREE, 0, ex + 0x200000, 0x400000, 0, 0), 0);
    for (int i = 0; i < 1100; i++)   /* the ring (1024 events) forgets all of the above */
        vt__trace(.kind = VT_EV_MARK, .device = -1);
    vt__snapshot_data *s = build();
    ASSERT(s->meta.events_overwritten > 0 && s->events[0].seq > 11);
    ASSERT(s->meta.flags & VT_META_POOL_OBSERVED);
    size_t nf = 0;
    const vt__snap_segment *f[4];
    for (size_t i = 0; i < s->nsegments; i++)
        if (vt__pool_is_framework(s->segments[i].pool) && nf < 4)
            f[nf++] = &s->segments[i];
    ASSERT_EQ(nf, 4);   /* sorted by address: seg, small, ex's two outer parts */
    ASSERT_EQ(f[0]->addr, seg);
    ASSERT_EQ(f[0]->size, 0x400000);
    ASSERT_EQ(f[0]->pool, VT_POOL_FRAMEWORK_LARGE);
    ASSERT_EQ(f[0]->nblocks, 2);
    const vt__snap_block *b = &s->blocks[f[0]->first_block];
    ASSERT_EQ(b[0].size, 1024);
    ASSERT_EQ(b[0].req_size, 1000);
    ASSERT_EQ(b[0].alloc_seq, 3);
    ASSERT_EQ(b[0].state, VT_BLOCK_ACTIVE_ALLOCATED);
    ASSERT_EQ(b[1].addr, seg + 1024);   /* the freed block is free space */
    ASSERT_EQ(b[1].state, VT_BLOCK_INACTIVE);
    ASSERT_EQ(f[1]->pool, VT_POOL_FRAMEWORK_SMALL);
    ASSERT_EQ(f[1]->nblocks, 3);
    b = &s->blocks[f[1]->first_block];
    ASSERT_EQ(b[1].addr, small + 0x200);
    ASSERT_EQ(b[1].state, VT_BLOCK_ACTIVE_PENDING_FREE);
    ASSERT_EQ(f[2]->addr, ex);
    ASSERT_EQ(f[2]->size, 0x200000);
    ASSERT_EQ(f[3]->addr, ex + 0x600000);
    ASSERT_EQ(f[3]->size, 0x200000);
    /* the file holds it, and reads back the same */
    vt__snapshot_data *r = through_a_file(s);
    ASSERT_EQ(r->nsegments, s->nsegments);
    ASSERT_EQ(r->nblocks, s->nblocks);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* vt_pool_event's SEGMENT_ALLOC of a private pool (VT_POOL_EVENT_PRIVATE: a
 * CUDA graph's): the event keeps the pool kind in aux and the pool in aux2
 * (format 1.14), the state keeps it once the ring overwrote the event, each
 * segment with its own pool, and the file holds it (SEGMENT_POOLS). */
TEST(a_private_pools_segments_keep_their_pool_in_the_event_and_the_state)
{
    ASSERT_EQ(vt_pool_observe(dlsym(RTLD_DEFAULT, "strlen"), NULL), 0);
    const uint64_t seg = 0x7f0000000000, graph = 0x7f0000400000;
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, seg, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, graph, 0x400000, 7,
                            VT_POOL_EVENT_PRIVATE(VT_POOL_LARGE, 6)), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, graph, 0x1000, 7, 0), 0);
    vt__snapshot_data *s = build();
    ASSERT_EQ(s->nevents, 3);
    ASSERT_EQ(s->events[1].kind, VT_EV_SEGMENT_ALLOC);
    ASSERT_EQ(s->events[1].aux, VT_POOL_LARGE);
    ASSERT_EQ(s->events[1].aux2, 6);
    ASSERT_EQ(s->events[0].aux2, 0);
    vt__snapshot_free(s);
    for (int i = 0; i < 1100; i++)   /* the ring (1024 events) forgets them */
        vt__trace(.kind = VT_EV_MARK, .device = -1);
    s = build();
    ASSERT(s->meta.events_overwritten > 0);
    const vt__snap_segment *f[2];
    size_t nf = 0;
    for (size_t i = 0; i < s->nsegments; i++)
        if (vt__pool_is_framework(s->segments[i].pool) && nf < 2)
            f[nf++] = &s->segments[i];
    ASSERT_EQ(nf, 2);
    ASSERT_EQ(f[0]->addr, seg);
    ASSERT_EQ(f[0]->private_pool, 0);
    ASSERT_EQ(f[1]->addr, graph);
    ASSERT_EQ(f[1]->private_pool, 6);
    vt__snapshot_data *r = through_a_file(s);
    size_t n6 = 0;
    for (size_t i = 0; i < r->nsegments; i++)
        n6 += r->segments[i].private_pool == 6 && r->segments[i].addr == graph;
    ASSERT_EQ(n6, 1);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* vt_pool_oom: the observed allocator's OOM with the private pool the
 * request was for (format 1.15), kept above the flags of OOM addr through a
 * file; vt_pool_event's OOM is the default pool's. */
TEST(an_observed_ooms_private_pool_is_kept_above_its_flags)
{
    ASSERT_EQ(vt_pool_observe(dlsym(RTLD_DEFAULT, "strlen"), NULL), 0);
    ASSERT_EQ(vt_pool_oom(0, 0x200000, 0x100000, 0x4000000, 7, 6), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_OOM, 0, 0x4000000, 0x200000, 7, 0x100000), 0);
    vt__snapshot_data *s = build();
    vt__snapshot_data *r = through_a_file(s);
    ASSERT_EQ(r->nevents, 2);
    ASSERT_EQ(r->events[0].kind, VT_EV_OOM);
    ASSERT_EQ(r->events[0].addr, VT_OOM_FRAMEWORK | VT_OOM_IN_POOL(6));
    ASSERT_EQ(VT_OOM_POOL(r->events[0].addr), 6);
    ASSERT_EQ(r->events[0].req_size, 0x200000);
    ASSERT_EQ(r->events[0].aux, 0x100000);
    ASSERT_EQ(r->events[1].addr, VT_OOM_FRAMEWORK);
    ASSERT_EQ(VT_OOM_POOL(r->events[1].addr), 0);
    vt__snapshot_free(r);
    vt__snapshot_free(s);
}

/* vt_pool_block_at: whether memory is a block of the observed allocator
 * (track() declares a device storage that is not, a CUDA IPC handle's
 * mapping, as external). Unknown before the first block; a block's start
 * only; still the allocator's while its free is pending; not once freed. */
TEST(pool_block_at_says_whether_memory_is_a_block_of_the_observed_allocator)
{
    const uint64_t seg = 0x7f0000000000;
    ASSERT_EQ(vt_pool_block_at(seg), -1);
    ASSERT_EQ(vt_pool_observe(dlsym(RTLD_DEFAULT, "strlen"), NULL), 0);
    ASSERT_EQ(vt_pool_block_at(seg), -1);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, seg, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, seg, 0x1000, 0, 0), 0);
    ASSERT_EQ(vt_pool_block_at(seg), 1);
    ASSERT_EQ(vt_pool_block_at(seg + 0x1000), 0);        /* free space of the segment */
    ASSERT_EQ(vt_pool_block_at(0x500000200000ull), 0);   /* elsewhere: an IPC mapping */
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_REQUESTED, 0, seg, 0x1000, 0, 0), 0);
    ASSERT_EQ(vt_pool_block_at(seg), 1);
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_COMPLETED, 0, seg, 0x1000, 0, 0), 0);
    ASSERT_EQ(vt_pool_block_at(seg), 0);
}

/* vt_pool_block_stack and vt_stack_python_frame: the Python frames that
 * allocated a live block of the observed allocator, innermost first (what
 * track() names a tensor by that no op showed being made: a compiled
 * region's output). Lent frames stand for the program's here; a frame cut
 * to the buffer still says its full length; none once the block is freed. */
TEST(pool_block_stack_names_the_python_frames_that_allocated_a_block)
{
    const uint64_t seg = 0x7e0000000000;
    ASSERT_EQ(vt_pool_observe(dlsym(RTLD_DEFAULT, "strlen"), NULL), 0);
    ASSERT_EQ(vt_pool_block_stack(seg, NULL), 0);
    const char *frames[] = { "model.py:170 forward", "train.py:224 estimate_loss" };
    uint32_t lent = vt_stack_intern_frames(frames, 2);
    ASSERT_NE(lent, 0);
    vt_thread_python_stack(lent);
    ASSERT_EQ(vt_pool_event(VT_EV_SEGMENT_ALLOC, 0, seg, 0x400000, 0, VT_POOL_LARGE), 0);
    ASSERT_EQ(vt_pool_event(VT_EV_ALLOC, 0, seg, 0x1000, 0, 0), 0);
    vt_thread_python_stack(0);
    uint64_t seq = 0;
    uint32_t stack = vt_pool_block_stack(seg, &seq);
    ASSERT_NE(stack, 0);
    ASSERT_GT(seq, 0);
    char buf[64];
    ASSERT_EQ(vt_stack_python_frame(stack, 0, buf, sizeof buf), (int)strlen(frames[0]));
    ASSERT_STR_EQ(buf, frames[0]);
    ASSERT_EQ(vt_stack_python_frame(stack, 1, buf, sizeof buf), (int)strlen(frames[1]));
    ASSERT_STR_EQ(buf, frames[1]);
    ASSERT_EQ(vt_stack_python_frame(stack, 2, buf, sizeof buf), 0);
    ASSERT_EQ(vt_stack_python_frame(stack, 0, buf, 9), (int)strlen(frames[0]));
    ASSERT_STR_EQ(buf, "model.py");
    ASSERT_EQ(vt_stack_python_frame(0, 0, buf, sizeof buf), 0);
    ASSERT_EQ(vt_pool_block_stack(seg + 0x1000, &seq), 0);
    ASSERT_EQ(seq, 0);
    ASSERT_EQ(vt_pool_event(VT_EV_FREE_COMPLETED, 0, seg, 0x1000, 0, 0), 0);
    ASSERT_EQ(vt_pool_block_stack(seg, NULL), 0);
}

TEST_MAIN()
