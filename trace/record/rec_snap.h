/*
 * trace/record/rec_snap.h - the recorder's internals that speak vt__snapshot_data.
 *
 * Separate from rec_internal.h so that the hot-path files (ring writers,
 * stack capture) do not depend on the snapshot model.
 */
#ifndef VT_TRACE_REC_SNAP_H
#define VT_TRACE_REC_SNAP_H

#include <stdint.h>

#include "rec_internal.h"
#include "vramtrace.h"   /* VT_API */
#include "recorder.h"
#include "snapshot.h"

/* ---- ring.c -------------------------------------------------------------- */
/* Copy the retained events (seq order) into a new array; see ring.c. */
int vt__ring_copy(vt__event **out, size_t *nout, uint64_t *recorded, uint64_t *overwritten);

/* ---- recorder.c ---------------------------------------------------------- */
vt__state_provider vt__trace_state_provider(void);

/* ---- symbolize.c --------------------------------------------------------- */
/* Fill frames[i] for ips[i] (n unique IPs), adding strings to `strs`.
 * Never fails as a whole: what cannot be resolved stays 0. */
void vt__symbolize(const uint64_t *ips, size_t n, vt__frame *frames, vt__strtab *strs);

/* ---- symindex.c ---------------------------------------------------------- */
/* One module's symbols sorted by address, for many lookups (libdwfl scans
 * the whole table per lookup). Built per snapshot, used while its Dwfl
 * lives. */
typedef struct Dwfl_Module Dwfl_Module;
typedef struct vt__symindex vt__symindex;
/* @return the index, or NULL (no symbol table, no memory): lookups then
 * go to libdwfl. */
vt__symindex *vt__symindex_build(Dwfl_Module *mod);
/* The name dwfl_module_addrinfo(mod, pc) gives, and pc's offset from it in
 * *offset; NULL when none. `ix` may be NULL. */
const char *vt__symindex_lookup(const vt__symindex *ix, Dwfl_Module *mod, uint64_t pc,
                                uint64_t *offset);
void vt__symindex_free(vt__symindex *ix);

/* ---- interned.c ---------------------------------------------------------- */
/* Replace the interned string indexes of s's events and devices by indexes
 * into st (adding the strings), under a vt__strings_hold. A string whose
 * generation is gone becomes "". @return 0 or -ENOMEM. */
int vt__strings_export(vt__snapshot_data *s, vt__strtab *st);

/* ---- snapshot_take.c ----------------------------------------------------- */
/* Build a complete snapshot of the live process in memory.
 * @return 0 and *out (free with vt__snapshot_free), or a negative errno. */
int vt__snapshot_build(vt__snapshot_data **out);

/* The program asked for a snapshot now (on = 1): this thread's snapshots
 * are that request's until on = 0 forgets it (vramtrace.snapshot() does
 * after writing; at exit nothing does). A snapshot's time
 * (meta.snapshot_time_ns: where `check` ends the program's time) is the
 * request's, not the moment it is written: what an interpreter's side does
 * first (vramtrace.torch's holder walk, seconds on a large heap) is
 * vramtrace's own work, never the program's. Exported for the Python
 * package (vramtrace.snapshot(), the exit snapshot under `run --track`). */
VT_API void vt__snapshot_requested(int on);

#endif /* VT_TRACE_REC_SNAP_H */
