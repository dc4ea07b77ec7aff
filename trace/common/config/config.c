/*
 * trace/common/config/config.c - VRAMTRACE_CONF: every key, its default and its parser in
 * one table.
 *
 * Parsed once, on first use, from the environment. Parsing never calls CUDA
 * and never allocates device memory, so it is safe from any hook. A bad key
 * or value is reported on stderr in one line and leaves that key at its
 * default: a typo must never take the host program down.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum key_type { KEY_BOOL, KEY_U64, KEY_UINT, KEY_MIB, KEY_RING, KEY_FRACTION, KEY_SIGNAL, KEY_STACKS,
                KEY_AUTO_BOOL, KEY_TORCH };

struct key {
    const char *name;
    enum key_type type;
    size_t offset;               /* of the field in vt__conf */
    double min, max;             /* accepted range for numbers */
    const char *choices;         /* what the error message offers */
};

#define FIELD(f) offsetof(vt__conf, f)

/* Defaults are in vt__config_defaults() right below; keep the two in step. */
static const struct key keys[] = {
    { "cache", KEY_BOOL, FIELD(cache), 0, 1, "0 or 1" },
    { "max_split_size_mb", KEY_MIB, FIELD(max_split_size), 1, 1 << 30,
      "a size in MiB >= 1, or 'unlimited'" },
    { "roundup_power2_divisions", KEY_UINT, FIELD(roundup_power2_divisions), 0, 64,
      "0 (off) or a power of two from 1 to 64" },
    { "garbage_collection_threshold", KEY_FRACTION, FIELD(garbage_collection_threshold), 0, 1,
      "a fraction strictly between 0 and 1 (0 = off)" },
    { "per_process_memory_fraction", KEY_FRACTION, FIELD(per_process_memory_fraction), 0, 1,
      "a fraction in (0, 1]" },
    { "expandable_segments", KEY_BOOL, FIELD(expandable_segments), 0, 1, "0 or 1" },
    { "ipc_safe", KEY_AUTO_BOOL, FIELD(ipc_safe), 0, 0, "auto, 0 or 1" },
    { "free_sync", KEY_BOOL, FIELD(free_sync), 0, 1, "0 or 1" },
    { "trace", KEY_BOOL, FIELD(trace), 0, 1, "0 or 1" },
    { "max_events", KEY_U64, FIELD(max_events), 1024, 1e10,
      "an event count from 1024 to 10000000000" },
    { "ring", KEY_RING, FIELD(max_events), 1024, 1e10,
      "a size such as 256MB or 1GiB, room for 1024 to 10000000000 events" },
    { "stack_depth", KEY_UINT, FIELD(stack_depth), 0, 256, "0 (no stacks) to 256" },
    { "free_stacks", KEY_BOOL, FIELD(free_stacks), 0, 1, "0 or 1" },
    { "stacks", KEY_STACKS, FIELD(stacks), 0, 0, "native, python or all" },
    { "signal", KEY_SIGNAL, FIELD(signal), 0, 0, "none, SIGUSR1, SIGUSR2, SIGPROF, SIGRTMIN+N" },
    { "dump_on_oom", KEY_BOOL, FIELD(dump_on_oom), 0, 1, "0 or 1" },
    { "oom_snapshots", KEY_UINT, FIELD(oom_snapshots), 1, 1000000, "a count from 1 to 1000000" },
    { "torch", KEY_TORCH, FIELD(torch), 0, 0, "observe, track or off" },
};
#define NKEYS (sizeof keys / sizeof keys[0])

void vt__config_defaults(vt__conf *c)
{
    *c = (vt__conf){
        .cache = true,
        .max_split_size = UINT64_MAX,
        .roundup_power2_divisions = 0,
        .garbage_collection_threshold = 0.0,
        .per_process_memory_fraction = 1.0,
        .expandable_segments = false,
        .ipc_safe = VT_IPC_SAFE_AUTO,
        .free_sync = false,
        .trace = true,
        .max_events = 1000000,
        .stack_depth = 48,
        .free_stacks = true,
        .stacks = VT_STACKS_ALL,
        .signal = 0,
        .dump_on_oom = false,
        .oom_snapshots = 4,
        .torch = VT_TORCH_OBSERVE,
    };
}

static int parse_signal(const char *v, int *out)
{
    static const struct { const char *name; int sig; } names[] = {
        { "SIGUSR1", SIGUSR1 }, { "SIGUSR2", SIGUSR2 }, { "SIGPROF", SIGPROF },
    };
    if (!strcasecmp(v, "none") || !strcmp(v, "0")) {
        *out = 0;
        return 0;
    }
    const char *bare = strncasecmp(v, "SIG", 3) == 0 ? v + 3 : v;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(bare, names[i].name + 3)) {
            *out = names[i].sig;
            return 0;
        }
    if (!strncasecmp(bare, "RTMIN+", 6)) {
        char *end;
        long n = strtol(bare + 6, &end, 10);
        if (*end == '\0' && end != bare + 6 && n >= 0 && n <= SIGRTMAX - SIGRTMIN) {
            *out = SIGRTMIN + (int)n;
            return 0;
        }
    }
    return -EINVAL;
}

/* A decimal count within the key's range (no sign, no suffix). */
static int parse_count(const struct key *k, const char *v, unsigned long long *out)
{
    char *end = NULL;
    if (!isdigit((unsigned char)*v))
        return -EINVAL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end)
        return -EINVAL;
    if ((double)n < k->min || (double)n > k->max)
        return -ERANGE;
    *out = n;
    return 0;
}

int vt__parse_bytes(const char *v, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)*v) && *v != '.')
        return -EINVAL;
    errno = 0;
    double n = strtod(v, &end);
    if (errno || end == v || !(n > 0))
        return -EINVAL;
    static const struct { const char *suffix; double mul; } units[] = {
        { "", 1 }, { "B", 1 },
        { "K", 1024.0 }, { "KiB", 1024.0 }, { "KB", 1e3 },
        { "M", 1048576.0 }, { "MiB", 1048576.0 }, { "MB", 1e6 },
        { "G", 1073741824.0 }, { "GiB", 1073741824.0 }, { "GB", 1e9 },
        { "T", 1099511627776.0 }, { "TiB", 1099511627776.0 }, { "TB", 1e12 },
    };
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcasecmp(end, units[i].suffix)) {
            double bytes = n * units[i].mul;
            if (bytes < 1 || bytes >= 1.8e19)
                return -EINVAL;
            *out = (uint64_t)bytes;
            return 0;
        }
    return -EINVAL;
}

/* Parse one value into the field; -EINVAL (or -ERANGE) when it is not valid. */
static int parse_value(const struct key *k, const char *v, vt__conf *c)
{
    char *field = (char *)c + k->offset;
    char *end = NULL;
    if (*v == '\0')
        return -EINVAL;
    switch (k->type) {
    case KEY_BOOL:
        if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on"))
            *(bool *)field = true;
        else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "off"))
            *(bool *)field = false;
        else
            return -EINVAL;
        return 0;
    case KEY_U64:
    case KEY_UINT: {
        unsigned long long n;
        int rc = parse_count(k, v, &n);
        if (rc)
            return rc;
        if (k->type == KEY_U64) {
            *(uint64_t *)field = n;
        } else {
            /* roundup_power2_divisions must be a power of two (or 0). */
            if (k->offset == FIELD(roundup_power2_divisions) && n && (n & (n - 1)))
                return -EINVAL;
            *(unsigned *)field = (unsigned)n;
        }
        return 0;
    }
    case KEY_MIB: {
        if (!strcasecmp(v, "unlimited") || !strcasecmp(v, "max")) {
            *(uint64_t *)field = UINT64_MAX;
            return 0;
        }
        unsigned long long n;
        int rc = parse_count(k, v, &n);
        if (rc)
            return rc;
        *(uint64_t *)field = (uint64_t)n << 20;
        return 0;
    }
    case KEY_RING: {
        /* the events whose slots fit: the ring's slots are a power of two
         * (ring.c), so the most events in a power of two of them */
        uint64_t bytes, events = 1;
        int rc = vt__parse_bytes(v, &bytes);
        if (rc)
            return rc;
        while ((events << 1) * VT_RING_EVENT_BYTES <= bytes && (double)(events << 1) <= k->max)
            events <<= 1;
        if ((double)events < k->min || events * VT_RING_EVENT_BYTES > bytes)
            return -ERANGE;
        *(uint64_t *)field = events;
        return 0;
    }
    case KEY_FRACTION: {
        errno = 0;
        double d = strtod(v, &end);
        if (errno || *end || d != d)
            return -EINVAL;
        /* per_process_memory_fraction may be 1; the GC threshold may not. */
        bool ok = k->offset == FIELD(per_process_memory_fraction) ? (d > 0 && d <= 1)
                                                                    : (d >= 0 && d < 1);
        if (!ok)
            return -ERANGE;
        *(double *)field = d;
        return 0;
    }
    case KEY_AUTO_BOOL:
        if (!strcasecmp(v, "auto"))
            *(unsigned *)field = VT_IPC_SAFE_AUTO;
        else if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on"))
            *(unsigned *)field = VT_IPC_SAFE_ON;
        else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "off"))
            *(unsigned *)field = VT_IPC_SAFE_OFF;
        else
            return -EINVAL;
        return 0;
    case KEY_SIGNAL:
        return parse_signal(v, (int *)field);
    case KEY_STACKS:
    case KEY_TORCH: {
        static const char *const stacks[] = { [VT_STACKS_ALL] = "all",
                                              [VT_STACKS_NATIVE] = "native",
                                              [VT_STACKS_PYTHON] = "python" };
        static const char *const torch[] = { [VT_TORCH_OBSERVE] = "observe",
                                             [VT_TORCH_TRACK] = "track",
                                             [VT_TORCH_OFF] = "off" };
        const char *const *names = k->type == KEY_STACKS ? stacks : torch;
        for (unsigned i = 0; i < 3; i++)
            if (!strcasecmp(v, names[i])) {
                *(unsigned *)field = i;
                return 0;
            }
        return -EINVAL;
    }
    }
    return -EINVAL;
}

/* One problem on `err` (none when NULL): what is wrong, then, for the
 * library (which never stops a program over its settings), what it does
 * instead (`instead`); a command that refuses bad settings (`refusing`:
 * vt__config_check) says what it does itself, so only what is wrong. */
__attribute__((format(printf, 4, 5)))
static void report(FILE *err, bool refusing, const char *instead, const char *fmt, ...)
{
    if (!err)
        return;
    if (!refusing)
        fputs("vramtrace: ", err);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(err, fmt, ap);
    va_end(ap);
    if (!refusing && instead)
        fprintf(err, "; %s", instead);
    fputc('\n', err);
}

static int parse(const char *text, vt__conf *out, FILE *err, bool refusing)
{
    int problems = 0;
    if (!text)
        return 0;
    char buf[4096];
    size_t len = strlen(text);
    if (len >= sizeof buf) {
        report(err, refusing, "ignored, using defaults", "VRAMTRACE_CONF is longer than %zu bytes",
               sizeof buf - 1);
        return 1;
    }
    memcpy(buf, text, len + 1);

    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*item))
            item++;
        char *tail = item + strlen(item);
        while (tail > item && isspace((unsigned char)tail[-1]))
            *--tail = '\0';
        if (*item == '\0')
            continue;
        char *colon = strchr(item, ':');
        if (!colon) {
            report(err, refusing, "ignored", "VRAMTRACE_CONF item '%s' is not key:value", item);
            problems++;
            continue;
        }
        *colon = '\0';
        const char *value = colon + 1;
        const struct key *k = NULL;
        for (size_t i = 0; i < NKEYS; i++)
            if (!strcmp(item, keys[i].name))
                k = &keys[i];
        if (!k) {
            char valid[512];
            size_t used = 0;
            for (size_t i = 0; i < NKEYS && used < sizeof valid; i++)
                used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s",
                                         i ? ", " : "", keys[i].name);
            report(err, refusing, NULL, "unknown VRAMTRACE_CONF key '%s'; valid keys: %s", item,
                   valid);
            problems++;
            continue;
        }
        vt__conf trial = *out;
        if (parse_value(k, value, &trial) != 0) {
            report(err, refusing, "keeping the default",
                   "bad value '%s' for VRAMTRACE_CONF key '%s' (expected %s)", value, k->name,
                   k->choices);
            problems++;
            continue;
        }
        *out = trial;
    }
    return problems;
}

int vt__config_parse(const char *text, vt__conf *out, FILE *err)
{
    return parse(text, out, err, false);
}

int vt__config_check(const char *text, vt__conf *out, char *msg, size_t len)
{
    vt__conf defaults;
    if (!out) {
        vt__config_defaults(&defaults);
        out = &defaults;
    }
    if (len)
        msg[0] = '\0';
    FILE *f = len > 1 ? fmemopen(msg, len - 1, "w") : NULL;
    int problems = parse(text, out, f, true);
    if (f)
        fclose(f);
    if (len) {
        msg[len - 1] = '\0';
        char *nl = strchr(msg, '\n');   /* the first problem */
        if (nl)
            *nl = '\0';
    }
    return problems;
}

static void signal_name(int sig, char *buf, size_t len)
{
    if (sig == 0)
        snprintf(buf, len, "none");
    else if (sig == SIGUSR1)
        snprintf(buf, len, "SIGUSR1");
    else if (sig == SIGUSR2)
        snprintf(buf, len, "SIGUSR2");
    else if (sig == SIGPROF)
        snprintf(buf, len, "SIGPROF");
    else
        snprintf(buf, len, "SIGRTMIN+%d", sig - SIGRTMIN);
}

size_t vt__config_format(const vt__conf *c, char *buf, size_t len)
{
    char msm[32], sig[32];
    signal_name(c->signal, sig, sizeof sig);
    if (c->max_split_size == UINT64_MAX)
        snprintf(msm, sizeof msm, "unlimited");
    else
        snprintf(msm, sizeof msm, "%llu", (unsigned long long)(c->max_split_size >> 20));
    int n = snprintf(buf, len,
        "cache:%d,max_split_size_mb:%s,roundup_power2_divisions:%u,"
        "garbage_collection_threshold:%g,per_process_memory_fraction:%g,expandable_segments:%d,"
        "free_sync:%d,"
        "trace:%d,max_events:%llu,stack_depth:%u,free_stacks:%d,stacks:%s,signal:%s,"
        "dump_on_oom:%d,oom_snapshots:%u,ipc_safe:%s,torch:%s",
        c->cache, msm, c->roundup_power2_divisions, c->garbage_collection_threshold,
        c->per_process_memory_fraction, c->expandable_segments, c->free_sync, c->trace,
        (unsigned long long)c->max_events, c->stack_depth, c->free_stacks,
        c->stacks == VT_STACKS_NATIVE ? "native" : c->stacks == VT_STACKS_PYTHON ? "python" : "all",
        sig,
        c->dump_on_oom, c->oom_snapshots,
        c->ipc_safe == VT_IPC_SAFE_ON ? "1" : c->ipc_safe == VT_IPC_SAFE_OFF ? "0" : "auto",
        c->torch == VT_TORCH_TRACK ? "track" : c->torch == VT_TORCH_OFF ? "off" : "observe");
    return n < 0 ? 0 : (size_t)n;
}

static vt__conf global;
static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
    vt__config_defaults(&global);
    vt__config_parse(getenv("VRAMTRACE_CONF"), &global, stderr);
}

const vt__conf *vt__config(void)
{
    pthread_once(&global_once, global_init);
    return &global;
}

static void installed_init(void) {}

void vt__config_install(const vt__conf *c)
{
    /* VRAMTRACE_CONF is not read (nor its problems printed) for a
     * configuration that replaces it anyway */
    pthread_once(&global_once, installed_init);
    global = *c;
}
