/* The tracker's record objects (_TensorRec, _StorageRec): their slots read
 * and written at their offsets, and a tensor's TENSOR_NEW. */
#include "trackfast.h"

int get_u64(PyObject *obj, PyObject *name, uint64_t *out)
{
    PyObject *v = get_attr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

int set_u64(PyObject *obj, PyObject *name, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (o == NULL)
        return -1;
    int rc = set_attr(obj, name, o);
    Py_DECREF(o);
    return rc;
}

/* -- attributes, without the generic lookup --------------------------------
 *
 * Half of the C path's time went to attribute lookups (the type's MRO,
 * then the descriptor) before these. The tracker's records are __slots__
 * classes: a slot is a pointer at a fixed offset in the object, which the
 * member descriptor gives once (setup()). The Tracker's containers are
 * fetched once per Dispatcher. */

typedef struct {
    PyObject *name;          /* interned: compared by pointer */
    Py_ssize_t offset;
} SlotOffset;

enum { MAX_SLOTS = 16 };
static SlotOffset rec_slots[MAX_SLOTS], srec_slots[MAX_SLOTS];
static int n_rec_slots, n_srec_slots;

static Py_ssize_t slot_offset(PyObject *obj, PyObject *name)
{
    const SlotOffset *t;
    int n;
    if (Py_IS_TYPE(obj, (PyTypeObject *)tensor_rec_type)) {
        t = rec_slots;
        n = n_rec_slots;
    } else if (Py_IS_TYPE(obj, (PyTypeObject *)storage_rec_type)) {
        t = srec_slots;
        n = n_srec_slots;
    } else {
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (t[i].name == name)
            return t[i].offset;
    return -1;
}

/* obj.name, a new reference (NULL with an exception). */
PyObject *get_attr(PyObject *obj, PyObject *name)
{
    Py_ssize_t off = slot_offset(obj, name);
    if (off >= 0) {
        PyObject *v = *(PyObject **)((char *)obj + off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);   /* an unset slot raises as usual */
}

/* obj.name = v */
int set_attr(PyObject *obj, PyObject *name, PyObject *v)
{
    Py_ssize_t off = slot_offset(obj, name);
    if (off < 0)
        return PyObject_SetAttr(obj, name, v);
    PyObject **p = (PyObject **)((char *)obj + off);
    PyObject *old = *p;
    *p = Py_NewRef(v);
    Py_XDECREF(old);
    return 0;
}

/* Record the offsets of ``type``'s object slots named in ``names``. */
static int slot_table(PyObject *type, PyObject *const *names, int n, SlotOffset *out)
{
    int got = 0;
    for (int i = 0; i < n && got < MAX_SLOTS; i++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, names[i]);
        if (descr == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;   /* not a slot of this class: the generic lookup */
        }
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type))
            continue;
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY))
            continue;
        out[got].name = names[i];
        out[got].offset = m->offset;
        got++;
    }
    return got;
}

/* Tracker._record: the TENSOR_NEW of ``rec`` if not made yet; its id. */
int record(Dispatcher *d, PyObject *rec, uint64_t *tid)
{
    PyObject *pend = get_attr(rec, s_pend);
    if (pend == NULL)
        return -1;
    if (pend == Py_None) {
        Py_DECREF(pend);
        return get_u64(rec, s_tid, tid);
    }
    int rc = -1;
    PyObject *name = NULL, *encoded = NULL, *enc_cache = NULL, *by_tid = NULL, *key = NULL;
    if (!PyTuple_Check(pend) || PyTuple_GET_SIZE(pend) != 3) {
        PyErr_SetString(PyExc_TypeError, "_TensorRec.pend is not (ptr, nbytes, stack)");
        goto out;
    }
    uint64_t ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 0));
    uint64_t nbytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 1));
    uint64_t stack = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pend, 2));
    uint64_t base;
    if (PyErr_Occurred() || get_u64(rec, s_base, &base) < 0)
        goto out;
    if (set_attr(rec, s_pend, Py_None) < 0)
        goto out;
    name = get_attr(rec, s_name);
    enc_cache = tracker_attr(d, s_encoded);
    if (name == NULL || enc_cache == NULL)
        goto out;
    encoded = PyDict_GetItemWithError(enc_cache, name);   /* borrowed */
    if (encoded != NULL) {
        Py_INCREF(encoded);
    } else {
        if (PyErr_Occurred())
            goto out;
        encoded = PyUnicode_AsEncodedString(name, "utf-8", "replace");
        if (encoded == NULL)
            goto out;
        if (PyDict_GET_SIZE(enc_cache) >= (1 << 16))
            PyDict_Clear(enc_cache);
        if (PyDict_SetItem(enc_cache, name, encoded) < 0)
            goto out;
    }
    *tid = d->tensor_new((const void *)(uintptr_t)ptr, (size_t)nbytes, base,
                         PyBytes_AS_STRING(encoded), (uint32_t)stack);
    by_tid = tracker_attr(d, s_by_tid);
    key = PyLong_FromUnsignedLongLong(*tid);
    if (by_tid == NULL || key == NULL || set_attr(rec, s_tid, key) < 0 ||
        PyDict_SetItem(by_tid, key, rec) < 0)
        goto out;
    rc = 0;
out:
    Py_DECREF(pend);
    Py_XDECREF(name);
    Py_XDECREF(encoded);
    Py_XDECREF(enc_cache);
    Py_XDECREF(by_tid);
    Py_XDECREF(key);
    return rc;
}

/* Tracker._flush: record the outputs held back, in creation order. */
int flush(Dispatcher *d)
{
    PyObject *pending = tracker_attr(d, s_pending);
    if (pending == NULL)
        return -1;
    int rc = 0;
    if (PyList_Check(pending) && PyList_GET_SIZE(pending) > 0) {
        /* Take the list's items first: recording runs no Python that adds. */
        PyObject *taken = PyList_GetSlice(pending, 0, PyList_GET_SIZE(pending));
        if (taken == NULL || PyList_SetSlice(pending, 0, PyList_GET_SIZE(pending), NULL) < 0) {
            Py_XDECREF(taken);
            Py_DECREF(pending);
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(taken) && rc == 0; i++) {
            uint64_t tid;
            rc = record(d, PyList_GET_ITEM(taken, i), &tid);
        }
        Py_DECREF(taken);
    }
    Py_DECREF(pending);
    return rc;
}

/* Is ``obj``'s attribute ``name`` true? -1 on error. */
int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = get_attr(obj, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* A new reference to the result of ``obj.name()``. */
PyObject *call0(PyObject *obj, PyObject *name)
{
    return PyObject_CallMethodNoArgs(obj, name);
}

/* The slot tables of the two record classes (setup()). A class whose every
 * slot is in its table is made here without its Python __init__ (see
 * make_record); one with slots we do not know is made by calling it. */
static int direct_tensor_rec, direct_storage_rec;

static PyObject *rec_names[6], *srec_names[12];

static int slots_of(PyObject *type, Py_ssize_t *n)
{
    PyObject *slots = PyObject_GetAttrString(type, "__slots__");
    if (slots == NULL)
        return -1;
    *n = PyTuple_Check(slots) ? PyTuple_GET_SIZE(slots) : -1;
    Py_DECREF(slots);
    return 0;
}

int setup_slots(PyObject *tensor_rec, PyObject *storage_rec)
{
    PyObject *rn[] = {s_tid, s_skey, s_ref, s_name, s_base, s_pend};
    PyObject *sn[] = {s_ptr, s_nbytes, s_device, s_external, s_tids, s_last_epoch, s_skey,
                      s_weak, s_declared, s_seen_epoch, s_rest, s_twins};
    memcpy(rec_names, rn, sizeof rn);
    memcpy(srec_names, sn, sizeof sn);
    n_rec_slots = slot_table(tensor_rec, rec_names, 6, rec_slots);
    n_srec_slots = slot_table(storage_rec, srec_names, 12, srec_slots);
    Py_ssize_t nr, ns;
    if (n_rec_slots < 0 || n_srec_slots < 0 || slots_of(tensor_rec, &nr) < 0 ||
        slots_of(storage_rec, &ns) < 0)
        return -1;
    direct_tensor_rec = n_rec_slots == 6 && nr == 6;
    direct_storage_rec = n_srec_slots == 12 && ns == 12;
    return 0;
}

/* A new record of ``type`` whose slots ``names`` (all of them) take
 * ``values``: what its Python __init__ does, without the bytecode frame
 * (one per tensor the program makes). A new reference. */
static PyObject *make_record(PyObject *type, PyObject *const *names, PyObject *const *values,
                             int n)
{
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (obj == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        if (set_attr(obj, names[i], values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    return obj;
}

/* _TensorRec(skey, name, base, pend): tid 0, no weakref yet. */
PyObject *new_tensor_rec(PyObject *skey, PyObject *name, uint64_t base, PyObject *pend)
{
    PyObject *base_obj = PyLong_FromUnsignedLongLong(base);
    if (base_obj == NULL)
        return NULL;
    PyObject *rec;
    if (direct_tensor_rec) {
        PyObject *zero = PyLong_FromLong(0);
        PyObject *v[6] = {zero, skey, Py_None, name, base_obj, pend};
        rec = zero ? make_record(tensor_rec_type, rec_names, v, 6) : NULL;
        Py_XDECREF(zero);
    } else {
        PyObject *a[4] = {skey, name, base_obj, pend};
        rec = PyObject_Vectorcall(tensor_rec_type, a, 4, NULL);
    }
    Py_DECREF(base_obj);
    return rec;
}

/* _StorageRec(ptr, nbytes, device, external, epoch, skey, weak): no
 * tensors yet, not declared, no twins, last used and seen at ``epoch``. */
PyObject *new_storage_rec(uint64_t ptr, uint64_t nbytes, long device, PyObject *epoch,
                          PyObject *skey, PyObject *weak)
{
    PyObject *o_ptr = PyLong_FromUnsignedLongLong(ptr), *o_n = PyLong_FromUnsignedLongLong(nbytes),
        *o_dev = PyLong_FromLong(device), *ext = device < 0 ? Py_True : Py_False;
    PyObject *srec = NULL;
    if (o_ptr != NULL && o_n != NULL && o_dev != NULL) {
        if (direct_storage_rec) {
            PyObject *tids = PySet_New(NULL), *zero = PyLong_FromLong(0);
            PyObject *v[12] = {o_ptr, o_n, o_dev, ext, tids, epoch, skey, weak, Py_False, epoch,
                               zero, Py_None};
            if (tids != NULL && zero != NULL)
                srec = make_record(storage_rec_type, srec_names, v, 12);
            Py_XDECREF(tids);
            Py_XDECREF(zero);
        } else {
            PyObject *a[7] = {o_ptr, o_n, o_dev, ext, epoch, skey, weak};
            srec = PyObject_Vectorcall(storage_rec_type, a, 7, NULL);
        }
    }
    Py_XDECREF(o_ptr);
    Py_XDECREF(o_n);
    Py_XDECREF(o_dev);
    return srec;
}
