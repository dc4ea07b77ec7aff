/* tests/hooks/hk_stats.h - what a test program reports besides its output.
 *
 * The programs under test must print the same thing with and without the
 * preload, so counters go to the file named by HOOKS_STATS instead: the
 * simulator's own counters (simcuda_stats, looked up in libcuda.so.1) and,
 * when libvramtrace is loaded, the cache's (vt_get_stats, looked up by name:
 * the programs never link vramtrace). One "key=value" per line.
 */
#ifndef HK_STATS_H
#define HK_STATS_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "simcuda.h"
#include "vramtrace.h"

static inline void hk_report_stats(long user_allocs)
{
    const char *path = getenv("HOOKS_STATS");
    if (!path)
        return;
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "user_allocs=%ld\n", user_allocs);
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    int (*stats)(int, simcuda_counters *) = NULL;
    if (h)
        *(void **)&stats = dlsym(h, "simcuda_stats");
    simcuda_counters c;
    if (stats && stats(0, &c) == 0) {
        fprintf(f, "sim_alloc_calls=%llu\n", (unsigned long long)c.mem_alloc_calls);
        fprintf(f, "sim_alloc_async_calls=%llu\n", (unsigned long long)c.mem_alloc_async_calls);
        fprintf(f, "sim_allocs=%llu\n", (unsigned long long)c.allocs);
        fprintf(f, "sim_frees=%llu\n", (unsigned long long)c.frees);
        fprintf(f, "sim_bad_frees=%llu\n", (unsigned long long)c.bad_frees);
        fprintf(f, "sim_device_syncs=%llu\n", (unsigned long long)c.device_syncs);
    }
    int (*vts)(int, vt_stats *) = NULL;
    *(void **)&vts = dlsym(RTLD_DEFAULT, "vt_get_stats");
    vt_stats s;
    if (vts && vts(0, &s) == 0) {
        fprintf(f, "vt_allocs=%lld\n", (long long)s.allocation[VT_STAT_ALL].allocated);
        fprintf(f, "vt_frees=%lld\n", (long long)s.allocation[VT_STAT_ALL].freed);
        fprintf(f, "vt_backend_allocs=%llu\n", (unsigned long long)s.num_backend_allocs);
        fprintf(f, "vt_bad_frees=%llu\n", (unsigned long long)s.num_bad_frees);
    }
    fclose(f);
}

#endif /* HK_STATS_H */
