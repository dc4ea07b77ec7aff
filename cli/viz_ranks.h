/*
 * cli/viz_ranks.h - `vramtrace viz` of several snapshots (one per rank).
 */
#ifndef VT_CLI_VIZ_RANKS_H
#define VT_CLI_VIZ_RANKS_H

#include <stddef.h>

#include "check.h"

/* Render `n` snapshots into one page `out` with a rank selector and an
 * overview of every rank's curve; `check` runs the checker on each. Prints
 * its own messages; returns the exit status. */
int vt__viz_ranks(const char *const *inputs, size_t n, const char *out, int check,
                  const vt__check_options *opt, int quiet);

#endif /* VT_CLI_VIZ_RANKS_H */
