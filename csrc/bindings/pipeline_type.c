/* rlxc._rlxc.Pipeline: a stack of Layer objects with its KV caches. Calls release the
 * GIL; a per-pipeline lock serializes threads that share one pipeline. */
#include "common.h"


static int Pipeline_init(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"layers", "max_seq", "threads", NULL};
    PipelineObject *self = (PipelineObject *)o;
    PyObject *seq, *max_seq_obj, *threads_obj = Py_None;
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline is already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:Pipeline", kwlist, &seq, &max_seq_obj, &threads_obj)) return -1;
    int max_seq, threads = 0;
    if (int_arg(max_seq_obj, "max_seq", 1, 1 << 24, &max_seq)) return -1;
    if (threads_obj != Py_None && int_arg(threads_obj, "threads", 1, 1024, &threads)) return -1;
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    /* What PySequence_Tuple accepts; its own errors (those of a generator's body included,
     * KeyboardInterrupt too) propagate as raised. */
    if (!Py_TYPE(seq)->tp_iter && !PySequence_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "layers must be a sequence of rlxc.Layer, got %s", Py_TYPE(seq)->tp_name);
        return -1;
    }
    PyObject *tup = PySequence_Tuple(seq);
    if (!tup) return -1;
    const Py_ssize_t n = PyTuple_GET_SIZE(tup);
    if (n == 0 || n > 100000) {
        Py_DECREF(tup);
        PyErr_SetString(PyExc_ValueError, "layers must hold between 1 and 100000 rlxc.Layer");
        return -1;
    }
    /* The iterable ran user code, which may have initialized this object (a generator calling
     * __init__ on it): that pipeline stands, and this call, from here on without user code,
     * makes none to overwrite it. */
    if (self->p) {
        Py_DECREF(tup);
        PyErr_SetString(PyExc_RuntimeError, "Pipeline is already initialized (by a call made while iterating layers)");
        return -1;
    }
    rlxc_layer **ptrs = PyMem_Malloc(n * sizeof *ptrs);
    if (!ptrs) { Py_DECREF(tup); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(tup, i);
        if (!PyObject_TypeCheck(it, &Layer_Type)) {
            PyErr_Format(PyExc_TypeError, "layers[%zd] must be an rlxc.Layer, got %s", i, Py_TYPE(it)->tp_name);
            PyMem_Free(ptrs);
            Py_DECREF(tup);
            return -1;
        }
        ptrs[i] = &((LayerObject *)it)->layer;
    }
    char err[RLXC_ERRLEN];
    self->p = rlxc_pipeline_create(ptrs, (int)n, max_seq, threads, err);
    PyMem_Free(ptrs);
    if (!self->p) {
        Py_DECREF(tup);
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    self->layers = tup;
    return 0;
}

static int Pipeline_traverse(PyObject *o, visitproc visit, void *arg) {
    Py_VISIT(((PipelineObject *)o)->layers);
    return 0;
}

static int Pipeline_clear(PyObject *o) {
    Py_CLEAR(((PipelineObject *)o)->layers);
    return 0;
}

static void Pipeline_dealloc(PyObject *o) {
    PipelineObject *self = (PipelineObject *)o;
    PyObject_GC_UnTrack(o);
    rlxc_pipeline_free(self->p);
    if (self->lock) PyThread_free_lock(self->lock);
    Pipeline_clear(o);
    Py_TYPE(o)->tp_free(o);
}

int pipeline_ready(PipelineObject *self) {
    if (!self->p || !self->layers) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline is not initialized");
        return 0;
    }
    return 1;
}

/* Take the pipeline's lock (waiting without the GIL) and freeze its layers. */
int pipeline_enter(PipelineObject *self) {
    const long pid = (long)getpid();
    if (self->hook_thread && self->hook_thread == PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "a hook cannot run, reset or reconfigure the model whose call it is in");
        return -1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        PyThread_type_lock fresh = NULL;
        /* Held in the process we were forked from, by a thread that does not exist here and will
         * never release it: use a new lock (the old one is left as fork left it). Only completed
         * calls are in the cache (n_past advances when a call succeeds). lock_pid is 0 while a
         * waiter of this process has the lock but not yet the GIL: then wait, as for any holder. */
        if (self->lock_pid && self->lock_pid != pid && (fresh = PyThread_allocate_lock()) != NULL) self->lock = fresh;
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->lock_pid = pid;
    /* the last kv_cache view is gone: what was written through views is copied to ring mirrors once */
    if (!self->kv_views) rlxc_pipeline_kv_released(self->p);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->layers); i++) {
        LayerObject *l = (LayerObject *)PyTuple_GET_ITEM(self->layers, i);
        layer_forget_parent_runs(l);
        l->busy++;
        l->busy_pid = pid;
    }
    return 0;
}

void pipeline_leave(PipelineObject *self) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->layers); i++)
        ((LayerObject *)PyTuple_GET_ITEM(self->layers, i))->busy--;
    self->lock_pid = 0;
    PyThread_release_lock(self->lock);
}

/* ple must be None when no layer has ple_dim, else float32 [T, ple_stride] (or [ple_stride] for one token). */
static int ple_arg(PipelineObject *self, PyObject *ple, int T, int one_token, const float **out) {
    const size_t stride = rlxc_pipeline_ple_stride(self->p);
    *out = NULL;
    if (ple == Py_None) {
        if (stride > 0) {
            PyErr_Format(PyExc_ValueError, "ple is required: the layers take per-layer inputs of %zu floats per token",
                         stride);
            return -1;
        }
        return 0;
    }
    if (stride == 0) {
        PyErr_SetString(PyExc_ValueError, "ple must be None: no layer has ple_dim > 0");
        return -1;
    }
    PyArrayObject *a = as_f32(ple, "ple", one_token ? 1 : 2, one_token ? 1 : 2);
    if (!a) return -1;
    if ((size_t)PyArray_DIM(a, one_token ? 0 : 1) != stride || (!one_token && PyArray_DIM(a, 0) != T)) {
        if (one_token) PyErr_Format(PyExc_ValueError, "ple must have shape (%zu,)", stride);
        else PyErr_Format(PyExc_ValueError, "ple must have shape (%d, %zu)", T, stride);
        return -1;
    }
    if (check_finite(a, "ple")) return -1;
    *out = PyArray_DATA(a);
    return 0;
}

/* x and ple were checked against the pipeline's shapes; their widths are what the engine may
 * read, so they are re-checked once the layers are frozen. */
static PyObject *run(PipelineObject *self, PyArrayObject *x, int T, int pos, int decode, const float *ple,
                     int layer_outputs) {
    const int H = (int)PyArray_DIM(x, PyArray_NDIM(x) - 1), L = (int)PyTuple_GET_SIZE(self->layers);
    const size_t stride = ple ? rlxc_pipeline_ple_stride(self->p) : 0;
    npy_intp dims[3] = {L, T, H};
    PyArrayObject *out = decode ? new_array(1, dims + 2, NPY_FLOAT32) : new_array(2, dims + 1, NPY_FLOAT32);
    PyArrayObject *lo = layer_outputs ? (decode ? new_array(2, (npy_intp[]){L, H}, NPY_FLOAT32)
                                                : new_array(3, dims, NPY_FLOAT32))
                                      : NULL;
    if (!out || (layer_outputs && !lo)) {
        Py_XDECREF(out);
        Py_XDECREF(lo);
        return NULL;
    }
    char err[RLXC_ERRLEN];
    int rc;
    float *lop = lo ? PyArray_DATA(lo) : NULL;
    if (pipeline_enter(self)) {
        Py_DECREF(out);
        Py_XDECREF(lo);
        return NULL;
    }
    /* Arguments were checked before enter(), which may wait without the GIL while another
     * thread re-shapes the layers; once entered they are frozen, so check again. */
    if (rlxc_pipeline_hidden_size(self->p) != H || (ple && rlxc_pipeline_ple_stride(self->p) != stride) ||
        (int)PyTuple_GET_SIZE(self->layers) != L) {
        pipeline_leave(self);
        Py_DECREF(out);
        Py_XDECREF(lo);
        PyErr_SetString(PyExc_RuntimeError, "the layers changed shape while this call waited for the pipeline; "
                                            "check the arguments and call again");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = decode ? rlxc_pipeline_decode(self->p, PyArray_DATA(x), ple, pos, PyArray_DATA(out), lop, err)
                : rlxc_pipeline_prefill(self->p, PyArray_DATA(x), ple, T, PyArray_DATA(out), lop, err);
    Py_END_ALLOW_THREADS
    pipeline_leave(self);
    if (rc) {
        Py_DECREF(out);
        Py_XDECREF(lo);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    if (!lo) return (PyObject *)out;
    return Py_BuildValue("(NN)", out, lo);
}

static PyObject *Pipeline_prefill(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "ple", "layer_outputs", NULL};
    PipelineObject *self = (PipelineObject *)o;
    PyObject *xo, *pleo = Py_None;
    int layer_outputs = 0;
    if (!pipeline_ready(self) || !PyArg_ParseTupleAndKeywords(args, kw, "O|Op:prefill", kwlist, &xo, &pleo, &layer_outputs))
        return NULL;
    PyArrayObject *x = as_f32(xo, "x", 2, 2);
    if (!x) return NULL;
    const int H = rlxc_pipeline_hidden_size(self->p);
    if (PyArray_DIM(x, 1) != H || PyArray_DIM(x, 0) < 1 || PyArray_DIM(x, 0) > rlxc_pipeline_max_seq(self->p)) {
        PyErr_Format(PyExc_ValueError, "x must have shape (T, %d) with 1 <= T <= max_seq=%d, got (%zd, %zd)", H,
                     rlxc_pipeline_max_seq(self->p), (Py_ssize_t)PyArray_DIM(x, 0), (Py_ssize_t)PyArray_DIM(x, 1));
        return NULL;
    }
    const int T = (int)PyArray_DIM(x, 0);
    const float *ple;
    if (check_finite(x, "x") || ple_arg(self, pleo, T, 0, &ple)) return NULL;
    return run(self, x, T, 0, 0, ple, layer_outputs);
}

static PyObject *Pipeline_decode_token(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "pos", "ple", "layer_outputs", NULL};
    PipelineObject *self = (PipelineObject *)o;
    PyObject *xo, *poso, *pleo = Py_None;
    int layer_outputs = 0, pos;
    if (!pipeline_ready(self) ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OO|Op:decode_token", kwlist, &xo, &poso, &pleo, &layer_outputs))
        return NULL;
    PyArrayObject *x = as_f32(xo, "x", 1, 1);
    if (!x) return NULL;
    const int H = rlxc_pipeline_hidden_size(self->p);
    if (PyArray_DIM(x, 0) != H) {
        PyErr_Format(PyExc_ValueError, "x must have shape (%d,), got (%zd,)", H, (Py_ssize_t)PyArray_DIM(x, 0));
        return NULL;
    }
    if (int_arg(poso, "pos", 0, rlxc_pipeline_max_seq(self->p) - 1, &pos)) return NULL;
    if (pos > rlxc_pipeline_n_past(self->p)) {
        PyErr_Format(PyExc_ValueError, "pos (%d) is past the %d cached tokens: positions must be filled in order", pos,
                     rlxc_pipeline_n_past(self->p));
        return NULL;
    }
    const float *ple;
    if (check_finite(x, "x") || ple_arg(self, pleo, 1, 1, &ple)) return NULL;
    return run(self, x, 1, pos, 1, ple, layer_outputs);
}

static PyObject *Pipeline_reset(PyObject *o, PyObject *noargs) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return NULL;
    char err[RLXC_ERRLEN];
    if (pipeline_enter(self)) return NULL;
    if (self->kv_views && rlxc_pipeline_kv_reshaped(self->p)) {
        pipeline_leave(self);
        PyErr_SetString(PyExc_BufferError, "reset() would re-allocate KV caches that kv_cache() arrays still view: "
                                           "delete those arrays first");
        return NULL;
    }
    int rc = rlxc_pipeline_reset(self->p, err);
    pipeline_leave(self);
    if (rc) {
        PyErr_SetString(rc == -2 ? PyExc_MemoryError : PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The base of the kv_cache arrays: keeps the pipeline alive and counted in kv_views. */
static void kv_view_release(PyObject *capsule) {
    PipelineObject *self = PyCapsule_GetContext(capsule);
    self->kv_views--;
    Py_DECREF(self);
}

static PyObject *kv_view(PipelineObject *self, const rlxc_kv_view *kv, void *base) {
    /* f32 and f16 as numbers; bf16 (numpy has no such type) as its uint16 bits, q8_0 as the
     * bytes of each row's blocks */
    const int typenum = kv->type == RLXC_F32    ? NPY_FLOAT32
                        : kv->type == RLXC_F16  ? NPY_FLOAT16
                        : kv->type == RLXC_BF16 ? NPY_UINT16
                                                : NPY_UINT8;
    const size_t row = rlxc_wtype_row_bytes(kv->type, kv->dim);
    const size_t elem = typenum == NPY_FLOAT32 ? 4 : typenum == NPY_UINT8 ? 1 : 2;
    npy_intp dims[3] = {kv->heads, kv->n, (npy_intp)(row / elem)};
    npy_intp strides[3] = {(npy_intp)((size_t)kv->rows * row), (npy_intp)row, (npy_intp)elem};
    char *data = (char *)base + (size_t)kv->first * row;
    PyObject *a = PyArray_New(&PyArray_Type, 3, dims, typenum, strides, data, 0, NPY_ARRAY_WRITEABLE | NPY_ARRAY_ALIGNED,
                              NULL);
    PyObject *cap = a ? PyCapsule_New(data, "rlxc.kv_cache", kv_view_release) : NULL;
    if (!cap || PyCapsule_SetContext(cap, self)) {
        Py_XDECREF(cap);
        Py_XDECREF(a);
        return NULL;
    }
    Py_INCREF(self);
    self->kv_views++;
    if (PyArray_SetBaseObject((PyArrayObject *)a, cap)) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static PyObject *Pipeline_kv_cache(PyObject *o, PyObject *arg) {
    PipelineObject *self = (PipelineObject *)o;
    int i;
    if (!pipeline_ready(self) || int_arg(arg, "layer", 0, PyTuple_GET_SIZE(self->layers) - 1, &i)) return NULL;
    rlxc_kv_view kv;
    if (pipeline_enter(self)) return NULL;
    rlxc_pipeline_kv(self->p, i, &kv);
    const rlxc_layer *l = &((LayerObject *)PyTuple_GET_ITEM(self->layers, i))->layer;
    pipeline_leave(self);
    if (!kv.k || kv.heads != l->num_kv_heads || kv.dim != l->head_dim) {
        PyErr_Format(PyExc_RuntimeError, "layer %d's K/V shape or sharing changed since its cache was allocated: "
                     "call reset()", i);
        return NULL;
    }
    PyObject *ka = kv_view(self, &kv, kv.k), *va = ka ? kv_view(self, &kv, kv.v) : NULL;
    if (!va) {
        Py_XDECREF(ka);
        return NULL;
    }
    return Py_BuildValue("(NN)", ka, va);
}

static PyObject *Pipeline_seq_past(PyObject *o, PyObject *arg) {
    PipelineObject *self = (PipelineObject *)o;
    int s;
    if (!pipeline_ready(self) || int_arg(arg, "seq", 0, rlxc_pipeline_seqs(self->p) - 1, &s)) return NULL;
    return PyLong_FromLong(rlxc_pipeline_seq_past(self->p, s));
}

static PyObject *Pipeline_set_n_past(PyObject *o, PyObject *arg) {
    PipelineObject *self = (PipelineObject *)o;
    int n;
    if (!pipeline_ready(self) || int_arg(arg, "n_past", 0, rlxc_pipeline_max_seq(self->p), &n)) return NULL;
    char err[RLXC_ERRLEN];
    if (pipeline_enter(self)) return NULL;
    const int rc = rlxc_pipeline_set_n_past(self->p, n, err);
    pipeline_leave(self);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *get_int(PyObject *o, int (*f)(const rlxc_pipeline *)) {
    PipelineObject *self = (PipelineObject *)o;
    return pipeline_ready(self) ? PyLong_FromLong(f(self->p)) : NULL;
}
static PyObject *Pipeline_n_past(PyObject *o, void *c) { return get_int(o, rlxc_pipeline_n_past); }
static PyObject *Pipeline_max_seq(PyObject *o, void *c) { return get_int(o, rlxc_pipeline_max_seq); }
static PyObject *Pipeline_hidden_size(PyObject *o, void *c) { return get_int(o, rlxc_pipeline_hidden_size); }
static PyObject *Pipeline_ple_stride(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    return pipeline_ready(self) ? PyLong_FromSize_t(rlxc_pipeline_ple_stride(self->p)) : NULL;
}
static PyObject *Pipeline_threads(PyObject *o, void *c) { return get_int(o, rlxc_pipeline_threads); }

static int Pipeline_set_threads(PyObject *o, PyObject *v, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    int n;
    if (!pipeline_ready(self)) return -1;
    if (!v) { PyErr_SetString(PyExc_AttributeError, "cannot delete threads"); return -1; }
    if (int_arg(v, "threads", 1, 1024, &n)) return -1;
    if (pipeline_enter(self)) return -1;
    rlxc_pipeline_set_threads(self->p, n);
    pipeline_leave(self);
    return 0;
}

static PyObject *Pipeline_activations(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return NULL;
    return PyUnicode_FromString(rlxc_pipeline_act(self->p) == RLXC_ACT_F32 ? "f32" : "q8");
}

static int Pipeline_set_activations(PyObject *o, PyObject *v, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    rlxc_act act;
    if (!pipeline_ready(self)) return -1;
    if (!v) { PyErr_SetString(PyExc_AttributeError, "cannot delete activations"); return -1; }
    if (act_arg(v, "activations", &act)) return -1;
    if (pipeline_enter(self)) return -1;
    rlxc_pipeline_set_act(self->p, act);
    pipeline_leave(self);
    return 0;
}

static PyObject *Pipeline_layers(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return NULL;
    return Py_NewRef(self->layers);
}

static PyMethodDef Pipeline_methods[] = {
    {"prefill", (PyCFunction)(void (*)(void))Pipeline_prefill, METH_VARARGS | METH_KEYWORDS,
     "prefill(x, ple=None, layer_outputs=False): run float32 [T, hidden] at positions n_past.. and append to the "
     "cache. Returns [T, hidden], or (out, [n_layers, T, hidden]) with layer_outputs."},
    {"decode_token", (PyCFunction)(void (*)(void))Pipeline_decode_token, METH_VARARGS | METH_KEYWORDS,
     "decode_token(x, pos, ple=None, layer_outputs=False): run one float32 [hidden] token at position pos "
     "(pos <= n_past; smaller pos rewinds the cache). Returns [hidden]."},
    {"reset", Pipeline_reset, METH_NOARGS, "reset(): empty the KV cache (and re-size it if layers changed shape)."},
    {"kv_cache", Pipeline_kv_cache, METH_O,
     "kv_cache(layer) -> (k, v): float32 views [num_kv_heads, n_past, head_dim] of the layer's cache (a layer that "
     "shares K/V gets its donor's), writable: an edit changes what later tokens attend to."},
    {"seq_past", Pipeline_seq_past, METH_O, "seq_past(seq): tokens in sequence seq's cache."},
    {"set_n_past", Pipeline_set_n_past, METH_O,
     "set_n_past(n): declare the cache's first n positions valid (after writing K/V into kv_cache views)."},
    {NULL, NULL, 0, NULL},
};

/* closure: 0 kv_type, 1 kv_ring, 2 ubatch */
static PyObject *Pipeline_kv_setting(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return NULL;
    rlxc_wtype t;
    int ring, ubatch;
    rlxc_pipeline_get_kv(self->p, &t, &ring, &ubatch);
    switch ((int)(intptr_t)c) {
    case 0: return PyUnicode_FromString(rlxc_wtype_name(t));
    case 1: return PyBool_FromLong(ring);
    default: return PyLong_FromLong(ubatch);
    }
}

static int Pipeline_set_kv_setting(PyObject *o, PyObject *v, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return -1;
    if (!v) { PyErr_SetString(PyExc_AttributeError, "cannot delete a KV setting"); return -1; }
    rlxc_wtype t;
    int ring, ubatch;
    rlxc_pipeline_get_kv(self->p, &t, &ring, &ubatch);
    const int which = (int)(intptr_t)c;
    if (which == 0) {
        const char *s = str_arg(v, "kv_type");
        if (!s) return -1;
        const int wt = rlxc_wtype_from_name(s);
        if (wt < 0) {
            PyErr_Format(PyExc_ValueError, "kv_type must be 'f32', 'f16', 'bf16' or 'q8_0', got '%s'", s);
            return -1;
        }
        t = (rlxc_wtype)wt;
    } else if (which == 1) {
        const int b = PyObject_IsTrue(v);
        if (b < 0) return -1;
        ring = b;
    } else if (int_arg(v, "ubatch", 1, 1 << 20, &ubatch)) {
        return -1;
    }
    char err[RLXC_ERRLEN];
    if (pipeline_enter(self)) return -1;
    const int rc = rlxc_pipeline_set_kv(self->p, t, ring, ubatch, err);
    pipeline_leave(self);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    return 0;
}

/* closure: 0 seqs (set_seqs), 1 seq (use_seq) */
static PyObject *Pipeline_seq_setting(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return NULL;
    return PyLong_FromLong(c ? rlxc_pipeline_seq(self->p) : rlxc_pipeline_seqs(self->p));
}

static int Pipeline_set_seq_setting(PyObject *o, PyObject *v, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    if (!pipeline_ready(self)) return -1;
    if (!v) { PyErr_SetString(PyExc_AttributeError, "cannot delete a sequence setting"); return -1; }
    int n;
    if (int_arg(v, c ? "seq" : "seqs", c ? 0 : 1, c ? rlxc_pipeline_seqs(self->p) - 1 : RLXC_MAX_SEQS, &n)) return -1;
    if (self->kv_views) {
        PyErr_SetString(PyExc_BufferError, "kv_cache() arrays of the active sequence are alive: delete them first");
        return -1;
    }
    char err[RLXC_ERRLEN];
    if (pipeline_enter(self)) return -1;
    const int rc = c ? rlxc_pipeline_use_seq(self->p, n, err) : rlxc_pipeline_set_seqs(self->p, n, err);
    pipeline_leave(self);
    if (rc) {
        PyErr_SetString(rc == -2 ? PyExc_MemoryError : PyExc_ValueError, err);
        return -1;
    }
    return 0;
}

static PyObject *Pipeline_kv_bytes(PyObject *o, void *c) {
    PipelineObject *self = (PipelineObject *)o;
    return pipeline_ready(self) ? PyLong_FromSize_t(rlxc_pipeline_kv_bytes(self->p)) : NULL;
}

static PyGetSetDef Pipeline_getset[] = {
    {"seqs", Pipeline_seq_setting, Pipeline_set_seq_setting,
     "Independent sequences, each with its own KV caches (default 1). Setting it empties every cache and makes "
     "sequence 0 active.",
     (void *)0},
    {"seq", Pipeline_seq_setting, Pipeline_set_seq_setting,
     "The active sequence: the one prefill, decode, n_past and kv_cache act on.", (void *)1},
    {"kv_type", Pipeline_kv_setting, Pipeline_set_kv_setting,
     "How the KV cache stores K and V: 'f32' (exact, the default), 'f16', 'bf16' or 'q8_0' (head_dim a multiple of 32). "
     "Takes effect at the next reset().",
     (void *)0},
    {"kv_ring", Pipeline_kv_setting, Pipeline_set_kv_setting,
     "Windowed layers keep only their last sliding_window - 1 + ubatch positions (a ring) where that takes less "
     "memory than max_seq positions (default True). Takes effect at the next reset().", (void *)1},
    {"ubatch", Pipeline_kv_setting, Pipeline_set_kv_setting,
     "The most tokens one pass runs (default 512): a longer prefill runs in passes. Sizes the rings; takes effect "
     "at the next reset().", (void *)2},
    {"kv_bytes", Pipeline_kv_bytes, NULL,
     "Bytes the KV caches take under the current settings (virtual: pages fill as positions do).", NULL},
    {"n_past", Pipeline_n_past, NULL, "Tokens in the KV cache.", NULL},
    {"max_seq", Pipeline_max_seq, NULL, "Capacity of the KV cache in tokens.", NULL},
    {"hidden_size", Pipeline_hidden_size, NULL, "Width of the residual stream.", NULL},
    {"ple_stride", Pipeline_ple_stride, NULL, "Per-layer-input floats per token (sum of ple_dim).", NULL},
    {"threads", Pipeline_threads, Pipeline_set_threads, "OpenMP threads used by each call.", NULL},
    {"activations", Pipeline_activations, Pipeline_set_activations,
     "How block-quantized weights meet the activations: 'q8' rounds them to 8-bit blocks for integer dots "
     "(llama.cpp's numerics, fastest; the default), 'f32' dequantizes weight rows and keeps float32 activations "
     "(transformers' numerics on the dequantized weights).", NULL},
    {"layers", Pipeline_layers, NULL, "The layers, in order (the same objects: edits apply to the next call).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Pipeline_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rlxc._rlxc.Pipeline",
    .tp_basicsize = sizeof(PipelineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Pipeline(layers, max_seq, threads=None): run a stack of Layers over a per-layer KV cache.",
    .tp_new = PyType_GenericNew,
    .tp_init = Pipeline_init,
    .tp_dealloc = Pipeline_dealloc,
    .tp_traverse = Pipeline_traverse,
    .tp_clear = Pipeline_clear,
    .tp_methods = Pipeline_methods,
    .tp_getset = Pipeline_getset,
};
