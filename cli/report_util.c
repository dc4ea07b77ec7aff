/* cli/report_util.c - helpers shared by the commands (loading a snapshot, the
 * wording of option errors) and by the summary, leaks and json views. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "report_util.h"
#include "event_stream.h"
#include "pytorch.h"
#include "grow.h"
#include "u64map.h"

int vt__report_load(const char *cmd, const char *path, vt__snapshot_data **s, vt__timeline **tl)
{
    char err[1024];
    *s = NULL;
    if (tl)
        *tl = NULL;
    if (vt__snapshot_load(path, s, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace %s: %s\n", cmd, err);
        return VT_EXIT_FAILURE;
    }
    if (tl && vt__timeline_build(*s, tl, err, sizeof err) != 0) {
        fprintf(stderr, "vramtrace %s: %s: %s\n", cmd, path, err);
        vt__snapshot_free(*s);
        *s = NULL;
        return VT_EXIT_FAILURE;
    }
    return 0;
}

void vt__cli_unknown_option(const char *cmd, const char *a)
{
    fprintf(stderr, "vramtrace %s: unknown option '%s' (try vramtrace %s --help)\n", cmd, a, cmd);
}

bool vt__cli_operand(const char *cmd, const char *what, const char *a, const char **operand)
{
    if (a[0] == '-' && a[1]) {
        vt__cli_unknown_option(cmd, a);
        return false;
    }
    if (*operand) {
        fprintf(stderr, "vramtrace %s: one %s only ('%s' and '%s')\n", cmd, what, *operand, a);
        return false;
    }
    *operand = a;
    return true;
}

int vt__report_text_names(vt__snapshot_data *s)
{
    vt__buf b = { 0 };
    uint32_t *off = malloc((s->nstrings ? s->nstrings : 1) * sizeof *off);
    if (!off)
        return -ENOMEM;
    for (size_t i = 0; i < s->nstrings && !b.oom; i++) {
        off[i] = (uint32_t)b.n;
        vt__put_text_str(&b, vt__snapshot_string(s, (uint32_t)i));
        vt__put_u8(&b, 0);
        if (b.n > UINT32_MAX)   /* offsets are 32 bits */
            b.oom = 1;
    }
    if (b.oom) {
        free(off);
        vt__buf_free(&b);
        return -ENOMEM;
    }
    free(s->strings_blob);
    free(s->string_offsets);
    s->strings_blob = (char *)b.p;
    s->strings_blob_size = b.n;
    s->string_offsets = off;
    return 0;
}

int vt__report_args(const char *cmd, int argc, char **argv, const char *usage, const char *flag,
                    bool *on, const char **path)
{
    *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        if (flag && !strcmp(a, flag)) {
            *on = true;
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option(cmd, a);
            return VT_EXIT_FAILURE;
        } else if (*path) {
            fprintf(stderr, "vramtrace %s: one FILE only ('%s' is a second)\n%s", cmd, a, usage);
            return VT_EXIT_FAILURE;
        } else {
            *path = a;
        }
    }
    if (!*path) {
        fprintf(stderr, "vramtrace %s: missing FILE\n%s", cmd, usage);
        return VT_EXIT_FAILURE;
    }
    return 0;
}

int vt__report_open_stream(const char *cmd, const char *path, vt__snapshot_data **s,
                           vt__event_stream **es, char *err, size_t errlen)
{
    if (vt__snapshot_open(path, s, es, err, errlen) != 0) {
        fprintf(stderr, "vramtrace %s: %s\n", cmd, err);
        return VT_EXIT_FAILURE;
    }
    err[0] = 0;
    return 0;
}

void vt__report_stream_failed(const char *cmd, const char *path, const char *stream_err,
                              const char *why)
{
    if (stream_err[0])
        fprintf(stderr, "vramtrace %s: %s\n", cmd, stream_err);
    else
        fprintf(stderr, "vramtrace %s: %s: %s\n", cmd, path, why);
}

int vt__report_run_streamed(const char *cmd, int argc, char **argv, const char *usage,
                            const char *flag, bool *on, unsigned what, vt__report_view *view)
{
    const char *path;
    int rc = vt__report_args(cmd, argc, argv, usage, flag, on, &path);
    if (rc)
        return rc == 1 ? 0 : rc;
    char err[1024], tlerr[1024];
    vt__snapshot_data *s;
    vt__event_stream *es;
    if ((rc = vt__report_open_stream(cmd, path, &s, &es, err, sizeof err)) != 0)
        return rc;
    vt__timeline *tl;
    if (vt__timeline_build_stream(s, es, what, &tl, tlerr, sizeof tlerr) != 0) {
        /* the timeline's own trouble (memory) as vt__report_load says it */
        vt__report_stream_failed(cmd, path, err, tlerr);
        rc = VT_EXIT_FAILURE;
    } else {
        /* the names made safe for a terminal first: every such view is text */
        if (vt__report_text_names(s) != 0) {
            fprintf(stderr, "vramtrace %s: out of memory\n", cmd);
            rc = VT_EXIT_FAILURE;
        } else {
            rc = view(path, s, tl, flag && *on);
        }
        vt__timeline_free(tl);
    }
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

static const char *basename_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Modules whose frames are plumbing between the program and the memory. */
static bool boring_module(const char *module)
{
    static const char *prefixes[] = { "libvramtrace", "libcudart", "libcuda.", "libc.so",
                                      "libc-", "libstdc++", "ld-linux", "libc10_cuda",
                                      "libsimcuda" };
    const char *b = basename_of(module);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(b, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

bool vt__report_all_frames;

bool vt__report_frame_folded(const vt__snapshot_data *s, const vt__frame *f, bool has_python)
{
    if (vt__report_all_frames)
        return false;
    enum vt__frame_fold fold = vt__frame_fold(s, f);
    return fold == VT_FOLD_ALWAYS || (fold == VT_FOLD_WITH_PYTHON && has_python);
}

bool vt__report_stack_has_user_code(const vt__snapshot_data *s, const vt__frame *const *fr, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (vt__frame_is_user_code(s, fr[i]))
            return true;
    return false;
}

bool vt__report_stack_has_python(const vt__snapshot_data *s, const vt__frame *const *fr, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (vt__frame_is_python(s, fr[i]))
            return true;
    return false;
}

bool vt__report_snapshot_has_python(const vt__snapshot_data *s)
{
    for (size_t i = 0; i < s->nframes; i++)
        if (vt__frame_is_python(s, &s->frames[i]))
            return true;
    return false;
}

bool vt__report_stack_without_python(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[512];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 512);
    if (n > 512)
        n = 512;
    return n > 0 && !vt__report_stack_has_python(s, fr, n);
}

const vt__frame *vt__report_site_frame(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[256];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 256);
    if (n > 256)
        n = 256;
    /* The innermost line of the program's own code; else, where Python ran,
     * the innermost Python line (the native frames under it are the
     * framework's). */
    const vt__frame *own = vt__report_all_frames ? NULL : vt__snapshot_user_frame(s, id);
    if (own)
        return own;
    if (!vt__report_all_frames)
        for (size_t i = 0; i < n; i++)
            if (vt__frame_is_python(s, fr[i]) && !vt__report_frame_folded(s, fr[i], true))
                return fr[i];
    /* a recorder's own frames are VT_FOLD_ALWAYS */
    for (size_t i = 0; i < n; i++)
        if (!boring_module(vt__snapshot_string(s, fr[i]->module)) &&
            vt__frame_fold(s, fr[i]) != VT_FOLD_ALWAYS)
            return fr[i];
    return n ? fr[0] : NULL;
}

uint64_t vt__report_frame_key(const vt__snapshot_data *s, const vt__frame *f)
{
    if (!f)
        return 0;
    if (f->file)   /* one line of one file, however many frames name it */
        return vt__mix64((uint64_t)f->file << 32 | f->line) ^ f->function;
    return vt__mix64(f->ip ^ ((uint64_t)f->module << 48)) + (uint64_t)(f - s->frames) + 1;
}

vt__report_inside vt__report_inside_of(const vt__snapshot_data *s, uint32_t id, uint64_t bytes)
{
    const vt__frame *ws = vt__report_library_workspace(s, id);
    return (vt__report_inside){ .frame = ws ? ws : vt__snapshot_library_frame(s, id),
                                .workspace = ws != NULL, .bytes = bytes, .count = 1 };
}

static int cmp_inside(const void *a, const void *b)
{
    const vt__report_inside *x = a, *y = b;
    return vt__report_cmp_bytes(x->bytes, x->frame->line, y->bytes, y->frame->line);
}

int vt__report_sum_inside(const vt__snapshot_data *s, const vt__report_inside *items, size_t n,
                          vt__report_inside *out, size_t max, uint32_t *nlines)
{
    vt__u64map at = { 0 };
    vt__report_inside *all = NULL;
    size_t nall = 0, cap = 0;
    int rc = -ENOMEM;
    if (vt__u64map_init(&at, 16))
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (!items[i].frame)
            continue;
        uint64_t key = vt__report_frame_key(s, items[i].frame);
        uint32_t x = vt__u64map_get(&at, key);
        if (x == VT__U64MAP_NONE) {
            vt__report_inside *in = vt__grow_push((void **)&all, &cap, &nall, sizeof *all);
            if (!in || vt__u64map_put(&at, key, (uint32_t)(nall - 1)))
                goto out;
            x = (uint32_t)(nall - 1);
            *in = (vt__report_inside){ .frame = items[i].frame, .workspace = items[i].workspace };
        }
        all[x].bytes += items[i].bytes;
        all[x].count += items[i].count;
    }
    if (nall)
        qsort(all, nall, sizeof *all, cmp_inside);
    for (size_t i = 0; i < nall && i < max; i++)
        out[i] = all[i];
    *nlines = (uint32_t)nall;
    rc = 0;
out:
    free(all);
    vt__u64map_free(&at);
    return rc;
}

#define SOURCE_TEXT_MAX 60   /* characters of a source line in a site's name */

/* The last Python source read, whole: compare names many sites of one file,
 * each by one line of it. */
static struct { char *path, *text; size_t len; } source_cache;

#define SOURCE_FILE_MAX (16u << 20)   /* a larger file is not read */

static const char *source_file(const char *path, size_t *len)
{
    if (source_cache.path && !strcmp(source_cache.path, path)) {
        *len = source_cache.len;
        return source_cache.text;
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t n = 0, cap = 0;
    int ok = 1;
    for (;;) {
        if (n == cap) {
            char *more = cap < SOURCE_FILE_MAX ? realloc(text, cap ? 2 * cap : 65536) : NULL;
            if (!more) {
                ok = 0;
                break;
            }
            text = more;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(text + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    ok = ok && !ferror(f);
    fclose(f);
    char *copy = ok ? strdup(path) : NULL;
    if (!copy) {
        free(text);
        return NULL;
    }
    free(source_cache.path);
    free(source_cache.text);
    source_cache.path = copy;
    source_cache.text = text;
    source_cache.len = *len = n;
    return text;
}

/* Line `line` of the Python source `path` as it is now (a traceback reads it
 * the same way), without its trailing comment (a `#` outside a string: the
 * name quotes the code, as track()'s tensor names do, vramtrace/torch/
 * _naming.py), whitespace runs made one space, cut to SOURCE_TEXT_MAX with
 * "..."; 0 when the file or the line cannot be read, or is all comment. */
static int source_text(const char *path, unsigned line, char *buf, size_t len)
{
    size_t n = strlen(path), size = 0;
    if (!line || n < 3 || strcmp(path + n - 3, ".py") != 0 || len < SOURCE_TEXT_MAX + 1)
        return 0;
    const char *text = source_file(path, &size), *end = text + size, *c = text;
    if (!text)
        return 0;
    for (unsigned at = 1; at < line && c < end; at++) {
        const char *nl = memchr(c, '\n', (size_t)(end - c));
        c = nl ? nl + 1 : end;
    }
    size_t o = 0;
    char quote = 0;   /* the quote of the string the scan is in, 0: none */
    for (; c < end && *c != '\n' && o < SOURCE_TEXT_MAX; c++) {
        if (quote && *c == '\\' && c + 1 < end && c[1] != '\n') {
            buf[o++] = *c++;   /* an escaped character: its quote ends nothing */
            if (o == SOURCE_TEXT_MAX)
                break;
        } else if (quote && *c == quote) {
            quote = 0;
        } else if (!quote && (*c == '\'' || *c == '"')) {
            quote = *c;
        } else if (!quote && *c == '#') {
            break;
        }
        int space = *c == ' ' || *c == '\t' || *c == '\r';
        if (space && (o == 0 || buf[o - 1] == ' '))
            continue;
        buf[o++] = space ? ' ' : *c;
    }
    while (o && buf[o - 1] == ' ')
        o--;
    if (o == SOURCE_TEXT_MAX)
        memcpy(buf + o - 3, "...", 3);
    buf[o] = 0;
    return o > 0;
}

void vt__report_site_name(const vt__snapshot_data *s, const vt__frame *f, char *buf, size_t len)
{
    if (!f) {
        snprintf(buf, len, "<no stack recorded>");
        return;
    }
    const char *fn = vt__snapshot_string(s, f->function);
    const char *file = vt__snapshot_string(s, f->file);
    const char *mod = vt__snapshot_string(s, f->module);
    char text[SOURCE_TEXT_MAX + 1];
    if (*file && source_text(file, f->line, text, sizeof text))
        snprintf(buf, len, "%s (%s:%u)", text, basename_of(file), f->line);
    else if (*fn && *file)
        snprintf(buf, len, "%s %s:%u", fn, basename_of(file), f->line);
    else if (*fn)
        snprintf(buf, len, "%s", fn);
    else
        snprintf(buf, len, "%s+0x%" PRIx64, *mod ? mod : "??", f->module_offset);
}

void vt__report_frame_text(FILE *out, const vt__snapshot_data *s, const vt__frame *f)
{
    const char *fn = vt__snapshot_string(s, f->function);
    const char *file = vt__snapshot_string(s, f->file);
    const char *mod = vt__snapshot_string(s, f->module);
    fputs(*fn ? fn : "??", out);
    if (*file) {
        fprintf(out, " %s", file);
        if (f->line)
            fprintf(out, ":%u", f->line);
    }
    uint32_t def = vt__frame_def_line(s, f);
    if (def)
        fprintf(out, " (def at line %u)", def);
    if (*mod && !vt__frame_is_python(s, f))
        fprintf(out, " (%s+0x%" PRIx64 ")", mod, f->module_offset);
}

void vt__report_frame_json(FILE *out, const vt__snapshot_data *s, const vt__frame *f)
{
    if (!f) {
        fputs("null", out);
        return;
    }
    char *txt = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&txt, &len);
    if (m) {
        vt__report_frame_text(m, s, f);
        fclose(m);
    }
    vt__json_str(out, txt ? txt : "");
    free(txt);
}

void vt__report_stack(FILE *out, const vt__snapshot_data *s, uint32_t stack, const char *indent)
{
    const vt__frame *fr[512];
    size_t n = vt__snapshot_stack_frames(s, stack, fr, 512);
    if (n == 0) {
        fprintf(out, "%s<no stack recorded>\n", indent);
        return;
    }
    size_t shown = n > 512 ? 512 : n, folded = 0, library = 0, native = 0;
    bool has_python = vt__report_stack_has_python(s, fr, shown);
    /* Where the program's own code is on the stack, its lines lead: the
     * libraries' Python frames inside it (torch's modules) and the native
     * frames under them (the framework's, the interpreter's) are folded.
     * Where only a library's Python code is (the DataLoader's pin-memory
     * thread), its lines lead in the same way, the native frames folded. */
    bool has_user = !vt__report_all_frames && vt__report_stack_has_user_code(s, fr, shown);
    bool fold_native = has_user || (!vt__report_all_frames && has_python);
    for (size_t i = 0; i < shown; i++) {
        if (fold_native && !vt__frame_is_python(s, fr[i])) {
            native++;
            continue;
        }
        if (vt__report_frame_folded(s, fr[i], has_python)) {
            folded++;
            continue;
        }
        if (has_user && vt__frame_is_python(s, fr[i]) && !vt__frame_is_user_code(s, fr[i])) {
            library++;
            continue;
        }
        if (fr[i]->ip) /* 0 for frames without one: Python frames of an imported snapshot */
            fprintf(out, "%s#%zu 0x%016" PRIx64 " in ", indent, i, fr[i]->ip);
        else
            fprintf(out, "%s#%zu ", indent, i);
        vt__report_frame_text(out, s, fr[i]);
        fputc('\n', out);
    }
    if (n > shown)
        fprintf(out, "%s... %zu more frames\n", indent, n - shown);
    if (library)
        fprintf(out, "%s(%zu library Python frame%s hidden; --all-frames shows them)\n", indent,
                library, library == 1 ? "" : "s");
    if (folded)
        fprintf(out, "%s(%zu interpreter and dispatch frame%s hidden; --all-frames shows them)\n",
                indent, folded, folded == 1 ? "" : "s");
    if (native)
        fprintf(out, "%s(%zu native frame%s under them hidden; --all-frames shows them)\n",
                indent, native, native == 1 ? "" : "s");
}

/* What the libraries keep for themselves and reuse: cuBLAS/cuBLASLt and
 * cuDNN handles and workspaces (PyTorch's at::cuda::getCurrentCUDABlasHandle,
 * getCUDABlasLtWorkspace, setWorkspaceForHandle), NCCL's buffers. Named by a
 * native frame's function, or by the library that made the device call. */
const vt__frame *vt__report_library_workspace(const vt__snapshot_data *s, uint32_t id)
{
    static const char *const libraries[] = { "libcublas", "libcudnn", "libnccl",
                                             "libcusolver", "libcusparse" };
    const vt__frame *fr[512];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 512);
    if (n > 512)
        n = 512;
    bool caller_seen = false;
    for (size_t i = 0; i < n; i++) {
        if (vt__frame_is_python(s, fr[i]))
            continue;
        if (vt__frame_makes_library_workspace(s, fr[i]))
            return fr[i];
        const char *mod = vt__snapshot_string(s, fr[i]->module);
        if (!caller_seen && !boring_module(mod)) {   /* who called the allocator */
            caller_seen = true;
            for (size_t k = 0; k < sizeof libraries / sizeof *libraries; k++)
                if (!strncmp(basename_of(mod), libraries[k], strlen(libraries[k])))
                    return fr[i];
        }
    }
    return NULL;
}

const vt__frame *vt__report_host_cache(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *fr[512];
    size_t n = vt__snapshot_stack_frames(s, id, fr, 512);
    for (size_t i = 0; i < n && i < 512; i++)
        if (vt__frame_makes_host_cache_block(s, fr[i]))
            return fr[i];
    return NULL;
}

const char *vt__kind_name(unsigned kind, char *buf, size_t len)
{
    static const char *names[VT_EV_KIND_COUNT] = {
        [VT_EV_ALLOC] = "ALLOC",
        [VT_EV_FREE_REQUESTED] = "FREE_REQUESTED",
        [VT_EV_FREE_COMPLETED] = "FREE_COMPLETED",
        [VT_EV_SEGMENT_ALLOC] = "SEGMENT_ALLOC",
        [VT_EV_SEGMENT_FREE] = "SEGMENT_FREE",
        [VT_EV_STREAM_USE] = "STREAM_USE",
        [VT_EV_OOM] = "OOM",
        [VT_EV_MARK] = "MARK",
        [VT_EV_BAD_FREE] = "BAD_FREE",
        [VT_EV_PASSTHROUGH] = "PASSTHROUGH",
        [VT_EV_FORK] = "FORK",
        [VT_EV_STREAM_DESTROY] = "STREAM_DESTROY",
        [VT_EV_EMPTY_CACHE] = "EMPTY_CACHE",
        [VT_EV_TENSOR_NEW] = "TENSOR_NEW",
        [VT_EV_TENSOR_USE] = "TENSOR_USE",
        [VT_EV_TENSOR_DROP] = "TENSOR_DROP",
        [VT_EV_STORAGE_EXTERNAL] = "STORAGE_EXTERNAL",
        [VT_EV_STORAGE_EXTERNAL_FREE] = "STORAGE_EXTERNAL_FREE",
        [VT_EV_HOLDER_NEW] = "HOLDER_NEW",
        [VT_EV_REF] = "REF",
        [VT_EV_UNREF] = "UNREF",
        [VT_EV_FINDING] = "FINDING",
        [VT_EV_TENSOR_NAME] = "TENSOR_NAME",
        [VT_EV_PAUSE] = "PAUSE",
    };
    if (kind < VT_EV_KIND_COUNT && names[kind])
        return names[kind];
    snprintf(buf, len, "KIND_%u", kind);
    return buf;
}

void vt__report_state_totals(const vt__snapshot_data *s, int device, vt__state_totals *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        if (g->device != device)
            continue;
        out->reserved += g->size;
        out->segments++;
        for (uint32_t k = 0; k < g->nblocks && (size_t)g->first_block + k < s->nblocks; k++) {
            const vt__snap_block *b = &s->blocks[g->first_block + k];
            if (b->state == VT_BLOCK_ACTIVE_ALLOCATED) {
                out->allocated += b->size;
                out->allocated_blocks++;
            } else if (b->state == VT_BLOCK_ACTIVE_PENDING_FREE) {
                out->pending += b->size;
                out->pending_blocks++;
            }
        }
    }
}

const vt__snap_device *vt__report_device(const vt__snapshot_data *s, int device)
{
    for (size_t i = 0; i < s->ndevices; i++)
        if (s->devices[i].ordinal == device)
            return &s->devices[i];
    return NULL;
}
