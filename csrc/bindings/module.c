/* The rlxc._rlxc module: kernel selection at import, CPU info, the weight type table. */
#define RLXC_BINDINGS_MODULE
#include "common.h"
#include "kernels.h"

PyObject *rlxc_enum_classes[ENUM_COUNT];

static PyObject *cpu_info(PyObject *self, PyObject *noargs) {
    const char *compiled[] = {"scalar", "avx2", "avx512", "neon"};
    PyObject *avail = PyList_New(0);
    if (!avail) return NULL;
    for (int i = 0; i < 4; i++) {
        if (!rlxc_kernels_available(compiled[i])) continue;
        PyObject *s = PyUnicode_FromString(compiled[i]);
        if (!s || PyList_Append(avail, s)) { Py_XDECREF(s); Py_DECREF(avail); return NULL; }
        Py_DECREF(s);
    }
#if defined(__x86_64__)
    const int amx = rlxc_amx_usable();
#else
    const int amx = 0;
#endif
    return Py_BuildValue("{s:s,s:s,s:N,s:i,s:O}", "features", rlxc_cpu_features(), "isa", rlxc_kernels_active()->isa,
                         "available_isas", avail, "default_threads", rlxc_threads_default(), "amx",
                         amx ? Py_True : Py_False);
}

static PyObject *set_isa(PyObject *self, PyObject *arg) {
    const char *name = str_arg(arg, "name");
    if (!name) return NULL;
    char err[RLXC_ERRLEN];
    if (rlxc_kernels_select(name, err, sizeof err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *get_isa(PyObject *self, PyObject *noargs) { return PyUnicode_FromString(rlxc_kernels_active()->isa); }

/* The engine's table of weight types (rlxc.h), one dict per type in rlxc_wtypes' order: name, ggml
 * type id, weights and bytes per block, whether the active kernels run its products, whether
 * Layer.set_weight makes it from floats. */
static PyObject *weight_types(PyObject *self, PyObject *noargs) {
    PyObject *list = PyList_New(rlxc_n_wtypes);
    for (int i = 0; list && i < rlxc_n_wtypes; i++) {
        const rlxc_wtype_info *t = &rlxc_wtypes[i];
        PyObject *d = Py_BuildValue("{s:s,s:i,s:i,s:n,s:N,s:N}", "name", t->name, "ggml_type", (int)t->type,
                                    "block_size", t->block, "block_bytes", (Py_ssize_t)t->block_bytes, "runs",
                                    PyBool_FromLong(rlxc_wtype_runs(t->type)), "from_floats",
                                    PyBool_FromLong(t->from_floats));
        if (!d) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, d);
    }
    return list;
}

static PyObject *profile_start(PyObject *self, PyObject *noargs) {
    if (rlxc_profile_start()) {
        PyErr_SetString(PyExc_RuntimeError, "a profile is already running: stop it first");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* (names, ns[threads][stages] as uint64, wall ns, team runs) of the profile that ran. */
static PyObject *profile_stop(PyObject *self, PyObject *noargs) {
    static uint64_t ns[RLXC_PROFILE_THREADS * RLXC_TIMES];
    uint64_t wall, runs;
    const int n = rlxc_profile_stop(ns, RLXC_PROFILE_THREADS, &wall, &runs);
    if (n < 0) {
        PyErr_SetString(PyExc_RuntimeError, "no profile is running: start one first");
        return NULL;
    }
    PyObject *names = PyTuple_New(RLXC_TIMES);
    for (int s = 0; names && s < RLXC_TIMES; s++) {
        PyObject *name = PyUnicode_FromString(rlxc_time_name((rlxc_time)s));
        if (!name) Py_CLEAR(names);
        else PyTuple_SET_ITEM(names, s, name);
    }
    const npy_intp dims[2] = {n, RLXC_TIMES};
    PyArrayObject *arr = names ? (PyArrayObject *)PyArray_SimpleNew(2, (npy_intp *)dims, NPY_UINT64) : NULL;
    if (!arr) {
        Py_XDECREF(names);
        return NULL;
    }
    memcpy(PyArray_DATA(arr), ns, (size_t)n * RLXC_TIMES * sizeof(uint64_t));
    return Py_BuildValue("(NNKK)", names, arr, (unsigned long long)wall, (unsigned long long)runs);
}

static PyObject *register_enums(PyObject *self, PyObject *args) {
    PyObject *e[ENUM_COUNT];
    if (!PyArg_ParseTuple(args, "OOOO", &e[0], &e[1], &e[2], &e[3])) return NULL;
    for (int i = 0; i < ENUM_COUNT; i++) {
        Py_INCREF(e[i]);
        Py_XSETREF(rlxc_enum_classes[i], e[i]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"cpu_info", cpu_info, METH_NOARGS, "cpu_info() -> dict: CPU features, the active ISA and the ISAs usable here."},
    {"set_isa", set_isa, METH_O, "set_isa(name): use 'scalar', 'avx2', 'avx512', 'neon' or 'auto' kernels."},
    {"get_isa", get_isa, METH_NOARGS, "get_isa() -> str: the ISA of the active kernel table."},
    {"weight_types", weight_types, METH_NOARGS,
     "weight_types() -> list of dict: every weight type the engine knows, in a fixed order, as {'name': 'q4_0', "
     "'ggml_type': 2, 'block_size': 32 (weights per block), 'block_bytes': 18, 'runs': whether the active kernels "
     "multiply it, 'from_floats': whether Layer.set_weight quantizes floats to it}."},
    {"profile_start", profile_start, METH_NOARGS,
     "profile_start(): zero the engine's stage timers and time every call from now on (rlxc.profile)."},
    {"profile_stop", profile_stop, METH_NOARGS,
     "profile_stop() -> (stage names, uint64 ndarray [threads, stages] of ns, wall ns, calls): stop timing."},
    {"_register_enums", register_enums, METH_VARARGS, "internal: the Python enum classes for enum fields."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, .m_name = "_rlxc", .m_doc = "rlxc C engine binding.", .m_size = -1};

PyMODINIT_FUNC PyInit__rlxc(void) {
    import_array();
    char err[RLXC_ERRLEN];
    if (rlxc_kernels_init(err, sizeof err)) {
        PyErr_SetString(PyExc_ImportError, err);
        return NULL;
    }
    if (rlxc_layer_type_prepare() < 0 || PyType_Ready(&Pipeline_Type) < 0 || PyType_Ready(&Engine_Type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, module_methods) || PyModule_AddFunctions(m, rlxc_ops_methods) ||
        PyModule_AddObjectRef(m, "Layer", (PyObject *)&Layer_Type) ||
        PyModule_AddObjectRef(m, "Pipeline", (PyObject *)&Pipeline_Type) ||
        PyModule_AddObjectRef(m, "Engine", (PyObject *)&Engine_Type)) {
        Py_DECREF(m);
        return NULL;
    }
    /* the stage names in engine order: a stage's bit in Engine.set_hooks' masks is 1 << its index */
    PyObject *stages = PyTuple_New(RLXC_STAGE_COUNT);
    for (int s = 0; stages && s < RLXC_STAGE_COUNT; s++)
        PyTuple_SET_ITEM(stages, s, PyUnicode_FromString(rlxc_stage_name((rlxc_stage)s)));
    if (!stages || PyModule_AddObject(m, "STAGES", stages)) {
        Py_XDECREF(stages);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
