/*
 * cli/export.h - the foreign formats `vramtrace export` writes besides
 * PyTorch's pickle (which lives in trace/pytorch_export.c, next to its
 * reader).
 */
#ifndef VT_CLI_EXPORT_H
#define VT_CLI_EXPORT_H

#include <stdio.h>

#include "check.h"
#include "snapshot.h"
#include "timeline.h"

/* Trace Event Format JSON (Perfetto, chrome://tracing); `report` (may be
 * NULL) adds the checker's findings as instants. 0 or -1 on a write error. */
int vt__export_perfetto(FILE *out, const vt__snapshot_data *s, const vt_timeline *tl,
                        const vt_check_report *report);

#endif /* VT_CLI_EXPORT_H */
