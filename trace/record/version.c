/*
 * trace/record/version.c - the version of the loaded library, for comparison with
 * the header a program was compiled against.
 */
#include "vramtrace.h"

unsigned vt_version_number(void)
{
    return VRAMTRACE_VERSION_NUMBER;
}

const char *vt_version_string(void)
{
    return VRAMTRACE_VERSION_STRING;
}
