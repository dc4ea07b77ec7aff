/*
 * trace/snap/snapfile_encode.h - internals shared by the snapshot writer, the
 * reader and their tests (not part of the snapfile.h contract).
 */
#ifndef VT_TRACE_SNAPFILE_ENCODE_H
#define VT_TRACE_SNAPFILE_ENCODE_H

#include <stddef.h>

#include "snapshot.h"

/* Sizes of the move-to-front lists of the EVENTS stream and size columns. */
#define VT_MTF_STREAMS 8
#define VT_MTF_SIZES 16

/* Encode `s` into a malloc'ed buffer (*data, *size): the exact bytes
 * vt__snapfile_write() puts in the file. @return 0 or a negative errno with a
 * message in err. */
int vt__snapfile_encode(const vt__snapshot_data *s, void **data, size_t *size, char *err,
                        size_t errlen);

/* Kinds this build knows (format.h: 1..13 and 16..VT_EV_KIND_COUNT-1). */
int vt__event_kind_known(unsigned kind);

/* The minor version (of this major) that introduced `kind`: 0 for the kinds
 * of 1.0, 1 for TENSOR_NAME (and so on, format.h); -1 for a kind this build
 * does not know. A file
 * of minor m may hold only kinds whose minor is <= m (format.h). */
int vt__event_kind_minor(unsigned kind);

#endif /* VT_TRACE_SNAPFILE_ENCODE_H */
