/*
 * tests/viz/test_render_findings.c - the page's findings panel says what
 * `vramtrace check`'s report says, on synthetic traces built as the
 * checker's tests build them (tests/check/check_fixture.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "../check/check_fixture.h"
#include "page_of_snapshot.h"

/* The page of y's snapshot with the checker's findings (a string to free). */
static char *page_of(synth *y)
{
    vt__check_report *rep = check(y, NULL);
    size_t n = 0;
    char *p = page_of_snapshot(&y->s, rep, &n);
    vt__check_report_free(rep);
    return p;
}

/* PyTorch's mse_loss returns its 0-dim result on its elementwise buffer: a
 * list of such losses holds 75 KiB each, which the panel, like the report,
 * says as the loss's own 8 bytes of its storage's; an owner as large as its
 * storage is said by the storage's bytes alone. */
TEST(the_panel_says_an_owner_much_smaller_than_its_storage_by_its_own_bytes)
{
    synth y;
    kept_losses_on_their_buffers(&y);
    char *page = page_of(&y);
    ASSERT_STR_CONTAINS(page, "linger: 'loss = criterion(out, target) (train.py:58)' "
                              "(itself 8 B of the storage's 75.02 KiB) alive");
    ASSERT_STR_CONTAINS(page, "linger: 'err = out - target (train.py:57)' (75.02 KiB) alive");
    free(page);
    synth_fini(&y);
}

TEST_MAIN()
