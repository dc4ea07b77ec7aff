/*
 * trace/common/demangle.c - C++ names as people read them (demangle.h).
 */
#include "demangle.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static vt__demangle_fn from(void *handle)
{
    vt__demangle_fn fn = NULL;
    void *p = handle ? dlsym(handle, "__cxa_demangle") : NULL;
    memcpy(&fn, &p, sizeof p);
    return fn;
}

vt__demangle_fn vt__demangler(bool may_load)
{
    vt__demangle_fn fn = from(RTLD_DEFAULT);
    if (fn)
        return fn;
    /* RTLD_NOLOAD: a handle only when it is loaded already, privately or not
     * (dlopen hands out the same object again; the reference it takes is
     * kept, as the function pointer is used after). */
    void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h && may_load)
        h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    return from(h);
}

char *vt__demangle(vt__demangle_fn fn, const char *name)
{
    if (!fn || !name || name[0] != '_' || name[1] != 'Z')
        return NULL;
    int status = -1;
    char *d = fn(name, NULL, NULL, &status);
    if (d && status == 0)
        return d;
    free(d);
    return NULL;
}
