/* trace/common/format_bytes.h - the one way a size is shown to a person, by
 * every view (summary, leaks, check, compare, export names, the viz page):
 * binary units, at most two decimals, trailing zeros dropped:
 * "512 B", "1.5 KiB", "64 MiB", "2.25 GiB". */
#ifndef VT_COMMON_FORMAT_BYTES_H
#define VT_COMMON_FORMAT_BYTES_H

#include <stddef.h>
#include <stdint.h>

#define VT_FMT_BYTES_LEN 32   /* room for any formatted size */

/* Write the size into buf (VT_FMT_BYTES_LEN bytes or more). @return buf. */
const char *vt__fmt_bytes(uint64_t bytes, char *buf);

/* "20.35 MiB·s": a byte-time product in binary units (negative or not
 * finite: 0). `buf` as above. */
const char *vt__fmt_byte_seconds(double byte_seconds, char *buf);

/* "62.5 ms": a duration in s, ms or µs, three significant digits (whole
 * seconds from 1000 s: a growth window's length, of a trace that may last a
 * millisecond or a day).
 * `buf` as above. */
const char *vt__fmt_duration(uint64_t ns, char *buf);

#endif
