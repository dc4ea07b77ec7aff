/* trace/common/format_bytes.c - sizes for people (see format_bytes.h). */
#include "format_bytes.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };

const char *vt__fmt_bytes(uint64_t bytes, char *buf)
{
    if (bytes < 1024) {
        snprintf(buf, VT_FMT_BYTES_LEN, "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    char num[16];                      /* v < 1024 (16 EiB at most): "1023.99" */
    snprintf(num, sizeof num, "%.2f", v);
    char *dot = strchr(num, '.');
    if (dot) {
        char *e = num + strlen(num) - 1;
        while (e > dot && *e == '0')
            *e-- = 0;
        if (e == dot)
            *e = 0;
    }
    snprintf(buf, VT_FMT_BYTES_LEN, "%s %s", num, units[u]);
    return buf;
}

const char *vt__fmt_byte_seconds(double bs, char *buf)
{
    unsigned u = 0;
    if (!isfinite(bs) || bs < 0)
        bs = 0;
    while (bs >= 1024 && u < 6) {
        bs /= 1024;
        u++;
    }
    snprintf(buf, VT_FMT_BYTES_LEN, "%.2f %s\xc2\xb7s", bs, units[u]);
    return buf;
}

const char *vt__fmt_duration(uint64_t ns, char *buf)
{
    double v = (double)ns;
    const char *unit = ns >= 1000000000ull ? "s" : ns >= 1000000ull ? "ms" : "\xc2\xb5s";
    v /= ns >= 1000000000ull ? 1e9 : ns >= 1000000ull ? 1e6 : 1e3;
    snprintf(buf, VT_FMT_BYTES_LEN, v >= 1000 ? "%.0f %s" : "%.3g %s", v, unit);
    return buf;
}
