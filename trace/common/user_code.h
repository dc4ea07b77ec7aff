/*
 * trace/common/user_code.h - which Python source is the program's own code.
 *
 * One rule for everything that names a line for people: the reports lead
 * with the innermost frame of the program's own code (trace/snap's
 * vt__frame_is_user_code), and track() names tensors by it (the library's
 * vt_source_is_programs, asked by vramtrace.torch).
 */
#ifndef VT_COMMON_USER_CODE_H
#define VT_COMMON_USER_CODE_H

#include <stdbool.h>
#include <string.h>

/* Not under site-packages or dist-packages (torch and every installed
 * library), not vramtrace's own package, not the standard library
 * (.../lib/pythonX.Y/...), not the interpreter's frozen modules, not the
 * code torch.fx generates (a torch.compile'd model's graphs run as
 * "<eval_with_key>.N": the program's line is the one that called the model). */
static inline bool vt__source_is_programs(const char *file)
{
    if (!file || !*file || !strncmp(file, "<frozen", 7) || !strncmp(file, "<eval_with_key>", 15))
        return false;
    static const char *const library[] = { "/site-packages/", "/dist-packages/", "/vramtrace/" };
    for (size_t i = 0; i < sizeof library / sizeof library[0]; i++)
        if (strstr(file, library[i]))
            return false;
    const char *std = strstr(file, "/lib/python");
    return !(std && strchr(std + 11, '/'));
}

#endif /* VT_COMMON_USER_CODE_H */
