/*
 * alloc/replay/torch_conf.c - PYTORCH_CUDA_ALLOC_CONF for the PyTorch model
 * (c10/cuda/CUDAAllocatorConfig.cpp): max_split_size_mb,
 * max_non_split_rounding_mb, roundup_power2_divisions (one number: the
 * per-size table form "[256:1,>:4]" is not modelled),
 * garbage_collection_threshold, expandable_segments, plus
 * per_process_memory_fraction (torch.cuda.set_per_process_memory_fraction)
 * and cache (cache:0 is PYTORCH_NO_CUDA_MEMORY_CACHING).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "errbuf.h"
#include "torch_model.h"

static bool parse_bool(const char *v, size_t n, bool *out)
{
    if ((n == 4 && !strncasecmp(v, "true", 4)) || (n == 1 && *v == '1')) {
        *out = true;
        return true;
    }
    if ((n == 5 && !strncasecmp(v, "false", 5)) || (n == 1 && *v == '0')) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_num(const char *v, size_t n, double *out)
{
    char buf[64];
    if (!n || n >= sizeof buf)
        return false;
    memcpy(buf, v, n);
    buf[n] = '\0';
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0' && isfinite(*out);
}

/* "key:value,..." over c; @return 0, or -EINVAL with one line in err. */
int tm_apply_conf(tconf *c, const char *text, char *err, size_t errlen)
{
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        const char *next = end ? end + 1 : NULL;
        if (n == 0) {
            p = next;
            continue;
        }
        if (!colon) {
            return vt__errf(err, errlen, -EINVAL, "'%.*s' is not key:value", (int)n, p);
        }
        size_t klen = (size_t)(colon - p), vlen = n - klen - 1;
        const char *v = colon + 1;
        double x = 0;
        bool ok = true, flag;
#define KEY(name) (klen == sizeof name - 1 && !strncmp(p, name, klen))
        if (KEY("max_split_size_mb")) {
            if (vlen == 9 && !strncmp(v, "unlimited", 9))
                c->max_split = NO_LIMIT;
            else if ((ok = parse_num(v, vlen, &x) && x > 0))
                /* PyTorch takes at least one large segment's worth */
                c->max_split = x * 1048576.0 > (double)LARGE_BUFFER ? (uint64_t)(x * 1048576.0)
                                                                    : LARGE_BUFFER;
        } else if (KEY("max_non_split_rounding_mb")) {
            if ((ok = parse_num(v, vlen, &x) && x >= 0))
                c->max_nonsplit_round = (uint64_t)(x * 1048576.0);
        } else if (KEY("roundup_power2_divisions")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x <= 64 && x == floor(x) &&
                 ((unsigned)x & ((unsigned)x - 1)) == 0;
            if (ok)
                c->divisions = (unsigned)x;
        } else if (KEY("garbage_collection_threshold")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x < 1;
            if (ok)
                c->gc_threshold = x;
        } else if (KEY("per_process_memory_fraction")) {
            ok = parse_num(v, vlen, &x) && x >= 0 && x <= 1;
            if (ok)
                c->fraction = x;
        } else if (KEY("expandable_segments")) {
            if ((ok = parse_bool(v, vlen, &flag)))
                c->expandable = flag;
        } else if (KEY("cache")) {
            if ((ok = parse_bool(v, vlen, &flag)))
                c->uncached = !flag;
        } else if (KEY("release_lock_on_cudamalloc") || KEY("backend") ||
                   (klen > 7 && !strncmp(p, "pinned_", 7))) {
            /* no effect on what the cache holds */
        } else {
            return vt__errf(err, errlen, -EINVAL, "unknown key '%.*s' for PyTorch's allocator",
                            (int)klen, p);
        }
#undef KEY
        if (!ok) {
            return vt__errf(err, errlen, -EINVAL, "bad value '%.*s' for %.*s", (int)vlen, v,
                            (int)klen, p);
        }
        p = next;
    }
    return 0;
}

void tm_format_conf(const tconf *c, char *buf, size_t len)
{
    char split[32];
    if (c->max_split == NO_LIMIT)
        snprintf(split, sizeof split, "unlimited");
    else
        snprintf(split, sizeof split, "%llu", (unsigned long long)(c->max_split >> 20));
    snprintf(buf, len,
             "max_split_size_mb:%s,roundup_power2_divisions:%u,garbage_collection_threshold:%g,"
             "per_process_memory_fraction:%g,expandable_segments:%s%s",
             split, c->divisions, c->gc_threshold, c->fraction, c->expandable ? "True" : "False",
             c->uncached ? ",cache:0" : "");
}
