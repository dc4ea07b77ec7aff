/*
 * trace/snap/frame_fold.c - what the views make of a frame: plumbing between
 * the program and the memory, the one rule every view folds by (the text
 * reports and the page's stacks and icicle, which gets the renderer's mark
 * per frame); and a library making its own workspace, which they name as
 * such.
 */
#include <string.h>

#include "snapshot.h"

bool vt__frame_is_python(const vt__snapshot_data *s, const vt__frame *f)
{
    return f->ip == 0 && !strcmp(vt__snapshot_string(s, f->module), "python");
}

static const char *basename_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* torch's Python layers between a module's caller and its forward, and
 * between a tensor method and its C++ implementation: every stack of a
 * PyTorch program passes through them, none of them allocates. */
static bool torch_plumbing(const char *file, const char *fn)
{
    static const struct { const char *file, *fn; } plumbing[] = {
        { "torch/nn/modules/module.py", "_call_impl" },
        { "torch/nn/modules/module.py", "_wrapped_call_impl" },
        { "torch/utils/_contextlib.py", "decorate_context" },
        { "torch/_tensor.py", "wrapped" },
        { "torch/_tensor.py", "_handle_torch_function_and_wrap_type_error_to_not_implemented" },
        { "torch/overrides.py", "handle_torch_function" },
        { "torch/_ops.py", "__call__" },
    };
    for (size_t i = 0; i < sizeof plumbing / sizeof plumbing[0]; i++)
        if (!strcmp(fn, plumbing[i].fn) && ends_with(file, plumbing[i].file))
            return true;
    return false;
}

/* track()'s dispatch mode, one more such layer (vramtrace's frames are not
 * the program's): its entry points, in whichever file of the vramtrace.torch
 * package holds them (vramtrace/torch.py in recordings made before it
 * became a package). */
static bool tracker_dispatch(const char *file, const char *fn)
{
    bool ours = ends_with(file, "vramtrace/torch.py") || strstr(file, "vramtrace/torch/") != NULL;
    return ours && (!strcmp(fn, "__torch_dispatch__") || !strcmp(fn, "_dispatch") ||
                    !strcmp(fn, "_engine_dispatch"));
}

/* The interpreter itself: libpython, or a python executable built without
 * it; and track()'s dispatch mode in C (vramtrace._trackfast), the
 * native half of the plumbing above. */
static bool interpreter_module(const char *module)
{
    const char *b = basename_of(module);
    return !strncmp(b, "libpython", 9) || (!strncmp(b, "python", 6) && !strstr(b, ".so")) ||
           !strncmp(b, "_trackfast.", 11);
}

/* A recorder's own frames: PyTorch's unwinder, which a snapshot taken with
 * _record_memory_history(stacks="all") puts at the top of every stack, and
 * its caching allocator's, the plumbing between the program and memory.
 * Imported frames have no module to tell them by; their names do. */
static bool recorder_frame(const vt__snapshot_data *s, const vt__frame *f)
{
    static const char *const prefixes[] = {
        "torch::unwind::", "torch::CapturedTraceback::", "torch::cuda::(anonymous namespace)::gather",
        "c10::cuda::CUDACachingAllocator::",
    };
    if (*vt__snapshot_string(s, f->module))
        return false;
    const char *fn = vt__snapshot_string(s, f->function);
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(fn, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

enum vt__frame_fold vt__frame_fold(const vt__snapshot_data *s, const vt__frame *f)
{
    if (recorder_frame(s, f))
        return VT_FOLD_ALWAYS;
    bool plumbing = vt__frame_is_python(s, f)
        ? torch_plumbing(vt__snapshot_string(s, f->file), vt__snapshot_string(s, f->function)) ||
              tracker_dispatch(vt__snapshot_string(s, f->file), vt__snapshot_string(s, f->function))
        : interpreter_module(vt__snapshot_string(s, f->module));
    return plumbing ? VT_FOLD_WITH_PYTHON : VT_FOLD_NEVER;
}

bool vt__frame_makes_library_workspace(const vt__snapshot_data *s, const vt__frame *f)
{
    static const char *const functions[] = {
        "Workspace", "BlasHandle", "BlasLtHandle", "cublasCreate", "cublasLtCreate",
        "cudnnCreate", "getCudnnHandle", "cusolverDnCreate", "cusparseCreate", "ncclComm",
    };
    if (vt__frame_is_python(s, f))
        return false;
    const char *fn = vt__snapshot_string(s, f->function);
    for (size_t k = 0; k < sizeof functions / sizeof *functions; k++)
        if (strstr(fn, functions[k]))
            return true;
    return false;
}

bool vt__frame_makes_host_cache_block(const vt__snapshot_data *s, const vt__frame *f)
{
    return !vt__frame_is_python(s, f) &&
           strstr(vt__snapshot_string(s, f->function), "CachingHostAllocator") != NULL;
}
