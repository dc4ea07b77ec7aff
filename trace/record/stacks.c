/*
 * trace/record/stacks.c - stack capture: native frames, Python frames merged
 * in, frames lent to threads that run no Python. Stacks are interned as
 * paths of the prefix tree (stack_tree.c); a stack id is a node id.
 *
 * Capturing a stack seen before (the common case: a training loop allocates
 * from the same call sites again and again) avoids the unwind altogether on
 * x86-64: each thread remembers recent walks - the registers they started
 * from and the stack words they read - and a walk whose words all still hold
 * their values gives the same stack (see "Remembering walks" below). Where
 * that does not apply, libunwind's unw_backtrace runs (~60 ns for 40 frames
 * once its per-thread frame cache is warm; under ThreadSanitizer a cursor
 * walk, see unwind_ips), and a per-thread
 * direct-mapped cache from the hash of the raw IP array to the stack id spares
 * the tree lookups. Its keys are 64-bit hashes of the whole array; a false hit
 * needs a 64-bit collision between two distinct stacks of one thread.
 *
 * Nothing here calls malloc: tables are mmap'ed once at init, the per-thread
 * cache once per thread.
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "vramtrace.h"
#include "rec_internal.h"
#include "recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"

#define CACHE_SLOTS 1024               /* per thread, 12 KiB */
#define PY_SLOTS 1024                  /* merged Python+native stacks per thread */
#define PY_FRAME_SLOTS 1024            /* Python frame -> synthetic IP per thread */
#define MAX_SLACK 32                   /* our own frames we expect at most */

#if defined(__x86_64__)
#define FAST_PATH 1
#define FAST_WAYS 8                    /* remembered walks per set, LRU */
#define FAST_SETS 32                   /* 256 walks per thread, 800 KiB virtual */
#define FAST_WORDS 192                 /* stack words one walk may depend on */
#define NO_LEARN UINT32_MAX            /* walk.nwords: this key cannot be remembered */
#define PENDING (UINT32_MAX - 1)       /* walk.nwords: missed once, learn on the next */
#define KEY_SLOTS 512                  /* start registers with a discriminating word */
/* Learning a walk uses libunwind's cursor API, which masks and unmasks
 * signals (two syscalls) and takes a mutex as it steps: ~3 us for a dozen
 * frames, ~50 plain unw_backtrace calls (these use libunwind's lock-free
 * per-thread trace cache). Each
 * capture that has to unwind earns one credit, a learn costs LEARN_COST, so
 * a thread whose stacks never repeat closely enough to be answered from
 * memory (more distinct stacks than it remembers, cycled) spends at most
 * 1/LEARN_COST of a learn per unwind, about a fifth of the unwind itself.
 * The starting (and maximal) credit pays for LEARN_BURST learns at once: a
 * program's few dozen hot call sites are learned within their first
 * captures. */
#define LEARN_COST 256
#define LEARN_BURST 64
#define CREDIT_MAX (LEARN_COST * LEARN_BURST)

/* A stack word a walk read and its value. */
typedef struct word { uintptr_t addr, val; } word;

/* Start registers (sp, bp, return address into the recorder) that more than
 * one stack has been seen from: every call site that reaches the allocator
 * through the same entry at the same depth shares them, hundreds in a large
 * program. Their walks first differ in one stack word (the call site's return
 * address, usually a few frames out); its value goes into the set index, so
 * those stacks spread over the sets instead of evicting each other from one. */
typedef struct keydisc {
    uint64_t key;                      /* 0 = empty */
    uintptr_t addr;                    /* the discriminating word (>= the key's sp) */
    uint32_t index;                    /* its position in the walks that found it */
} keydisc;

/* A remembered unwind: the registers it started from and every stack word it
 * read (return addresses, saved frame pointers), with their values. */
typedef struct walk {
    uintptr_t sp, bp, ra;              /* in capture(): the walk's start */
    uint64_t used;                     /* ts->clock at its last use (LRU) */
    uint64_t placed;                   /* the set hash it was placed with: a PENDING
                                        * walk of another call site differs */
    uint32_t id;                       /* the stack id it gave */
    uint32_t nwords;                   /* words[] in use, or NO_LEARN / PENDING */
    uint32_t nany;                     /* saved rbp values outside the live stack (no
                                        * frame pointer: see "Remembering walks"),
                                        * addresses only: words[FAST_WORDS - 1 - i].addr */
    word words[FAST_WORDS];            /* exact words in walk order from the front */
} walk;
#endif

typedef struct tstate {
    uint64_t key[CACHE_SLOTS];         /* hash of an IP array, 0 = empty */
    uint32_t id[CACHE_SLOTS];          /* its stack id */
    uint32_t spare;                    /* node id lost in a CAS race, reusable
                                        * (stack_tree.c) */
    uint64_t hits;                     /* cache hits of either kind (tests) */
    vt__stack_captures stats;          /* this thread's captures by path */
    uint32_t modules_gen;              /* modules_gen its remembered walks belong to */
    uint64_t pykey[PY_SLOTS];          /* hash of (native stack, Python frames), 0 = empty */
    uint32_t pyid[PY_SLOTS];           /* the merged stack's id */
    uint32_t pyback[PY_SLOTS];         /* its frames from an autograd backward call
                                        * outward (backward_python), 0: none */
    uint64_t fkey[PY_FRAME_SLOTS];     /* hash of a Python frame (code, names, offset) */
    uint64_t fip[PY_FRAME_SLOTS];      /* its synthetic IP */
    uint32_t lent;                     /* vt_thread_python_stack's frames, 0: none */
#ifdef FAST_PATH
    uintptr_t stack_hi;                /* end of this thread's stack, 0 = unknown */
    uint64_t clock;                    /* walk LRU clock */
    uint32_t credit;                   /* learning budget, see LEARN_COST */
    uint64_t wkey[FAST_SETS * FAST_WAYS];  /* walks[i]'s key (hash of sp, bp, ra), 0 = empty;
                                          * a set's keys share one cache line */
    walk walks[FAST_SETS * FAST_WAYS];
    keydisc disc[KEY_SLOTS];
#endif
} tstate;

#define TS_DEAD ((tstate *)(uintptr_t)1)

static unsigned depth;                 /* frames kept per stack, 0 = off */
static bool free_stacks;
/* Python frames are read once an interpreter is found (see "Finding Python
 * later" below); until then captures are native. Published with release
 * after pyframes.c's state is written. */
static _Atomic unsigned py_stacks = VT_STACKS_NATIVE;  /* VT_STACKS_NATIVE: no Python read */
static unsigned py_wanted = VT_STACKS_NATIVE;  /* the configuration's choice */
static _Atomic uint32_t loads_gen;     /* dlopen/dlsym calls seen by the hooks */
static _Atomic uint32_t py_probed_gen; /* loads_gen when Python was last looked for */
static _Atomic bool py_probing;        /* one thread looks at a time */
static _Atomic unsigned slack = 8;     /* extra frames unwound for our own */
static uintptr_t mod_lo, mod_hi;       /* our module's code, when a shared object */
static _Atomic uintptr_t obs_lo, obs_hi; /* an observer's module (vt_pool_observe): ours too */
static pthread_key_t ts_key;
/* Bumped when a library is unloaded: code at a remembered address may now be
 * another library's, so every thread forgets its walks (see ts_get). */
static _Atomic uint32_t modules_gen;

static __thread tstate *my_ts __attribute__((tls_model("initial-exec")));

extern const char __start_vt_rec_text[] __attribute__((weak, visibility("hidden")));
extern const char __stop_vt_rec_text[] __attribute__((weak, visibility("hidden")));

static void ts_destroy(void *p)
{
    if (p && p != TS_DEAD)
        munmap(p, sizeof(tstate));
    /* Later allocations of this thread's TLS destructors go uncached. */
    my_ts = TS_DEAD;
}

/* A library was unloaded since this thread last remembered a walk. */
static void ts_forget_walks(tstate *t, uint32_t gen)
{
#ifdef FAST_PATH
    memset(t->wkey, 0, sizeof t->wkey);
    memset(t->disc, 0, sizeof t->disc);
#endif
    t->modules_gen = gen;
}

static tstate *ts_get(void)
{
    tstate *t = my_ts;
    if (vt__likely(t != NULL)) {
        if (t == TS_DEAD)
            return NULL;
        uint32_t gen = atomic_load_explicit(&modules_gen, memory_order_relaxed);
        if (vt__unlikely(t->modules_gen != gen))
            ts_forget_walks(t, gen);
        return t;
    }
    t = vt__map_tables(sizeof *t);
    my_ts = t ? t : TS_DEAD;
    if (!t)
        return NULL;
    pthread_setspecific(ts_key, t);
#ifdef FAST_PATH
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo = NULL;
        size_t size = 0;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0 && lo)
            t->stack_hi = (uintptr_t)lo + size;
        pthread_attr_destroy(&attr);
    }
    t->credit = CREDIT_MAX;
#endif
    t->modules_gen = atomic_load_explicit(&modules_gen, memory_order_relaxed);
    return t;
}

void vt__trace_modules_changed(void)
{
    atomic_fetch_add_explicit(&modules_gen, 1, memory_order_relaxed);
    /* libunwind caches unwind info by address; its own remedy for unloads. */
    unw_flush_cache(unw_local_addr_space, 0, 0);
}

struct find_self { uintptr_t addr, lo, hi; bool found, is_main; };

static int find_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct find_self *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        if (f->addr >= a && f->addr < b)
            mine = true;
        if (ph->p_flags & PF_X) {
            if (a < lo) lo = a;
            if (b > hi) hi = b;
        }
    }
    if (!mine)
        return 0;
    f->found = true;
    f->lo = lo;
    f->hi = hi;
    /* The main program is reported first, with an empty name. */
    f->is_main = info->dlpi_name == NULL || info->dlpi_name[0] == '\0';
    return 1;
}

int vt__stacks_init(unsigned d)
{
    const vt__conf *c = vt__config();
    depth = d > VT_STACK_MAX_DEPTH ? VT_STACK_MAX_DEPTH : d;
    free_stacks = c->free_stacks;
    py_wanted = c->stacks;
    atomic_store_explicit(&py_probed_gen, atomic_load(&loads_gen), memory_order_relaxed);
    atomic_store_explicit(&py_stacks,
                          py_wanted != VT_STACKS_NATIVE && vt__py_detect() ? py_wanted
                                                                           : VT_STACKS_NATIVE,
                          memory_order_release);
    static bool made;
    if (!made) {
        if (vt__stack_tree_init() != 0)
            return -ENOMEM;
        if (pthread_key_create(&ts_key, ts_destroy) != 0)
            return -EAGAIN;
        made = true;
    }
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    uintptr_t lo, hi;
    if (vt__module_text((uintptr_t)&vt__stacks_init, &lo, &hi) == 1) {
        mod_lo = lo;
        mod_hi = hi;
    }
    return 0;
}

int vt__module_text(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
    struct find_self f = { .addr = addr };
    dl_iterate_phdr(find_self_cb, &f);
    if (!f.found)
        return 0;
    *lo = f.lo;
    *hi = f.hi;
    return f.is_main ? 2 : 1;
}

int vt__stacks_own_module(const void *addr)
{
    uintptr_t lo, hi;
    if (vt__module_text((uintptr_t)addr, &lo, &hi) != 1)
        return -ENOENT;
    atomic_store_explicit(&obs_hi, 0, memory_order_relaxed);   /* empty while it changes */
    atomic_store_explicit(&obs_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&obs_hi, hi, memory_order_release);
    return 0;
}

static inline bool own_frame(uintptr_t ip)
{
    uintptr_t olo = atomic_load_explicit(&obs_lo, memory_order_relaxed);
    uintptr_t ohi = atomic_load_explicit(&obs_hi, memory_order_acquire);
    return (ip - mod_lo < mod_hi - mod_lo) || (ip - olo < ohi - olo) ||
           (ip - (uintptr_t)__start_vt_rec_text <
            (uintptr_t)__stop_vt_rec_text - (uintptr_t)__start_vt_rec_text);
}

static inline uint64_t mix(uint64_t h, uint64_t v)
{
    return vt__stack_mix(h, v);
}

/* Intern ips[0..n) given innermost first (stack_tree.c), with the
 * thread's spare node id. */
static uint32_t intern(const uint64_t *ips, size_t n, tstate *ts)
{
    return vt__stack_tree_intern(ips, n, ts ? &ts->spare : NULL);
}

uint32_t vt__stack_intern_ips(const uint64_t *ips, size_t n)
{
    if (n == 0 || !vt__rec_on())
        return 0;
    return intern(ips, n > VT_STACK_MAX_DEPTH ? VT_STACK_MAX_DEPTH : n, ts_get());
}

/* Raw IPs of a walk (own frames first) -> stack id: skip our frames, cut to
 * the depth, then the per-thread IP-array cache, then the tree. */
static uint32_t finish(void *const *buf, int n, unsigned d, unsigned sl, tstate *ts)
{
    int skip = 0;
    while (skip < n && own_frame((uintptr_t)buf[skip]))
        skip++;
    /* Deep inside our own code (hooks -> allocator -> here): unwind more next
     * time so that callers still get `depth` frames of their own. */
    if ((unsigned)skip + 2 > sl && sl < MAX_SLACK)
        atomic_store_explicit(&slack, (unsigned)skip + 4 < MAX_SLACK ? (unsigned)skip + 4
                                                                      : MAX_SLACK,
                              memory_order_relaxed);
    int m = n - skip;
    if (m > (int)d)
        m = (int)d;
    if (m <= 0)
        return 0;
    uint64_t ips[VT_STACK_MAX_DEPTH];
    uint64_t h = (uint64_t)m;
    for (int i = 0; i < m; i++) {
        ips[i] = (uint64_t)(uintptr_t)buf[skip + i];
        h = mix(h, ips[i]);
    }
    h |= 1;
    if (vt__likely(ts != NULL)) {
        unsigned slot = (unsigned)(h >> 40) & (CACHE_SLOTS - 1);
        if (ts->key[slot] == h) {
            ts->hits++;
            return ts->id[slot];
        }
        uint32_t id = intern(ips, (size_t)m, ts);
        /* A truncated stack is not remembered: each capture counts. */
        if (id && !(id & VT_STACK_TRUNCATED)) {
            ts->key[slot] = h;
            ts->id[slot] = id;
        }
        return id;
    }
    return intern(ips, (size_t)m, NULL);
}

#ifdef FAST_PATH
/* Remembering walks.
 *
 * An unwind is a pure function of the registers it starts from (ip, sp and
 * the frame pointer; CFA rules use nothing else in practice) and of the stack
 * words it reads: each frame's return address and, for frames that keep a
 * frame pointer, the saved rbp. So when capture() runs again with the same sp,
 * bp and return address, and every one of those words still holds the value
 * it had, the walk would give the same stack: checking ~40 words in the hot
 * top of the stack replaces unwinding ~40 frames (bench_trace shows the
 * difference). The words are learned per call site with libunwind's cursor API,
 * which tells where each frame's CFA and saved rbp are; a walk through a
 * signal frame, or reading outside this thread's stack, is not remembered.
 * A key is learned on its second miss (the first leaves a PENDING walk), so
 * one-off stacks pay no learning, and learning is paid for by credit
 * (LEARN_COST), so stacks that come back too rarely to stay remembered never
 * make capturing much slower than unwinding.
 *
 * rbp is part of the key only when it points into the live stack. Code built
 * without frame pointers (most libraries, PyTorch included) keeps a loop
 * counter or a heap pointer there, and a key per value would make every
 * capture from a loop a new key. A value outside [sp, stack end) cannot be a
 * frame pointer the walk follows: a CFA rule based on it would read outside
 * the stack, and such walks are not remembered (learn() refuses them). The
 * same holds for the rbp values that frames saved on the stack, restored by
 * the walk for the frames further out: one outside the live stack is
 * remembered as "any value outside the live stack", or a loop counter saved
 * by a callee would make every capture of the loop a mismatch.
 *
 * Two sets per walk. The walks of a key are spread over the sets by the
 * value of its discriminating word, the return address into each call site;
 * a program's call sites through one entry are a few dozen such addresses,
 * and with one set per walk, some address layouts (ASLR draws a new one each
 * run) put more of them in one set than it has ways: they then evict each
 * other in turn, each one unwound and learned again on every round until
 * the learning credit is spent, a fast path lost for the whole run by the
 * luck of the draw (about one run in 60 with 40 sites). Each walk may
 * live in either of two sets, the new one goes to the way least recently
 * used of both (two choices: the fullest set stays within a few walks of
 * the average); a lookup reads the second set's keys only when the first
 * does not answer. Two sets per walk also means more call sites meet in a
 * set, so a pending walk keeps the set hash it was placed with: another
 * site's first miss is not this site's second. */
static void remember(walk *w, uintptr_t a, uintptr_t lo, uintptr_t hi, bool saved_bp,
                     bool *ok)
{
    /* Below capture()'s sp: learn()'s frame, or capture()'s own register
     * saves where its prologue runs after the sp was read (shrink-wrapping):
     * the return address into capture() and the rbp of the key, no
     * dependency either. */
    if (a < lo)
        return;
    if (a + sizeof(uintptr_t) > hi) {
        *ok = false;
        return;
    }
    uintptr_t v = *(const uintptr_t *)a;
    if (w->nwords + w->nany == FAST_WORDS) {
        *ok = false;
    } else if (saved_bp && v - lo >= hi - lo) {
        w->words[FAST_WORDS - 1 - w->nany++].addr = a;
    } else {
        w->words[w->nwords].addr = a;
        w->words[w->nwords].val = v;
        w->nwords++;
    }
}

/* The first exact word of `w` that no longer holds what its walk read;
 * w->nwords + 1 when a saved rbp went into the live stack; w->nwords when
 * everything holds. */
static inline uint32_t words_hold(const walk *w, uintptr_t sp, uintptr_t hi)
{
    for (uint32_t i = 0; i < w->nwords; i++)
        if (*(const volatile uintptr_t *)w->words[i].addr != w->words[i].val)
            return i;
    for (uint32_t i = 0; i < w->nany; i++) {
        uintptr_t v = *(const volatile uintptr_t *)w->words[FAST_WORDS - 1 - i].addr;
        if (v - sp < hi - sp)
            return w->nwords + 1;
    }
    return w->nwords;
}

/* Gives way `slot` to the walk from (sp, bp, ra) under `key`, as most
 * recently used; the caller has set what the walk holds. */
static inline void claim_way(tstate *ts, size_t slot, uint64_t key, uintptr_t sp, uintptr_t bp,
                             uintptr_t ra)
{
    walk *w = &ts->walks[slot];
    w->sp = sp;
    w->bp = bp;
    w->ra = ra;
    w->used = ++ts->clock;
    ts->wkey[slot] = key;
}

/* Six arguments, all in registers: nothing of capture()'s below its sp. */
VT_REC_TEXT static uint32_t learn(tstate *ts, size_t slot, uint64_t key, uintptr_t sp,
                                  uintptr_t bp, uintptr_t ra)
{
    unsigned d = depth;
    walk *w = &ts->walks[slot];
    unw_context_t ctx;
    unw_cursor_t cur;
    void *buf[VT_STACK_MAX_DEPTH + MAX_SLACK + 1];
    unsigned sl = atomic_load_explicit(&slack, memory_order_relaxed);
    int want = (int)(d + sl + 1), n = 0;
    bool ok = true;
    ts->stats.learns++;
    ts->wkey[slot] = 0;
    w->nwords = 0;
    w->nany = 0;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0)
        return 0;
    for (;;) {
        unw_word_t ip = 0, csp = 0;
        unw_save_loc_t loc;
        unw_get_reg(&cur, UNW_REG_IP, &ip);
        buf[n++] = (void *)(uintptr_t)ip;
        if (unw_get_save_loc(&cur, UNW_X86_64_RBP, &loc) == 0 && loc.type == UNW_SLT_MEMORY)
            remember(w, (uintptr_t)loc.u.addr, sp, ts->stack_hi, true, &ok);
        if (unw_is_signal_frame(&cur) > 0)
            ok = false;
        if (n >= want || unw_step(&cur) <= 0)
            break;
        unw_get_reg(&cur, UNW_REG_SP, &csp);
        /* The return address of the frame just left. */
        remember(w, (uintptr_t)csp - sizeof(uintptr_t), sp, ts->stack_hi, false, &ok);
    }
    uint32_t id = finish(buf, n, d, sl, ts);
    w->id = id;
    claim_way(ts, slot, key, sp, bp, ra);
    if (!ok || !id || (id & VT_STACK_TRUNCATED))
        w->nwords = NO_LEARN;          /* don't try again: unwind each time */
    return id;
}
#endif

/* The unwind behind a capture the fast path cannot answer, into buf (our own
 * frames first; finish() drops them); how many frames.
 *
 * Under ThreadSanitizer it steps libunwind's cursor instead of calling
 * unw_backtrace. unw_backtrace keeps a per-thread trace cache that its
 * thread-specific-data destructor frees only in the last destructor round
 * of thread exit; TSan tears the thread's state down in that same round,
 * and its key, created when the runtime started, comes first. Freeing the
 * cache then takes a mutex through TSan's interceptor on a dead thread
 * state and faults inside the runtime: every thread of a preloaded program
 * that had allocated crashed as it exited. The cursor keeps no per-thread
 * state (the per-thread caching policy set in vt__stacks_init is TLS
 * without a destructor), so no libunwind code runs at thread exit. */
VT_REC_TEXT static int unwind_ips(void **buf, int max)
{
#if VT_TSAN
    unw_context_t ctx;
    unw_cursor_t cur;
    int n = 0;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0)
        return 0;
    do {
        unw_word_t ip = 0;
        if (unw_get_reg(&cur, UNW_REG_IP, &ip) != 0)
            break;
        buf[n++] = (void *)(uintptr_t)ip;
    } while (n < max && unw_step(&cur) > 0);
    return n;
#else
    return unw_backtrace(buf, max);
#endif
}

VT_REC_TEXT static uint32_t capture(void)
{
    unsigned d = depth;
    if (d == 0)
        return 0;
    tstate *ts = ts_get();
#ifdef FAST_PATH
    if (vt__likely(ts != NULL) && ts->stack_hi) {
        uintptr_t sp, bp, ra = (uintptr_t)__builtin_return_address(0);
        __asm__ volatile("mov %%rsp, %0\n\tmov %%rbp, %1" : "=r"(sp), "=r"(bp));
        if (bp - sp >= ts->stack_hi - sp)
            bp = 0;                    /* not a frame pointer (see above) */
        uint64_t key = mix(mix(mix(0x51, sp), bp), ra) | 1;
        keydisc *kd = &ts->disc[(key >> 16) & (KEY_SLOTS - 1)];
        uint64_t h = key;
        if (kd->key == key)
            h = mix(key, *(const volatile uintptr_t *)kd->addr);
        /* Two candidate sets, the walk goes to the one with the older way
         * (see "Two sets per walk" above): call sites are return addresses
         * a fixed distance apart, and one hash of them fills some set past
         * its ways in one address layout in a few dozen. */
        size_t first = (size_t)((h >> 32) & (FAST_SETS - 1));
        size_t second = (first + 1 + (size_t)((h >> 56) % (FAST_SETS - 1))) & (FAST_SETS - 1);
        size_t sets[2] = { first * FAST_WAYS, second * FAST_WAYS }, victim = sets[0];
        for (int s = 0; s < 2; s++) {
            size_t set = sets[s];
            /* Ways with the same key: stacks whose discriminating word
             * agrees (or none is known yet), e.g. one call site reached
             * through different outer callers; each keeps its own words. */
            for (size_t k = set; k < set + FAST_WAYS; k++) {
                walk *w = &ts->walks[k];
                /* A pending walk is only this call site's first miss when
                 * the discriminating word put it here too: several sites
                 * share a key, and one that took another's pending walk for
                 * its own would learn in its place, the other to miss again. */
                if (ts->wkey[k] == key && w->sp == sp && w->bp == bp && w->ra == ra &&
                    (w->nwords != PENDING || w->placed == h)) {
                    if (w->nwords == NO_LEARN) {
                        w->used = ++ts->clock;
                        goto unwind;
                    }
                    if (w->nwords == PENDING) {   /* second miss */
                        if (ts->credit < LEARN_COST) {   /* stays pending */
                            w->used = ++ts->clock;
                            ts->credit++;
                            goto unwind;
                        }
                        ts->credit -= LEARN_COST;
                        return learn(ts, k, key, sp, bp, ra);
                    }
                    uint32_t i = words_hold(w, sp, ts->stack_hi);
                    if (i == w->nwords) {
                        w->used = ++ts->clock;
                        ts->hits++;
                        ts->stats.remembered++;
                        return w->id;
                    }
                    /* Another stack from these registers: the first word
                     * that tells them apart discriminates (the earliest one
                     * seen). */
                    if (i < w->nwords && (kd->key != key || i < kd->index)) {
                        kd->key = key;
                        kd->addr = w->words[i].addr;
                        kd->index = i;
                    }
                }
                uint64_t used = ts->wkey[k] ? w->used : 0;   /* empty ways first */
                if (used < (ts->wkey[victim] ? ts->walks[victim].used : 0))
                    victim = k;
            }
        }
        if (ts->credit < CREDIT_MAX)
            ts->credit++;
        walk *w = &ts->walks[victim];   /* first miss: pending, in the LRU way */
        w->nwords = PENDING;
        w->placed = h;
        claim_way(ts, victim, key, sp, bp, ra);
    }
unwind:
#endif
    ;
    void *buf[VT_STACK_MAX_DEPTH + MAX_SLACK];
    unsigned sl = atomic_load_explicit(&slack, memory_order_relaxed);
    if (vt__likely(ts != NULL))
        ts->stats.unwinds++;
    int n = unwind_ips(buf, (int)(d + sl));
    return finish(buf, n, d, sl, ts);
}

/* Python frames.
 *
 * The native capture above is answered from memory most of the time, but
 * the same native stack (the eval loop's return addresses do not change
 * with the Python line) runs under many Python stacks, so Python frames are
 * merged in after it: the thread's frames are read (a few loads per frame),
 * hashed with the native stack id, and a per-thread cache maps the pair to
 * the merged stack's id. A miss rebuilds the native IPs from the tree and
 * splices each eval-loop C call's Python frames in just inside its
 * _PyEval_EvalFrameDefault frame (innermost C call first), so that, read from
 * the outside, a stack goes train.py:41 step -> model.py:88 forward ->
 * at::empty -> cudaMalloc, the eval loop's own frame just outside the
 * Python frames it ran (folded by the reports). Python frames beyond the
 * native stack's depth (more C calls of the eval loop than native frames
 * kept) go outermost. */
static uint64_t py_frame_ip(tstate *ts, const vt__pyframe *f)
{
    uint64_t h = mix(mix(mix(0x9f, f->code), f->names), (uint64_t)(uint32_t)f->addr) | 1;
    size_t slot = (size_t)(h >> 40) & (PY_FRAME_SLOTS - 1);
    if (ts && ts->fkey[slot] == h)
        return ts->fip[slot];
    uint64_t ip = vt__py_frame_ip(f);
    if (ts && ip) {
        ts->fkey[slot] = h;
        ts->fip[slot] = ip;
    }
    return ip;
}

/* Everything that tells one Python frame from another (code object, its
 * names, instruction, eval-loop group), mixed into one word. */
static inline uint64_t py_frame_key(const vt__pyframe *f)
{
    uint64_t v = f->code ^ f->names * UINT64_C(0xc4ceb9fe1a85ec53) ^
                 ((uint64_t)(uint32_t)f->addr | (uint64_t)f->group << 32) *
                     UINT64_C(0x9E3779B97F4A7C15);
    return mix(v, UINT64_C(0x5eed));
}

/* The IPs of stack `id`, innermost first, at most `max`; how many. */
static size_t stack_ips(uint32_t id, uint64_t *ips, size_t max)
{
    size_t n = 0;
    while (id && n < max) {
        uint32_t parent;
        uint64_t ip;
        if (vt__stacks_node(id, &parent, &ip) != 0 || parent >= id)
            break;
        ips[n++] = ip;
        id = parent;
    }
    return n;
}

static uint32_t merge_python(uint32_t native, tstate *ts, const vt__pyframe *py, int n,
                             uint32_t ngroups)
{
    uint64_t nat[VT_STACK_MAX_DEPTH], out[VT_STACK_MAX_DEPTH];
    size_t nn = stack_ips(native, nat, VT_STACK_MAX_DEPTH), m = 0;
    uint32_t g = 0;
    int pi = 0;
    for (size_t i = 0; i < nn && m < VT_STACK_MAX_DEPTH; i++) {
        if (g < ngroups && vt__py_is_eval_frame(nat[i])) {
            for (; pi < n && py[pi].group == g && m < VT_STACK_MAX_DEPTH; pi++) {
                uint64_t ip = py_frame_ip(ts, &py[pi]);
                if (ip)
                    out[m++] = ip;
            }
            g++;
        }
        if (m < VT_STACK_MAX_DEPTH)
            out[m++] = nat[i];
    }
    for (; pi < n && m < VT_STACK_MAX_DEPTH; pi++) {
        uint64_t ip = py_frame_ip(ts, &py[pi]);
        if (ip)
            out[m++] = ip;
    }
    return m ? intern(out, m, ts) : native;
}

/* The per-thread cache of merged stacks (a native stack with Python or
 * lent frames merged in): the slot of key `h`, and keeping `id` there. */
static inline size_t merged_slot(uint64_t h)
{
    return (size_t)(h >> 40) & (PY_SLOTS - 1);
}

static inline void remember_merged(tstate *ts, uint64_t h, uint32_t id, uint32_t back)
{
    if (id && !(id & VT_STACK_TRUNCATED)) {
        ts->pykey[merged_slot(h)] = h;
        ts->pyid[merged_slot(h)] = id;
        ts->pyback[merged_slot(h)] = back;
    }
}

/* A thread running no Python code that was lent frames `lent` (an autograd
 * engine thread computing a gradient: vt_thread_python_stack's frames of
 * the forward op, or the frames of the backward call it works for): its
 * native frames, then the lent ones outside them, as if the Python code had
 * called it. Cached with the merged stacks (another hash seed). */
static uint32_t with_lent_frames(uint32_t native, tstate *ts, uint32_t lent)
{
    if (native & VT_STACK_TRUNCATED)
        return native;
    uint64_t h = mix(mix(0x6c656e74, native), lent) | 1;
    if (ts && ts->pykey[merged_slot(h)] == h)
        return ts->pyid[merged_slot(h)];
    uint64_t out[VT_STACK_MAX_DEPTH];
    size_t m = stack_ips(native, out, VT_STACK_MAX_DEPTH);
    m += stack_ips(lent, out + m, VT_STACK_MAX_DEPTH - m);
    uint32_t id = m ? intern(out, m, ts) : native;
    if (ts)
        remember_merged(ts, h, id, 0);
    return id;
}

/* The backward call being computed for threads without Python frames.
 *
 * `loss.backward()` on a device hands the graph to an autograd engine thread
 * and waits: the gradients are allocated on a thread that runs no Python,
 * so its stacks would have no line of the program. The waiting thread's
 * frames are not ours to read (never another thread's: pyframes.c), but it
 * made an allocation of its own on the way in, the seed gradient
 * (torch.autograd.backward's _make_grads: ones_like), whose stack passes
 * through torch/autograd/__init__.py's backward (or grad). That stack's
 * frames from the backward call outward are published here, and lent to
 * every thread without Python frames until the publishing thread captures a
 * stack outside any backward call (its backward returned). A backward given
 * its gradients (torch.autograd.backward(t, grads): no seed) lends nothing;
 * two threads in backward at once: the later one's frames are lent. A
 * thread with frames of its own lent (track(): the forward op's) keeps
 * those. */
static _Atomic uint32_t backward_lent;     /* frames to lend, 0: none */
static _Atomic(const tstate *) backward_owner;   /* the thread that published them */

/* py's frames from an autograd backward call outward, as a stack of their
 * own, or 0 when py has none. Called on a merge miss only. */
static uint32_t backward_python(tstate *ts, const vt__pyframe *py, int n)
{
    int at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (vt__py_frame_is(&py[i], "torch/autograd/__init__.py", "backward") ||
            vt__py_frame_is(&py[i], "torch/autograd/__init__.py", "grad"))
            at = i;
    if (at < 0)
        return 0;
    uint64_t out[VT_STACK_MAX_DEPTH];
    size_t m = 0;
    for (int i = at; i < n && m < VT_STACK_MAX_DEPTH; i++) {
        uint64_t ip = py_frame_ip(ts, &py[i]);
        if (ip)
            out[m++] = ip;
    }
    uint32_t id = m ? intern(out, m, ts) : 0;
    return id & VT_STACK_TRUNCATED ? 0 : id;
}

/* A capture with Python frames on thread ts; back: its backward_python. */
static inline void note_backward(const tstate *ts, uint32_t back)
{
    if (back) {
        if (atomic_load_explicit(&backward_lent, memory_order_relaxed) != back ||
            atomic_load_explicit(&backward_owner, memory_order_relaxed) != ts) {
            atomic_store_explicit(&backward_owner, ts, memory_order_relaxed);
            atomic_store_explicit(&backward_lent, back, memory_order_release);
        }
    } else if (vt__unlikely(atomic_load_explicit(&backward_lent, memory_order_relaxed) != 0) &&
               atomic_load_explicit(&backward_owner, memory_order_relaxed) == ts) {
        atomic_store_explicit(&backward_lent, 0, memory_order_release);
    }
}

/* The native frames here, and the frames lent to this thread if any.
 * Inlined into the recorder's entry points (so not VT_REC_TEXT, which
 * forbids inlining): no frame of its own between them and capture(), whose
 * cache keys on its caller's frame, and a thread with nothing lent pays a
 * thread-local load and a relaxed one. */
static inline __attribute__((always_inline)) uint32_t capture_native(void)
{
    uint32_t native = capture();
    tstate *ts = my_ts;
    if (ts != NULL && ts != TS_DEAD && ts->lent)
        return with_lent_frames(native, ts, ts->lent);
    uint32_t back = atomic_load_explicit(&backward_lent, memory_order_acquire);
    return vt__unlikely(back != 0) ? with_lent_frames(native, ts_get(), back) : native;
}

VT_REC_TEXT static uint32_t capture_with_python(void)
{
    vt__pyframe py[VT_STACK_MAX_DEPTH];
    uint32_t ngroups = 0;
    int n = vt__py_walk(py, VT_STACK_MAX_DEPTH, &ngroups);
    if (n <= 0)
        return capture_native();   /* a thread with no Python */
    uint32_t native = atomic_load_explicit(&py_stacks, memory_order_relaxed) == VT_STACKS_ALL
                          ? capture() : 0;
    if (native & VT_STACK_TRUNCATED)
        return native;         /* the table is full: no room for more */
    tstate *ts = ts_get();
    /* The key of (native stack, Python frames): each frame mixed on its own
     * (the frames' multiplies overlap), then chained by one multiply each:
     * three dependent mixes a frame made this loop a third of a capture at
     * a Python depth of 30. */
    uint64_t h = mix(0x7079, native);
    for (int i = 0; i < n; i++)
        h = h * UINT64_C(0xff51afd7ed558ccd) ^ py_frame_key(&py[i]);
    h = mix(h, (uint64_t)n) | 1;
    if (vt__likely(ts != NULL)) {
        ts->stats.python++;
        if (ts->pykey[merged_slot(h)] == h) {
            note_backward(ts, ts->pyback[merged_slot(h)]);
            return ts->pyid[merged_slot(h)];
        }
        ts->stats.python_merges++;
    }
    uint32_t id = merge_python(native, ts, py, n, ngroups);
    uint32_t back = backward_python(ts, py, n);
    if (ts) {
        remember_merged(ts, h, id, back);
        note_backward(ts, back);
    }
    return id;
}

/* Finding Python later.
 *
 * A program that embeds Python dlopens libpython after recording started
 * (and maybe after its first allocations), so one look at initialization is
 * not enough. The dlopen and dlsym hooks bump loads_gen before the call
 * (the entries jump to the real function: nothing of ours runs after it);
 * a capture that finds it changed, while no Python is known, looks again.
 * Looking before a racing dlopen has loaded the library misses it, but an
 * embedder then dlsyms the interpreter's entry points, or Python's own
 * dlopen of an extension module comes, and the next capture looks again.
 * A process that never has Python pays one relaxed load and compare per
 * capture, and one look (a few dlsym calls) per dlopen or dlsym it makes.
 * Nothing here imports, initializes or locks Python: vt__py_detect only
 * looks symbols up. */
/* Called by the dlopen and dlsym hooks, also while a sanitizer runtime
 * resolves its interceptors through our dlsym before it has initialized. */
vt__no_sanitize void vt__trace_modules_loaded(void)
{
    atomic_fetch_add_explicit(&loads_gen, 1, memory_order_relaxed);
}

uint32_t vt__modules_loaded_gen(void)
{
    return atomic_load_explicit(&loads_gen, memory_order_relaxed);
}

static void look_for_python_again(uint32_t gen)
{
    bool idle = false;
    if (!atomic_compare_exchange_strong(&py_probing, &idle, true))
        return;                /* another thread is looking */
    atomic_store_explicit(&py_probed_gen, gen, memory_order_relaxed);
    if (py_wanted != VT_STACKS_NATIVE &&
        atomic_load_explicit(&py_stacks, memory_order_relaxed) == VT_STACKS_NATIVE &&
        vt__py_detect())
        atomic_store_explicit(&py_stacks, py_wanted, memory_order_release);
    atomic_store_explicit(&py_probing, false, memory_order_release);
}

static inline bool python_known(void)
{
    if (atomic_load_explicit(&py_stacks, memory_order_acquire) != VT_STACKS_NATIVE)
        return true;
    uint32_t gen = atomic_load_explicit(&loads_gen, memory_order_relaxed);
    if (vt__likely(gen == atomic_load_explicit(&py_probed_gen, memory_order_relaxed)))
        return false;
    look_for_python_again(gen);
    return atomic_load_explicit(&py_stacks, memory_order_acquire) != VT_STACKS_NATIVE;
}

VT_REC_TEXT uint32_t vt__stack_capture(void)
{
    if (vt__unlikely(!vt__rec_on()))
        return 0;
    if (depth && python_known())
        return capture_with_python();
    return capture_native();
}

VT_REC_TEXT uint32_t vt__stack_capture_free(void)
{
    if (vt__unlikely(!vt__rec_on()) || !free_stacks)
        return 0;
    if (depth && python_known())
        return capture_with_python();
    return capture_native();
}

void vt_thread_python_stack(uint32_t stack)
{
    tstate *ts = ts_get();
    if (ts != NULL)
        ts->lent = stack;
}

int vt_stack_python_frame(uint32_t stack, int i, char *buf, size_t len)
{
    uint32_t id = stack, parent;
    uint64_t ip;
    for (size_t steps = 0; i >= 0 && steps < VT_STACK_MAX_DEPTH * 4; steps++) {
        if (vt__stacks_node(id, &parent, &ip) != 0)
            return 0;   /* the stack's end (or no such stack) */
        if ((ip & VT_IP_SYNTHETIC) && i-- == 0) {
            int n = vt__strings_get((uint32_t)ip, buf, len);
            return n < 0 ? -1 : n;
        }
        id = parent;
    }
    return 0;
}

unsigned vt__stacks_python_minor(void)
{
    return atomic_load_explicit(&py_stacks, memory_order_acquire) != VT_STACKS_NATIVE
               ? vt__py_minor() : 0;
}

uint64_t vt__stacks_cache_hits(void)
{
    tstate *t = ts_get();
    return t ? t->hits : 0;
}

void vt__stacks_thread_stats(vt__stack_captures *out)
{
    tstate *t = ts_get();
    *out = t ? t->stats : (vt__stack_captures){ 0 };
}
