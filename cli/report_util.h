/*
 * cli/report_util.h - what the snapshot views (summary, leaks, json) share:
 * loading a snapshot with one error line, picking the frame of a stack worth
 * showing, printing frames (sizes and JSON strings: trace/common); the
 * one-operand argument check that check and export share, and the one wording
 * of an unknown option every command uses.
 */
#ifndef VT_CLI_REPORT_UTIL_H
#define VT_CLI_REPORT_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "event_stream.h"
#include "format_bytes.h"
#include "json_str.h"
#include "order.h"
#include "snapshot.h"
#include "timeline.h"

/* Read `path` and build its timeline (tl may be NULL when not wanted). On
 * failure prints "vramtrace CMD: <reason>" to stderr and returns the exit
 * status to use (VT_EXIT_FAILURE); 0 on success. */
int vt__report_load(const char *cmd, const char *path, vt__snapshot_data **s, vt__timeline **tl);

/* Open `path` with its events as a stream (vt__snapshot_open), the one way
 * every streaming command does. On failure prints "vramtrace CMD: <reason>"
 * to stderr and returns VT_EXIT_FAILURE; on success 0, with err emptied:
 * from then on the stream writes there only when it meets a damaged file. */
int vt__report_open_stream(const char *cmd, const char *path, vt__snapshot_data **s,
                           vt__event_stream **es, char *err, size_t errlen);

/* Say on stderr why a command reading path's stream failed: a damaged file
 * as its reader says it (stream_err, non-empty only then), else the
 * command's own trouble (`why`, e.g. memory) after the path. */
void vt__report_stream_failed(const char *cmd, const char *path, const char *stream_err,
                              const char *why);

/* Make every name in `s` (its string table: functions, files, modules,
 * tensors, holders, marks, the command line) safe to print on a terminal
 * (vt__text_str's form): a name can then neither forge a line of a text
 * report nor send an escape sequence. For text views only: JSON has its own
 * escaping and must keep the names as recorded. @return 0 or -ENOMEM. */
int vt__report_text_names(vt__snapshot_data *s);

/* A view: prints the report of path's snapshot to stdout; `flag` is whether
 * the command's one option was given. @return 0, or the exit status after
 * saying why on stderr. */
typedef int vt__report_view(const char *path, const vt__snapshot_data *s, const vt__timeline *tl,
                            bool flag);
/* The one FILE operand of a view command and its one flag: --help or -h
 * prints the usage to stdout; `flag` (NULL: none) sets *on. An unknown
 * option prints one line (vt__cli_unknown_option), a second FILE or none
 * one line and the usage, to stderr. @return 0 and *path; 1 after --help;
 * else the command's exit status (commands.h). */
int vt__report_args(const char *cmd, int argc, char **argv, const char *usage, const char *flag,
                    bool *on, const char **path);

/* The whole of a text view command that a condensed timeline serves: its
 * arguments (vt__report_args), the one FILE's events read as a stream
 * (vt__timeline_build_stream with `what`), never held all at once, its names
 * escaped (vt__report_text_names), shown by `view` (main() flushes stdout).
 * @return the command's exit status (commands.h). */
int vt__report_run_streamed(const char *cmd, int argc, char **argv, const char *usage,
                            const char *flag, bool *on, unsigned what, vt__report_view *view);

/* The one wording of an option a command does not know: one line on
 * stderr, "vramtrace CMD: unknown option 'A' (try vramtrace CMD --help)". */
void vt__cli_unknown_option(const char *cmd, const char *a);

/* An argument of a command taking one operand `what` (FILE, SNAPSHOT) that
 * is none of its options: an unknown option or a second operand prints one
 * line to stderr and returns false; else it is the operand (*operand = a). */
bool vt__cli_operand(const char *cmd, const char *what, const char *a, const char **operand);

/* The order of a report's rows (qsort): more bytes first, equal bytes by
 * the smaller key, so that the order is total and the same every run. */
static inline int vt__report_cmp_bytes(uint64_t x_bytes, uint64_t x_key, uint64_t y_bytes,
                                       uint64_t y_key)
{
    if (x_bytes != y_bytes)
        return x_bytes < y_bytes ? 1 : -1;
    return vt__order(x_key, y_key);
}

/* --all-frames: show the frames folded by default (below). */
extern bool vt__report_all_frames;
/* Whether any of fr[0..n) is a Python frame. */
bool vt__report_stack_has_python(const vt__snapshot_data *s, const vt__frame *const *fr, size_t n);
/* Python frames were recorded in this snapshot (some thread ran Python). */
bool vt__report_snapshot_has_python(const vt__snapshot_data *s);
/* Whether any of fr[0..n) is the program's own code (vt__frame_is_user_code). */
bool vt__report_stack_has_user_code(const vt__snapshot_data *s, const vt__frame *const *fr, size_t n);
/* Stack `id` has frames, none of them Python: in a snapshot with Python
 * frames, it was recorded on a thread running no Python code (PyTorch's
 * autograd engine threads during backward, a C++ worker). */
bool vt__report_stack_without_python(const vt__snapshot_data *s, uint32_t id);
/* A frame hidden unless --all-frames, by vt__frame_fold's rule (the page's
 * too): in a stack with Python frames, the interpreter's native frames (its
 * evaluation loop and calls) and torch's Python dispatch plumbing
 * (nn.Module.__call__ and the like); a recorder's own frames always. */
bool vt__report_frame_folded(const vt__snapshot_data *s, const vt__frame *f, bool has_python);

/* The call site of stack `id`: its innermost Python frame not folded, when
 * it has one (and not --all-frames); else the innermost frame that is not
 * vramtrace, the CUDA runtime or driver, or the C/C++ runtime (allocation
 * wrappers); the innermost frame when all are; NULL for an empty stack. */
const vt__frame *vt__report_site_frame(const vt__snapshot_data *s, uint32_t id);

/* A line as a key: one line of one file, however many frames name it (a
 * native frame: itself); 0 for NULL. */
uint64_t vt__report_frame_key(const vt__snapshot_data *s, const vt__frame *f);

/* What a library made under a line of the program: the library's line
 * (vt__snapshot_library_frame) or, for a library's own workspace, the frame
 * that made it (vt__report_library_workspace), with bytes and allocations. */
typedef struct vt__report_inside {
    const vt__frame *frame;     /* NULL: the program's line called torch itself */
    bool workspace;
    uint64_t bytes;
    uint32_t count;
} vt__report_inside;

/* Stack `id`'s, for one allocation of `bytes`. */
vt__report_inside vt__report_inside_of(const vt__snapshot_data *s, uint32_t id, uint64_t bytes);

/* items[0..n) summed by line (vt__report_frame_key), the largest first: the
 * first `max` in out[], how many lines in *nlines (those without a frame
 * left out). @return 0 or -ENOMEM. */
int vt__report_sum_inside(const vt__snapshot_data *s, const vt__report_inside *items, size_t n,
                          vt__report_inside *out, size_t max, uint32_t *nlines);

/* A site's short name, one line, as compare lists sites across ranks: the
 * Python source line as the file reads now with the file's base name,
 * "recv = torch.empty(n) (stage.py:41)", where it can be read; else
 * "fn file:line" ("fn", "module+0xoff" where less is known; "<no stack
 * recorded>" for NULL). */
void vt__report_site_name(const vt__snapshot_data *s, const vt__frame *f, char *buf, size_t len);

/* "fn file:line (module+0xoff)" with the parts that are known; a Python
 * frame's "fn file:line (def at line N)" where its function's first line is
 * known (vt__frame_def_line). */
void vt__report_frame_text(FILE *out, const vt__snapshot_data *s, const vt__frame *f);

/* That text as a JSON string; null for no frame. */
void vt__report_frame_json(FILE *out, const vt__snapshot_data *s, const vt__frame *f);

/* "    #N 0x... in fn file:line (module+0x...)" for every frame of `stack`,
 * or "    <no stack recorded>". Where the program's own Python code is on
 * the stack (and not --all-frames), only its frames are listed, innermost
 * first, and the rest counted on "(N ... hidden)" lines. */
void vt__report_stack(FILE *out, const vt__snapshot_data *s, uint32_t stack, const char *indent);

/* Whether stack `id` allocated a library's own handle or workspace (cuBLAS,
 * cuDNN, NCCL, ...: memory the library keeps and reuses by design): the
 * frame that says so (vt__frame_makes_library_workspace, or the library
 * that called the allocator), else NULL. */
const vt__frame *vt__report_library_workspace(const vt__snapshot_data *s, uint32_t id);

/* The frame of PyTorch's pinned host cache that made stack `id`'s block
 * (vt__frame_makes_host_cache_block), or NULL. */
const vt__frame *vt__report_host_cache(const vt__snapshot_data *s, uint32_t id);

/* The allocator's state at the snapshot, per device (STATE section). */
typedef struct vt__state_totals {
    uint64_t allocated, allocated_blocks;  /* active_allocated blocks */
    uint64_t pending, pending_blocks;      /* active_pending_free blocks */
    uint64_t reserved, segments;
} vt__state_totals;
void vt__report_state_totals(const vt__snapshot_data *s, int device, vt__state_totals *out);

/* The device info of ordinal `device`, or NULL. */
const vt__snap_device *vt__report_device(const vt__snapshot_data *s, int device);

/* Name of an event kind ("ALLOC", ...; "KIND_<n>" for unknown ones). */
const char *vt__kind_name(unsigned kind, char *buf, size_t len);

#endif /* VT_CLI_REPORT_UTIL_H */
