/*
 * alloc/replay/replay_conf.c - the settings a snapshot was recorded under, as
 * allocator conf text.
 *
 * A vramtrace snapshot records its whole VRAMTRACE_CONF, normalized
 * ("cache:1,max_split_size_mb:unlimited,..."); only the allocator's keys
 * matter to a replay. A PyTorch snapshot imported by `vramtrace import`
 * records PyTorch's allocator_settings as "key=value,..."
 * (trace/interop/pytorch_import.c): max_split_size in bytes (SIZE_MAX when
 * unlimited), garbage_collection_threshold, expandable_segments, and
 * roundup_power2_divisions as a per-size table, which is kept only when the
 * PYTORCH_CUDA_ALLOC_CONF text gives one number for every size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"

static const char *const allocator_keys[] = {
    "cache", "max_split_size_mb", "roundup_power2_divisions",
    "garbage_collection_threshold", "per_process_memory_fraction", "expandable_segments",
};

static void append(char *buf, size_t len, const char *key, const char *val, size_t vlen)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    snprintf(buf + used, len - used, "%s%s:%.*s", used ? "," : "", key, (int)vlen, val);
}

/* The value of "key<sep>" in a list of "k<sep>v" items split at ','. */
static const char *find_value(const char *text, const char *key, char sep, size_t *vlen)
{
    size_t klen = strlen(key);
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > klen && !strncmp(p, key, klen) && p[klen] == sep) {
            *vlen = n - klen - 1;
            return p + klen + 1;
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

void vt__replay_conf_from_meta(const char *recorded, char *buf, size_t len, bool *expandable)
{
    buf[0] = '\0';
    *expandable = false;
    if (!recorded || !*recorded)
        return;
    size_t vlen;
    const char *v;
    if (strstr(recorded, "max_split_size_mb:") && !strstr(recorded, "PYTORCH_CUDA_ALLOC_CONF=")) {
        for (size_t i = 0; i < sizeof allocator_keys / sizeof *allocator_keys; i++)
            if ((v = find_value(recorded, allocator_keys[i], ':', &vlen)))
                append(buf, len, allocator_keys[i], v, vlen);
        if ((v = find_value(recorded, "expandable_segments", ':', &vlen)))
            *expandable = vlen == 1 && *v == '1';
        return;
    }
    /* PyTorch's allocator_settings */
    if ((v = find_value(recorded, "max_split_size", '=', &vlen))) {
        char num[32];
        snprintf(num, sizeof num, "%.*s", (int)(vlen < 31 ? vlen : 31), v);
        long long bytes = strtoll(num, NULL, 10);
        /* SIZE_MAX (read back as -1 or a huge number) means unlimited */
        if (bytes > 0 && bytes < (1ll << 50) && bytes >= (1ll << 20)) {
            snprintf(num, sizeof num, "%lld", bytes >> 20);
            append(buf, len, "max_split_size_mb", num, strlen(num));
        }
    }
    if ((v = find_value(recorded, "garbage_collection_threshold", '=', &vlen))) {
        char num[32];
        snprintf(num, sizeof num, "%.*s", (int)(vlen < 31 ? vlen : 31), v);
        if (strtod(num, NULL) > 0)
            append(buf, len, "garbage_collection_threshold", num, strlen(num));
    }
    if ((v = find_value(recorded, "expandable_segments", '=', &vlen)))
        *expandable = (vlen == 4 && !strncmp(v, "True", 4)) || (vlen == 1 && *v == '1');
    if (*expandable)
        append(buf, len, "expandable_segments", "1", 1);
    /* roundup_power2_divisions: in the PYTORCH_CUDA_ALLOC_CONF text, one
     * number (not a [size:divisions,...] table) */
    const char *rp = strstr(recorded, "roundup_power2_divisions:");
    if (rp) {
        rp += strlen("roundup_power2_divisions:");
        size_t n = strspn(rp, "0123456789");
        if (n)
            append(buf, len, "roundup_power2_divisions", rp, n);
    }
}

void vt__replay_recorded_conf(const vt__snapshot_data *s, char *buf, size_t len)
{
    bool expandable;
    vt__replay_conf_from_meta(vt__snapshot_string(s, s->meta.config), buf, len, &expandable);
}
