/* Argument helpers of the binding (declared in common.h): Python objects to the C values the
 * engine takes, with the TypeError / ValueError that names the argument otherwise. */
#include "common.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

PyArrayObject *as_f32(PyObject *obj, const char *name, int lo, int hi) {
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray of float32, got %s", name, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != NPY_FLOAT32) {
        PyErr_Format(PyExc_TypeError, "%s must have dtype float32, got %s (use .astype(np.float32))", name,
                     PyArray_DESCR(a)->typeobj->tp_name);
        return NULL;
    }
    if (PyArray_NDIM(a) < lo || PyArray_NDIM(a) > hi) {
        if (lo == hi) PyErr_Format(PyExc_ValueError, "%s must be %d-D, got %d-D", name, lo, PyArray_NDIM(a));
        else PyErr_Format(PyExc_ValueError, "%s must be %d-D to %d-D, got %d-D", name, lo, hi, PyArray_NDIM(a));
        return NULL;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous, aligned and native-endian (use np.ascontiguousarray)",
                     name);
        return NULL;
    }
    return a;
}

int check_finite(PyArrayObject *a, const char *name) {
    const float *x = PyArray_DATA(a);
    const npy_intp n = PyArray_SIZE(a);
    for (npy_intp i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            PyErr_Format(PyExc_ValueError, "%s contains NaN or infinity (at flat index %zd)", name, (Py_ssize_t)i);
            return -1;
        }
    return 0;
}

PyArrayObject *new_array(int ndim, const npy_intp *dims, int type) {
    return (PyArrayObject *)PyArray_SimpleNew(ndim, (npy_intp *)dims, type);
}

int int_arg(PyObject *obj, const char *name, long lo, long hi, int *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) { /* not printed: the decimal form of a huge int may itself raise */
        PyErr_Format(PyExc_ValueError, "%s must be in [%ld, %ld], got %s", name, lo, hi,
                     overflow > 0 ? "a larger integer" : "a smaller integer");
        return -1;
    }
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%ld, %ld], got %ld", name, lo, hi, v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

const char *str_arg(PyObject *obj, const char *name) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, got %s", name, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!s) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is not valid Unicode text (it cannot be encoded as UTF-8)", name);
        return NULL;
    }
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s must not contain NUL characters", name);
        return NULL;
    }
    return s;
}

int real_arg(PyObject *obj, const char *name, int finite, double *out) {
    PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
    if (!PyFloat_Check(obj) && !PyLong_Check(obj) && !(nb && (nb->nb_float || nb->nb_index))) {
        PyErr_Format(PyExc_TypeError, "%s must be a real number, got %s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    const double d = PyFloat_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred()) {
        const int overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
        PyErr_Clear();
        if (overflow) PyErr_Format(PyExc_ValueError, "%s is too large for a float", name);
        else PyErr_Format(PyExc_TypeError, "%s must be a real number, got %s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (finite && !(fabs(d) <= FLT_MAX)) {
        PyErr_Format(PyExc_ValueError, "%s must be a finite number within float32 range, got %g", name, d);
        return -1;
    }
    *out = d;
    return 0;
}

int check_aligned(PyArrayObject *a, rlxc_wtype t, const char *name) {
    /* stored rows are read in place as floats / halves (block scales): align like them */
    const size_t align = t == RLXC_F32 ? 4 : 2;
    if ((uintptr_t)PyArray_DATA(a) % align) {
        PyErr_Format(PyExc_ValueError, "%s must be %zu-byte aligned for %s (np.ascontiguousarray gives a copy that is)",
                     name, align, rlxc_wtype_name(t));
        return -1;
    }
    return 0;
}

int wtype_arg(const char *s, const char *name) {
    const int t = rlxc_wtype_from_name(s);
    if (t < 0) {
        char names[160] = ""; /* 'f32', 'f16', ...: the engine's table of types */
        for (int i = 0; i < rlxc_n_wtypes; i++) {
            const size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s'%s'", i ? ", " : "", rlxc_wtypes[i].name);
        }
        PyErr_Format(PyExc_ValueError, "%s must be one of %s, got '%s'", name, names, s);
    }
    return t;
}

int act_arg(PyObject *obj, const char *name, rlxc_act *out) {
    const char *s = str_arg(obj, name);
    if (!s) return -1;
    if (!strcmp(s, "q8")) *out = RLXC_ACT_Q8;
    else if (!strcmp(s, "f32")) *out = RLXC_ACT_F32;
    else {
        PyErr_Format(PyExc_ValueError, "%s must be 'q8' (activations rounded to 8 bits for integer dots) or 'f32' "
                     "(weights dequantized, activations kept in float32), got '%s'", name, s);
        return -1;
    }
    return 0;
}
