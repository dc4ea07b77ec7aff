/*
 * cli/json_doc.h - the JSON document of a snapshot and its timeline
 * (schema: docs/json-schema.md), what `vramtrace json` prints
 * (json_doc.c): from the whole snapshot, or from a stream of its events in
 * memory that follows what is alive at once (the same bytes).
 */
#ifndef VT_CLI_JSON_DOC_H
#define VT_CLI_JSON_DOC_H

#include <stdbool.h>
#include <stdio.h>

#include "snapshot.h"
#include "timeline.h"

struct vt__event_stream;

/* The document of s (its events all in memory) and its timeline tl; `path`
 * is the file's name in it. @return 0, or -EIO on a write error. */
int vt__json_doc_write(FILE *o, const char *path, const vt__snapshot_data *s,
                       const vt__timeline *tl, bool with_events);

/* The same bytes from s read as a stream of its events (s holds every
 * section but the events, as vt__snapfile_open_stream gives it; or a whole
 * snapshot with vt__event_stream_of). A damaged file's message is the
 * stream's (the err it was opened with).
 * @return 0, or a negative errno with one line in err (-EIO: a write error). */
int vt__json_doc_write_stream(FILE *o, const char *path, const vt__snapshot_data *s,
                              struct vt__event_stream *es, bool with_events, char *err,
                              size_t errlen);

#endif /* VT_CLI_JSON_DOC_H */
