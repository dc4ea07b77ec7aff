/*
 * tests/interop/test_import_stream.c - a PyTorch pickle imported with its
 * trace entries streamed (each batch read into events and dropped from the
 * value graph as it is parsed) is the pickle imported through its whole
 * value graph, byte for byte once written as a .vtsnap: on many pickles
 * that Python's own pickle writes ($VT_PICKLE_GEN: every protocol, one
 * entry, batches around 1000, several devices, shared frames, unknown
 * actions, odd key orders), on the shapes the streamed way must refuse
 * (they fall back to the whole graph) and on the benchmark's file
 * ($VT_BENCH_GEN, smaller). The same pickles converted in bounded memory
 * into a .vtsnap (vt__pytorch_convert: entries spilled to a temporary file,
 * merged by time, the file mapped and let go as it is parsed, the graph
 * collected) hold the same snapshot, and their errors are the whole
 * import's; no temporary file or descriptor outlives a conversion.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "pytorch.h"
#include "event_stream.h"
#include "snapfile.h"
#include "spill.h"

static char err[1024];

static char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ASSERT_MSG(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ASSERT(buf);
    ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static char *as_vtsnap(const vt__snapshot_data *s, const char *dir, const char *tag, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.vtsnap", dir, tag);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
    return slurp(path, n);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ASSERT(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The first `size` bytes of `path` (0: all) converted in bounded memory, as
 * vt__snapshot_open does (the file mapped), every `every` bytes and values
 * (0: the defaults, and the events stored plainly) letting pages go and
 * collecting the graph (and the events compressed). @return the
 * converter's answer; on 0 *bytes is the .vtsnap it wrote, read back and
 * written again (its content, whatever zstd's cuts). */
static int convert(const char *path, size_t size, size_t every, const char *dir, char **bytes,
                   size_t *n)
{
    int before = open_fds();
    int fd = open(path, O_RDONLY);
    ASSERT_MSG(fd >= 0, "%s", path);
    struct stat st;
    ASSERT_OK(fstat(fd, &st));
    size = size ? size : (size_t)st.st_size;
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    ASSERT(map != MAP_FAILED);
    close(fd);
    int tmp = vt__tmpfile(err, sizeof err);
    ASSERT_MSG(tmp >= 0, "%s", err);
    /* the defaults as vt__snapshot_open has them (events stored plainly) */
    vt__pytorch_convert_opts o = { .mapped = true, .plain = !every, .drop_every = every,
                                   .collect_min = every };
    int rc = vt__pytorch_convert(map, size, "x", &o, tmp, err, sizeof err);
    munmap(map, (size_t)st.st_size);
    if (rc == 0) {
        char at[64];
        vt__snapshot_data *s = NULL;
        snprintf(at, sizeof at, "/proc/self/fd/%d", tmp);
        ASSERT_MSG(vt__snapfile_read(at, &s, err, sizeof err) == 0, "%s: %s", path, err);
        *bytes = as_vtsnap(s, dir, "converted", n);
        vt__snapshot_free(s);
    }
    close(tmp);
    ASSERT_MSG(open_fds() == before, "%s: a conversion left a descriptor open", path);
    return rc;
}

/* `path` converted (default steps and tiny ones) holds what `whole` (its
 * whole import's .vtsnap) holds. @return whether it converted. */
static int converts_the_same(const char *path, const char *dir, const char *whole, size_t nwhole)
{
    int took = -1;
    for (size_t every = 0; every <= 64; every += 64) {
        char *c = NULL;
        size_t nc = 0;
        int rc = convert(path, 0, every, dir, &c, &nc);
        ASSERT_MSG(rc == 0 || rc == 1, "%s: %d %s", path, rc, err);
        ASSERT_MSG(took < 0 || took == (rc == 0), "%s: converted one way only", path);
        took = rc == 0;
        if (rc == 0)
            ASSERT_MSG(nc == nwhole && !memcmp(c, whole, nc),
                       "%s: converted (steps %zu) differs from the whole graph's", path, every);
        free(c);
    }
    return took;
}

/* Import `path` both ways; @return whether the streamed way took it. */
static int same_both_ways(const char *path, const char *dir, int *converted)
{
    size_t size, na, nb;
    char *data = slurp(path, &size);
    vt__snapshot_data *whole = NULL, *streamed = NULL, *either = NULL;
    ASSERT_MSG(vt__pytorch_import_path(data, size, "x", false, &whole, err, sizeof err) == 0,
               "%s: %s", path, err);
    int rc = vt__pytorch_import_path(data, size, "x", true, &streamed, err, sizeof err);
    ASSERT_MSG(rc == 0 || rc == 1, "%s: %d %s", path, rc, err);
    ASSERT_OK(vt__pytorch_import(data, size, "x", &either, err, sizeof err));
    ASSERT(whole->nevents > 0 || strstr(path, "empty"));
    char *a = as_vtsnap(whole, dir, "whole", &na);
    char *b = as_vtsnap(either, dir, "either", &nb);
    ASSERT_MSG(na == nb && !memcmp(a, b, na), "%s: the import differs from the whole graph's",
               path);
    free(b);
    if (rc == 0) {
        ASSERT_EQ(streamed->nevents, whole->nevents);
        b = as_vtsnap(streamed, dir, "streamed", &nb);
        ASSERT_MSG(na == nb && !memcmp(a, b, na), "%s: streamed differs from the whole graph's",
                   path);
        free(b);
    }
    *converted = converts_the_same(path, dir, a, na);
    free(a);
    vt__snapshot_free(whole);
    vt__snapshot_free(streamed);
    vt__snapshot_free(either);
    free(data);
    return rc == 0;
}

static void run_py(const char *script, const char *args)
{
    char cmd[8192];
    ASSERT_MSG(script, "the generator's path is not set");
    snprintf(cmd, sizeof cmd, "python3 '%s' %s", script, args);
    ASSERT_MSG(system(cmd) == 0, "%s", cmd);
}

TEST(streamed_import_is_the_whole_import_on_generated_pickles)
{
    char dir[] = "/tmp/vt-import-stream.XXXXXX";
    ASSERT(mkdtemp(dir));
    char args[4200];
    snprintf(args, sizeof args, "'%s'", dir);
    run_py(getenv("VT_PICKLE_GEN"), args);
    DIR *d = opendir(dir);
    ASSERT(d);
    int nstreamed = 0, nwhole = 0, nconverted = 0, conv;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strstr(de->d_name, ".pickle"))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int took = same_both_ways(path, dir, &conv);
        /* s-: shaped by the pickler, streamed and converted; w-: refused,
         * imported whole */
        ASSERT_MSG(took == (de->d_name[0] == 's'), "%s: streamed %d", de->d_name, took);
        ASSERT_MSG(conv == took, "%s: converted %d", de->d_name, conv);
        took ? nstreamed++ : nwhole++;
        nconverted += conv;
        unlink(path);
    }
    closedir(d);
    ASSERT_GE(nstreamed, 20);
    ASSERT_GE(nwhole, 4);
    ASSERT_EQ(nconverted, nstreamed);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST(streamed_import_is_the_whole_import_on_the_benchmarks_file)
{
    char dir[] = "/tmp/vt-import-stream.XXXXXX";
    ASSERT(mkdtemp(dir));
    char args[4300], path[4200];
    snprintf(path, sizeof path, "%s/big.pickle", dir);
    snprintf(args, sizeof args, "'%s' 30000", path);
    run_py(getenv("VT_BENCH_GEN"), args);
    int conv;
    ASSERT(same_both_ways(path, dir, &conv));
    ASSERT(conv);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST(streamed_import_is_the_whole_import_on_a_pickle_pytorchs_recorder_wrote)
{
    /* data/pytorch_2_14_mlp.pickle: PyTorch 2.14.1's _dump_snapshot of a small
     * training run (data/make_pytorch_pickle.py); it must take the streamed way */
    const char *path = getenv("VT_TORCH_PICKLE");
    ASSERT_MSG(path && path[0], "VT_TORCH_PICKLE is not set (run through meson test)");
    char dir[] = "/tmp/vt-import-stream.XXXXXX";
    ASSERT(mkdtemp(dir));
    int conv;
    ASSERT_MSG(same_both_ways(path, dir, &conv), "%s: imported whole, not streamed", path);
    ASSERT_MSG(conv, "%s: imported whole, not converted", path);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

/* Every cut of a pickle, and bytes of it flipped: the conversion says what
 * the whole import says (or leaves the pickle to it), never crashes, never
 * leaves a file or a descriptor behind; so does vt__snapshot_open, the
 * entry point of every view. */
TEST(converted_pickle_errors_are_the_whole_imports_and_leave_nothing_behind)
{
    char dir[] = "/tmp/vt-import-stream.XXXXXX", tmpdir[4200], args[4300], path[4200];
    ASSERT(mkdtemp(dir));
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", dir);
    ASSERT_OK(mkdir(tmpdir, 0700));
    ASSERT_OK(setenv("TMPDIR", tmpdir, 1));
    snprintf(path, sizeof path, "%s/big.pickle", dir);
    snprintf(args, sizeof args, "'%s' 3000", path);
    run_py(getenv("VT_BENCH_GEN"), args);
    size_t size;
    char *data = slurp(path, &size), *c = NULL, cut[4300];
    snprintf(cut, sizeof cut, "%s/cut.pickle", dir);
    int nerrors = 0;
    for (size_t n = 2; n < size; n += n < 300 ? 1 : 997) {
        for (int flip = 0; flip < 2; flip++) {
            char whole_err[1024];
            vt__snapshot_data *whole = NULL, *s = NULL;
            if (flip)
                data[n] ^= 0x5A;
            size_t len = flip ? size : n;
            int wrc = vt__pytorch_import_path(data, len, "x", false, &whole, whole_err,
                                              sizeof whole_err);
            FILE *f = fopen(cut, "wb");
            ASSERT(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
            size_t nc = 0;
            int rc = convert(cut, 0, n % 2 ? 64 : 0, dir, &c, &nc);
            ASSERT_MSG(rc <= 1, "%zu", n);
            if (rc < 0) {
                ASSERT_MSG(rc == wrc && !strcmp(err, whole_err), "cut at %zu (flip %d): %d '%s', "
                           "the whole import: %d '%s'", n, flip, rc, err, wrc, whole_err);
                nerrors++;
            } else if (rc == 0) {
                ASSERT_MSG(wrc == 0, "cut at %zu (flip %d): converted, but the whole import "
                           "says '%s'", n, flip, whole_err);
                size_t nw;
                char *w = as_vtsnap(whole, dir, "whole", &nw);
                ASSERT_MSG(nw == nc && !memcmp(w, c, nw), "cut at %zu (flip %d): differs", n,
                           flip);
                free(w);
            }
            free(c);
            c = NULL;
            /* the views' entry point: the whole load's message, or the snapshot */
            char lerr[1024];
            vt__event_stream *es = NULL;
            int before = open_fds();
            int orc = vt__snapshot_open(cut, &s, &es, err, sizeof err);
            vt__snapshot_data *l = NULL;
            int lrc = vt__snapshot_load(cut, &l, lerr, sizeof lerr);
            ASSERT_MSG(orc == lrc && (orc == 0 || !strcmp(err, lerr)), "cut at %zu (flip %d): "
                       "open %d '%s', load %d '%s'", n, flip, orc, err, lrc, lerr);
            if (orc == 0)
                ASSERT_EQ(vt__event_stream_count(es), l->nevents);
            vt__event_stream_close(es);
            vt__snapshot_free(s);
            vt__snapshot_free(l);
            vt__snapshot_free(whole);
            ASSERT_MSG(open_fds() == before, "cut at %zu: vt__snapshot_open left a descriptor",
                       n);
            if (flip)
                data[n] ^= 0x5A;
            DIR *d = opendir(tmpdir);
            ASSERT(d);
            struct dirent *de;
            while ((de = readdir(d)))
                ASSERT_MSG(de->d_name[0] == '.', "%s left in TMPDIR", de->d_name);
            closedir(d);
        }
    }
    ASSERT_GE(nerrors, 100);
    free(data);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN()
