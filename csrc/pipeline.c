/* The forward pass: a stack of rlxc_layer run over T tokens with per-layer KV caches.
 * Every value comes from the layer being run; kernels come from the active table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels.h"
#include "rlxc.h"

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)

typedef struct {
    float *k, *v;   /* [num_kv_heads][max_seq][head_dim], NULL for layers that share another's */
    int heads, dim; /* the shape the cache was allocated for */
    int shared;     /* the layer read another layer's cache when this was allocated */
} kv_cache;

struct rlxc_pipeline {
    rlxc_layer **layers;
    int n_layers, max_seq, n_threads, n_past;
    rlxc_act act;
    kv_cache *kv;

    /* Scratch, grown only when a call needs more (more tokens, wider layers, more threads):
     * decode after a prefill of the same model never allocates. */
    size_t cap_floats, cap_xq; /* cap_xq in bytes: rlxc_linear's scratch */
    float *xa, *q, *k, *v, *att, *o, *f1, *f2, *cs;
    void *xq;
    float *scores; /* n_threads * max_seq */
    int scores_threads;
};

static int ensure_scratch(rlxc_pipeline *p, int T, char *err);

static size_t kv_floats(const rlxc_pipeline *p, int i) {
    const rlxc_layer *l = p->layers[i];
    return (size_t)l->num_kv_heads * p->max_seq * l->head_dim;
}

static int alloc_caches(rlxc_pipeline *p, char *err) {
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        kv_cache *c = &p->kv[i];
        free(c->k);
        free(c->v);
        memset(c, 0, sizeof *c);
        c->shared = l->kv_shared_from >= 0;
        if (c->shared) continue;
        c->k = calloc(kv_floats(p, i), sizeof(float));
        c->v = calloc(kv_floats(p, i), sizeof(float));
        if (!c->k || !c->v) FAIL("out of memory for layer %d's KV cache (%zu floats)", i, 2 * kv_floats(p, i));
        c->heads = l->num_kv_heads;
        c->dim = l->head_dim;
    }
    return 0;
}

void rlxc_pipeline_free(rlxc_pipeline *p) {
    if (!p) return;
    for (int i = 0; p->kv && i < p->n_layers; i++) {
        free(p->kv[i].k);
        free(p->kv[i].v);
    }
    free(p->kv);
    free(p->layers);
    free(p->xa);
    free(p->xq);
    free(p->scores);
    free(p);
}

rlxc_pipeline *rlxc_pipeline_create(rlxc_layer *const *layers, int n_layers, int max_seq, int n_threads, char *err) {
    if (n_layers <= 0) { snprintf(err, RLXC_ERRLEN, "a pipeline needs at least one layer"); return NULL; }
    if (max_seq <= 0) { snprintf(err, RLXC_ERRLEN, "max_seq must be > 0, got %d", max_seq); return NULL; }
    rlxc_pipeline *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, RLXC_ERRLEN, "out of memory"); return NULL; }
    p->n_layers = n_layers;
    p->max_seq = max_seq;
    p->n_threads = n_threads > 0 ? n_threads : rlxc_threads_default();
    p->layers = malloc(n_layers * sizeof *p->layers);
    p->kv = calloc(n_layers, sizeof *p->kv);
    if (!p->layers || !p->kv) {
        snprintf(err, RLXC_ERRLEN, "out of memory");
        rlxc_pipeline_free(p);
        return NULL;
    }
    memcpy(p->layers, layers, n_layers * sizeof *p->layers);
    for (int i = 0; i < n_layers; i++) {
        if (rlxc_layer_check_fields(p->layers[i], err)) {
            char msg[RLXC_ERRLEN];
            snprintf(msg, sizeof msg, "%s", err);
            snprintf(err, RLXC_ERRLEN, "layer %d: %s", i, msg);
            rlxc_pipeline_free(p);
            return NULL;
        }
    }
    if (alloc_caches(p, err) || ensure_scratch(p, 1, err)) {
        rlxc_pipeline_free(p);
        return NULL;
    }
    return p;
}

int rlxc_pipeline_reset(rlxc_pipeline *p, char *err) {
    p->n_past = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const int own = l->kv_shared_from < 0;
        if (own != (p->kv[i].k != NULL) || (own && (p->kv[i].heads != l->num_kv_heads || p->kv[i].dim != l->head_dim)))
            return alloc_caches(p, err);
    }
    return 0;
}

int rlxc_pipeline_n_past(const rlxc_pipeline *p) { return p->n_past; }
int rlxc_pipeline_max_seq(const rlxc_pipeline *p) { return p->max_seq; }
int rlxc_pipeline_hidden_size(const rlxc_pipeline *p) { return p->layers[0]->hidden_size; }
int rlxc_pipeline_threads(const rlxc_pipeline *p) { return p->n_threads; }
void rlxc_pipeline_set_threads(rlxc_pipeline *p, int n) { p->n_threads = n > 0 ? n : rlxc_threads_default(); }
void rlxc_pipeline_set_act(rlxc_pipeline *p, rlxc_act act) { p->act = act; }
rlxc_act rlxc_pipeline_act(const rlxc_pipeline *p) { return p->act; }

size_t rlxc_pipeline_ple_stride(const rlxc_pipeline *p) {
    size_t s = 0;
    for (int i = 0; i < p->n_layers; i++) s += (size_t)p->layers[i]->ple_dim; /* each >= 0 (check_fields) */
    return s;
}

/* Everything a run depends on, checked once per call: layers may have been edited. */
static int validate(const rlxc_pipeline *p, char *err) {
    const int H = p->layers[0]->hidden_size;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        char msg[RLXC_ERRLEN];
        if (rlxc_layer_check(l, msg)) FAIL("layer %d: %s", i, msg);
        if (l->hidden_size != H)
            FAIL("layer %d has hidden_size %d but layer 0 has %d: the residual stream must keep one width", i,
                 l->hidden_size, H);
        const int src = l->kv_shared_from;
        if (src >= 0) {
            if (src >= i) FAIL("layer %d: kv_shared_from (%d) must name an earlier layer", i, src);
            const rlxc_layer *s = p->layers[src];
            if (s->kv_shared_from >= 0) FAIL("layer %d: kv_shared_from names layer %d, which shares too", i, src);
            if (s->num_kv_heads != l->num_kv_heads || s->head_dim != l->head_dim)
                FAIL("layer %d shares layer %d's KV cache but has num_kv_heads %d / head_dim %d vs %d / %d", i, src,
                     l->num_kv_heads, l->head_dim, s->num_kv_heads, s->head_dim);
        }
        const kv_cache *c = &p->kv[src >= 0 ? src : i];
        /* a layer that switched between own and shared K/V has a cache with gaps */
        if (!c->k || c->heads != l->num_kv_heads || c->dim != l->head_dim || p->kv[i].shared != (src >= 0))
            FAIL("layer %d's K/V shape (num_kv_heads * head_dim) or kv_shared_from changed since its cache was "
                 "allocated: call reset()", i);
    }
    return 0;
}

/* Grow scratch to hold T tokens of the largest layer. */
static int ensure_scratch(rlxc_pipeline *p, int T, char *err) {
    size_t per_tok = 0;
    int max_in = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const size_t H = l->hidden_size, Q = (size_t)l->num_q_heads * l->head_dim;
        const size_t KV = (size_t)l->num_kv_heads * l->head_dim, I = l->intermediate_size;
        const size_t F = I > (size_t)l->ple_dim ? I : (size_t)l->ple_dim;
        /* the last region holds cos, sin and inverse frequencies: rotary_dim * 3/2 floats, once */
        const size_t n = H + Q + 2 * KV + Q + H + 2 * F + 2 * (size_t)l->rotary_dim;
        if (n > per_tok) per_tok = n;
        size_t in = H > Q ? H : Q;
        in = in > F ? in : F;
        if ((int)in > max_in) max_in = (int)in;
    }
    const size_t need = per_tok * (size_t)T, need_xq = rlxc_linear_scratch_bytes(max_in, T, p->n_threads, p->act);
    /* New buffers are published before the old ones are freed, and capacities only after: a
     * fork() from another thread at any point leaves the child valid pointers (a call in the
     * child sees at worst a smaller capacity and grows again). The fences keep the compiler
     * from reordering those stores. */
    if (need > p->cap_floats || need_xq > p->cap_xq) {
        float *xa = malloc(need * sizeof(float));
        void *xq = malloc(need_xq ? need_xq : 1);
        if (!xa || !xq) {
            free(xa), free(xq);
            FAIL("out of memory for scratch of %d tokens", T);
        }
        float *old_xa = p->xa;
        void *old_xq = p->xq;
        p->cap_floats = p->cap_xq = 0;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        p->xa = xa, p->xq = xq;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        free(old_xa), free(old_xq);
        p->cap_floats = need;
        p->cap_xq = need_xq;
    }
    if (p->scores_threads < p->n_threads) {
        float *scores = malloc((size_t)p->n_threads * p->max_seq * sizeof(float));
        if (!scores) FAIL("out of memory for attention scratch");
        float *old = p->scores;
        p->scores_threads = 0;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        p->scores = scores;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        free(old);
        p->scores_threads = p->n_threads;
    }
    return 0;
}

/* Carve this layer's buffers out of the scratch block. */
static void layout_scratch(rlxc_pipeline *p, const rlxc_layer *l, int T) {
    const size_t H = l->hidden_size, Q = (size_t)l->num_q_heads * l->head_dim;
    const size_t KV = (size_t)l->num_kv_heads * l->head_dim, I = l->intermediate_size;
    const size_t F = I > (size_t)l->ple_dim ? I : (size_t)l->ple_dim;
    float *s = p->xa;
    p->q = s += H * T;
    p->k = s += Q * T;
    p->v = s += KV * T;
    p->att = s += KV * T;
    p->o = s += Q * T;
    p->f1 = s += H * T;
    p->f2 = s += F * T;
    p->cs = s += F * T;
}

static void linear(rlxc_pipeline *p, float *y, const rlxc_weight *w, const float *x, int T, const rlxc_weight *bias) {
    rlxc_linear(y, w, x, T, p->n_threads, p->xq, p->act);
    if (bias && bias->data)
        for (int t = 0; t < T; t++) rlxc_kernels_active()->add(y + (size_t)t * w->rows, bias->data, w->rows);
}

/* The layer's norm over rows of n. */
static void norm_rows(const rlxc_layer *l, float *y, const float *x, int rows, int n, const rlxc_weight *w,
                      const rlxc_weight *b, float offset) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        if (l->norm_type == RLXC_LAYERNORM) kn->layernorm(yr, xr, w->data, b ? b->data : NULL, l->eps, n);
        else kn->rmsnorm(yr, xr, w ? w->data : NULL, offset, l->eps, n);
    }
}

/* Per-head RMSNorm (q/k norms, v-norm): always RMS, whatever the main norm type. */
static void head_norm(const rlxc_layer *l, float *x, int rows, const rlxc_weight *w) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    for (int r = 0; r < rows; r++)
        kn->rmsnorm(x + (size_t)r * l->head_dim, x + (size_t)r * l->head_dim, w ? w->data : NULL,
                    l->qk_norm_offset, l->eps, l->head_dim);
}

static void activate(const rlxc_layer *l, float *x, size_t n) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    if (l->activation == RLXC_SILU) kn->silu(x, x, (int)n);
    else kn->gelu_tanh(x, x, (int)n);
}

void rlxc_rope_inv_freq(const rlxc_layer *l, float *inv) {
    const int n_pairs = l->rotary_dim / 2;
    const double denom = l->rope_layout == RLXC_ROPE_PROPORTIONAL ? l->head_dim : l->rotary_dim;
    const float *factors = l->w[RLXC_W_ROPE_FREQ_FACTORS].data;
    for (int k = 0; k < n_pairs; k++) {
        double f = pow((double)l->rope_base, -2.0 * k / denom);
        if (factors) f /= factors[k];
        inv[k] = (float)f;
    }
}

void rlxc_rope_angles(const rlxc_layer *l, const float *inv, int pos, float *cs, float *sn) {
    for (int k = 0; k < l->rotary_dim / 2; k++) {
        const float angle = (float)pos * inv[k];
        cs[k] = (float)cos((double)angle) * l->rope_attn_factor;
        sn[k] = (float)sin((double)angle) * l->rope_attn_factor;
    }
}

/* Query `it` = (token t, head h) over its visible keys: the last W of positions 0..pos. */
static void attention_item(const rlxc_pipeline *p, const rlxc_layer *l, const kv_cache *c, int pos0, int it,
                           float *scores) {
    const int hd = l->head_dim, nq = l->num_q_heads, group = nq / l->num_kv_heads, W = l->sliding_window;
    const size_t Q = (size_t)nq * hd;
    const int t = it / nq, h = it % nq, pos = pos0 + t;
    const int start = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
    const size_t base = ((size_t)(h / group) * p->max_seq + start) * hd;
    rlxc_kernels_active()->attn_head(p->att + t * Q + (size_t)h * hd, p->q + t * Q + (size_t)h * hd, c->k + base,
                                     c->v + base, hd, pos - start + 1, l->attn_scale, l->attn_softcap, scores);
}

/* Heads (and tokens) split across threads. */
static void attention(rlxc_pipeline *p, const rlxc_layer *l, const kv_cache *c, int T, int pos0) {
    const int items = T * l->num_q_heads;
    const int nth = rlxc_threads_usable(p->n_threads < items ? p->n_threads : items);
    if (nth == 1) {
        for (int it = 0; it < items; it++) attention_item(p, l, c, pos0, it, p->scores);
        return;
    }
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int it = 0; it < items; it++) {
#ifdef _OPENMP
        float *scores = p->scores + (size_t)omp_get_thread_num() * p->max_seq;
#else
        float *scores = p->scores;
#endif
        attention_item(p, l, c, pos0, it, scores);
    }
}

/* One layer over x[T][H] in place; ple: this layer's slice of the first token, stride ple_stride. */
static void layer_forward(rlxc_pipeline *p, int li, float *x, const float *ple, size_t ple_stride, int T, int pos0) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_layer *l = p->layers[li];
    const rlxc_weight *w = l->w;
    const int H = l->hidden_size, hd = l->head_dim, nq = l->num_q_heads, nkv = l->num_kv_heads;
    const size_t Q = (size_t)nq * hd, KV = (size_t)nkv * hd, I = l->intermediate_size;
    const int own_kv = l->kv_shared_from < 0;
    const kv_cache *c = &p->kv[own_kv ? li : l->kv_shared_from];
    layout_scratch(p, l, T);

    /* attention block */
    norm_rows(l, p->xa, x, T, H, &w[RLXC_W_ATTN_NORM], l->input_norm_bias ? &w[RLXC_W_ATTN_NORM_B] : NULL,
              l->norm_offset);
    linear(p, p->q, &w[RLXC_W_Q], p->xa, T, l->qkv_bias ? &w[RLXC_W_Q_B] : NULL);
    if (l->has_qk_norm) head_norm(l, p->q, T * nq, &w[RLXC_W_Q_NORM]);
    if (own_kv) {
        linear(p, p->k, &w[RLXC_W_K], p->xa, T, l->qkv_bias ? &w[RLXC_W_K_B] : NULL);
        if (l->v_from_k) memcpy(p->v, p->k, T * KV * sizeof(float));
        else linear(p, p->v, &w[RLXC_W_V], p->xa, T, l->qkv_bias ? &w[RLXC_W_V_B] : NULL);
        if (l->has_qk_norm) head_norm(l, p->k, T * nkv, &w[RLXC_W_K_NORM]);
        if (l->has_v_norm) head_norm(l, p->v, T * nkv, NULL);
    }
    if (l->rotary_dim > 0) {
        const int n_pairs = l->rotary_dim / 2;
        const int half = l->rope_layout == RLXC_ROPE_PROPORTIONAL ? hd / 2 : n_pairs;
        float *cs = p->cs, *sn = cs + n_pairs, *inv = sn + n_pairs;
        rlxc_rope_inv_freq(l, inv); /* once per call: pow is the costly part */
        for (int t = 0; t < T; t++) {
            rlxc_rope_angles(l, inv, pos0 + t, cs, sn);
            kn->rope(p->q + t * Q, nq, hd, cs, sn, n_pairs, half);
            if (own_kv) kn->rope(p->k + t * KV, nkv, hd, cs, sn, n_pairs, half);
        }
    }
    if (own_kv)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nkv; h++) {
                const size_t at = ((size_t)h * p->max_seq + pos0 + t) * hd;
                memcpy(c->k + at, p->k + t * KV + (size_t)h * hd, hd * sizeof(float));
                memcpy(c->v + at, p->v + t * KV + (size_t)h * hd, hd * sizeof(float));
            }
    attention(p, l, c, T, pos0);
    linear(p, p->o, &w[RLXC_W_O], p->att, T, l->o_bias ? &w[RLXC_W_O_B] : NULL);
    if (l->sandwich_norm) norm_rows(l, p->o, p->o, T, H, &w[RLXC_W_ATTN_POST_NORM], NULL, l->norm_offset);
    kn->add(x, p->o, T * H);

    /* feed-forward block */
    norm_rows(l, p->xa, x, T, H, &w[RLXC_W_FFN_NORM], l->post_attn_norm_bias ? &w[RLXC_W_FFN_NORM_B] : NULL,
              l->norm_offset);
    if (l->ffn_type == RLXC_GATED) {
        linear(p, p->f1, &w[RLXC_W_GATE], p->xa, T, l->ffn_up_bias ? &w[RLXC_W_GATE_B] : NULL);
        linear(p, p->f2, &w[RLXC_W_UP], p->xa, T, l->ffn_up_bias ? &w[RLXC_W_UP_B] : NULL);
        activate(l, p->f1, T * I);
        kn->mul(p->f1, p->f1, p->f2, (int)(T * I));
    } else {
        linear(p, p->f1, &w[RLXC_W_UP], p->xa, T, l->ffn_up_bias ? &w[RLXC_W_UP_B] : NULL);
        activate(l, p->f1, T * I);
    }
    linear(p, p->o, &w[RLXC_W_DOWN], p->f1, T, l->ffn_down_bias ? &w[RLXC_W_DOWN_B] : NULL);
    if (l->sandwich_norm) norm_rows(l, p->o, p->o, T, H, &w[RLXC_W_FFN_POST_NORM], NULL, l->norm_offset);
    kn->add(x, p->o, T * H);

    /* Gemma 4 per-layer input: y += RMSNorm(proj(act(gate y) * ple)), RMS whatever norm_type */
    if (l->ple_dim > 0) {
        const int P = l->ple_dim;
        linear(p, p->f1, &w[RLXC_W_PLE_GATE], x, T, NULL);
        activate(l, p->f1, (size_t)T * P);
        for (int t = 0; t < T; t++) kn->mul(p->f1 + (size_t)t * P, p->f1 + (size_t)t * P, ple + (size_t)t * ple_stride, P);
        linear(p, p->o, &w[RLXC_W_PLE_PROJ], p->f1, T, NULL);
        for (int t = 0; t < T; t++)
            kn->rmsnorm(p->o + (size_t)t * H, p->o + (size_t)t * H, w[RLXC_W_PLE_NORM].data, l->norm_offset, l->eps, H);
        kn->add(x, p->o, T * H);
    }
    if (l->layer_scalar != 1.0f) kn->scale(x, l->layer_scalar, T * H);
}

/* Kernels count elements in int: T times any per-token width is at most RLXC_MAX_COUNT. */
static int check_call_size(const rlxc_pipeline *p, int T, char *err) {
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const size_t widths[] = {(size_t)l->hidden_size, (size_t)l->num_q_heads * l->head_dim,
                                 (size_t)l->intermediate_size, (size_t)l->ple_dim};
        for (size_t k = 0; k < sizeof widths / sizeof *widths; k++)
            if ((size_t)T * widths[k] > RLXC_MAX_COUNT)
                FAIL("%d tokens of layer %d's width %zu exceed what one call can hold: split the prefill", T, i,
                     widths[k]);
    }
    return 0;
}

static int run(rlxc_pipeline *p, const float *x, const float *ple, int T, int pos0, float *out, float *layer_out,
               char *err) {
    if (validate(p, err) || check_call_size(p, T, err) || ensure_scratch(p, T, err)) return -1;
    const int H = p->layers[0]->hidden_size;
    const size_t ple_stride = rlxc_pipeline_ple_stride(p);
    if (ple_stride > 0 && !ple) FAIL("layers have per-layer inputs (ple_dim > 0): pass ple of %zu floats per token", ple_stride);
    if (out != x) memmove(out, x, (size_t)T * H * sizeof(float));
    size_t ple_off = 0;
    for (int i = 0; i < p->n_layers; i++) {
        layer_forward(p, i, out, ple ? ple + ple_off : NULL, ple_stride, T, pos0);
        ple_off += p->layers[i]->ple_dim;
        if (layer_out) memcpy(layer_out + (size_t)i * T * H, out, (size_t)T * H * sizeof(float));
    }
    return 0;
}

int rlxc_pipeline_prefill(rlxc_pipeline *p, const float *x, const float *ple, int T, float *out, float *layer_out,
                          char *err) {
    if (T <= 0) FAIL("prefill needs at least one token, got T=%d", T);
    if (p->n_past + T > p->max_seq)
        FAIL("prefill of %d tokens at position %d would exceed max_seq=%d", T, p->n_past, p->max_seq);
    if (run(p, x, ple, T, p->n_past, out, layer_out, err)) return -1;
    p->n_past += T;
    return 0;
}

int rlxc_pipeline_decode(rlxc_pipeline *p, const float *x, const float *ple, int pos, float *out, float *layer_out,
                         char *err) {
    if (pos < 0 || pos >= p->max_seq) FAIL("pos must be in [0, max_seq=%d), got %d", p->max_seq, pos);
    if (pos > p->n_past) FAIL("pos (%d) is past the %d cached tokens: positions must be filled in order", pos, p->n_past);
    if (run(p, x, ple, 1, pos, out, layer_out, err)) return -1;
    p->n_past = pos + 1;
    return 0;
}
