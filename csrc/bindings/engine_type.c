/* rlxc._rlxc.Engine: a Pipeline and the model's parts around it (embedding, per-layer inputs,
 * final norm, lm_head, softcap) as one rlxc_model, so that rlxc.Model makes one call into C per
 * prefill and per decoded token. The weights are borrowed: the Engine keeps their arrays alive. */
#include "common.h"
#include "kernels.h"

/* Activation patching: the rows of values [n][width] replace stage `stage` of layer `layer` (-1:
 * the model's) at the positions pos[n], whenever a call runs them. */
typedef struct {
    int layer, n, width;
    rlxc_stage stage;
    const int32_t *pos;
    const float *values;
} patch;

typedef struct {
    PyObject_HEAD
    rlxc_model *m;
    PipelineObject *pipe;
    PyObject *refs; /* list: the arrays the model's weights point into */
    /* taps: hook_masks [n_layers + 1] (set_hooks), called back through `hook` under the GIL;
     * patches applied in C (set_patches), their arrays kept in patch_refs */
    uint32_t *hook_masks;
    PyObject *hook;
    patch *patches;
    int n_patches;
    PyObject *patch_refs;
    PyObject *hook_error;     /* the exception a hook raised in the running call */
    char patch_error[RLXC_ERRLEN];
} EngineObject;

/* A matrix from a float32 [rows, cols] array (type "f32") or uint8 [rows, row_bytes] GGUF rows of
 * type `tname`, borrowed into *w. None leaves *w empty. */
static int matrix_arg(EngineObject *self, PyObject *obj, PyObject *tname, const char *name, rlxc_weight *w) {
    memset(w, 0, sizeof *w);
    if (obj == Py_None) return 0;
    char tlabel[64];
    snprintf(tlabel, sizeof tlabel, "%s_type", name);
    const char *ts = tname == Py_None ? "f32" : str_arg(tname, tlabel);
    if (!ts) return -1;
    const int t = wtype_arg(ts, tlabel);
    if (t < 0) return -1;
    if (!PyArray_Check(obj) || PyArray_NDIM((PyArrayObject *)obj) != 2 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj) ||
        PyArray_TYPE((PyArrayObject *)obj) != (t == RLXC_F32 ? NPY_FLOAT32 : NPY_UINT8) ||
        !PyArray_ISNOTSWAPPED((PyArrayObject *)obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous 2-D %s array", name,
                     t == RLXC_F32 ? "float32 [rows, cols]" : "uint8 [rows, row_bytes]");
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    const npy_intp rows = PyArray_DIM(a, 0), n = PyArray_DIM(a, 1);
    const int block = rlxc_wtype_block_size((rlxc_wtype)t);
    const size_t block_bytes = rlxc_wtype_row_bytes((rlxc_wtype)t, block);
    const npy_intp cols = t == RLXC_F32 ? n : (npy_intp)(n / block_bytes * block);
    if (rows < 1 || cols < 1 || rows > RLXC_MAX_COUNT || cols > RLXC_MAX_COUNT ||
        (t != RLXC_F32 && (size_t)n % block_bytes)) {
        PyErr_Format(PyExc_ValueError, "%s has shape (%zd, %zd): not rows of whole %s blocks", name, (Py_ssize_t)rows,
                     (Py_ssize_t)n, ts);
        return -1;
    }
    if (check_aligned(a, (rlxc_wtype)t, name) || PyList_Append(self->refs, obj)) return -1;
    *w = (rlxc_weight){.type = (rlxc_wtype)t, .rows = (int)rows, .cols = (int)cols, .data = PyArray_DATA(a), .borrowed = 1};
    return 0;
}

/* A float32 vector (None: empty), borrowed into *w as a 1 x n weight. */
static int vector_arg(EngineObject *self, PyObject *obj, const char *name, rlxc_weight *w) {
    memset(w, 0, sizeof *w);
    if (obj == Py_None) return 0;
    PyArrayObject *a = as_f32(obj, name, 1, 1);
    if (!a || check_finite(a, name) || PyList_Append(self->refs, obj)) return -1;
    *w = (rlxc_weight){.type = RLXC_F32, .rows = 1, .cols = (int)PyArray_DIM(a, 0), .data = PyArray_DATA(a), .borrowed = 1};
    return 0;
}

static int float_arg(PyObject *obj, const char *name, float *out) {
    double d;
    if (real_arg(obj, name, 1, &d)) return -1;
    *out = (float)d;
    return 0;
}

static int Engine_init(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"pipeline", "embed", "embed_type", "embed_scale", "lm_head", "lm_head_type",
                             "norm_type", "norm_weight", "norm_bias", "norm_eps", "norm_offset", "final_softcap",
                             "ple_embed", "ple_embed_type", "ple_proj", "ple_proj_type", "ple_norm",
                             "ple_embed_scale", "ple_proj_scale", "ple_input_scale", "ple_eps", NULL};
    EngineObject *self = (EngineObject *)o;
    PyObject *pipe, *embed, *embed_type = Py_None, *lm = Py_None, *lm_type = Py_None, *nw = Py_None, *nb = Py_None;
    PyObject *pe = Py_None, *pe_type = Py_None, *pp = Py_None, *pp_type = Py_None, *pn = Py_None;
    PyObject *f[9] = {0}; /* embed_scale, norm_eps, norm_offset, final_softcap, ple scales x3, ple_eps, norm_type */
    if (self->m) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|$OOOOOOOOOOOOOOOOOOO:Engine", kwlist, &Pipeline_Type, &pipe, &embed,
                                     &embed_type, &f[0], &lm, &lm_type, &f[8], &nw, &nb, &f[1], &f[2], &f[3], &pe,
                                     &pe_type, &pp, &pp_type, &pn, &f[4], &f[5], &f[6], &f[7]))
        return -1;
    if (!pipeline_ready((PipelineObject *)pipe)) return -1;
    Py_XSETREF(self->refs, PyList_New(0));
    if (!self->refs) return -1;
    rlxc_model_parts mp = {.embed_scale = 1.0f, .norm_eps = 1e-6f, .ple_embed_scale = 1.0f, .ple_proj_scale = 1.0f,
                           .ple_input_scale = 1.0f, .ple_eps = 1e-6f};
    float *scalars[8] = {&mp.embed_scale, &mp.norm_eps, &mp.norm_offset, &mp.final_softcap, &mp.ple_embed_scale,
                         &mp.ple_proj_scale, &mp.ple_input_scale, &mp.ple_eps};
    static const char *scalar_names[8] = {"embed_scale", "norm_eps", "norm_offset", "final_softcap",
                                          "ple_embed_scale", "ple_proj_scale", "ple_input_scale", "ple_eps"};
    for (int i = 0; i < 8; i++)
        if (f[i] && float_arg(f[i], scalar_names[i], scalars[i])) return -1;
    int norm_type = 0;
    if (f[8] && int_arg(f[8], "norm_type", 0, 1, &norm_type)) return -1;
    mp.norm_type = (rlxc_norm_type)norm_type;
    if (mp.final_softcap < 0 || mp.norm_eps < 0 || mp.ple_eps < 0) {
        PyErr_SetString(PyExc_ValueError, "final_softcap, norm_eps and ple_eps must be >= 0");
        return -1;
    }
    if (matrix_arg(self, embed, embed_type, "embed", &mp.embed) || matrix_arg(self, lm, lm_type, "lm_head", &mp.lm_head) ||
        vector_arg(self, nw, "norm_weight", &mp.norm) || vector_arg(self, nb, "norm_bias", &mp.norm_bias) ||
        matrix_arg(self, pe, pe_type, "ple_embed", &mp.ple_embed) ||
        matrix_arg(self, pp, pp_type, "ple_proj", &mp.ple_proj) || vector_arg(self, pn, "ple_norm", &mp.ple_norm))
        return -1;
    if (!mp.embed.data) {
        PyErr_SetString(PyExc_TypeError, "embed is required");
        return -1;
    }
    if (!mp.ple_embed.data != !mp.ple_proj.data || !mp.ple_embed.data != !mp.ple_norm.data) {
        PyErr_SetString(PyExc_ValueError, "ple_embed, ple_proj and ple_norm go together");
        return -1;
    }
    char err[RLXC_ERRLEN];
    rlxc_model *m = rlxc_model_create(((PipelineObject *)pipe)->p, &mp, err);
    if (!m) {
        PyErr_SetString(PyExc_MemoryError, err);
        return -1;
    }
    self->m = m;
    Py_INCREF(pipe);
    self->pipe = (PipelineObject *)pipe;
    return 0;
}

static int Engine_traverse(PyObject *o, visitproc visit, void *arg) {
    EngineObject *self = (EngineObject *)o;
    Py_VISIT(self->pipe);
    Py_VISIT(self->refs);
    Py_VISIT(self->hook);
    Py_VISIT(self->patch_refs);
    Py_VISIT(self->hook_error);
    return 0;
}

static int Engine_clear(PyObject *o) {
    EngineObject *self = (EngineObject *)o;
    Py_CLEAR(self->pipe);
    Py_CLEAR(self->refs);
    Py_CLEAR(self->hook);
    Py_CLEAR(self->patch_refs);
    Py_CLEAR(self->hook_error);
    return 0;
}

static void Engine_dealloc(PyObject *o) {
    EngineObject *self = (EngineObject *)o;
    PyObject_GC_UnTrack(o);
    rlxc_model_free(self->m);
    free(self->hook_masks);
    free(self->patches);
    Engine_clear(o);
    Py_TYPE(o)->tp_free(o);
}

static int n_layers(const EngineObject *self) { return (int)PyTuple_GET_SIZE(self->pipe->layers); }

/* "layers.3.mlp_out" or "logits". */
static void stage_label(char *buf, size_t n, int layer, rlxc_stage s) {
    if (layer < 0) snprintf(buf, n, "%s", rlxc_stage_name(s));
    else snprintf(buf, n, "layers.%d.%s", layer, rlxc_stage_name(s));
}

/* A stage's values handed to the Python hook: a float32 [T, width] copy; what the hook leaves in
 * it, or returns instead, is copied back. */
static int call_hook(EngineObject *self, int layer, rlxc_stage s, float *data, int T, int pos0, int width) {
    PyArrayObject *a = new_array(2, (npy_intp[]){T, width}, NPY_FLOAT32);
    if (!a) return -1;
    memcpy(PyArray_DATA(a), data, (size_t)T * width * sizeof(float));
    PyObject *r = PyObject_CallFunction(self->hook, "isOi", layer, rlxc_stage_name(s), (PyObject *)a, pos0);
    int rc = -1;
    if (r) {
        PyArrayObject *src = r == Py_None ? (PyArrayObject *)Py_NewRef(a)
                                          : (PyArrayObject *)PyArray_FromAny(r, PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
                                                                             NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST, NULL);
        if (src && PyArray_SIZE(src) != (npy_intp)T * width) {
            char where[64];
            stage_label(where, sizeof where, layer, s);
            PyErr_Format(PyExc_ValueError, "the hook at %s returned %zd values, the stage has %d tokens x %d", where,
                         (Py_ssize_t)PyArray_SIZE(src), T, width);
        } else if (src) {
            memcpy(data, PyArray_DATA(src), (size_t)T * width * sizeof(float));
            rc = 0;
        }
        Py_XDECREF(src);
        Py_DECREF(r);
    }
    Py_DECREF(a);
    return rc;
}

/* The engine's tap: patches first (no GIL), then the Python hook where one is set. */
static int engine_tap(void *ctx, int layer, rlxc_stage s, float *data, int T, int pos0, int width) {
    EngineObject *self = ctx;
    const int slot = layer < 0 ? n_layers(self) : layer;
    for (int i = 0; i < self->n_patches; i++) {
        const patch *pt = &self->patches[i];
        if (pt->layer != layer || pt->stage != s) continue;
        for (int k = 0; k < pt->n; k++) {
            const int t = pt->pos[k] - pos0;
            if (t < 0 || t >= T) continue;
            if (pt->width != width) {
                char where[64];
                stage_label(where, sizeof where, layer, s);
                snprintf(self->patch_error, sizeof self->patch_error,
                         "the patch of %s has %d values per position, the stage has %d here", where, pt->width, width);
                return 1;
            }
            memcpy(data + (size_t)t * width, pt->values + (size_t)k * width, (size_t)width * sizeof(float));
        }
    }
    if (!self->hook || !(self->hook_masks[slot] >> s & 1u)) return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    self->pipe->hook_thread = PyThread_get_thread_ident();
    const int rc = call_hook(self, layer, s, data, T, pos0, width);
    self->pipe->hook_thread = 0;
    if (rc) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb) PyException_SetTraceback(v, tb);
        Py_XSETREF(self->hook_error, v);
        Py_XDECREF(t);
        Py_XDECREF(tb);
    }
    PyGILState_Release(g);
    return rc != 0;
}

/* Before a call (pipeline entered): the taps of the hooks and patches, if any. */
static int taps_begin(EngineObject *self) {
    const int L = n_layers(self);
    uint32_t masks[L + 1];
    int any = 0;
    for (int i = 0; i <= L; i++) {
        masks[i] = self->hook ? self->hook_masks[i] : 0;
        any |= masks[i] != 0;
    }
    for (int i = 0; i < self->n_patches; i++) {
        masks[self->patches[i].layer < 0 ? L : self->patches[i].layer] |= 1u << self->patches[i].stage;
        any = 1;
    }
    Py_CLEAR(self->hook_error);
    self->patch_error[0] = 0;
    char err[RLXC_ERRLEN];
    if (any && rlxc_pipeline_set_taps(self->pipe->p, engine_tap, self, masks, err)) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    return 0;
}

/* After a call: no taps; the error of a failed call (the hook's own exception if one raised). */
static void taps_end(EngineObject *self, int rc, const char *err) {
    rlxc_pipeline_set_taps(self->pipe->p, NULL, NULL, NULL, NULL);
    if (!rc) return;
    if (self->hook_error) {
        PyObject *e = self->hook_error;
        self->hook_error = NULL;
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    } else {
        PyErr_SetString(PyExc_ValueError, self->patch_error[0] ? self->patch_error : err);
    }
}

static int engine_ready(EngineObject *self) {
    if (!self->m || !self->pipe) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is not initialized");
        return 0;
    }
    return pipeline_ready(self->pipe);
}

/* int32 copy of 1-D integer token ids (any integer dtype; range checked by the engine). */
static PyArrayObject *ids_arg(PyObject *obj, int max_len) {
    if (!PyArray_Check(obj) || PyArray_NDIM((PyArrayObject *)obj) != 1 ||
        !PyArray_ISINTEGER((PyArrayObject *)obj)) {
        PyErr_SetString(PyExc_TypeError, "ids must be a 1-D numpy array of integers");
        return NULL;
    }
    const npy_intp T = PyArray_DIM((PyArrayObject *)obj, 0);
    if (T < 1 || T > max_len) {
        PyErr_Format(PyExc_ValueError, "ids must hold between 1 and max_seq=%d tokens, got %zd", max_len, (Py_ssize_t)T);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(obj, PyArray_DescrFromType(NPY_INT64), 1, 1,
                                                        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST,
                                                        NULL);
    if (!a) return NULL;
    PyArrayObject *out = new_array(1, &T, NPY_INT32);
    if (out) {
        const int64_t *src = PyArray_DATA(a);
        int32_t *dst = PyArray_DATA(out);
        for (npy_intp i = 0; i < T; i++) {
            if (src[i] < INT32_MIN || src[i] > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "token id %lld is outside the vocabulary", (long long)src[i]);
                Py_CLEAR(out);
                break;
            }
            dst[i] = (int32_t)src[i];
        }
    }
    Py_DECREF(a);
    return out;
}

static PyObject *Engine_prefill(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"ids", "logits", "trace", NULL};
    EngineObject *self = (EngineObject *)o;
    PyObject *ids_obj, *which_obj = NULL;
    int trace = 0;
    if (!engine_ready(self) ||
        !PyArg_ParseTupleAndKeywords(args, kw, "O|Op:prefill", kwlist, &ids_obj, &which_obj, &trace))
        return NULL;
    rlxc_logits which = RLXC_LOGITS_ALL;
    if (which_obj) {
        const char *s = str_arg(which_obj, "logits");
        if (!s) return NULL;
        if (!strcmp(s, "last")) which = RLXC_LOGITS_LAST;
        else if (!strcmp(s, "none")) which = RLXC_LOGITS_NONE;
        else if (strcmp(s, "all")) {
            PyErr_Format(PyExc_ValueError, "logits must be 'all', 'last' or 'none', got '%s'", s);
            return NULL;
        }
    }
    if (trace && which != RLXC_LOGITS_ALL) {
        PyErr_SetString(PyExc_ValueError, "trace=True needs logits='all'");
        return NULL;
    }
    PyArrayObject *ids = ids_arg(ids_obj, rlxc_pipeline_max_seq(self->pipe->p));
    if (!ids) return NULL;
    const int T = (int)PyArray_DIM(ids, 0), V = rlxc_model_n_logits(self->m);
    const int H = rlxc_pipeline_hidden_size(self->pipe->p), L = (int)PyTuple_GET_SIZE(self->pipe->layers);
    PyArrayObject *logits = NULL, *emb = NULL, *lay = NULL, *fin = NULL;
    if (which == RLXC_LOGITS_ALL) logits = new_array(2, (npy_intp[]){T, V}, NPY_FLOAT32);
    else if (which == RLXC_LOGITS_LAST) logits = new_array(1, (npy_intp[]){V}, NPY_FLOAT32);
    if (trace) {
        emb = new_array(2, (npy_intp[]){T, H}, NPY_FLOAT32);
        lay = new_array(3, (npy_intp[]){L, T, H}, NPY_FLOAT32);
        fin = new_array(2, (npy_intp[]){T, H}, NPY_FLOAT32);
    }
    PyObject *result = NULL;
    if ((which != RLXC_LOGITS_NONE && !logits) || (trace && (!emb || !lay || !fin))) goto done;
    rlxc_trace tr = {trace ? PyArray_DATA(emb) : NULL, trace ? PyArray_DATA(lay) : NULL, trace ? PyArray_DATA(fin) : NULL};
    char err[RLXC_ERRLEN];
    int rc;
    if (pipeline_enter(self->pipe)) goto done;
    /* the layers may have changed shape while this call waited for the pipeline */
    if (rlxc_pipeline_hidden_size(self->pipe->p) != H) {
        pipeline_leave(self->pipe);
        PyErr_SetString(PyExc_RuntimeError, "the layers changed shape while this call waited; call again");
        goto done;
    }
    if (taps_begin(self)) {
        pipeline_leave(self->pipe);
        goto done;
    }
    const int32_t *idp = PyArray_DATA(ids);
    float *lp = logits ? PyArray_DATA(logits) : NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = rlxc_model_prefill(self->m, idp, T, which, lp, trace ? &tr : NULL, err);
    Py_END_ALLOW_THREADS
    taps_end(self, rc, err);
    pipeline_leave(self->pipe);
    if (rc) goto done;
    if (trace) result = Py_BuildValue("(OOOO)", logits, emb, lay, fin);
    else result = logits ? Py_NewRef(logits) : Py_NewRef(Py_None);
done:
    Py_DECREF(ids);
    Py_XDECREF(logits);
    Py_XDECREF(emb);
    Py_XDECREF(lay);
    Py_XDECREF(fin);
    return result;
}

static PyObject *Engine_decode(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"token", "pos", NULL};
    EngineObject *self = (EngineObject *)o;
    PyObject *tok_obj, *pos_obj;
    int token, pos;
    if (!engine_ready(self) || !PyArg_ParseTupleAndKeywords(args, kw, "OO:decode", kwlist, &tok_obj, &pos_obj))
        return NULL;
    if (int_arg(tok_obj, "token", 0, rlxc_model_vocab(self->m) - 1, &token) ||
        int_arg(pos_obj, "pos", 0, rlxc_pipeline_max_seq(self->pipe->p) - 1, &pos))
        return NULL;
    PyArrayObject *logits = new_array(1, (npy_intp[]){rlxc_model_n_logits(self->m)}, NPY_FLOAT32);
    if (!logits) return NULL;
    char err[RLXC_ERRLEN];
    int rc;
    float *lp = PyArray_DATA(logits);
    if (pipeline_enter(self->pipe)) {
        Py_DECREF(logits);
        return NULL;
    }
    if (taps_begin(self)) {
        pipeline_leave(self->pipe);
        Py_DECREF(logits);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = rlxc_model_decode(self->m, token, pos, lp, err);
    Py_END_ALLOW_THREADS
    taps_end(self, rc, err);
    pipeline_leave(self->pipe);
    if (rc) {
        Py_DECREF(logits);
        return NULL;
    }
    return (PyObject *)logits;
}

static PyObject *Engine_decode_batch(PyObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"seqs", "tokens", NULL};
    EngineObject *self = (EngineObject *)o;
    PyObject *seqs_obj, *tok_obj;
    if (!engine_ready(self) ||
        !PyArg_ParseTupleAndKeywords(args, kw, "OO:decode_batch", kwlist, &seqs_obj, &tok_obj))
        return NULL;
    const int n_seq = rlxc_pipeline_seqs(self->pipe->p);
    PyArrayObject *seqs = ids_arg(seqs_obj, n_seq), *toks = seqs ? ids_arg(tok_obj, n_seq) : NULL;
    if (!toks) {
        Py_XDECREF(seqs);
        return NULL;
    }
    const npy_intp B = PyArray_DIM(toks, 0);
    PyArrayObject *logits = NULL;
    if (PyArray_DIM(seqs, 0) != B)
        PyErr_Format(PyExc_ValueError, "seqs (%zd) and tokens (%zd) must have the same length",
                     (Py_ssize_t)PyArray_DIM(seqs, 0), (Py_ssize_t)B);
    else
        logits = new_array(2, (npy_intp[]){B, rlxc_model_n_logits(self->m)}, NPY_FLOAT32);
    if (logits && pipeline_enter(self->pipe)) Py_CLEAR(logits);
    if (logits) {
        char err[RLXC_ERRLEN];
        int rc;
        const int32_t *sp = PyArray_DATA(seqs), *tp = PyArray_DATA(toks);
        float *lp = PyArray_DATA(logits);
        const int hooked = self->hook != NULL || self->n_patches > 0;
        Py_BEGIN_ALLOW_THREADS
        rc = hooked ? -1 : rlxc_model_decode_batch(self->m, sp, tp, (int)B, lp, err);
        Py_END_ALLOW_THREADS
        pipeline_leave(self->pipe);
        if (rc) {
            PyErr_SetString(PyExc_ValueError, hooked ? "hooks, collected stages and patches do not run in a batch: "
                                                       "decode one sequence at a time" : err);
            Py_CLEAR(logits);
        }
    }
    Py_DECREF(seqs);
    Py_DECREF(toks);
    return (PyObject *)logits;
}

/* (layer, stage name) -> layer index (-1 for the model's stages) and stage; -1 with ValueError. */
static int stage_arg(EngineObject *self, PyObject *layer_obj, PyObject *name_obj, int *layer, rlxc_stage *s) {
    const char *name = str_arg(name_obj, "stage");
    if (!name) return -1;
    const int st = rlxc_stage_from_name(name);
    if (st < 0) {
        PyErr_Format(PyExc_ValueError, "unknown stage '%s'", name);
        return -1;
    }
    if (int_arg(layer_obj, "layer", -1, n_layers(self) - 1, layer)) return -1;
    if ((*layer < 0) != rlxc_stage_is_model((rlxc_stage)st)) {
        PyErr_Format(PyExc_ValueError, "stage '%s' is %s's (layer %s)", name,
                     rlxc_stage_is_model((rlxc_stage)st) ? "the model" : "a layer",
                     rlxc_stage_is_model((rlxc_stage)st) ? "-1" : ">= 0");
        return -1;
    }
    *s = (rlxc_stage)st;
    return 0;
}

static PyObject *Engine_set_hooks(PyObject *o, PyObject *args) {
    EngineObject *self = (EngineObject *)o;
    PyObject *masks_obj, *hook;
    if (!engine_ready(self) || !PyArg_ParseTuple(args, "OO:set_hooks", &masks_obj, &hook)) return NULL;
    const int L = n_layers(self);
    uint32_t *masks = NULL;
    if (hook != Py_None) {
        if (!PyCallable_Check(hook)) {
            PyErr_SetString(PyExc_TypeError, "hook must be callable or None");
            return NULL;
        }
        PyObject *seq = PySequence_Fast(masks_obj, "masks must be a sequence of ints");
        if (!seq) return NULL;
        if (PySequence_Fast_GET_SIZE(seq) != L + 1) {
            PyErr_Format(PyExc_ValueError, "masks must hold n_layers + 1 = %d ints, got %zd", L + 1,
                         PySequence_Fast_GET_SIZE(seq));
            Py_DECREF(seq);
            return NULL;
        }
        masks = calloc(L + 1, sizeof *masks);
        for (int i = 0; masks && i <= L; i++) {
            const unsigned long m = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
            if (PyErr_Occurred() || m >> RLXC_STAGE_COUNT) {
                if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "mask %d has bits past the %d stages", i, RLXC_STAGE_COUNT);
                Py_CLEAR(seq);
                free(masks);
                return NULL;
            }
            masks[i] = (uint32_t)m;
        }
        Py_DECREF(seq);
        if (!masks) return PyErr_NoMemory();
    }
    if (pipeline_enter(self->pipe)) {
        free(masks);
        return NULL;
    }
    free(self->hook_masks);
    self->hook_masks = masks;
    Py_XSETREF(self->hook, hook == Py_None ? NULL : Py_NewRef(hook));
    pipeline_leave(self->pipe);
    Py_RETURN_NONE;
}

/* One patch from (layer, stage, positions, values) into *pt; the arrays go to refs. */
static int patch_arg(EngineObject *self, PyObject *item, PyObject *refs, patch *pt) {
    PyObject *layer_obj, *name_obj, *pos_obj, *val_obj;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOOO", &layer_obj, &name_obj, &pos_obj, &val_obj)) {
        PyErr_SetString(PyExc_TypeError, "a patch is a tuple (layer, stage, positions, values)");
        return -1;
    }
    if (stage_arg(self, layer_obj, name_obj, &pt->layer, &pt->stage)) return -1;
    PyArrayObject *pos = (PyArrayObject *)PyArray_FromAny(pos_obj, PyArray_DescrFromType(NPY_INT32), 1, 1,
                                                          NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST, NULL);
    if (!pos) return -1;
    if (PyList_Append(refs, (PyObject *)pos)) {
        Py_DECREF(pos);
        return -1;
    }
    Py_DECREF(pos);
    PyArrayObject *val = as_f32(val_obj, "patch values", 2, 2);
    if (!val || check_finite(val, "patch values") || PyList_Append(refs, val_obj)) return -1;
    if (PyArray_DIM(val, 0) != PyArray_DIM(pos, 0) || PyArray_DIM(val, 1) < 1 || PyArray_DIM(val, 1) > RLXC_MAX_COUNT) {
        PyErr_Format(PyExc_ValueError, "patch of stage '%s': values must be [len(positions)=%zd, width], got [%zd, %zd]",
                     rlxc_stage_name(pt->stage), (Py_ssize_t)PyArray_DIM(pos, 0), (Py_ssize_t)PyArray_DIM(val, 0),
                     (Py_ssize_t)PyArray_DIM(val, 1));
        return -1;
    }
    pt->n = (int)PyArray_DIM(pos, 0);
    pt->width = (int)PyArray_DIM(val, 1);
    pt->pos = PyArray_DATA(pos);
    pt->values = PyArray_DATA(val);
    for (int k = 0; k < pt->n; k++)
        if (pt->pos[k] < 0) {
            PyErr_Format(PyExc_ValueError, "patch of stage '%s': position %d is negative", rlxc_stage_name(pt->stage),
                         (int)pt->pos[k]);
            return -1;
        }
    return 0;
}

static PyObject *Engine_set_patches(PyObject *o, PyObject *args) {
    EngineObject *self = (EngineObject *)o;
    PyObject *list;
    if (!engine_ready(self) || !PyArg_ParseTuple(args, "O:set_patches", &list)) return NULL;
    PyObject *seq = PySequence_Fast(list, "patches must be a sequence of (layer, stage, positions, values)");
    if (!seq) return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    patch *pts = calloc(n ? n : 1, sizeof *pts);
    PyObject *refs = PyList_New(0);
    int ok = pts && refs;
    for (Py_ssize_t i = 0; ok && i < n; i++) ok = !patch_arg(self, PySequence_Fast_GET_ITEM(seq, i), refs, &pts[i]);
    Py_DECREF(seq);
    if (ok && !pipeline_enter(self->pipe)) {
        free(self->patches);
        self->patches = pts;
        self->n_patches = (int)n;
        Py_XSETREF(self->patch_refs, refs);
        pipeline_leave(self->pipe);
        Py_RETURN_NONE;
    }
    if (!pts) PyErr_NoMemory();
    free(pts);
    Py_XDECREF(refs);
    return NULL;
}

static PyObject *Engine_pipeline(PyObject *o, void *c) {
    EngineObject *self = (EngineObject *)o;
    return engine_ready(self) ? Py_NewRef((PyObject *)self->pipe) : NULL;
}

static PyObject *Engine_n_logits(PyObject *o, void *c) {
    EngineObject *self = (EngineObject *)o;
    return engine_ready(self) ? PyLong_FromLong(rlxc_model_n_logits(self->m)) : NULL;
}

static PyMethodDef Engine_methods[] = {
    {"prefill", (PyCFunction)(void (*)(void))Engine_prefill, METH_VARARGS | METH_KEYWORDS,
     "prefill(ids, logits='all', trace=False): run int token ids at positions n_past.. and append them to the "
     "cache. Returns float32 logits [T, n_logits] ('all'), [n_logits] ('last') or None ('none'); with trace, "
     "(logits, embeddings [T, hidden], layers [n_layers, T, hidden], final_norm [T, hidden])."},
    {"decode", (PyCFunction)(void (*)(void))Engine_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(token, pos): one token at position pos <= n_past (smaller pos rewinds the cache). Returns float32 "
     "[n_logits]."},
    {"decode_batch", (PyCFunction)(void (*)(void))Engine_decode_batch, METH_VARARGS | METH_KEYWORDS,
     "decode_batch(seqs, tokens): tokens[b] appended to sequence seqs[b] (distinct), all in one pass. Returns "
     "float32 [B, n_logits]."},
    {"set_hooks", Engine_set_hooks, METH_VARARGS,
     "set_hooks(masks, hook): call hook(layer, stage, values, pos0) at the stages whose bit (1 << stage index) is "
     "set in masks[layer] (masks[n_layers]: the model's stages, layer -1). values: float32 [T, width], a copy; "
     "what the hook leaves in it or returns (T * width floats) replaces the stage. hook None: no hooks."},
    {"set_patches", Engine_set_patches, METH_VARARGS,
     "set_patches(patches): each (layer, stage, positions, values [len(positions), width]) replaces the stage's "
     "values at those positions in every later call, in C. [] clears."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Engine_getset[] = {
    {"pipeline", Engine_pipeline, NULL, "The Pipeline whose layers and cache the engine runs.", NULL},
    {"n_logits", Engine_n_logits, NULL, "Width of a logits row (the lm_head's rows).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Engine_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rlxc._rlxc.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Engine(pipeline, embed, *, embed_type='f32', embed_scale=1.0, lm_head=None, lm_head_type=None, "
              "norm_type=0, norm_weight=None, norm_bias=None, norm_eps=1e-6, norm_offset=0.0, final_softcap=0.0, "
              "ple_embed=None, ple_embed_type=None, ple_proj=None, ple_proj_type=None, ple_norm=None, "
              "ple_embed_scale=1.0, ple_proj_scale=1.0, ple_input_scale=1.0, ple_eps=1e-6): a whole model in the C "
              "engine: token ids in, logits out, one call and one thread team per prefill or decoded token. "
              "Weights are float32 [rows, cols] or uint8 [rows, row_bytes] GGUF rows of the named type, used in "
              "place (the Engine keeps them alive).",
    .tp_new = PyType_GenericNew,
    .tp_init = Engine_init,
    .tp_dealloc = Engine_dealloc,
    .tp_traverse = Engine_traverse,
    .tp_clear = Engine_clear,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};
