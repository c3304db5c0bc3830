/* rlxc._rlxc.Layer: one rlxc_layer, its fields as validated attributes and its weights
 * set from and returned as NumPy arrays. */
#include "common.h"
#include <float.h>
#include <math.h>
#include <stddef.h>
#include "kernels.h"

typedef enum { F_INT, F_FLOAT, F_BOOL, F_ENUM } field_kind;

typedef struct {
    const char *name;
    field_kind kind;
    size_t offset;
    int enum_idx; /* F_ENUM: index into rlxc_enum_classes */
    const char *doc;
} field_desc;

#define FIELD(n, k, e, d) {#n, k, offsetof(rlxc_layer, n), e, d}
static const field_desc fields[] = {
    FIELD(eps, F_FLOAT, 0, "Epsilon added to the mean square (RMSNorm) or variance (LayerNorm)."),
    FIELD(attn_scale, F_FLOAT, 0, "Multiplier of q.k before softmax (head_dim**-0.5 unless the model says otherwise)."),
    FIELD(head_dim, F_INT, 0, "Width of one attention head."),
    FIELD(num_q_heads, F_INT, 0, "Query heads."),
    FIELD(num_kv_heads, F_INT, 0, "Key/value heads (GQA); num_q_heads must be a multiple."),
    FIELD(rope_base, F_FLOAT, 0, "RoPE theta."),
    FIELD(rotary_dim, F_INT, 0, "Rotated dims per head (even, <= head_dim; 0 = no RoPE)."),
    FIELD(sliding_window, F_INT, 0, "Key j is visible to query i iff j <= i and i - j < W; 0 = full attention."),
    FIELD(has_v_norm, F_BOOL, 0, "Weightless RMSNorm over each V head (Gemma 4)."),
    FIELD(layer_scalar, F_FLOAT, 0, "Multiplies the whole residual stream at the end of the layer (Gemma 4)."),
    FIELD(norm_type, F_ENUM, ENUM_NORM, "NormType.RMSNORM or NormType.LAYERNORM for the layer's main norms."),
    FIELD(ffn_type, F_ENUM, ENUM_FFN, "FfnType.GATED (down(act(gate x) * up x)) or FfnType.STANDARD (down(act(up x)))."),
    FIELD(activation, F_ENUM, ENUM_ACT, "Activation.SILU or Activation.GELU_TANH."),
    FIELD(qk_norm_offset, F_FLOAT, 0, "q/k norms multiply by (offset + w): 1 for Gemma 3, 0 for Qwen 3 / Gemma 4."),
    FIELD(input_norm_bias, F_BOOL, 0, "The input LayerNorm has a bias."),
    FIELD(post_attn_norm_bias, F_BOOL, 0, "The pre-FFN LayerNorm (HF post_attention_layernorm in Llama-style layers) has a bias."),
    FIELD(ffn_up_bias, F_BOOL, 0, "The up (and gate) projections have biases."),
    FIELD(ffn_down_bias, F_BOOL, 0, "The down projection has a bias."),
    FIELD(hidden_size, F_INT, 0, "Width of the residual stream."),
    FIELD(intermediate_size, F_INT, 0, "Width of the FFN hidden layer."),
    FIELD(norm_offset, F_FLOAT, 0, "Main norms multiply by (offset + w): 1 for Gemma 1-3, else 0."),
    FIELD(qkv_bias, F_BOOL, 0, "q/k/v projections have biases."),
    FIELD(o_bias, F_BOOL, 0, "The output projection has a bias."),
    FIELD(has_qk_norm, F_BOOL, 0, "Per-head RMSNorm of q and k before RoPE (Qwen 3, Gemma 3/4)."),
    FIELD(sandwich_norm, F_BOOL, 0, "Norms after attention and after the FFN (Gemma 2/3/4)."),
    FIELD(attn_softcap, F_FLOAT, 0, "Scores become cap * tanh(scores / cap); 0 = off (Gemma 2)."),
    FIELD(rope_layout, F_ENUM, ENUM_ROPE, "RopeLayout.PREFIX (rotate the leading rotary_dim dims) or PROPORTIONAL (Gemma 4)."),
    FIELD(rope_attn_factor, F_FLOAT, 0, "Multiplies RoPE's cos and sin (YaRN / LongRoPE attention factor)."),
    FIELD(v_from_k, F_BOOL, 0, "V is the raw K projection (Gemma 4 attention_k_eq_v)."),
    FIELD(kv_shared_from, F_INT, 0, "-1: own K/V; else the index of an earlier layer whose KV cache this layer reads."),
    FIELD(ple_dim, F_INT, 0, "Width of the per-layer embedding input (Gemma 4); 0 = none."),
    FIELD(num_experts, F_INT, 0, "Experts of a mixture-of-experts FFN; 0 = a dense FFN only."),
    FIELD(num_experts_used, F_INT, 0, "Experts each token is routed to (top-k of the router's softmax)."),
    FIELD(expert_intermediate_size, F_INT, 0, "Width of one expert's hidden layer."),
    FIELD(moe_norm_topk, F_BOOL, 0, "Renormalise the chosen experts' probabilities to sum 1 (Mixtral, Qwen3-MoE, Gemma 4)."),
    FIELD(steer_scale, F_FLOAT, 0, "Multiplies the steering vectors steer_resid_pre / _mid / _post (weights, when set)."),
};
#define N_FIELDS ((int)(sizeof fields / sizeof *fields))

/* The slot no longer borrows: release the owner of its old bytes. */
static void drop_view(LayerObject *self, int s) { Py_CLEAR(self->views[s]); }

static int layer_frozen(LayerObject *self) {
    layer_forget_parent_runs(self);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Layer is in use by a running Pipeline; edit it between calls");
        return 1;
    }
    return 0;
}

static PyObject *field_get(PyObject *o, void *closure) {
    const field_desc *f = closure;
    const char *p = (const char *)&((LayerObject *)o)->layer + f->offset;
    switch (f->kind) {
    case F_INT: return PyLong_FromLong(*(const int *)p);
    case F_FLOAT: return PyFloat_FromDouble(*(const float *)p);
    case F_BOOL: return PyBool_FromLong(*(const int *)p);
    case F_ENUM:
        if (rlxc_enum_classes[f->enum_idx])
            return PyObject_CallFunction(rlxc_enum_classes[f->enum_idx], "i", *(const int *)p);
        return PyLong_FromLong(*(const int *)p);
    }
    Py_RETURN_NONE;
}

/* Write one field into `l` without cross-field checks. */
static int field_store(rlxc_layer *l, const field_desc *f, PyObject *v) {
    char *p = (char *)l + f->offset;
    if (f->kind == F_FLOAT) {
        if (!PyFloat_Check(v) && !(PyLong_Check(v) && !PyBool_Check(v))) {
            PyErr_Format(PyExc_TypeError, "%s must be a number, got %s", f->name, Py_TYPE(v)->tp_name);
            return -1;
        }
        double d;
        if (real_arg(v, f->name, 0, &d)) return -1;
        /* beyond float range: infinity, which the field checks reject by name */
        *(float *)p = fabs(d) > FLT_MAX && isfinite(d) ? (float)copysign(INFINITY, d) : (float)d;
        return 0;
    }
    if (f->kind == F_BOOL) {
        int overflow = 0;
        const long b = PyLong_Check(v) ? PyLong_AsLongAndOverflow(v, &overflow) : -1;
        if (b == -1 && PyErr_Occurred()) return -1;
        if (!PyBool_Check(v) && !(PyLong_Check(v) && !overflow && (b == 0 || b == 1))) {
            PyErr_Format(PyExc_TypeError, "%s must be a bool, got %s", f->name, Py_TYPE(v)->tp_name);
            return -1;
        }
        *(int *)p = PyObject_IsTrue(v);
        return 0;
    }
    /* ints and enums (IntEnum members are ints) */
    int iv;
    if (int_arg(v, f->name, -2147483647L, 2147483647L, &iv)) return -1;
    *(int *)p = iv;
    return 0;
}

static int field_set(PyObject *o, PyObject *v, void *closure) {
    const field_desc *f = closure;
    LayerObject *self = (LayerObject *)o;
    if (!v) {
        PyErr_Format(PyExc_AttributeError, "cannot delete field %s", f->name);
        return -1;
    }
    /* Convert first: it may run user code (__float__, __bool__) that edits or re-inits this
     * layer or starts a pipeline on it, so the layer is read only after it. */
    rlxc_layer value;
    if (field_store(&value, f, v)) return -1;
    if (layer_frozen(self)) return -1;
    rlxc_layer trial = self->layer; /* shallow: shares weight pointers, never freed */
    memcpy((char *)&trial + f->offset, (const char *)&value + f->offset, 4); /* every field is an int or a float */
    char err[RLXC_ERRLEN];
    if (rlxc_layer_check_fields(&trial, err)) {
        PyErr_Format(PyExc_ValueError, "cannot set %s: %s", f->name, err);
        return -1;
    }
    self->layer = trial;
    return 0;
}

static PyObject *Layer_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    LayerObject *self = (LayerObject *)type->tp_alloc(type, 0);
    if (self) rlxc_layer_init(&self->layer);
    return (PyObject *)self;
}

static const field_desc *find_field(const char *name) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

/* Layer(**fields). head_dim also sets attn_scale = head_dim**-0.5 and rotary_dim = head_dim
 * unless those are given, so a Layer(head_dim=...) is consistent without more keywords. */
static int Layer_init(PyObject *o, PyObject *args, PyObject *kw) {
    LayerObject *self = (LayerObject *)o;
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "Layer takes keyword arguments only, e.g. Layer(head_dim=64)");
        return -1;
    }
    rlxc_layer l;
    rlxc_layer_init(&l);
    if (kw) {
        PyObject *hd = PyDict_GetItemString(kw, "head_dim");
        if (hd && PyLong_Check(hd)) {
            int overflow;
            long h = PyLong_AsLongAndOverflow(hd, &overflow);
            if (h == -1 && PyErr_Occurred()) return -1;
            if (h > 0 && h < 1 << 20) {
                l.attn_scale = (float)(1.0 / sqrt((double)h));
                l.rotary_dim = (int)h - (int)(h % 2);
            }
        }
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &key, &val)) {
            const char *name = PyUnicode_AsUTF8(key);
            if (!name) return -1;
            const field_desc *f = find_field(name);
            if (!f) {
                PyErr_Format(PyExc_TypeError, "Layer got an unknown field '%s' (see rlxc.Layer.FIELDS)", name);
                return -1;
            }
            if (field_store(&l, f, val)) return -1;
        }
    }
    char err[RLXC_ERRLEN];
    if (rlxc_layer_check_fields(&l, err)) {
        PyErr_Format(PyExc_ValueError, "invalid Layer: %s", err);
        return -1;
    }
    if (layer_frozen(self)) return -1; /* checked last: the conversions above may run user code */
    rlxc_layer_free(&self->layer); /* __init__ may run twice */
    for (int s = 0; s < RLXC_W_COUNT; s++) drop_view(self, s);
    self->layer = l;
    return 0;
}

static int Layer_traverse(PyObject *o, visitproc visit, void *arg) {
    LayerObject *self = (LayerObject *)o;
    for (int s = 0; s < RLXC_W_COUNT; s++) Py_VISIT(self->views[s]);
    return 0;
}

/* Break cycles through borrowed weights: the slots go with the owners of their bytes. */
static int Layer_clear(PyObject *o) {
    LayerObject *self = (LayerObject *)o;
    for (int s = 0; s < RLXC_W_COUNT; s++)
        if (self->views[s] && !self->busy) {
            rlxc_layer_clear_weight(&self->layer, (rlxc_wslot)s);
            drop_view(self, s);
        }
    return 0;
}

static void Layer_dealloc(PyObject *o) {
    LayerObject *self = (LayerObject *)o;
    PyObject_GC_UnTrack(o);
    if (self->weakrefs) PyObject_ClearWeakRefs(o);
    rlxc_layer_free(&self->layer);
    for (int s = 0; s < RLXC_W_COUNT; s++) drop_view(self, s);
    Py_TYPE(o)->tp_free(o);
}

static int slot_arg(PyObject *name_obj, const char *argname) {
    const char *str = str_arg(name_obj, argname);
    if (!str) return -1;
    const int s = rlxc_wslot_from_name(str);
    if (s < 0) PyErr_Format(PyExc_KeyError, "unknown weight name %R (see rlxc.Layer.WEIGHTS)", name_obj);
    return s;
}

static PyObject *Layer_set_weight(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"name", "array", "dtype", NULL};
    LayerObject *self = (LayerObject *)o;
    PyObject *name, *arr, *dtype_obj = NULL;
    const char *dtype = "f32";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:set_weight", kwlist, &name, &arr, &dtype_obj)) return NULL;
    const int s = slot_arg(name, "name");
    if (s >= 0 && dtype_obj && !(dtype = str_arg(dtype_obj, "dtype"))) return NULL;
    const int t = s < 0 ? -1 : wtype_arg(dtype, "dtype");
    if (t < 0 || layer_frozen(self)) return NULL;
    PyArrayObject *a = as_f32(arr, "array", 1, 2);
    if (!a || check_finite(a, "array")) return NULL;
    const int is_matrix = rlxc_wslot_is_matrix((rlxc_wslot)s);
    if (PyArray_NDIM(a) != (is_matrix ? 2 : 1)) {
        PyErr_Format(PyExc_ValueError, "weight '%s' must be %s, got %d-D", rlxc_wslot_name((rlxc_wslot)s),
                     is_matrix ? "2-D [out, in]" : "1-D", PyArray_NDIM(a));
        return NULL;
    }
    const npy_intp *d = PyArray_DIMS(a);
    if (d[0] > INT32_MAX || (is_matrix && d[1] > INT32_MAX)) { /* weight shapes are ints, like the fields */
        PyErr_Format(PyExc_ValueError, "weight '%s' is too large", rlxc_wslot_name((rlxc_wslot)s));
        return NULL;
    }
    const int rows = is_matrix ? (int)d[0] : 1, cols = (int)d[is_matrix ? 1 : 0];
    char err[RLXC_ERRLEN];
    /* the GIL stays held: a pipeline must never see a half-written slot */
    if (rlxc_layer_set_weight(&self->layer, (rlxc_wslot)s, PyArray_DATA(a), rows, cols, (rlxc_wtype)t, err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    drop_view(self, s);
    Py_RETURN_NONE;
}

/* uint8 [rows, row_bytes] C-contiguous bytes of `cols` columns of `dtype`, checked. */
static PyArrayObject *raw_arg(PyObject *arr, int cols, int t, const char *dtype) {
    if (!PyArray_Check(arr) || PyArray_TYPE((PyArrayObject *)arr) != NPY_UINT8 ||
        PyArray_NDIM((PyArrayObject *)arr) != 2 || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)arr)) {
        PyErr_SetString(PyExc_TypeError, "data must be a C-contiguous 2-D numpy.ndarray of uint8 [rows, row_bytes]");
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)arr;
    const int block = rlxc_wtype_block_size((rlxc_wtype)t);
    if (cols <= 0 || cols % block) {
        PyErr_Format(PyExc_ValueError, "cols must be > 0 and a multiple of %d (the %s block size), got %d", block, dtype,
                     cols);
        return NULL;
    }
    const size_t rb = rlxc_wtype_row_bytes((rlxc_wtype)t, cols);
    if ((size_t)PyArray_DIM(a, 1) != rb || PyArray_DIM(a, 0) > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "data has %zd bytes per row; %d columns of %s need %zu",
                     (Py_ssize_t)PyArray_DIM(a, 1), cols, dtype, rb);
        return NULL;
    }
    return a;
}

/* set_weight_raw copies the bytes; set_weight_view borrows them and keeps `data` alive. */
static PyObject *set_raw(PyObject *o, PyObject *args, PyObject *kw, int view) {
    static char *kwlist[] = {"name", "data", "cols", "dtype", NULL};
    LayerObject *self = (LayerObject *)o;
    PyObject *name, *arr, *cols_obj, *dtype_obj;
    int cols;
    const char *dtype;
    if (!PyArg_ParseTupleAndKeywords(args, kw, view ? "OOOO:set_weight_view" : "OOOO:set_weight_raw", kwlist, &name,
                                     &arr, &cols_obj, &dtype_obj))
        return NULL;
    const int s = slot_arg(name, "name");
    if (s < 0 || int_arg(cols_obj, "cols", -2147483647L - 1, 2147483647L, &cols) ||
        !(dtype = str_arg(dtype_obj, "dtype")))
        return NULL;
    const int t = wtype_arg(dtype, "dtype");
    if (t < 0 || layer_frozen(self)) return NULL;
    PyArrayObject *a = raw_arg(arr, cols, t, dtype);
    if (!a) return NULL;
    if (view && check_aligned(a, (rlxc_wtype)t, "data (set_weight_view reads it in place; set_weight_raw copies)"))
        return NULL;
    const int rows = (int)PyArray_DIM(a, 0);
    char err[RLXC_ERRLEN];
    const int rc = view ? rlxc_layer_set_weight_view(&self->layer, (rlxc_wslot)s, PyArray_DATA(a), rows, cols,
                                                     (rlxc_wtype)t, err)
                        : rlxc_layer_set_weight_raw(&self->layer, (rlxc_wslot)s, PyArray_DATA(a), rows, cols,
                                                    (rlxc_wtype)t, err);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    drop_view(self, s);
    if (view) self->views[s] = Py_NewRef(arr);
    Py_RETURN_NONE;
}

static PyObject *Layer_set_weight_raw(PyObject *o, PyObject *args, PyObject *kw) { return set_raw(o, args, kw, 0); }
static PyObject *Layer_set_weight_view(PyObject *o, PyObject *args, PyObject *kw) { return set_raw(o, args, kw, 1); }

/* The weight as stored, or None if unset. raw: uint8 [rows, row_bytes]; else float32 (dequantized). */
static PyObject *weight_out(LayerObject *self, PyObject *name, int raw) {
    const int s = slot_arg(name, "name");
    if (s < 0) return NULL;
    const rlxc_weight *w = &self->layer.w[s];
    if (!w->data) Py_RETURN_NONE;
    const int is_matrix = rlxc_wslot_is_matrix((rlxc_wslot)s);
    const size_t rb = rlxc_wtype_row_bytes(w->type, w->cols);
    PyArrayObject *out;
    if (raw) {
        npy_intp dims[2] = {w->rows, (npy_intp)rb};
        out = new_array(2, dims, NPY_UINT8);
        if (out) memcpy(PyArray_DATA(out), w->data, (size_t)w->rows * rb);
        return (PyObject *)out;
    }
    npy_intp dims[2] = {w->rows, w->cols};
    out = is_matrix ? new_array(2, dims, NPY_FLOAT32) : new_array(1, dims + 1, NPY_FLOAT32);
    if (!out) return NULL;
    float *dst = PyArray_DATA(out);
    for (int r = 0; r < w->rows; r++) {
        const void *row = (const char *)w->data + (size_t)r * rb;
        rlxc_dequantize_row(w->type, dst + (size_t)r * w->cols, row, w->cols);
    }
    return (PyObject *)out;
}

static PyObject *Layer_weight(PyObject *o, PyObject *name) { return weight_out((LayerObject *)o, name, 0); }
static PyObject *Layer_weight_raw(PyObject *o, PyObject *name) { return weight_out((LayerObject *)o, name, 1); }

static PyObject *Layer_weight_type(PyObject *o, PyObject *name) {
    const int s = slot_arg(name, "name");
    if (s < 0) return NULL;
    const rlxc_weight *w = &((LayerObject *)o)->layer.w[s];
    if (!w->data) Py_RETURN_NONE;
    return PyUnicode_FromString(rlxc_wtype_name(w->type));
}

static PyObject *Layer_clear_weight(PyObject *o, PyObject *name) {
    const int s = slot_arg(name, "name");
    if (s < 0 || layer_frozen((LayerObject *)o)) return NULL;
    rlxc_layer_clear_weight(&((LayerObject *)o)->layer, (rlxc_wslot)s);
    drop_view((LayerObject *)o, s);
    Py_RETURN_NONE;
}

static PyObject *Layer_check(PyObject *o, PyObject *noargs) {
    char err[RLXC_ERRLEN];
    if (rlxc_layer_check(&((LayerObject *)o)->layer, err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Layer_used_weights(PyObject *o, PyObject *noargs) {
    PyObject *list = PyList_New(0);
    for (int s = 0; list && s < RLXC_W_COUNT; s++) {
        if (!rlxc_wslot_used(&((LayerObject *)o)->layer, (rlxc_wslot)s) && s != RLXC_W_ROPE_FREQ_FACTORS) continue;
        if (s == RLXC_W_ROPE_FREQ_FACTORS && !((LayerObject *)o)->layer.w[s].data) continue;
        PyObject *n = PyUnicode_FromString(rlxc_wslot_name((rlxc_wslot)s));
        if (!n || PyList_Append(list, n)) Py_CLEAR(list);
        Py_XDECREF(n);
    }
    return list;
}

static PyObject *Layer_weight_shape(PyObject *o, PyObject *name) {
    const int s = slot_arg(name, "name");
    if (s < 0) return NULL;
    int r, c;
    rlxc_wslot_shape(&((LayerObject *)o)->layer, (rlxc_wslot)s, &r, &c);
    return rlxc_wslot_is_matrix((rlxc_wslot)s) ? Py_BuildValue("(ii)", r, c) : Py_BuildValue("(i)", c);
}

static PyObject *Layer_nbytes(PyObject *o, void *closure) {
    size_t n = 0;
    const rlxc_layer *l = &((LayerObject *)o)->layer;
    for (int s = 0; s < RLXC_W_COUNT; s++)
        if (l->w[s].data) n += (size_t)l->w[s].rows * rlxc_wtype_row_bytes(l->w[s].type, l->w[s].cols);
    return PyLong_FromSize_t(n);
}

static PyMethodDef Layer_methods[] = {
    {"set_weight", (PyCFunction)(void (*)(void))Layer_set_weight, METH_VARARGS | METH_KEYWORDS,
     "set_weight(name, array, dtype='f32'): copy a float32 array into a weight slot, converted to dtype: 'f32', "
     "or for matrices 'f16', 'bf16', 'q4_0', 'q8_0' (the types weight_types() marks from_floats; q4_0 / q8_0 need an "
     "input width that is a multiple of 32). q5_0 and the K-quants come as GGUF bytes: set_weight_raw / "
     "set_weight_view."},
    {"set_weight_raw", (PyCFunction)(void (*)(void))Layer_set_weight_raw, METH_VARARGS | METH_KEYWORDS,
     "set_weight_raw(name, data, cols, dtype): copy stored bytes (uint8 [rows, row_bytes], GGUF block layout)."},
    {"set_weight_view", (PyCFunction)(void (*)(void))Layer_set_weight_view, METH_VARARGS | METH_KEYWORDS,
     "set_weight_view(name, data, cols, dtype): use stored bytes in place, without a copy (e.g. a memory-mapped "
     "GGUF tensor); the layer keeps a reference to data."},
    {"weight", Layer_weight, METH_O, "weight(name) -> float32 ndarray (a dequantized copy) or None if unset."},
    {"weight_raw", Layer_weight_raw, METH_O, "weight_raw(name) -> uint8 [rows, row_bytes] copy of the stored bytes, or None."},
    {"weight_type", Layer_weight_type, METH_O,
     "weight_type(name) -> the stored type's name ('f32', 'f16', 'bf16', 'q4_0', 'q5_0', 'q8_0', 'q4_k', 'q6_k': "
     "weight_types()), or None if unset."},
    {"weight_shape", Layer_weight_shape, METH_O, "weight_shape(name) -> the shape the slot needs under the current fields."},
    {"clear_weight", Layer_clear_weight, METH_O, "clear_weight(name): unset a weight slot."},
    {"check", Layer_check, METH_NOARGS, "check(): raise ValueError unless fields and weights let the layer run."},
    {"used_weights", Layer_used_weights, METH_NOARGS, "used_weights() -> list of weight names the current fields use."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Layer_getset[N_FIELDS + 2];

static int init_getset(void) {
    for (int i = 0; i < N_FIELDS; i++)
        Layer_getset[i] = (PyGetSetDef){(char *)fields[i].name, field_get, field_set, (char *)fields[i].doc,
                                        (void *)&fields[i]};
    Layer_getset[N_FIELDS] = (PyGetSetDef){"nbytes", Layer_nbytes, NULL, "Bytes held by the layer's weights.", NULL};
    return 0;
}

PyTypeObject Layer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rlxc._rlxc.Layer",
    .tp_basicsize = sizeof(LayerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = Layer_traverse,
    .tp_clear = Layer_clear,
    .tp_doc = "One decoder layer (the C FullPipelineLayer): every per-layer field as an attribute, weights by name.",
    .tp_new = Layer_new,
    .tp_init = Layer_init,
    .tp_dealloc = Layer_dealloc,
    .tp_methods = Layer_methods,
    .tp_weaklistoffset = offsetof(LayerObject, weakrefs),
};

/* Called from module init before PyType_Ready. */
int rlxc_layer_type_prepare(void) {
    init_getset();
    Layer_Type.tp_getset = Layer_getset;
    PyObject *names = PyTuple_New(N_FIELDS), *wnames = PyTuple_New(RLXC_W_COUNT);
    if (!names || !wnames) return -1;
    for (int i = 0; i < N_FIELDS; i++) PyTuple_SET_ITEM(names, i, PyUnicode_FromString(fields[i].name));
    for (int s = 0; s < RLXC_W_COUNT; s++) PyTuple_SET_ITEM(wnames, s, PyUnicode_FromString(rlxc_wslot_name((rlxc_wslot)s)));
    if (PyType_Ready(&Layer_Type) < 0) return -1;
    int rc = PyDict_SetItemString(Layer_Type.tp_dict, "FIELDS", names) |
             PyDict_SetItemString(Layer_Type.tp_dict, "WEIGHTS", wnames);
    Py_DECREF(names);
    Py_DECREF(wnames);
    PyType_Modified(&Layer_Type);
    return rc ? -1 : 0;
}
