/*
 * cli/cmd_json.c - `vramtrace json FILE [--events]`: the snapshot and its
 * reconstructed timeline as one JSON document (json_doc.h; schema:
 * docs/json-schema.md), written to stdout as the events are read as a
 * stream: memory follows what is alive at once, not the number of events.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "event_stream.h"
#include "json_doc.h"
#include "pytorch.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_JSON "\n"
    "\n"
    "Print the snapshot as JSON (schema: docs/json-schema.md): metadata,\n"
    "devices with peaks, counts, frames, stacks, segments and blocks,\n"
    "allocation lifetimes, memory the cache did not serve (uncached), marks.\n"
    "  --events   also list every event (large: one object per event)\n"
    VT_EXIT_HELP;

int vt__cmd_json(int argc, char **argv)
{
    bool with_events = false;
    const char *path;
    int rc = vt__report_args("json", argc, argv, usage_text, "--events", &with_events, &path);
    if (rc)
        return rc == 1 ? 0 : rc;
    /* serr is the stream's: set after the opening only by a damaged file */
    char serr[1024] = "", err[1024] = "";
    vt__snapshot_data *s;
    vt__event_stream *es;
    if ((rc = vt__report_open_stream("json", path, &s, &es, serr, sizeof serr)) != 0)
        return rc;
    static char buf[1 << 16];
    setvbuf(stdout, buf, _IOFBF, sizeof buf);
    rc = vt__json_doc_write_stream(stdout, path, s, es, with_events, err, sizeof err);
    if (rc)
        vt__report_stream_failed("json", path, serr, err);
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc ? VT_EXIT_FAILURE : 0;
}
