/* A model's state followed at each mark: a parameter's .grad
 * (Tracker._grads_follow_parameters says the rule and keeps what is rare:
 * naming a parameter, looking the models up), and the parameters and
 * buffers of a model in use (_Marks._state_follows_models). A .grad is its
 * parameter's state: each step that used the parameter uses its .grad too,
 * and a new .grad (every step after zero_grad(set_to_none=True)) is named
 * after its parameter; a model's buffers are used with it. That is a few
 * dict lookups (and a rename) per parameter and buffer per mark: a loop
 * here, one call each, not a Python loop over the model's state. */
#include "trackfast.h"

#if PY_VERSION_HEX >= 0x030D0000
#define lookup_attr PyObject_GetOptionalAttr
#else
#define lookup_attr _PyObject_LookupAttr   /* its name before 3.13 */
#endif

/* Whether ``name`` (a str) starts with ``prefix`` / ends with ``suffix``. */
static int str_starts(PyObject *name, const char *prefix)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n);
    size_t k = strlen(prefix);
    return s != NULL && (size_t)n >= k && memcmp(s, prefix, k) == 0;
}

static int str_ends(PyObject *name, const char *suffix)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n);
    size_t k = strlen(suffix);
    return s != NULL && (size_t)n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Gradient record ``grec`` named ``label`` (its parameter's name and
 * ".grad"), and the backward output it views (its storage's owner, made by
 * the autograd engine and named by the forward's line) if that one is gone
 * or still named as a backward op's. Not yet recorded: recorded under it. */
int name_grad(Dispatcher *d, PyObject *grec, PyObject *label)
{
    if (!is_tensor_rec(grec) || !PyUnicode_Check(label))
        return -1;
    TensorRec *g = TREC(grec);
    if (name_record(d, grec, label) < 0)
        return -1;
    if (g->base == 0)
        return 0;
    PyObject *by_tid = book(d, BOOK_BY_TID);
    PyObject *key = by_tid ? PyLong_FromUnsignedLongLong(g->base) : NULL;
    PyObject *base = key ? PyDict_GetItemWithError(by_tid, key) : NULL;   /* borrowed */
    Py_XINCREF(base);
    Py_XDECREF(key);
    Py_XDECREF(by_tid);
    if (base == NULL && PyErr_Occurred())
        return -1;
    int rc = 0;
    if (base != NULL && !is_tensor_rec(base)) {
        rc = -1;
    } else if (base == NULL || PyUnicode_Find(TREC(base)->name, s_backward_marker, 0,
                                              PY_SSIZE_T_MAX, 1) >= 0) {
        rc = set_name(d, g->base, label);
        if (rc == 0 && base != NULL) {
            Py_INCREF(label);
            Py_SETREF(TREC(base)->name, label);
        }
    } else if (PyErr_Occurred()) {
        rc = -1;
    }
    Py_XDECREF(base);
    return rc;
}

/* The name ``param_names`` (id(param) -> (weakref, name)) gives ``t``: a
 * new reference to the name ("": no model holds it), NULL and no error if
 * it does not know ``t``. */
static PyObject *known_name(PyObject *param_names, PyObject *t)
{
    PyObject *key = PyLong_FromVoidPtr(t);
    PyObject *got = key ? PyDict_GetItemWithError(param_names, key) : NULL;   /* borrowed */
    Py_XDECREF(key);
    if (got == NULL || !PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2 ||
        !PyWeakref_Check(PyTuple_GET_ITEM(got, 0)))
        return NULL;
    if (PyWeakref_GetObject(PyTuple_GET_ITEM(got, 0)) != t)   /* borrowed */
        return NULL;
    return Py_NewRef(PyTuple_GET_ITEM(got, 1));
}

/* One parameter used since the mark: its .grad used and named; 1 if the
 * tracker's Python has to name something (the parameter, or a .grad whose
 * parameter no lookup has named yet), 0 if not, -1 on error. */
static int follow(Dispatcher *d, PyObject *t, PyObject *rec, long long epoch,
                  PyObject *param_names)
{
    PyObject *by_obj = NULL, *storages = NULL, *g = NULL, *grec = NULL;
    int rc = -1;
    if (lookup_attr(t, s_grad, &g) < 0)   /* getattr(t, "_grad", None) */
        goto out;
    if (g == NULL || g == Py_None) {
        rc = str_starts(TREC(rec)->name, "parameter");
        goto out;
    }
    by_obj = book(d, BOOK_BY_OBJ);
    grec = by_obj ? record_of(by_obj, g) : NULL;
    if (grec == NULL) {
        rc = PyErr_Occurred() ? -1 : str_starts(TREC(rec)->name, "parameter");
        goto out;
    }
    TensorRec *gr = TREC(grec);
    if (gr->tid == 0) {
        rc = str_starts(TREC(rec)->name, "parameter");
        goto out;
    }
    StorageRec *gst;
    storages = book(d, BOOK_STORAGES);
    if (storages == NULL || storage_rec_of(storages, grec, &gst) < 0)
        goto out;
    /* a use with no stack, where the step has not used it already (an
     * optimizer step reads every grad: its use, with its line, stays the
     * last one, and the mark writes no event for it) */
    if (gst == NULL || gst->last_epoch < epoch) {
        d->use(gr->tid, 0);
        if (gst != NULL)
            gst->last_epoch = epoch;
    }
    if (str_starts(TREC(rec)->name, "parameter")) {
        rc = 1;   /* the parameter first: Python names both */
        goto out;
    }
    if (str_ends(gr->name, ".grad")) {
        rc = 0;
        goto out;
    }
    PyObject *name = known_name(param_names, t);
    if (name == NULL) {
        rc = PyErr_Occurred() ? -1 : 1;   /* not looked up yet: Python looks */
        goto out;
    }
    rc = 0;
    if (PyUnicode_GET_LENGTH(name) > 0) {   /* "": no model holds it */
        PyObject *label = PyUnicode_FromFormat("%U.grad", name);
        rc = label != NULL ? name_grad(d, grec, label) : -1;
        Py_XDECREF(label);
    }
    Py_DECREF(name);
out:
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    Py_XDECREF(g);
    Py_XDECREF(grec);
    return rc;
}

/* Dispatcher.follow_grads(epoch, named, param_names, model_of) ->
 * (models, todo): for each tracked parameter whose storage was used since
 * mark ``epoch`` (a record named "parameter..." or one of ``named``, the
 * names the tracker gave parameters), its .grad's record used (no stack)
 * with its storage, and named "<parameter's name>.grad" where
 * ``param_names`` knows the parameter's name. ``models``: the set of
 * ``model_of`` (id(param) -> id(model)) of those parameters, None for one
 * it lacks; ``todo``: (param, rec) for the tracker's Python to name. */
PyObject *follow_grads(Dispatcher *d, long long epoch, PyObject *named, PyObject *param_names,
                       PyObject *model_of)
{
    PyObject *storages = book(d, BOOK_STORAGES);
    PyObject *all = storages ? PyDict_Values(storages) : NULL;   /* renames run Python */
    Py_XDECREF(storages);
    PyObject *models = all ? PySet_New(NULL) : NULL;
    PyObject *todo = models ? PyList_New(0) : NULL;
    PyObject *out = NULL;
    if (todo == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *srec = PyList_GET_ITEM(all, i);
        if (!is_storage_rec(srec))
            goto out;
        if (SREC(srec)->last_epoch < epoch)
            continue;
        PyObject *recs = PySequence_List(SREC(srec)->tids);
        if (recs == NULL)
            goto out;
        int bad = 0;
        for (Py_ssize_t j = 0; !bad && j < PyList_GET_SIZE(recs); j++) {
            PyObject *rec = PyList_GET_ITEM(recs, j);
            if (!is_tensor_rec(rec)) {
                bad = 1;
                break;
            }
            int param = str_starts(TREC(rec)->name, "parameter");
            if (!param) {
                param = PySet_Contains(named, TREC(rec)->name);
                if (param < 0) {
                    bad = 1;
                    break;
                }
            }
            if (!param || TREC(rec)->ref == NULL || !PyWeakref_Check(TREC(rec)->ref))
                continue;
            PyObject *t = PyWeakref_GetObject(TREC(rec)->ref);   /* borrowed */
            if (t == NULL) {
                bad = 1;
                break;
            }
            Py_INCREF(t);
            /* isinstance: Parameter's metaclass counts a tensor marked
             * _is_param as one too (its __instancecheck__ is Python: asked
             * only of what is not a Parameter by type) */
            int is_param = PyObject_TypeCheck(t, (PyTypeObject *)parameter_type)
                               ? 1 : PyObject_IsInstance(t, parameter_type);
            if (is_param < 0)
                bad = 1;
            if (is_param > 0) {
                PyObject *key = PyLong_FromVoidPtr(t);
                PyObject *mid = key ? PyDict_GetItemWithError(model_of, key) : NULL;
                Py_XDECREF(key);
                if ((mid == NULL && PyErr_Occurred()) ||
                    PySet_Add(models, mid != NULL ? mid : Py_None) < 0) {
                    bad = 1;
                } else {
                    int more = follow(d, t, rec, epoch, param_names);
                    PyObject *pair = more > 0 ? PyTuple_Pack(2, t, rec) : NULL;
                    bad = more < 0 || (more > 0 && (pair == NULL || PyList_Append(todo, pair) < 0));
                    Py_XDECREF(pair);
                }
            }
            Py_DECREF(t);
        }
        Py_DECREF(recs);
        if (bad)
            goto out;
    }
    out = PyTuple_Pack(2, models, todo);
out:
    Py_XDECREF(all);
    Py_XDECREF(models);
    Py_XDECREF(todo);
    return out;
}

/* One (weakref, name) of a model's state, for follow_state(): its tensor
 * used if its storage was not used in the step (or ``timed``), and
 * (tensor, name) into ``renames`` where the record goes by another name.
 * 0, or -1 with an error set. */
static int follow_one(Dispatcher *d, PyObject *by_obj, PyObject *storages, PyObject *item,
                      long long epoch, int timed, PyObject *renames)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyWeakref_Check(PyTuple_GET_ITEM(item, 0)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "a model's state holds no (weakref, name)");
        return -1;
    }
    PyObject *t = PyWeakref_GetObject(PyTuple_GET_ITEM(item, 0));   /* borrowed */
    if (t == NULL)
        return -1;
    PyObject *rec = t != Py_None ? record_of(by_obj, t) : NULL;
    if (rec == NULL)
        return PyErr_Occurred() ? -1 : 0;   /* dead, or not tracked */
    int rc = -1;
    if (TREC(rec)->tid == 0) {
        rc = 0;   /* not recorded (yet) */
        goto out;
    }
    StorageRec *s;
    if (storage_rec_of(storages, rec, &s) < 0)
        goto out;
    if (s != NULL && (s->last_epoch < epoch || timed)) {
        d->use(TREC(rec)->tid, 0);
        s->last_epoch = epoch;
    }
    PyObject *name = PyTuple_GET_ITEM(item, 1);   /* "": a parameter, named elsewhere */
    int same = PyUnicode_GET_LENGTH(name) == 0 ? 0 : PyUnicode_Compare(TREC(rec)->name, name);
    if (same == -1 && PyErr_Occurred())
        goto out;
    PyObject *pair = same != 0 ? PyTuple_Pack(2, t, name) : NULL;
    rc = same != 0 && (pair == NULL || PyList_Append(renames, pair) < 0) ? -1 : 0;
    Py_XDECREF(pair);
out:
    Py_DECREF(rec);
    return rc;
}

/* Dispatcher.follow_state(state, epoch, timed) -> renames: a model in use
 * uses its state (_Marks._state_follows_models says why). ``state``: the
 * model's (weakref, name) pairs (Tracker._model_state: its parameters,
 * named "", and its buffers). Each tracked tensor of it whose storage was
 * not used in the step (mark ``epoch``; every one when ``timed``) is used
 * now (no stack) and its storage with it. ``renames``: the (tensor, name)
 * pairs whose record goes by another name, for the tracker to rename. */
PyObject *follow_state(Dispatcher *d, PyObject *state, long long epoch, int timed)
{
    PyObject *by_obj = book(d, BOOK_BY_OBJ), *storages = book(d, BOOK_STORAGES);
    PyObject *renames = by_obj && storages ? PyList_New(0) : NULL;
    for (Py_ssize_t i = 0; renames != NULL && i < PyList_GET_SIZE(state); i++) {
        if (follow_one(d, by_obj, storages, PyList_GET_ITEM(state, i), epoch, timed, renames) < 0)
            Py_CLEAR(renames);
    }
    Py_XDECREF(by_obj);
    Py_XDECREF(storages);
    return renames;
}
