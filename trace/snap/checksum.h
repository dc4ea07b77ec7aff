/*
 * trace/snap/checksum.h - CRC32C (Castagnoli) for the snapshot format.
 *
 * Chosen over a 64-bit hash because it is fully specified (third-party
 * readers find it in every language), and fast enough in software
 * (slice-by-8) for the few MiB a snapshot holds.
 */
#ifndef VT_TRACE_CHECKSUM_H
#define VT_TRACE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of `len` bytes, continuing from `crc` (start with 0). */
uint32_t vt__crc32c(uint32_t crc, const void *data, size_t len);

#endif /* VT_TRACE_CHECKSUM_H */
