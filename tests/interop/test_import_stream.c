/*
 * tests/interop/test_import_stream.c - a PyTorch pickle imported with its
 * trace entries streamed (each batch read into events and dropped from the
 * value graph as it is parsed) is the pickle imported through its whole
 * value graph, byte for byte once written as a .vtsnap: on many pickles
 * that Python's own pickle writes ($VT_PICKLE_GEN: every protocol, one
 * entry, batches around 1000, several devices, shared frames, unknown
 * actions, odd key orders), on the shapes the streamed way must refuse
 * (they fall back to the whole graph) and on the benchmark's file
 * ($VT_BENCH_GEN, smaller).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "pytorch.h"
#include "snapfile.h"

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

/* Import `path` both ways; @return whether the streamed way took it. */
static int same_both_ways(const char *path, const char *dir)
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
    int nstreamed = 0, nwhole = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strstr(de->d_name, ".pickle"))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int took = same_both_ways(path, dir);
        /* s-: shaped by the pickler, streamed; w-: refused, imported whole */
        ASSERT_MSG(took == (de->d_name[0] == 's'), "%s: streamed %d", de->d_name, took);
        took ? nstreamed++ : nwhole++;
        unlink(path);
    }
    closedir(d);
    ASSERT_GE(nstreamed, 20);
    ASSERT_GE(nwhole, 4);
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
    ASSERT(same_both_ways(path, dir));
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
    ASSERT_MSG(same_both_ways(path, dir), "%s: imported whole, not streamed", path);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST_MAIN()
