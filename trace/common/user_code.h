/*
 * trace/common/user_code.h - which Python source is the program's own code.
 *
 * One rule for everything that names a line for people: the reports lead
 * with the innermost frame of the program's own code (trace/snap's
 * vt__frame_is_user_code), and track() names tensors by it (the library's
 * vt_source_is_programs, asked by vramtrace.torch).
 */
#ifndef VT_COMMON_USER_CODE_H
#define VT_COMMON_USER_CODE_H

#include <stdbool.h>
#include <string.h>

/* Whether `file` is a module inductor (torch.compile's default backend)
 * wrote: DIR/XY/cXY....py in its cache directory (TORCHINDUCTOR_CACHE_DIR,
 * else /tmp/torchinductor_USER), named "c" and 51 more lowercase base32
 * letters and digits of its code's hash, in the folder named by the hash's
 * first two (torch/_inductor/codecache.py: code_hash, get_path). */
static inline bool vt__source_is_inductors(const char *file)
{
    const char *slash = strrchr(file, '/');
    if (!slash || slash - file < 3 || slash[-3] != '/')
        return false;
    const char *base = slash + 1;
    if (strlen(base) != 55 || base[0] != 'c' || strcmp(base + 52, ".py") != 0)
        return false;
    for (int i = 1; i < 52; i++) {
        char ch = base[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')))
            return false;
    }
    return slash[-2] == base[1] && slash[-1] == base[2];   /* its folder: the hash's first two */
}

/* Not under site-packages or dist-packages (torch and every installed
 * library), not vramtrace's own package, not the standard library
 * (.../lib/pythonX.Y/...), not the interpreter's frozen modules, not the
 * code torch.compile generates (torch.fx's graphs run as "<eval_with_key>.N",
 * inductor's as modules in its cache): the program's line is the one that
 * called the model. */
static inline bool vt__source_is_programs(const char *file)
{
    if (!file || !*file || !strncmp(file, "<frozen", 7) || !strncmp(file, "<eval_with_key>", 15) ||
        vt__source_is_inductors(file))
        return false;
    static const char *const library[] = { "/site-packages/", "/dist-packages/", "/vramtrace/" };
    for (size_t i = 0; i < sizeof library / sizeof library[0]; i++)
        if (strstr(file, library[i]))
            return false;
    const char *std = strstr(file, "/lib/python");
    return !(std && strchr(std + 11, '/'));
}

/* Whether `file` is torch's own Python (its package under site-packages or
 * dist-packages, or a torch/ folder of an installed tree: PyTorch built
 * from source and installed with --target): its modules and functional
 * are what every model's lines call, not a framework's own lines. */
static inline bool vt__source_is_torchs(const char *file)
{
    return file && (strstr(file, "-packages/torch/") || strstr(file, "-packages/functorch/"));
}

/* Whether `file` is torch.compile's CUDA graph trees (its reduce-overhead
 * mode, backend="cudagraphs"): a capture made there allocates into the
 * trees' private pool, which torch._dynamo.reset() releases. */
static inline bool vt__source_is_cudagraph_trees(const char *file)
{
    static const char trees[] = "torch/_inductor/cudagraph_trees.py";
    size_t n = file ? strlen(file) : 0;
    return n >= sizeof trees - 1 && !strcmp(file + n - (sizeof trees - 1), trees);
}

#endif /* VT_COMMON_USER_CODE_H */
