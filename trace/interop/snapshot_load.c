/*
 * trace/interop/snapshot_load.c - the one entry point of every reading view: a
 * snapshot file of either kind, told apart by its content (a .vtsnap starts
 * with its magic, a PyTorch pickle with the PROTO opcode), never by its name.
 */
#include <stdlib.h>

#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"

int vt_snapshot_load(const char *path, vt_snapshot_data **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    unsigned char *buf;
    size_t size;
    int rc = vt__read_file(path, &buf, &size, err, errlen);
    if (rc)
        return rc;
    if (size >= 2 && vt_pickle_sniff(buf, 2))
        rc = vt_pytorch_import(buf, size, path, out, err, errlen);
    else
        rc = vt_snapfile_decode(buf, size, path, out, err, errlen);
    free(buf);
    return rc;
}
