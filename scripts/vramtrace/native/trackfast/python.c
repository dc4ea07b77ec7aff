/* The C path's calls back into the Python Tracker, and its few plain reads
 * of Python objects (an attribute's truth, a method without arguments). */
#include "trackfast.h"

/* Call ``fn(args...)`` with torch._dynamo's frame evaluator off (what its
 * disable wrapper does around a Python __torch_dispatch__): the tracker's
 * Python must never be compiled into a user's graph. */
PyObject *call_python(PyObject *fn, PyObject *const *args, size_t nargs)
{
    PyObject *prior = NULL;
    if (set_eval_frame_fn != NULL) {
        prior = PyObject_CallOneArg(set_eval_frame_fn, Py_None);
        if (prior == NULL)
            PyErr_Clear();
    }
    PyObject *got = PyObject_Vectorcall(fn, args, nargs, NULL);
    if (prior != NULL) {
        if (prior != Py_None) {
            PyObject *exc_type, *exc, *tb;
            PyErr_Fetch(&exc_type, &exc, &tb);
            PyObject *r = PyObject_CallOneArg(set_eval_frame_fn, prior);
            if (r == NULL)
                PyErr_Clear();
            Py_XDECREF(r);
            PyErr_Restore(exc_type, exc, tb);
        }
        Py_DECREF(prior);
    }
    return got;
}

/* tracker.<name>(args...) */
PyObject *call_method(PyObject *tracker, PyObject *name, PyObject *const *args,
                      size_t nargs)
{
    PyObject *fn = PyObject_GetAttr(tracker, name);
    if (fn == NULL)
        return NULL;
    PyObject *got = call_python(fn, args, nargs);
    Py_DECREF(fn);
    return got;
}

/* Is ``obj``'s attribute ``name`` true? -1 on error. */
int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
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

/* instances_of(objects, cls) -> list: the items of list ``objects`` whose
 * type is ``cls`` or a subclass of it (issubclass(type(o), cls): the type's
 * own MRO, never a __class__ an object computes). The tracker looks the
 * models up with it in one pass over the collector's objects
 * (_Naming._param_name): in Python that loop cost more than
 * gc.get_objects() itself. */
PyObject *py_instances_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "instances_of(objects: list, cls: type)");
        return NULL;
    }
    PyObject *objects = args[0];
    PyTypeObject *cls = (PyTypeObject *)args[1];
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); i++) {
        PyObject *o = PyList_GET_ITEM(objects, i);
        if (PyType_IsSubtype(Py_TYPE(o), cls) && PyList_Append(out, o) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}
