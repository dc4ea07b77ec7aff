/*
 * trace/interop/snapshot_load.c - the one entry point of every reading view: a
 * snapshot file of either kind, told apart by its content (a .vtsnap starts
 * with its magic, a PyTorch pickle with the PROTO opcode), never by its name.
 */
#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"

/* A PyTorch pickle starts with the PROTO opcode, a .vtsnap with its magic. */
static int decode_either(const void *data, size_t size, const char *name, vt_snapshot_data **out,
                         char *err, size_t errlen)
{
    if (size >= 2 && vt_pickle_sniff(data, 2))
        return vt_pytorch_import(data, size, name, out, err, errlen);
    return vt_snapfile_decode(data, size, name, out, err, errlen);
}

int vt_snapshot_load(const char *path, vt_snapshot_data **out, char *err, size_t errlen)
{
    return vt__snapfile_read_with(path, decode_either, out, err, errlen);
}
