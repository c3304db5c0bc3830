/* rlxc.ops: kernels of the active table callable one by one on NumPy arrays, and the
 * GGUF block quantizers. Inputs are never modified; every op returns a new array. */
#include "common.h"
#include <stdlib.h>
#include "kernels.h"

#define KN rlxc_kernels_active()

/* A float32 copy of x to compute in place. */
static PyArrayObject *copy_of(PyArrayObject *x) {
    PyArrayObject *y = new_array(PyArray_NDIM(x), PyArray_DIMS(x), NPY_FLOAT32);
    if (y) memcpy(PyArray_DATA(y), PyArray_DATA(x), PyArray_NBYTES(x));
    return y;
}

static npy_intp last_dim(PyArrayObject *a) { return PyArray_DIM(a, PyArray_NDIM(a) - 1); }

/* Dimension i of a as a kernel count (kernels.h); -1 with a ValueError naming `name` beyond one. */
static int count_dim(PyArrayObject *a, int i, const char *name, int *out) {
    const npy_intp n = PyArray_DIM(a, i < 0 ? PyArray_NDIM(a) + i : i);
    if (n > RLXC_MAX_COUNT) {
        PyErr_Format(PyExc_ValueError, "%s is too large: %zd elements along an axis, the kernels take at most %d", name,
                     (Py_ssize_t)n, RLXC_MAX_COUNT);
        return -1;
    }
    *out = (int)n;
    return 0;
}

static int vec_arg(PyObject *o, const char *name, npy_intp n, PyArrayObject **out) {
    *out = NULL;
    if (o == Py_None) return 0;
    PyArrayObject *a = as_f32(o, name, 1, 1);
    if (!a) return -1;
    if (PyArray_DIM(a, 0) != n) {
        PyErr_Format(PyExc_ValueError, "%s must have shape (%zd,), got (%zd,)", name, (Py_ssize_t)n,
                     (Py_ssize_t)PyArray_DIM(a, 0));
        return -1;
    }
    *out = a;
    return 0;
}

static int nonempty(PyArrayObject *a, const char *name) {
    if (PyArray_SIZE(a) == 0) {
        PyErr_Format(PyExc_ValueError, "%s must not be empty", name);
        return -1;
    }
    return 0;
}

/* ---- quantization ---- */

static PyObject *quantize(PyObject *args, PyObject *kw, rlxc_wtype t, const char *fname) {
    static char *kwlist[] = {"w", NULL};
    PyObject *wo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &wo)) return NULL;
    PyArrayObject *w = as_f32(wo, "w", 2, 2);
    if (!w) return NULL;
    const npy_intp N = PyArray_DIM(w, 0), K = PyArray_DIM(w, 1);
    const int block = rlxc_wtype_block_size(t);
    if (K == 0 || K % block || K > RLXC_MAX_COUNT) {
        PyErr_Format(PyExc_ValueError, "w must have a positive number of columns divisible by %d for %s, got %zd", block,
                     fname, (Py_ssize_t)K);
        return NULL;
    }
    const size_t rb = rlxc_wtype_row_bytes(t, (int)K);
    npy_intp dims[2] = {N, (npy_intp)rb};
    PyArrayObject *out = new_array(2, dims, NPY_UINT8);
    if (!out) return NULL;
    const float *src = PyArray_DATA(w);
    char *dst = PyArray_DATA(out);
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp r = 0; r < N; r++) rlxc_quantize_row(t, dst + r * rb, src + r * K, (int)K);
    Py_END_ALLOW_THREADS
    return (PyObject *)out;
}

/* uint8 [N, row_bytes] rows of whole blocks of type t -> (the array, K); NULL with an error otherwise. */
static PyArrayObject *blocks_arg(PyObject *o, const char *name, rlxc_wtype t, npy_intp *K) {
    if (!PyArray_Check(o) || PyArray_TYPE((PyArrayObject *)o) != NPY_UINT8 || PyArray_NDIM((PyArrayObject *)o) != 2 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous 2-D numpy.ndarray of uint8", name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    const int block = rlxc_wtype_block_size(t);
    const npy_intp rb = PyArray_DIM(a, 1), bb = (npy_intp)rlxc_wtype_row_bytes(t, block);
    if (rb == 0 || rb % bb || rb / bb * block > RLXC_MAX_COUNT) {
        PyErr_Format(PyExc_ValueError, "%s rows must be a positive multiple of %zd bytes (one %s block of %d weights), got %zd",
                     name, (Py_ssize_t)bb, rlxc_wtype_name(t), block, (Py_ssize_t)rb);
        return NULL;
    }
    if (check_aligned(a, t, name)) return NULL;
    *K = rb / bb * block;
    return a;
}

/* Rows of type t (any leading shape, last axis = row bytes) -> float32 rows of K. */
static PyObject *dequantize_rows(PyArrayObject *b, rlxc_wtype t, int K) {
    if (check_aligned(b, t, "b")) return NULL;
    const int nd = PyArray_NDIM(b);
    npy_intp dims[NPY_MAXDIMS];
    memcpy(dims, PyArray_DIMS(b), (size_t)nd * sizeof(npy_intp));
    dims[nd - 1] = K;
    PyArrayObject *out = new_array(nd, dims, NPY_FLOAT32);
    if (!out) return NULL;
    const size_t rb = rlxc_wtype_row_bytes(t, K);
    const npy_intp rows = PyArray_SIZE(out) / K;
    const char *src = PyArray_DATA(b);
    float *dst = PyArray_DATA(out);
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp r = 0; r < rows; r++) rlxc_dequantize_row(t, dst + r * K, src + r * rb, K);
    Py_END_ALLOW_THREADS
    return (PyObject *)out;
}

static PyObject *op_quantize_q4_0(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q4_0, "q4_0"); }
static PyObject *op_quantize_q8_0(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q8_0, "q8_0"); }
static PyObject *op_quantize_q4_1(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q4_1, "q4_1"); }
static PyObject *op_quantize_q5_1(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q5_1, "q5_1"); }
static PyObject *op_quantize_q4_k(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q4_K, "q4_k"); }
static PyObject *op_quantize_q5_k(PyObject *m, PyObject *a, PyObject *k) { return quantize(a, k, RLXC_Q5_K, "q5_k"); }

/* Any type, any rows: b is a C-contiguous uint8 array whose last axis is one row's bytes (e.g.
 * rows picked out of a memory-mapped GGUF embedding table). */
static PyObject *op_dequantize(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"b", "wtype", "cols", NULL};
    PyObject *bo, *wto, *colso;
    const char *wts;
    int cols;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:dequantize", kwlist, &bo, &wto, &colso)) return NULL;
    if (!(wts = str_arg(wto, "wtype")) || int_arg(colso, "cols", -2147483647L - 1, 2147483647L, &cols)) return NULL;
    const int t = wtype_arg(wts, "wtype");
    if (t < 0) return NULL;
    const int block = rlxc_wtype_block_size((rlxc_wtype)t);
    if (cols <= 0 || cols % block) {
        PyErr_Format(PyExc_ValueError, "cols must be a positive multiple of %d (the %s block size), got %d", block, wts,
                     cols);
        return NULL;
    }
    if (!PyArray_Check(bo) || PyArray_TYPE((PyArrayObject *)bo) != NPY_UINT8 || PyArray_NDIM((PyArrayObject *)bo) < 1 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)bo)) {
        PyErr_SetString(PyExc_TypeError, "b must be a C-contiguous numpy.ndarray of uint8 with at least one dimension");
        return NULL;
    }
    PyArrayObject *b = (PyArrayObject *)bo;
    const size_t rb = rlxc_wtype_row_bytes((rlxc_wtype)t, cols);
    if ((size_t)PyArray_DIM(b, PyArray_NDIM(b) - 1) != rb) {
        PyErr_Format(PyExc_ValueError, "b's last dimension must be %zu bytes (one row of %d %s weights), got %zd", rb,
                     cols, wts, (Py_ssize_t)PyArray_DIM(b, PyArray_NDIM(b) - 1));
        return NULL;
    }
    return dequantize_rows(b, (rlxc_wtype)t, cols);
}

/* ---- matmul ---- */

static PyObject *op_matmul(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "w", "wtype", "threads", "activations", NULL};
    PyObject *xo, *wo, *tho = Py_None, *wto = NULL, *acto = NULL;
    const char *wts = "f32";
    rlxc_act act = RLXC_ACT_Q8;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO:matmul", kwlist, &xo, &wo, &wto, &tho, &acto)) return NULL;
    if (wto && !(wts = str_arg(wto, "wtype"))) return NULL;
    if (acto && act_arg(acto, "activations", &act)) return NULL;
    const int wt = wtype_arg(wts, "wtype");
    int threads = 1;
    if (wt < 0 || (tho != Py_None && int_arg(tho, "threads", 1, 1024, &threads))) return NULL;
    PyArrayObject *x = as_f32(xo, "x", 1, 2);
    if (!x || nonempty(x, "x")) return NULL;
    rlxc_weight w = {.type = (rlxc_wtype)wt};
    PyArrayObject *wa;
    npy_intp K;
    if (wt == RLXC_F32) {
        wa = as_f32(wo, "w", 2, 2);
        K = wa ? PyArray_DIM(wa, 1) : 0;
    } else {
        wa = blocks_arg(wo, "w", (rlxc_wtype)wt, &K);
    }
    if (!wa || nonempty(wa, "w")) return NULL;
    if (PyArray_DIM(wa, 0) > RLXC_MAX_COUNT || K > RLXC_MAX_COUNT) {
        PyErr_SetString(PyExc_ValueError, "w is too large");
        return NULL;
    }
    w.rows = (int)PyArray_DIM(wa, 0);
    w.cols = (int)K;
    w.data = PyArray_DATA(wa);
    if (last_dim(x) != K) {
        PyErr_Format(PyExc_ValueError, "x's last dimension (%zd) must equal w's input width (%zd)", (Py_ssize_t)last_dim(x),
                     (Py_ssize_t)K);
        return NULL;
    }
    const npy_intp T = PyArray_NDIM(x) == 2 ? PyArray_DIM(x, 0) : 1;
    if (T > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "x has too many rows");
        return NULL;
    }
    npy_intp dims[2] = {T, w.rows};
    PyArrayObject *out = PyArray_NDIM(x) == 2 ? new_array(2, dims, NPY_FLOAT32) : new_array(1, dims + 1, NPY_FLOAT32);
    const size_t xq_bytes = rlxc_linear_scratch_bytes((int)K, (int)T, threads, act);
    void *xq = xq_bytes ? malloc(xq_bytes) : NULL;
    if (!out || (xq_bytes && !xq)) {
        free(xq);
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    rlxc_linear(PyArray_DATA(out), &w, PyArray_DATA(x), (int)T, threads, xq, act);
    Py_END_ALLOW_THREADS
    free(xq);
    return (PyObject *)out;
}

/* ---- norms ---- */

static PyObject *op_rmsnorm(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "w", "eps", "offset", NULL};
    PyObject *xo, *wo = Py_None, *epso = NULL, *offo = NULL;
    double eps = 1e-6, offset = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO:rmsnorm", kwlist, &xo, &wo, &epso, &offo)) return NULL;
    if ((epso && real_arg(epso, "eps", 1, &eps)) || (offo && real_arg(offo, "offset", 1, &offset))) return NULL;
    PyArrayObject *x = as_f32(xo, "x", 1, 8), *w;
    int n;
    if (!x || nonempty(x, "x") || count_dim(x, -1, "x", &n) || vec_arg(wo, "w", n, &w)) return NULL;
    if (!(eps > 0)) { PyErr_SetString(PyExc_ValueError, "eps must be > 0"); return NULL; }
    PyArrayObject *y = copy_of(x);
    if (!y) return NULL;
    const npy_intp rows = PyArray_SIZE(x) / n;
    float *yd = PyArray_DATA(y);
    const float *wd = w ? PyArray_DATA(w) : NULL;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp r = 0; r < rows; r++) KN->rmsnorm(yd + r * n, yd + r * n, wd, (float)offset, (float)eps, n);
    Py_END_ALLOW_THREADS
    return (PyObject *)y;
}

static PyObject *op_layernorm(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "w", "b", "eps", NULL};
    PyObject *xo, *wo, *bo = Py_None, *epso = NULL;
    double eps = 1e-5;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:layernorm", kwlist, &xo, &wo, &bo, &epso)) return NULL;
    if (epso && real_arg(epso, "eps", 1, &eps)) return NULL;
    PyArrayObject *x = as_f32(xo, "x", 1, 8), *w, *b;
    int n;
    if (!x || nonempty(x, "x") || count_dim(x, -1, "x", &n) || vec_arg(wo, "w", n, &w) || vec_arg(bo, "b", n, &b))
        return NULL;
    if (!w) { PyErr_SetString(PyExc_TypeError, "w must be a float32 array, not None"); return NULL; }
    if (!(eps > 0)) { PyErr_SetString(PyExc_ValueError, "eps must be > 0"); return NULL; }
    PyArrayObject *y = copy_of(x);
    if (!y) return NULL;
    const npy_intp rows = PyArray_SIZE(x) / n;
    float *yd = PyArray_DATA(y);
    const float *wd = PyArray_DATA(w), *bd = b ? PyArray_DATA(b) : NULL;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp r = 0; r < rows; r++) KN->layernorm(yd + r * n, yd + r * n, wd, bd, (float)eps, n);
    Py_END_ALLOW_THREADS
    return (PyObject *)y;
}

/* ---- RoPE, attention ---- */

static PyObject *op_rope(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "pos", "rotary_dim", "base", "proportional", "freq_factors", "attn_factor", NULL};
    PyObject *xo, *poso, *rdo = Py_None, *ffo = Py_None, *baseo = NULL, *afo = NULL;
    double base = 10000.0, attn_factor = 1.0;
    int proportional = 0, pos;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOpOO:rope", kwlist, &xo, &poso, &rdo, &baseo, &proportional, &ffo,
                                     &afo))
        return NULL;
    if ((baseo && real_arg(baseo, "base", 1, &base)) || (afo && real_arg(afo, "attn_factor", 1, &attn_factor)))
        return NULL;
    PyArrayObject *x = as_f32(xo, "x", 2, 2), *ff;
    rlxc_layer l;
    rlxc_layer_init(&l);
    if (!x || nonempty(x, "x") || count_dim(x, 0, "x", &l.num_q_heads) || count_dim(x, 1, "x", &l.head_dim) ||
        int_arg(poso, "pos", 0, 1 << 24, &pos))
        return NULL;
    l.num_kv_heads = l.num_q_heads;
    l.rotary_dim = l.head_dim;
    if (rdo != Py_None && int_arg(rdo, "rotary_dim", 0, l.head_dim, &l.rotary_dim)) return NULL;
    l.rope_base = (float)base;
    l.rope_layout = proportional ? RLXC_ROPE_PROPORTIONAL : RLXC_ROPE_PREFIX;
    l.rope_attn_factor = (float)attn_factor;
    char err[RLXC_ERRLEN];
    if (rlxc_layer_check_fields(&l, err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    if (vec_arg(ffo, "freq_factors", l.rotary_dim / 2, &ff)) return NULL;
    l.w[RLXC_W_ROPE_FREQ_FACTORS].data = ff ? PyArray_DATA(ff) : NULL; /* borrowed: l is never freed */
    PyArrayObject *y = copy_of(x);
    if (!y) return NULL;
    const int n_pairs = l.rotary_dim / 2, half = proportional ? l.head_dim / 2 : n_pairs;
    float *cs = malloc(3 * (n_pairs + 1) * sizeof(float)); /* cos, sin, inverse frequencies */
    if (!cs) { Py_DECREF(y); return PyErr_NoMemory(); }
    Py_BEGIN_ALLOW_THREADS
    rlxc_rope_inv_freq(&l, cs + 2 * n_pairs);
    rlxc_rope_angles(&l, cs + 2 * n_pairs, pos, cs, cs + n_pairs);
    KN->rope(PyArray_DATA(y), l.num_q_heads, l.head_dim, cs, cs + n_pairs, n_pairs, half);
    Py_END_ALLOW_THREADS
    free(cs);
    return (PyObject *)y;
}

static PyObject *op_attention(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"q", "k", "v", "pos", "window", "scale", "softcap", NULL};
    PyObject *qo, *ko, *vo, *poso, *scaleo = Py_None, *windowo = NULL, *softcapo = NULL;
    int pos, window = 0;
    double softcap = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|OOO:attention", kwlist, &qo, &ko, &vo, &poso, &windowo, &scaleo,
                                     &softcapo))
        return NULL;
    if ((windowo && int_arg(windowo, "window", -2147483647L - 1, 2147483647L, &window)) ||
        (softcapo && real_arg(softcapo, "softcap", 1, &softcap)))
        return NULL;
    PyArrayObject *q = as_f32(qo, "q", 2, 2), *k = q ? as_f32(ko, "k", 3, 3) : NULL, *v = k ? as_f32(vo, "v", 3, 3) : NULL;
    int nq, hd, nkv, S;
    if (!v || nonempty(q, "q") || nonempty(k, "k") || count_dim(q, 0, "q", &nq) || count_dim(q, 1, "q", &hd) ||
        count_dim(k, 0, "k", &nkv) || count_dim(k, 1, "k", &S))
        return NULL;
    if (PyArray_DIM(k, 2) != hd || !PyArray_SAMESHAPE(k, v)) {
        PyErr_Format(PyExc_ValueError, "k and v must both have shape (num_kv_heads, seq, %d)", hd);
        return NULL;
    }
    if (nq % nkv) {
        PyErr_Format(PyExc_ValueError, "q's heads (%d) must be a multiple of k's heads (%d)", nq, nkv);
        return NULL;
    }
    if (int_arg(poso, "pos", 0, S - 1, &pos)) return NULL;
    if (window < 0) { PyErr_SetString(PyExc_ValueError, "window must be >= 0"); return NULL; }
    if (!(softcap >= 0)) { PyErr_SetString(PyExc_ValueError, "softcap must be >= 0"); return NULL; }
    double scale = 1.0 / sqrt((double)hd);
    if (scaleo != Py_None && real_arg(scaleo, "scale", 1, &scale)) return NULL;
    npy_intp dims[2] = {nq, hd};
    PyArrayObject *out = new_array(2, dims, NPY_FLOAT32);
    if (!out) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = rlxc_attention(PyArray_DATA(out), PyArray_DATA(q), nq, PyArray_DATA(k), PyArray_DATA(v), nkv, S, hd, pos,
                        window, (float)scale, (float)softcap);
    Py_END_ALLOW_THREADS
    if (rc) { Py_DECREF(out); return PyErr_NoMemory(); }
    return (PyObject *)out;
}

/* ---- elementwise ---- */

/* The copy of x (float32, any shape) an element-wise op computes on in place; the kernels count
 * its elements in an int. */
static PyArrayObject *elementwise_copy(PyObject *xo) {
    PyArrayObject *x = as_f32(xo, "x", 0, 32);
    if (!x) return NULL;
    PyArrayObject *y = copy_of(x);
    if (!y) return NULL;
    if (PyArray_SIZE(x) > RLXC_MAX_COUNT) { Py_DECREF(y); PyErr_SetString(PyExc_ValueError, "x is too large"); return NULL; }
    return y;
}

static PyObject *unary(PyObject *args, void (*f)(float *, const float *, int)) {
    PyObject *xo;
    if (!PyArg_ParseTuple(args, "O", &xo)) return NULL;
    PyArrayObject *y = elementwise_copy(xo);
    if (!y) return NULL;
    Py_BEGIN_ALLOW_THREADS
    f(PyArray_DATA(y), PyArray_DATA(y), (int)PyArray_SIZE(y));
    Py_END_ALLOW_THREADS
    return (PyObject *)y;
}

static PyObject *op_silu(PyObject *m, PyObject *args) { return unary(args, KN->silu); }
static PyObject *op_gelu_tanh(PyObject *m, PyObject *args) { return unary(args, KN->gelu_tanh); }

static PyObject *scalar_op(PyObject *args, const char *fmt, const char *sname, void (*f)(float *, float, int),
                           int positive) {
    PyObject *xo, *so;
    double s;
    if (!PyArg_ParseTuple(args, fmt, &xo, &so) || real_arg(so, sname, 1, &s)) return NULL;
    if (positive && !(s > 0)) { PyErr_SetString(PyExc_ValueError, "cap must be > 0"); return NULL; }
    PyArrayObject *y = elementwise_copy(xo);
    if (!y) return NULL;
    Py_BEGIN_ALLOW_THREADS
    f(PyArray_DATA(y), (float)s, (int)PyArray_SIZE(y));
    Py_END_ALLOW_THREADS
    return (PyObject *)y;
}

static PyObject *op_softcap(PyObject *m, PyObject *args) { return scalar_op(args, "OO:softcap", "cap", KN->softcap, 1); }
static PyObject *op_scale(PyObject *m, PyObject *args) { return scalar_op(args, "OO:scale", "s", KN->scale, 0); }

#define KW(f) (PyCFunction)(void (*)(void))(f), METH_VARARGS | METH_KEYWORDS
PyMethodDef rlxc_ops_methods[] = {
    {"quantize_q4_0", KW(op_quantize_q4_0), "quantize_q4_0(w: float32[N, K]) -> uint8[N, K//32*18] (GGUF Q4_0 blocks)."},
    {"quantize_q8_0", KW(op_quantize_q8_0), "quantize_q8_0(w: float32[N, K]) -> uint8[N, K//32*34] (GGUF Q8_0 blocks)."},
    {"quantize_q4_1", KW(op_quantize_q4_1), "quantize_q4_1(w: float32[N, K]) -> uint8[N, K//32*20] (GGUF Q4_1 blocks)."},
    {"quantize_q5_1", KW(op_quantize_q5_1), "quantize_q5_1(w: float32[N, K]) -> uint8[N, K//32*24] (GGUF Q5_1 blocks)."},
    {"quantize_q4_k", KW(op_quantize_q4_k),
     "quantize_q4_k(w: float32[N, K]) -> uint8[N, K//256*144] (GGUF Q4_K blocks: llama.cpp's reference search for "
     "scales, not bit-exact with it)."},
    {"quantize_q5_k", KW(op_quantize_q5_k),
     "quantize_q5_k(w: float32[N, K]) -> uint8[N, K//256*176] (GGUF Q5_K blocks: llama.cpp's reference search for "
     "scales, not bit-exact with it)."},
    {"dequantize", KW(op_dequantize),
     "dequantize(b: uint8[..., row_bytes], wtype, cols) -> float32[..., cols]: rows of any weight type (GGUF bytes), "
     "bit-exact with gguf.quants.dequantize."},
    {"matmul", KW(op_matmul),
     "matmul(x: float32[T, K] or [K], w, wtype='f32', threads=None, activations='q8') -> x @ W.T. w is float32 "
     "[N, K] or the GGUF bytes uint8[N, row_bytes] of an f16 / bf16 / q4_0 / q5_0 / q8_0 / q4_k / q6_k matrix. With "
     "activations='q8' the block types quantize x once for integer dots: to Q8_0 per 32 for q4_0 / q5_0 / q8_0, to "
     "Q8_K per 256 for q4_k / q6_k; with 'f32' they dequantize 48 rows of W at a time and keep x in float32."},
    {"rmsnorm", KW(op_rmsnorm), "rmsnorm(x, w=None, eps=1e-6, offset=0.0): x / rms(x) * (offset + w) over the last axis."},
    {"layernorm", KW(op_layernorm), "layernorm(x, w, b=None, eps=1e-5) over the last axis."},
    {"rope", KW(op_rope),
     "rope(x: float32[n_heads, head_dim], pos, rotary_dim=None, base=10000.0, proportional=False, freq_factors=None, "
     "attn_factor=1.0): rotate-half RoPE at position pos."},
    {"attention", KW(op_attention),
     "attention(q: [nq, hd], k: [nkv, S, hd], v: [nkv, S, hd], pos, window=0, scale=None, softcap=0.0) -> [nq, hd]: "
     "the query at position pos over cached keys 0..pos (the last `window` of them if window > 0)."},
    {"silu", (PyCFunction)op_silu, METH_VARARGS, "silu(x) = x * sigmoid(x)."},
    {"gelu_tanh", (PyCFunction)op_gelu_tanh, METH_VARARGS, "gelu_tanh(x): GELU with the tanh approximation."},
    {"softcap", (PyCFunction)op_softcap, METH_VARARGS, "softcap(x, cap) = cap * tanh(x / cap)."},
    {"scale", (PyCFunction)op_scale, METH_VARARGS, "scale(x, s) = x * s."},
    {NULL, NULL, 0, NULL},
};
