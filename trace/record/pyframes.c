/*
 * trace/record/pyframes.c - the calling thread's Python frames, read from the
 * interpreter's own structures, without linking or calling into libpython.
 *
 * Finding the interpreter. Recording starts by looking the interpreter up
 * with dlsym(RTLD_DEFAULT); a process without Python finds nothing, and looks
 * again only after it dlopens or dlsyms something (stacks.c, "Finding Python
 * later": a program embedding Python loads it late). A process whose Python
 * this file does not know (another minor version, a free-threaded build) is
 * treated the same way: native stacks only. vt__py_detect looks, one thread
 * at a time, only until it has found one (what it found is never written
 * again); the recorder's captures read the frames once stacks.c has
 * published its answer, vt_python_frames() once `py_found` says so. A look
 * lost to another thread's is made again at stacks.c's next chance (the
 * program's next dlopen or dlsym).
 *
 * Which thread state. Torch's bindings release the GIL around dispatch, so
 * the thread calling the allocator usually does not hold it, and
 * PyThreadState_Get()/_PyThreadState_UncheckedGet() answer NULL then (3.12+
 * clears the current thread state of a detached thread). But
 * PyGILState_GetThisThreadState() reads the thread's own TSS slot
 * (Python/pystate.c: gilstate_tss_get, a pthread_getspecific) and works
 * without the GIL: it names the thread state this thread attached last, whose
 * frame chain it left as it was when it released the GIL. Only the calling
 * thread mutates its own frame chain, and it is blocked in our call, so
 * reading it needs no lock. We never read another thread's frames, and never
 * from a signal handler (signal-driven snapshots are written by vramtrace's
 * own thread from stacks already interned). Before reading anything
 * Py_IsInitialized() must say yes: before initialization the TSS key is not
 * created, and from the start of finalization thread states may be freed.
 *
 * Frame layouts (offsets below, measured with offsetof against each
 * version's installed headers; 3.13's are taken from the _Py_DebugOffsets
 * that _PyRuntime starts with where they cover them):
 *   3.10  tstate->frame, a PyFrameObject chain: f_back, f_code, f_lasti (in
 *         code units; Objects/frameobject.c PyFrame_GetLineNumber passes
 *         f_lasti * 2 to PyCode_Addr2Line). One C call of
 *         _PyEval_EvalFrameDefault per Python frame.
 *   3.11  tstate->cframe->current_frame, a _PyInterpreterFrame chain:
 *         previous, f_code, prev_instr; Include/internal/pycore_frame.h:
 *         is_entry marks the first frame a C call of the eval loop ran, and
 *         _PyFrame_IsIncomplete (owner != GENERATOR && prev_instr <
 *         _PyCode_CODE(code) + _co_firsttraceable) frames that have not
 *         started, which tracebacks skip too.
 *   3.12  the same, except that each C call of the eval loop pushes a shim
 *         frame on the C stack (owner FRAME_OWNED_BY_CSTACK, Python/ceval.c
 *         entry_frame) instead of setting is_entry.
 *   3.13  tstate->current_frame; f_executable (code object or None),
 *         instr_ptr (the instruction executing, not the previous one); the
 *         CSTACK shim as in 3.12 (pycore_frame.h _PyFrame_IsIncomplete).
 * The line of a frame comes from PyCode_Addr2Line(code, byte offset), which
 * _PyInterpreterFrame_GetLine (3.11, 3.12) and PyUnstable_InterpreterFrame_
 * GetLine (3.13) call the same way. It is a pure function of the code
 * object's immutable co_linetable (Objects/codeobject.c: it walks a
 * PyCodeAddressRange on the stack; no allocation, no reference counting, no
 * thread state), so it is safe without the GIL; decoding the line table
 * ourselves would mean one more format per version to get right. It is only
 * called on the first sight of a (code, offset) pair per thread.
 *
 * Names are copied out of the code object's str objects (compact ASCII, or
 * compact with a cached UTF-8 copy, or encoded here from UCS-1/2/4) into the
 * pinned interned strings when a frame is first seen, as "file:line function":
 * a code object freed before the export leaves its frame's text behind. The
 * code object's co_firstlineno (where its function is defined) travels in
 * the frame's synthetic IP itself (rec_internal.h), read at the same time.
 */
#include "rec_internal.h"
#include "vramtrace.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layout {
    unsigned minor;        /* 3.minor */
    int ts_frame;          /* tstate -> innermost frame (3.11/12: -> cframe) */
    int cframe_current;    /* cframe -> current_frame, -1 without a cframe */
    int fr_back;           /* frame -> the frame that called it */
    int fr_code;           /* frame -> code object (3.13: f_executable) */
    int fr_instr;          /* 3.10: int f_lasti; later: instruction pointer */
    int fr_owner;          /* char owner, -1 in 3.10 */
    int fr_is_entry;       /* bool is_entry (3.11 only), else -1 */
    int co_filename, co_name, co_firstlineno;
    int co_code;           /* co_code_adaptive: instructions start here (3.11+) */
    int co_firsttraceable; /* int _co_firsttraceable (3.11+) */
    int str_ascii_size;    /* sizeof(PyASCIIObject): ASCII data follows */
    int str_compact_size;  /* sizeof(PyCompactUnicodeObject): other data follows */
    int str_utf8_len, str_utf8;  /* PyCompactUnicodeObject utf8_length, utf8 */
} layout;

/* Release builds (the x86-64 and aarch64 ABI are the same LP64 layouts). */
static const layout layouts[] = {
    { 10, 24, -1, 24, 32, 96, -1, -1, 104, 112, 40, -1, -1, 48, 72, 48, 56 },
    { 11, 56, 8, 48, 32, 56, 69, 68, 112, 120, 72, 184, 168, 48, 72, 48, 56 },
    { 12, 56, 0, 8, 0, 56, 70, -1, 112, 120, 68, 192, 176, 40, 56, 40, 48 },
    { 13, 72, -1, 8, 0, 56, 70, -1, 112, 120, 68, 200, 184, 40, 56, 40, 48 },
};

enum { OWNED_BY_GENERATOR = 1, OWNED_BY_CSTACK = 3 };
#define STR_STATE 32       /* PyASCIIObject.state, every version */
#define STR_LENGTH 16      /* PyASCIIObject.length */

static const layout *L;                     /* NULL: no Python we can read */
static int (*py_is_initialized)(void);
static void *(*py_gilstate_tstate)(void);
static int (*py_addr2line)(void *code, int addr);
static const void *py_code_type, *py_str_type;
static uintptr_t eval_lo, eval_hi;          /* _PyEval_EvalFrameDefault's code */

static unsigned python_minor(void)
{
    const unsigned long *hex = dlsym(RTLD_DEFAULT, "Py_Version");   /* 3.11+ */
    if (hex)
        return (*hex >> 24) == 3 ? (unsigned)(*hex >> 16 & 0xff) : 0;
    const char *(*get_version)(void) = NULL;
    *(void **)&get_version = dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (!get_version)
        return 0;
    /* Formats PY_VERSION into a static buffer; no interpreter state. */
    const char *v = get_version();
    unsigned major = 0, minor = 0;
    if (!v || sscanf(v, "%u.%u", &major, &minor) != 2 || major != 3)
        return 0;
    return minor;
}

/* The head of 3.13's _Py_DebugOffsets, which _PyRuntime starts with
 * (Include/internal/pycore_runtime.h), as far as this file uses it: the
 * running interpreter's own word on its layout, for debuggers and profilers
 * that read it from outside. */
typedef struct debug_offsets_313 {
    char cookie[8];                    /* "xdebugpy" */
    uint64_t version, free_threaded;
    uint64_t runtime_state[3];
    uint64_t interpreter_state[13];
    struct { uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
             datastack_chunk, status; } thread_state;
    struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } frame;
    struct { uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
             localsplusnames, localspluskinds, co_code_adaptive; } code;
} debug_offsets_313;

static layout from_debug;

/* 3.13: take the offsets _PyRuntime publishes over the table's. @return
 * false when it is not there or names a free-threaded build. */
static bool debug_offsets(const layout *table, const layout **out)
{
    const debug_offsets_313 *d = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (!d || memcmp(d->cookie, "xdebugpy", 8) != 0)
        return false;
    if (d->free_threaded)
        return false;
    from_debug = *table;
    from_debug.ts_frame = (int)d->thread_state.current_frame;
    from_debug.fr_back = (int)d->frame.previous;
    from_debug.fr_code = (int)d->frame.executable;
    from_debug.fr_instr = (int)d->frame.instr_ptr;
    from_debug.fr_owner = (int)d->frame.owner;
    from_debug.co_filename = (int)d->code.filename;
    from_debug.co_name = (int)d->code.name;
    from_debug.co_firstlineno = (int)d->code.firstlineno;
    from_debug.co_code = (int)d->code.co_code_adaptive;
    *out = &from_debug;
    return true;
}

/* Set once the interpreter's layout is known (release, after everything
 * vt__py_walk reads is written). One thread looks at a time (no lock: a
 * fork while another thread looked leaves the child without Python frames,
 * never waiting). */
static _Atomic bool py_found, py_detecting;

static bool detect_once(void);

/* 1: found, 0: another thread is looking, -1: no Python this file reads. */
static int detect(void)
{
    if (atomic_load_explicit(&py_found, memory_order_acquire))
        return 1;
    bool idle = false;
    if (!atomic_compare_exchange_strong(&py_detecting, &idle, true))
        return 0;
    int got = atomic_load_explicit(&py_found, memory_order_acquire) || detect_once() ? 1 : -1;
    if (got > 0)
        atomic_store_explicit(&py_found, true, memory_order_release);
    atomic_store_explicit(&py_detecting, false, memory_order_release);
    return got;
}

bool vt__py_detect(void)
{
    return detect() > 0;
}

static bool detect_once(void)
{
    unsigned minor = python_minor();
    const layout *found = NULL;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].minor == minor)
            found = &layouts[i];
    /* Free-threaded builds have another object header. */
    if (!found || dlsym(RTLD_DEFAULT, "_Py_MergeZeroLocalRefcount"))
        return false;
    if (minor == 13 && !debug_offsets(found, &found))
        return false;
    *(void **)&py_is_initialized = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    *(void **)&py_gilstate_tstate = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    *(void **)&py_addr2line = dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
    py_code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    py_str_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    if (!py_is_initialized || !py_gilstate_tstate || !py_addr2line || !py_code_type ||
        !py_str_type)
        return false;
    Dl_info di;
    const ElfW(Sym) *sym = NULL;
    if (eval && dladdr1(eval, &di, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size) {
        eval_lo = (uintptr_t)eval;
        eval_hi = eval_lo + sym->st_size;
    }
    L = found;
    return true;
}

/* The one reader of Python frames in C: the recorder's captures and
 * vramtrace.torch's extension (which keys its stacks by these pairs) both
 * read them here. An interpreter is looked for once per process when the
 * recorder has not found one (its stacks configured native, say); one this
 * file cannot read stays unreadable. */
VT_API int vt_python_frames(uint64_t *pairs, int max)
{
    static _Atomic bool unreadable;
    if (!pairs || max <= 0)
        return 0;
    if (!atomic_load_explicit(&py_found, memory_order_acquire)) {
        if (atomic_load_explicit(&unreadable, memory_order_relaxed))
            return -1;
        int got = detect();
        if (got < 0)
            atomic_store_explicit(&unreadable, true, memory_order_relaxed);
        if (got <= 0)
            return -1;
    }
    vt__pyframe py[VT_STACK_MAX_DEPTH];
    uint32_t ngroups;
    int n = vt__py_walk(py, max < VT_STACK_MAX_DEPTH ? max : VT_STACK_MAX_DEPTH, &ngroups);
    for (int i = 0; i < n; i++) {
        pairs[2 * i] = py[i].code;
        pairs[2 * i + 1] = (uint64_t)(int64_t)py[i].addr;
    }
    return n;
}

unsigned vt__py_minor(void)
{
    return L ? L->minor : 0;
}

bool vt__py_is_eval_frame(uint64_t ip)
{
    /* ip is a return address: the call is at ip - 1. */
    return ip - 1 - eval_lo < eval_hi - eval_lo;
}

#define AT(p, off, type) (*(type const *)((const char *)(p) + (off)))

int vt__py_walk(vt__pyframe *out, int max, uint32_t *ngroups)
{
    *ngroups = 0;
    if (!L || !py_is_initialized())
        return 0;
    const char *ts = py_gilstate_tstate();
    if (!ts)
        return 0;
    const char *f = AT(ts, L->ts_frame, const char *);
    if (L->cframe_current >= 0)
        f = f ? AT(f, L->cframe_current, const char *) : NULL;
    int n = 0;
    uint32_t group = 0;
    bool seen = false;     /* a frame of the current group was read */
    for (unsigned guard = 0; f && n < max && guard < 4096; guard++,
                  f = AT(f, L->fr_back, const char *)) {
        const char *code = AT(f, L->fr_code, const char *);
        int owner = L->fr_owner >= 0 ? AT(f, L->fr_owner, char) : 0;
        if (owner == OWNED_BY_CSTACK) {
            /* 3.12+: the shim of the eval loop's C call: the frames read so
             * far ran in that call, the next ones in an outer call. */
            if (seen)
                group++;
            seen = false;
            continue;
        }
        if (!code || AT(code, 8, const void *) != py_code_type)
            continue;
        int addr;
        bool incomplete = false;
        if (L->minor == 10) {
            int lasti = AT(f, L->fr_instr, int);
            addr = lasti < 0 ? -1 : lasti * 2;
        } else {
            const char *first = code + L->co_code;
            const char *ip = AT(f, L->fr_instr, const char *);
            addr = (int)(ip - first);
            incomplete = owner != OWNED_BY_GENERATOR &&
                         ip < first + 2 * AT(code, L->co_firsttraceable, int);
            /* 3.11/3.12: prev_instr is one before the start until the first
             * instruction runs; PyCode_Addr2Line answers co_firstlineno. */
            if (addr < 0)
                addr = -1;
        }
        seen = true;
        if (!incomplete) {
            out[n].code = (uint64_t)(uintptr_t)code;
            out[n].addr = addr;
            out[n].group = group;
            out[n].names = (uint64_t)(uintptr_t)AT(code, L->co_filename, const void *) ^
                           (uint64_t)(uintptr_t)AT(code, L->co_name, const void *) << 1 ^
                           (uint64_t)AT(code, L->co_firstlineno, int) << 48;
            n++;
        }
        if (L->minor == 10 || (L->fr_is_entry >= 0 && AT(f, L->fr_is_entry, char))) {
            group++;
            seen = false;
        }
    }
    *ngroups = group + (seen ? 1 : 0);
    return n;
}

/* Append str object `s` as UTF-8 to buf[*pos..len). */
static void put_str(const char *s, char *buf, size_t *pos, size_t len)
{
    if (!s || AT(s, 8, const void *) != py_str_type) {
        *pos += (size_t)snprintf(buf + *pos, len - *pos, "?");
        return;
    }
    uint32_t state = AT(s, STR_STATE, uint32_t);
    unsigned kind = state >> 2 & 7;
    bool compact = state & 0x20, ascii = state & 0x40;
    int64_t n = AT(s, STR_LENGTH, int64_t);
    size_t room = len - *pos - 1;
    if (!compact) {
        *pos += (size_t)snprintf(buf + *pos, len - *pos, "?");
        return;
    }
    if (ascii || (AT(s, L->str_utf8, const char *) != NULL)) {
        const char *data = ascii ? s + L->str_ascii_size : AT(s, L->str_utf8, const char *);
        size_t m = ascii ? (size_t)n : (size_t)AT(s, L->str_utf8_len, int64_t);
        if (m > room)
            m = room;
        memcpy(buf + *pos, data, m);
        *pos += m;
        buf[*pos] = '\0';
        return;
    }
    const char *data = s + L->str_compact_size;
    for (int64_t i = 0; i < n; i++) {
        uint32_t c = kind == 1 ? (uint8_t)data[i]
                   : kind == 2 ? ((const uint16_t *)(const void *)data)[i]
                               : ((const uint32_t *)(const void *)data)[i];
        char u[4];
        size_t k;
        if (c < 0x80) {
            u[0] = (char)c;
            k = 1;
        } else if (c < 0x800) {
            u[0] = (char)(0xC0 | c >> 6);
            u[1] = (char)(0x80 | (c & 0x3F));
            k = 2;
        } else if (c < 0x10000) {
            u[0] = (char)(0xE0 | c >> 12);
            u[1] = (char)(0x80 | (c >> 6 & 0x3F));
            u[2] = (char)(0x80 | (c & 0x3F));
            k = 3;
        } else {
            u[0] = (char)(0xF0 | c >> 18);
            u[1] = (char)(0x80 | (c >> 12 & 0x3F));
            u[2] = (char)(0x80 | (c >> 6 & 0x3F));
            u[3] = (char)(0x80 | (c & 0x3F));
            k = 4;
        }
        if (k > room)
            break;
        memcpy(buf + *pos, u, k);
        *pos += k;
        room -= k;
    }
    buf[*pos] = '\0';
}

uint64_t vt__py_frame_ip(const vt__pyframe *f)
{
    const char *code = (const char *)(uintptr_t)f->code;
    char text[1024];
    size_t pos = 0;
    put_str(AT(code, L->co_filename, const char *), text, &pos, sizeof text - 64);
    int line = py_addr2line((void *)(uintptr_t)code, f->addr);
    pos += (size_t)snprintf(text + pos, sizeof text - pos, ":%d ", line > 0 ? line : 0);
    put_str(AT(code, L->co_name, const char *), text, &pos, sizeof text);
    uint32_t s = vt__string_intern_pinned(text);
    /* co_firstlineno: an int the compiler sets once, every version; the line
     * of the first decorator, else of the def (1 for a module). */
    int first = AT(code, L->co_firstlineno, int);
    uint64_t def = first > 0 && first <= VT_IP_FIRST_LINE_MAX ? (uint64_t)first : 0;
    return s ? VT_IP_SYNTHETIC | def << VT_IP_FIRST_LINE_SHIFT | s : 0;
}

bool vt__py_frame_is(const vt__pyframe *f, const char *suffix, const char *name)
{
    const char *code = (const char *)(uintptr_t)f->code;
    char text[512];
    size_t pos = 0;
    put_str(AT(code, L->co_name, const char *), text, &pos, sizeof text);
    if (strcmp(text, name) != 0)
        return false;
    pos = 0;
    put_str(AT(code, L->co_filename, const char *), text, &pos, sizeof text);
    size_t n = strlen(suffix);
    return pos >= n && memcmp(text + pos - n, suffix, n) == 0;
}
