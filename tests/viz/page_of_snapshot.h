/* tests/viz/page_of_snapshot.h - the page `vramtrace viz` writes for a whole
 * snapshot in memory, with the checker's report `rep` (or NULL), as a string
 * to free (its length in *n). What the viz tests that render a page share. */
#ifndef VT_TESTS_VIZ_PAGE_OF_SNAPSHOT_H
#define VT_TESTS_VIZ_PAGE_OF_SNAPSHOT_H

#include <stdio.h>

#include "harness.h"
#include "check.h"
#include "render.h"
#include "timeline.h"

static inline char *page_of_snapshot(const vt__snapshot_data *s, const vt__check_report *rep,
                                     size_t *n)
{
    static char perr[1024];
    vt__timeline *tl;
    ASSERT_MSG(vt__timeline_build(s, &tl, perr, sizeof perr) == 0, "%s", perr);
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    ASSERT(f);
    ASSERT_MSG(vt__viz_render_page(f, s, tl, rep, NULL, NULL, NULL, perr, sizeof perr) == 0,
               "%s", perr);
    fclose(f);
    vt__timeline_free(tl);
    return p;
}

#endif
