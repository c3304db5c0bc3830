/* The forward pass: a stack of rlxc_layer run over T tokens with per-layer KV caches.
 * Every value comes from the layer being run; kernels come from the active table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "kernels.h"

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)

static int ensure_scratch(rlxc_pipeline *p, int T, size_t extra_floats, int n_threads, char *err);

void rlxc_pipeline_free(rlxc_pipeline *p) {
    if (!p) return;
    rlxc_kv_free(p);
    free(p->kv_all);
    free(p->seq_past);
    free(p->batch_pos);
    free(p->layers);
    free(p->s.act);
    free(p->s.xq);
    free(p->s.dq);
    free(p->s.scores);
    free(p->s.states);
    free(p->s.probs);
    free(p->s.moe);
    free(p->s.moe_idx);
    free(p->s.rows);
    free(p->tap_masks);
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
    p->kv = p->kv_all = calloc(n_layers, sizeof *p->kv);
    p->n_seq = 1;
    p->seq_past = calloc(1, sizeof *p->seq_past);
    p->tap_masks = calloc(n_layers + 1, sizeof *p->tap_masks);
    if (!p->layers || !p->kv || !p->seq_past || !p->tap_masks) {
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
    p->kv_type = RLXC_F32;
    p->kv_ring = 1;
    p->ubatch = 512;
    if (rlxc_kv_alloc(p, err) || ensure_scratch(p, 1, 0, p->n_threads, err)) {
        rlxc_pipeline_free(p);
        return NULL;
    }
    return p;
}

int rlxc_pipeline_reset(rlxc_pipeline *p, char *err) {
    p->n_past = 0;
    memset(p->seq_past, 0, (size_t)p->n_seq * sizeof *p->seq_past);
    return rlxc_pipeline_kv_reshaped(p) ? rlxc_kv_alloc(p, err) : 0;
}

int rlxc_pipeline_set_seqs(rlxc_pipeline *p, int n, char *err) {
    if (n < 1 || n > RLXC_MAX_SEQS) FAIL("the number of sequences must be in [1, %d], got %d", RLXC_MAX_SEQS, n);
    if (p->kv_exported) FAIL("kv_cache() views are out: release them before changing the number of sequences");
    rlxc_kv_cache *kv = calloc((size_t)n * p->n_layers, sizeof *kv);
    int *past = calloc(n, sizeof *past);
    if (!kv || !past) {
        free(kv), free(past);
        FAIL("out of memory for %d sequences", n);
    }
    const int old = p->n_seq;
    rlxc_kv_free(p);
    free(p->kv_all), free(p->seq_past);
    p->kv = p->kv_all = kv, p->seq_past = past, p->n_seq = n, p->seq = 0, p->n_past = 0;
    const int rc = rlxc_kv_alloc(p, err);
    if (rc && n != old) { /* back to the old count, empty, keeping the message */
        char msg[RLXC_ERRLEN], again[RLXC_ERRLEN];
        snprintf(msg, sizeof msg, "%s", err);
        if (rlxc_pipeline_set_seqs(p, old, again)) rlxc_pipeline_set_seqs(p, 1, again);
        snprintf(err, RLXC_ERRLEN, "%s", msg);
    }
    return rc;
}

int rlxc_pipeline_seqs(const rlxc_pipeline *p) { return p->n_seq; }
int rlxc_pipeline_seq(const rlxc_pipeline *p) { return p->seq; }

int rlxc_pipeline_use_seq(rlxc_pipeline *p, int s, char *err) {
    if (s < 0 || s >= p->n_seq) FAIL("sequence %d does not exist: the pipeline has %d (set_seqs)", s, p->n_seq);
    if (p->kv_exported) FAIL("kv_cache() views of sequence %d are out: release them before switching", p->seq);
    p->seq_past[p->seq] = p->n_past;
    p->seq = s;
    p->kv = p->kv_all + (size_t)s * p->n_layers;
    p->n_past = p->seq_past[s];
    return 0;
}

int rlxc_pipeline_seq_past(const rlxc_pipeline *p, int s) { return s == p->seq ? p->n_past : p->seq_past[s]; }

int rlxc_pipeline_set_n_past(rlxc_pipeline *p, int n, char *err) {
    if (n < 0 || n > p->max_seq) FAIL("n_past must be in [0, max_seq=%d], got %d", p->max_seq, n);
    p->n_past = n;
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
        if (rlxc_kv_check(p, i, err)) return -1;
    }
    return 0;
}


/* Rows of hidden_size each thread has to itself (p->s.rows): the residual row it holds, that
 * row normed, and a normed output (o after a post-norm) before it is added. */
#define RLXC_OWN_ROWS 3

/* The per-token buffers of layer l over T tokens, carved out of the scratch. */
typedef struct {
    float *xa, *q, *k, *v, *att, *o, *f1, *f2;
    float *cs, *sn; /* [T][rotary_dim / 2] */
    float *inv;     /* [rotary_dim / 2] */
} bufs;

static size_t floats_per_token(const rlxc_layer *l) {
    const size_t H = l->hidden_size, Q = (size_t)l->num_q_heads * l->head_dim;
    const size_t KV = (size_t)l->num_kv_heads * l->head_dim, I = l->intermediate_size;
    const size_t F = I > (size_t)l->ple_dim ? I : (size_t)l->ple_dim;
    /* the last rotary_dim hold cos and sin */
    return H + Q + 2 * KV + Q + H + 2 * F + (size_t)l->rotary_dim;
}

static bufs layout(const rlxc_pipeline *p, const rlxc_layer *l, int T) {
    const size_t H = l->hidden_size, Q = (size_t)l->num_q_heads * l->head_dim;
    const size_t KV = (size_t)l->num_kv_heads * l->head_dim, I = l->intermediate_size;
    const size_t F = I > (size_t)l->ple_dim ? I : (size_t)l->ple_dim, np = l->rotary_dim / 2;
    bufs b;
    /* the frequencies before every layer's buffers: a thread that starts the next layer writes
     * them while others still read the last stage's buffers of this one */
    b.inv = p->s.act;
    float *s = p->s.act + p->rope_floats;
    /* o first, at the same place in every layer: a decode whose threads each hold the residual
     * row (rlxc_pipeline_layers) has threads add this layer's o while others already write the
     * next layer's q, k and v, whose places depend on the layer's shape */
    b.o = s;
    b.xa = s += H * T;
    b.q = s += H * T;
    b.k = s += Q * T;
    b.v = s += KV * T;
    b.att = s += KV * T;
    b.f1 = s += Q * T;
    b.f2 = s += F * T;
    b.cs = s += F * T;
    b.sn = s + np * T;
    return b;
}

static size_t max_floats_per_token(const rlxc_pipeline *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const size_t f = floats_per_token(p->layers[i]);
        n = f > n ? f : n;
    }
    return n;
}

float *rlxc_pipeline_extra(const rlxc_pipeline *p, int T) {
    return p->s.act + p->rope_floats + max_floats_per_token(p) * T;
}

/* Room for `need` elements of `size` bytes in *slot, whose capacity is *cap elements: when it is
 * short, *slot is replaced by a new block, the new pointer published before the old is freed, so
 * a fork() from another thread at any point leaves the child valid pointers (a call in the child
 * sees at worst a smaller capacity, zeroed first and set after, and grows again). The fences keep
 * the compiler from reordering those stores. -1 when memory runs out. */
static int grow(void **slot, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    *cap = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    void *fresh = malloc(need * size), *old = *slot;
    if (!fresh) return -1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *slot = fresh;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    free(old);
    *cap = need;
    return 0;
}

/* The widest input a product of layer l takes: hidden, heads x head_dim, the FFN or the PLE. */
static size_t widest_input(const rlxc_layer *l) {
    const size_t widths[] = {(size_t)l->hidden_size, (size_t)l->num_q_heads * l->head_dim,
                             (size_t)l->intermediate_size, (size_t)l->ple_dim,
                             (size_t)(l->num_experts ? l->expert_intermediate_size : 0)};
    size_t most = 0;
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) most = widths[k] > most ? widths[k] : most;
    return most;
}

/* Queries an attention tile aims at: enough to reuse each block of K/V from cache, few enough
 * that their scores and states stay in L2. */
#define TILE_QUERIES 32

/* Tokens per attention tile of a layer with GQA groups of `group` heads. */
static int tile_tokens(int group) { return group >= TILE_QUERIES ? 1 : TILE_QUERIES / group; }

/* Each thread's attention scratch: a tile's (or a tapped head's K/V row as floats). */
static size_t scores_floats(const rlxc_pipeline *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const int group = l->num_q_heads / l->num_kv_heads;
        const size_t f = rlxc_attn_scratch_floats(tile_tokens(group) * group, l->head_dim);
        n = f > n ? f : n;
        n = (size_t)l->head_dim > n ? (size_t)l->head_dim : n;
    }
    return n;
}

/* The block states of a call of T tokens whose attention the team splits by blocks of keys
 * (a decode or a short call on several threads): every query's state of every block. */
static size_t states_floats(const rlxc_pipeline *p, int T, int nth) {
    size_t n = 0;
    for (int i = 0; nth > 1 && i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        if (T > tile_tokens(l->num_q_heads / l->num_kv_heads)) continue;
        const size_t blocks = (size_t)p->max_seq / rlxc_attn_block_keys(l->sliding_window) + 2;
        const size_t f = blocks * rlxc_attn_state_floats(T * l->num_q_heads, l->head_dim);
        n = f > n ? f : n;
    }
    return n;
}

/* Grow scratch to hold T tokens of the largest layer (plus extra_floats per token) on n_threads. */
static int ensure_scratch(rlxc_pipeline *p, int T, size_t extra_floats, int n_threads, char *err) {
    rlxc_scratch *s = &p->s;
    const int nth = n_threads > 1 ? n_threads : 1;
    size_t max_in = 0, need_xq = 0, need_moe = 0, need_moe_idx = 0;
    int rope = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        rope = l->rotary_dim / 2 > rope ? l->rotary_dim / 2 : rope;
        max_in = widest_input(l) > max_in ? widest_input(l) : max_in;
        size_t f, n; /* the experts' buffers, and their inputs: a row per token and chosen expert */
        rlxc_moe_scratch(l, T, &f, &n);
        need_moe = f > need_moe ? f : need_moe;
        need_moe_idx = n > need_moe_idx ? n : need_moe_idx;
        const size_t xq = f ? rlxc_xin_scratch_bytes((int)widest_input(l), T * l->num_experts_used, nth) : 0;
        need_xq = xq > need_xq ? xq : need_xq;
    }
    const size_t need = (max_floats_per_token(p) + extra_floats) * (size_t)T + rope;
    const size_t xq = rlxc_xin_scratch_bytes((int)max_in, T, nth);
    need_xq = xq > need_xq ? xq : need_xq;
    const size_t dq_stride = rlxc_dq_scratch_floats((int)max_in, T, p->act);
    if (grow((void **)&s->act, &s->cap_floats, need, sizeof(float)) || grow(&s->xq, &s->cap_xq, need_xq, 1) ||
        grow((void **)&s->dq, &s->cap_dq, dq_stride * nth, sizeof(float)))
        FAIL("out of memory for scratch of %d tokens", T);
    p->dq_stride = dq_stride;
    p->rope_floats = rope;
    p->scores_stride = scores_floats(p);
    if (grow((void **)&s->scores, &s->cap_scores, (size_t)nth * p->scores_stride, sizeof(float)) ||
        grow((void **)&s->states, &s->cap_states, states_floats(p, T, nth), sizeof(float)))
        FAIL("out of memory for attention scratch");
    if (grow((void **)&s->moe, &s->cap_moe, need_moe, sizeof(float)) ||
        grow((void **)&s->moe_idx, &s->cap_moe_idx, need_moe_idx, sizeof(int)))
        FAIL("out of memory for the experts of %d tokens", T);
    if (grow((void **)&s->rows, &s->cap_rows, (size_t)nth * RLXC_OWN_ROWS * p->layers[0]->hidden_size, sizeof(float)))
        FAIL("out of memory for scratch of %d threads", nth);
    return 0;
}

/* Kernels count elements in int: T times any per-token width is at most RLXC_MAX_COUNT. */
static int check_call_size(const rlxc_pipeline *p, int T, char *err) {
    for (int i = 0; i < p->n_layers; i++) {
        const rlxc_layer *l = p->layers[i];
        const size_t rows = (size_t)T * (l->num_experts ? l->num_experts_used : 1); /* the experts' rows */
        if (rows * widest_input(l) > RLXC_MAX_COUNT || (size_t)T * l->num_experts > RLXC_MAX_COUNT)
            FAIL("%d tokens of layer %d's width %zu exceed what one call can hold: split the prefill", T, i,
                 widest_input(l));
    }
    return 0;
}

/* Room for a tapped attn_probs stage: T queries of the most heads over every key up to n_past + T. */
static int ensure_probs(rlxc_pipeline *p, int T, char *err) {
    size_t need = 0;
    const size_t keys = (size_t)(p->n_past + T < p->max_seq ? p->n_past + T : p->max_seq);
    for (int i = 0; i < p->n_layers; i++)
        if (rlxc_tapped(p, i, RLXC_STAGE_ATTN_PROBS)) {
            const size_t n = (size_t)T * p->layers[i]->num_q_heads * keys;
            if (n > RLXC_MAX_COUNT) FAIL("attention weights of %d tokens over %zu keys exceed what one call can hold", T, keys);
            need = n > need ? n : need;
        }
    if (grow((void **)&p->s.probs, &p->s.cap_probs, need, sizeof(float))) FAIL("out of memory for attention weights");
    return 0;
}

int rlxc_pipeline_begin(rlxc_pipeline *p, int T, size_t extra_floats, int n_threads, char *err) {
    if (rlxc_kv_refresh(p, err) || validate(p, err) || check_call_size(p, T, err) ||
        ensure_scratch(p, T, extra_floats, n_threads, err) || ensure_probs(p, T, err))
        return -1;
    p->tap_failed = 0;
    rlxc_kv_sync(p);
    if (p->act == RLXC_ACT_Q8)
        for (int i = 0; i < p->n_layers; i++)
            for (int s = 0; s < RLXC_W_COUNT; s++)
                if (rlxc_wslot_is_matrix((rlxc_wslot)s) && rlxc_moe_packable(p->layers[i], (rlxc_wslot)s))
                    rlxc_weight_pack(&p->layers[i]->w[s], 1);
    return 0;
}

static float rope_inv_freq(const rlxc_layer *l, int k) {
    const double denom = l->rope_layout == RLXC_ROPE_PROPORTIONAL ? l->head_dim : l->rotary_dim;
    const float *factors = l->w[RLXC_W_ROPE_FREQ_FACTORS].data;
    double f = pow((double)l->rope_base, -2.0 * k / denom);
    if (factors) f /= factors[k];
    return (float)f;
}

static void rope_angle(const rlxc_layer *l, float inv, int pos, float *cs, float *sn) {
    const float angle = (float)pos * inv;
    *cs = (float)cos((double)angle) * l->rope_attn_factor;
    *sn = (float)sin((double)angle) * l->rope_attn_factor;
}

void rlxc_rope_inv_freq(const rlxc_layer *l, float *inv) {
    for (int k = 0; k < l->rotary_dim / 2; k++) inv[k] = rope_inv_freq(l, k);
}

void rlxc_rope_angles(const rlxc_layer *l, const float *inv, int pos, float *cs, float *sn) {
    for (int k = 0; k < l->rotary_dim / 2; k++) rope_angle(l, inv[k], pos, cs + k, sn + k);
}

/* The layer's norm of this thread's rows of x[T][n] into y. */
static void norm_row(const rlxc_layer *l, float *y, const float *x, int n, const rlxc_weight *w, const rlxc_weight *b) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    if (l->norm_type == RLXC_LAYERNORM) kn->layernorm(y, x, w->data, b ? b->data : NULL, l->eps, n);
    else kn->rmsnorm(y, x, w ? w->data : NULL, l->norm_offset, l->eps, n);
}

/* Per-head RMSNorm (q/k norms, v-norm): always RMS, whatever the main norm type. */
static void head_norm(const rlxc_layer *l, float *x, const rlxc_weight *w) {
    rlxc_kernels_active()->rmsnorm(x, x, w ? w->data : NULL, l->qk_norm_offset, l->eps, l->head_dim);
}

void rlxc_activate(const rlxc_layer *l, float *x, size_t n) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    if (l->activation == RLXC_SILU) kn->silu(x, x, (int)n);
    else kn->gelu_tanh(x, x, (int)n);
}

/* x prepared for the products' weights (at most 4); returns this thread's dq. */
static float *prepare(rlxc_pipeline *p, const rlxc_team *tm, rlxc_xin *in, const float *x, int T, int K,
                      const rlxc_product *ps, int n) {
    const rlxc_weight *ws[4];
    for (int i = 0; i < n; i++) ws[i] = ps[i].w;
    rlxc_xin_prepare(tm, in, x, T, K, ws, n, p->act, p->s.xq);
    return p->s.dq + (size_t)tm->ith * p->dq_stride;
}

void rlxc_products(rlxc_pipeline *p, const rlxc_team *tm, const float *x, int T, int K, const rlxc_product *ps,
                   int n) {
    rlxc_xin in;
    float *dq = prepare(p, tm, &in, x, T, K, ps, n);
    rlxc_linear_team(tm, &in, ps, n, dq);
}

void rlxc_products_alike(rlxc_pipeline *p, const rlxc_team *tm, const float *x, int T, int K,
                         const rlxc_product *ps, int n, rlxc_rows_done done, void *ctx) {
    rlxc_xin in;
    float *dq = prepare(p, tm, &in, x, T, K, ps, n);
    rlxc_linear_alike(tm, &in, ps, n, dq, done, ctx);
}

/* K/V head item j (token t at pos0 + t, or its batch position, head h) into layer li's cache. */
static void store_kv(rlxc_pipeline *p, int li, const bufs *b, size_t j, int pos0, int t, int h) {
    const int hd = p->layers[li]->head_dim;
    rlxc_kv_store(rlxc_kv_of(p, li, t), h, rlxc_pos_of(p, pos0, t), b->k + j * hd, b->v + j * hd);
}

/* Per-head work after the Q/K/V products, item by item: the T * nq query heads (q-norm, RoPE),
 * then for a layer with its own cache the T * nkv key/value heads (V from K, k-norm, v-norm,
 * RoPE, stored at their positions). */
static void qkv_heads(rlxc_pipeline *p, const rlxc_team *tm, int li, const bufs *b, int T, int pos0) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_layer *l = p->layers[li];
    const rlxc_weight *w = l->w;
    const int hd = l->head_dim, nq = l->num_q_heads, nkv = l->num_kv_heads, np = l->rotary_dim / 2;
    const int half = l->rope_layout == RLXC_ROPE_PROPORTIONAL ? hd / 2 : np, own = l->kv_shared_from < 0;
    const size_t nqi = (size_t)T * nq, items = nqi + (own ? (size_t)T * nkv : 0);
    size_t a, e;
    rlxc_team_share(tm, items, 1, &a, &e);
    for (size_t it = a; it < e; it++) {
        if (it < nqi) {
            const size_t t = it / nq;
            float *q = b->q + it * hd;
            if (l->has_qk_norm) head_norm(l, q, &w[RLXC_W_Q_NORM]);
            if (np) kn->rope(q, 1, hd, b->cs + t * np, b->sn + t * np, np, half);
            continue;
        }
        const size_t j = it - nqi, t = j / nkv, h = j % nkv;
        float *k = b->k + j * hd, *v = b->v + j * hd;
        if (l->v_from_k) memcpy(v, k, hd * sizeof(float));
        if (l->has_qk_norm) head_norm(l, k, &w[RLXC_W_K_NORM]);
        if (l->has_v_norm) head_norm(l, v, NULL);
        if (np) kn->rope(k, 1, hd, b->cs + t * np, b->sn + t * np, np, half);
        store_kv(p, li, b, j, pos0, (int)t, (int)h);
    }
}

/* After a tap of k or v: the team stores the K/V heads again. */
static void restore_kv(rlxc_pipeline *p, const rlxc_team *tm, int li, const bufs *b, int T, int pos0) {
    const int nkv = p->layers[li]->num_kv_heads;
    size_t a, e;
    rlxc_team_share(tm, (size_t)T * nkv, 1, &a, &e);
    for (size_t j = a; j < e; j++) store_kv(p, li, b, j, pos0, (int)(j / nkv), (int)(j % nkv));
}

/* The attention weights of one query over the n keys from row `row` of kv head h into pr[0..n)
 * (a tapped attn_probs stage; the kernels keep theirs to themselves); tmp: head_dim floats. */
static void head_probs(float *pr, const float *q, const rlxc_kv_cache *c, int h, size_t row, int n, float scale,
                       float softcap, float *tmp) {
    float max = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *k = rlxc_kv_row_f32(c, c->k, h, row + j, tmp);
        float s = 0.0f;
        for (int d = 0; d < c->dim; d++) s += q[d] * k[d];
        s *= scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        pr[j] = s;
        max = s > max ? s : max;
    }
    for (int j = 0; j < n; j++) sum += pr[j] = expf(pr[j] - max);
    for (int j = 0; j < n; j++) pr[j] /= sum;
}

/* Tokens per attention tile of layer li in this call: one in a batch (each its own sequence). */
static int tile_tokens_of(const rlxc_pipeline *p, const rlxc_layer *l) {
    return p->batch_seq ? 1 : tile_tokens(l->num_q_heads / l->num_kv_heads);
}

/* Attention tile `it` of a call: (tokens of tile_tokens_of, kv head, part of its group). */
static rlxc_attn_tile make_tile(const rlxc_pipeline *p, int li, const bufs *b, int T, int pos0, int split, size_t it) {
    const rlxc_layer *l = p->layers[li];
    const int nkv = l->num_kv_heads, hd = l->head_dim, nq = l->num_q_heads, group = nq / nkv, gh = group / split;
    const int tt = tile_tokens_of(p, l), t0 = (int)(it / ((size_t)nkv * split)) * tt;
    const int kvh = (int)(it / split % nkv), h0 = kvh * group + (int)(it % split) * gh;
    const size_t at = ((size_t)t0 * nq + h0) * hd;
    return (rlxc_attn_tile){.c = rlxc_kv_of(p, li, t0), .kvh = kvh, .window = l->sliding_window, .q = b->q + at,
                            .out = b->att + at, .q_stride = (size_t)nq * hd, .T = T - t0 < tt ? T - t0 : tt, .G = gh,
                            .pos0 = rlxc_pos_of(p, pos0, t0), .scale = l->attn_scale, .softcap = l->attn_softcap};
}

/* Output r of a tile times its head's head_scale (if set). */
static void scale_head(const rlxc_layer *l, const rlxc_attn_tile *t, const bufs *b, int r) {
    const float *hs = l->w[RLXC_W_HEAD_SCALE].data;
    if (!hs) return;
    const int hd = l->head_dim, h = (int)((t->out - b->att) / hd % l->num_q_heads) + r % t->G;
    rlxc_kernels_active()->scale(t->out + (r / t->G) * t->q_stride + (size_t)(r % t->G) * hd, hs[h], hd);
}

/* Each query (token t, head h) over its visible keys: the last W of 0..pos, in tiles of several
 * tokens and the heads of a GQA group (csrc/attention.c), a group split in parts where that gives
 * every thread work. When a call's tokens fit one tile (a decode) and the keys span several
 * blocks, the team shares the blocks instead and merges their states after a barrier: the same
 * bits as one thread. A tapped
 * attn_probs stage goes head by head in two passes: weights, the tap, then the weighted sum of V
 * (weights a tap puts outside the visible keys are not read). */
static void attention(rlxc_pipeline *p, const rlxc_team *tm, int li, const bufs *b, int T, int pos0) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_layer *l = p->layers[li];
    const int hd = l->head_dim, nq = l->num_q_heads, group = nq / l->num_kv_heads, W = l->sliding_window;
    const int probs = rlxc_tapped(p, li, RLXC_STAGE_ATTN_PROBS), keys = pos0 + T;
    const float *head_scale = l->w[RLXC_W_HEAD_SCALE].data;
    float *scores = p->s.scores + (size_t)tm->ith * p->scores_stride;
    size_t a, e;
    if (!probs) {
        const size_t token_tiles = (T + tile_tokens_of(p, l) - 1) / tile_tokens_of(p, l);
        int first = 0, nb = 1, split = 1;
        if (token_tiles == 1 && tm->nth > 1) {
            const rlxc_attn_tile t0 = make_tile(p, li, b, T, pos0, 1, 0);
            nb = rlxc_attn_tile_blocks(&t0, &first);
        }
        if (nb == 1) { /* tiles in turn, interleaved: later tokens of a causal prefill see more keys */
            while (token_tiles * l->num_kv_heads * split < (size_t)tm->nth && group % (2 * split) == 0) split *= 2;
            const size_t tiles = token_tiles * l->num_kv_heads * split;
            for (size_t it = tm->ith; it < tiles; it += tm->nth) {
                const rlxc_attn_tile t = make_tile(p, li, b, T, pos0, split, it);
                rlxc_attn_tile_run(&t, scores);
                for (int r = 0; r < t.T * t.G; r++) scale_head(l, &t, b, r);
            }
            return;
        }
        const size_t tiles = l->num_kv_heads;
        const int Q = T * group;
        /* one tile per kv head (a decode): their blocks shared, then the states merged query by query */
        const size_t sf = rlxc_attn_state_floats(Q, hd);
        size_t prepared = (size_t)-1;
        rlxc_team_share(tm, tiles * nb, 1, &a, &e);
        for (size_t it = a; it < e; it++) {
            const rlxc_attn_tile t = make_tile(p, li, b, T, pos0, 1, it / nb);
            if (it / nb != prepared) rlxc_attn_tile_prepare(&t, scores), prepared = it / nb;
            rlxc_attn_tile_block(&t, first + (int)(it % nb), scores, p->s.states + it * sf);
        }
        rlxc_team_sync(tm);
        prepared = (size_t)-1;
        rlxc_team_share(tm, tiles * Q, 1, &a, &e);
        for (size_t it = a; it < e; it++) {
            const size_t ti = it / Q;
            const int r = (int)(it % Q);
            const rlxc_attn_tile t = make_tile(p, li, b, T, pos0, 1, ti);
            if (ti != prepared) rlxc_attn_tile_prepare(&t, scores), prepared = ti;
            for (int bi = 0; bi < nb; bi++) rlxc_attn_tile_merge(&t, p->s.states + (ti * nb + bi) * sf, scores, r);
            rlxc_attn_tile_end(&t, scores, r);
            scale_head(l, &t, b, r);
        }
        return;
    }
    const rlxc_kv_cache *c = rlxc_kv_of(p, li, 0); /* taps: never in a batch */
    rlxc_team_share(tm, (size_t)T * nq, 1, &a, &e);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t it = a; it < e; it++) {
            const int t = (int)(it / nq), h = (int)(it % nq), kvh = h / group, pos = pos0 + t;
            const int start = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0, n = pos - start + 1;
            const size_t row = rlxc_kv_row(c, start);
            float *out = b->att + it * hd, *pr = p->s.probs + it * keys;
            if (pass == 0) {
                memset(pr, 0, (size_t)keys * sizeof(float));
                head_probs(pr + start, b->q + it * hd, c, kvh, row, n, l->attn_scale, l->attn_softcap, scores);
                continue;
            }
            memset(out, 0, hd * sizeof(float));
            for (int j = 0; j < n; j++) {
                const float *v = rlxc_kv_row_f32(c, c->v, kvh, row + j, scores);
                for (int d = 0; d < hd; d++) out[d] += pr[start + j] * v[d];
            }
            if (head_scale) kn->scale(out, head_scale[h], hd);
        }
        if (pass == 0) rlxc_tap(p, tm, li, RLXC_STAGE_ATTN_PROBS, p->s.probs, T, pos0, (size_t)nq * keys);
    }
}

static void steer(float *x, const rlxc_weight *v, float scale, int n) {
    if (!v->data) return;
    for (int i = 0; i < n; i++) x[i] += scale * ((const float *)v->data)[i];
}

/* This thread's tokens of the FFN output b->o: the dense FFN's (if any; a Qwen2-MoE shared expert
 * gated by sigmoid(shared_gate . mlp_in)) plus the experts' moe, each after its optional norm. */
static void mix_experts(const rlxc_layer *l, const bufs *b, float *moe, size_t t0, size_t t1) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_weight *w = l->w;
    const int H = l->hidden_size;
    const float *gate = w[RLXC_W_SHARED_GATE].data;
    for (size_t t = t0; t < t1; t++) {
        float *o = b->o + t * H, *m = moe + t * H;
        if (w[RLXC_W_MOE_POST_NORM].data) norm_row(l, m, m, H, &w[RLXC_W_MOE_POST_NORM], NULL);
        if (l->intermediate_size == 0) {
            memcpy(o, m, (size_t)H * sizeof(float));
            continue;
        }
        if (gate) {
            float dot = 0.0f;
            for (int d = 0; d < H; d++) dot += gate[d] * b->xa[t * H + d];
            kn->scale(o, 1.0f / (1.0f + expf(-dot)), H);
        }
        if (w[RLXC_W_DENSE_POST_NORM].data) norm_row(l, o, o, H, &w[RLXC_W_DENSE_POST_NORM], NULL);
        kn->add(o, m, H);
    }
}

void rlxc_ffn_activate(void *ctx, int r0, int r1) {
    const rlxc_ffn_act *c = ctx;
    const rlxc_kernels *kn = rlxc_kernels_active();
    for (int t = 0; t < c->T; t++) {
        float *f = c->f + (size_t)t * c->I + r0;
        rlxc_activate(c->l, f, (size_t)(r1 - r0));
        if (c->up) kn->mul(f, f, c->up + (size_t)t * c->I + r0, r1 - r0);
        if (c->g) kn->mul(f, f, c->g + (size_t)t * c->g_stride + r0, r1 - r0);
        if (c->neuron_scale) kn->mul(f, f, c->neuron_scale + r0, r1 - r0);
    }
}

/* The residual stream as one thread updates it in a layer: rows [t0, t1) of x[T][H] and of their
 * norms xa; held: every thread holds the one token's row (x, xa its own), so no barrier waits for
 * another thread's update or norm. tmp: the thread's own row for a normed output. */
typedef struct {
    float *x, *xa, *tmp;
    size_t t0, t1;
    int held;
} resid;

/* One layer over x[T][H] in place, the whole team; ple: this layer's slice of the first token's
 * inputs, ple_stride floats per token; own: this thread's RLXC_OWN_ROWS rows, the first holding
 * the token's residual row where `held`. */
static void layer_forward(rlxc_pipeline *p, const rlxc_team *tm, int li, float *x, const float *ple,
                          size_t ple_stride, int T, int pos0, float *own, int held) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const rlxc_layer *l = p->layers[li];
    const rlxc_weight *w = l->w;
    const int H = l->hidden_size, np = l->rotary_dim / 2, kv_own = l->kv_shared_from < 0;
    const size_t Q = (size_t)l->num_q_heads * l->head_dim, I = l->intermediate_size;
    const bufs b = layout(p, l, T);
    size_t a, e;
    resid r = {own, own + H, own + 2 * (size_t)H, 0, 1, 1};
    if (!held) { /* the shared rows, this thread's tokens in the per-token stages */
        r = (resid){x, b.xa, own + 2 * (size_t)H, 0, 0, 0};
        rlxc_team_share(tm, (size_t)T, 1, &r.t0, &r.t1);
    }

    /* attention block: input norm and the RoPE frequencies, then Q/K/V and the angles */
    rlxc_team_time(tm, RLXC_TIME_NORM);
    for (size_t t = r.t0; t < r.t1; t++) steer(r.x + t * H, &w[RLXC_W_STEER_PRE], l->steer_scale, H);
    rlxc_tap(p, tm, li, RLXC_STAGE_RESID_PRE, r.x, T, pos0, H);
    for (size_t t = r.t0; t < r.t1; t++)
        norm_row(l, r.xa + t * H, r.x + t * H, H, &w[RLXC_W_ATTN_NORM], l->input_norm_bias ? &w[RLXC_W_ATTN_NORM_B] : NULL);
    rlxc_tap(p, tm, li, RLXC_STAGE_ATTN_IN, r.xa, T, pos0, H);
    rlxc_team_time(tm, RLXC_TIME_HEADS);
    rlxc_team_share(tm, (size_t)np, 1, &a, &e);
    for (size_t k = a; k < e; k++) b.inv[k] = rope_inv_freq(l, (int)k);
    /* the frequencies, and the normed rows for the products below; a thread holding the row
     * normed its own, and with one token the angles below split as the frequencies above did */
    if (!r.held) rlxc_team_sync(tm);
    rlxc_team_share(tm, (size_t)T * np, 1, &a, &e);
    for (size_t it = a; it < e; it++)
        rope_angle(l, b.inv[it % np], rlxc_pos_of(p, pos0, (int)(it / np)), b.cs + it, b.sn + it);
    const int qb = l->qkv_bias;
    rlxc_product qkv[3] = {{b.q, &w[RLXC_W_Q], qb ? &w[RLXC_W_Q_B] : NULL},
                           {b.k, &w[RLXC_W_K], qb ? &w[RLXC_W_K_B] : NULL},
                           {b.v, &w[RLXC_W_V], qb ? &w[RLXC_W_V_B] : NULL}};
    rlxc_team_time(tm, RLXC_TIME_QKV);
    rlxc_products(p, tm, r.xa, T, H, qkv, kv_own ? (l->v_from_k ? 2 : 3) : 1);
    rlxc_team_sync(tm);
    rlxc_team_time(tm, RLXC_TIME_HEADS);
    qkv_heads(p, tm, li, &b, T, pos0);
    rlxc_team_sync(tm);
    rlxc_tap(p, tm, li, RLXC_STAGE_Q, b.q, T, pos0, Q);
    if (kv_own) {
        const size_t KV = (size_t)l->num_kv_heads * l->head_dim;
        const int kt = rlxc_tap(p, tm, li, RLXC_STAGE_K, b.k, T, pos0, KV);
        if (rlxc_tap(p, tm, li, RLXC_STAGE_V, b.v, T, pos0, KV) || kt) {
            restore_kv(p, tm, li, &b, T, pos0);
            rlxc_team_sync(tm);
        }
    }
    rlxc_team_time(tm, RLXC_TIME_ATTENTION);
    attention(p, tm, li, &b, T, pos0);
    rlxc_team_sync(tm);
    rlxc_tap(p, tm, li, RLXC_STAGE_ATTN_Z, b.att, T, pos0, Q);
    rlxc_team_time(tm, RLXC_TIME_O);
    rlxc_products(p, tm, b.att, T, (int)Q, &(rlxc_product){b.o, &w[RLXC_W_O], l->o_bias ? &w[RLXC_W_O_B] : NULL}, 1);
    rlxc_team_sync(tm);
    rlxc_tap(p, tm, li, RLXC_STAGE_ATTN_OUT, b.o, T, pos0, H);
    rlxc_team_time(tm, RLXC_TIME_NORM);
    for (size_t t = r.t0; t < r.t1; t++) {
        const float *o = b.o + t * H;
        float *xt = r.x + t * H;
        if (l->sandwich_norm) norm_row(l, r.tmp, o, H, &w[RLXC_W_ATTN_POST_NORM], NULL), o = r.tmp;
        kn->add(xt, o, H);
        steer(xt, &w[RLXC_W_STEER_MID], l->steer_scale, H);
    }
    rlxc_tap(p, tm, li, RLXC_STAGE_RESID_MID, r.x, T, pos0, H);
    for (size_t t = r.t0; t < r.t1; t++)
        norm_row(l, r.xa + t * H, r.x + t * H, H, &w[RLXC_W_FFN_NORM],
                 l->post_attn_norm_bias ? &w[RLXC_W_FFN_NORM_B] : NULL);
    if (!r.held) rlxc_team_sync(tm);
    rlxc_tap(p, tm, li, RLXC_STAGE_MLP_IN, r.xa, T, pos0, H);

    /* feed-forward block: gate and up split alike, so each thread activates its own rows */
    if (I > 0) {
        const int gated = l->ffn_type == RLXC_GATED, ub = l->ffn_up_bias;
        /* gated: f1 = gate, f2 = up; standard: f1 = up */
        const rlxc_product ffn[2] = {{b.f1, &w[gated ? RLXC_W_GATE : RLXC_W_UP],
                                      ub ? &w[gated ? RLXC_W_GATE_B : RLXC_W_UP_B] : NULL},
                                     {b.f2, &w[RLXC_W_UP], ub ? &w[RLXC_W_UP_B] : NULL}};
        rlxc_ffn_act act = {l, b.f1, gated ? b.f2 : NULL, w[RLXC_W_NEURON_SCALE].data, NULL, 0, I, T};
        rlxc_team_time(tm, RLXC_TIME_FFN_UP);
        rlxc_products_alike(p, tm, r.xa, T, H, ffn, gated ? 2 : 1, rlxc_ffn_activate, &act);
        rlxc_team_sync(tm);
        rlxc_tap(p, tm, li, RLXC_STAGE_MLP_ACT, b.f1, T, pos0, I);
        rlxc_team_time(tm, RLXC_TIME_FFN_DOWN);
        rlxc_products(p, tm, b.f1, T, (int)I,
                      &(rlxc_product){b.o, &w[RLXC_W_DOWN], l->ffn_down_bias ? &w[RLXC_W_DOWN_B] : NULL}, 1);
    }
    if (l->num_experts) rlxc_team_time(tm, RLXC_TIME_EXPERTS);
    float *moe_out = l->num_experts ? rlxc_moe(p, tm, li, r.x, r.xa, T) : NULL; /* never held */
    rlxc_team_sync(tm);
    if (moe_out) mix_experts(l, &b, moe_out, r.t0, r.t1);
    rlxc_tap(p, tm, li, RLXC_STAGE_MLP_OUT, b.o, T, pos0, H);
    rlxc_team_time(tm, RLXC_TIME_NORM);
    for (size_t t = r.t0; t < r.t1; t++) {
        const float *o = b.o + t * H;
        if (l->sandwich_norm) norm_row(l, r.tmp, o, H, &w[RLXC_W_FFN_POST_NORM], NULL), o = r.tmp;
        kn->add(r.x + t * H, o, H);
    }

    /* Gemma 4 per-layer input: y += RMSNorm(proj(act(gate y) * ple)), RMS whatever norm_type */
    if (l->ple_dim > 0) {
        const int P = l->ple_dim;
        if (!r.held) rlxc_team_sync(tm);
        rlxc_team_time(tm, RLXC_TIME_PLE);
        rlxc_ffn_act act = {l, b.f1, NULL, NULL, ple, ple_stride, (size_t)P, T};
        rlxc_products_alike(p, tm, r.x, T, H, &(rlxc_product){b.f1, &w[RLXC_W_PLE_GATE], NULL}, 1, rlxc_ffn_activate, &act);
        rlxc_team_sync(tm);
        rlxc_products(p, tm, b.f1, T, P, &(rlxc_product){b.o, &w[RLXC_W_PLE_PROJ], NULL}, 1);
        rlxc_team_sync(tm);
        for (size_t t = r.t0; t < r.t1; t++) {
            kn->rmsnorm(r.tmp, b.o + t * H, w[RLXC_W_PLE_NORM].data, l->norm_offset, l->eps, H);
            kn->add(r.x + t * H, r.tmp, H);
        }
        rlxc_team_time(tm, RLXC_TIME_NORM);
    }
    for (size_t t = r.t0; t < r.t1; t++) {
        if (l->layer_scalar != 1.0f) kn->scale(r.x + t * H, l->layer_scalar, H);
        steer(r.x + t * H, &w[RLXC_W_STEER_POST], l->steer_scale, H);
    }
    rlxc_tap(p, tm, li, RLXC_STAGE_RESID_POST, r.x, T, pos0, H);
}

/* Whether layer li's taps read or edit its residual row or that row normed (the shared ones). */
static int taps_resid(const rlxc_pipeline *p, int li) {
    static const rlxc_stage resid[] = {RLXC_STAGE_RESID_PRE, RLXC_STAGE_ATTN_IN, RLXC_STAGE_RESID_MID,
                                       RLXC_STAGE_MLP_IN, RLXC_STAGE_RESID_POST};
    for (size_t k = 0; k < sizeof resid / sizeof *resid; k++)
        if (rlxc_tapped(p, li, resid[k])) return 1;
    return 0;
}

void rlxc_pipeline_layers(rlxc_pipeline *p, const rlxc_team *tm, float *x, const float *ple, int T, int pos0,
                          float *layer_out, int layer_out_T) {
    const size_t H = p->layers[0]->hidden_size, ple_stride = rlxc_pipeline_ple_stride(p);
    size_t ple_off = 0, t0, t1;
    rlxc_team_share(tm, (size_t)T, 1, &t0, &t1);
    float *own = p->s.rows + (size_t)tm->ith * RLXC_OWN_ROWS * H;
    /* A decode on several threads: every thread holds the token's residual row and updates and
     * norms it itself (the same operations in the same order: the same bits), which saves the two
     * barriers a layer that would wait for one thread's norm. Layers with experts keep the shared
     * row, which their routing reads by token, and so do layers whose taps read or edit it. */
    int held = 0;
    for (int i = 0; i < p->n_layers; i++) {
        const int hold = T == 1 && tm->nth > 1 && !p->layers[i]->num_experts && !taps_resid(p, i);
        if (hold && !held) { /* x's row is the embedding's, or a layer's that did not hold it */
            rlxc_team_sync(tm);
            memcpy(own, x, H * sizeof(float));
        }
        layer_forward(p, tm, i, x, ple ? ple + ple_off : NULL, ple_stride, T, pos0, own, hold);
        if (hold && t1 > t0) memcpy(x, own, H * sizeof(float)); /* the token's owner keeps x current */
        held = hold;
        ple_off += p->layers[i]->ple_dim;
        if (layer_out)
            memcpy(layer_out + ((size_t)i * layer_out_T + t0) * H, x + t0 * H, (t1 - t0) * H * sizeof(float));
    }
}

typedef struct {
    rlxc_pipeline *p;
    float *x;
    const float *ple;
    int T, pos0;
    float *layer_out;
    int layer_out_T;
} run_args;

static void run_team(const rlxc_team *tm, void *arg) {
    const run_args *r = arg;
    rlxc_pipeline_layers(r->p, tm, r->x, r->ple, r->T, r->pos0, r->layer_out, r->layer_out_T);
}

/* T tokens at positions n_past.. in passes of at most ubatch, each appended to the cache before
 * the next; a failed pass leaves n_past as it was. */
static int run(rlxc_pipeline *p, const float *x, const float *ple, int T, float *out, float *layer_out, char *err) {
    const size_t H = p->layers[0]->hidden_size, ple_stride = rlxc_pipeline_ple_stride(p);
    if (ple_stride > 0 && !ple) FAIL("layers have per-layer inputs (ple_dim > 0): pass ple of %zu floats per token", ple_stride);
    const int n0 = p->n_past;
    for (int t = 0; t < T; t += p->ubatch) {
        const int n = T - t < p->ubatch ? T - t : p->ubatch;
        if (rlxc_pipeline_begin(p, n, 0, p->n_threads, err)) break;
        if (out != x) memmove(out + t * H, x + t * H, (size_t)n * H * sizeof(float));
        run_args r = {p, out + t * H, ple ? ple + t * ple_stride : NULL, n, p->n_past,
                      layer_out ? layer_out + t * H : NULL, T};
        rlxc_team_run(p->n_threads, run_team, &r);
        if (rlxc_taps_failed(p, err)) break;
        p->n_past += n;
    }
    if (p->n_past == n0 + T) return 0;
    p->n_past = n0;
    return -1;
}

int rlxc_pipeline_prefill(rlxc_pipeline *p, const float *x, const float *ple, int T, float *out, float *layer_out,
                          char *err) {
    if (T <= 0) FAIL("prefill needs at least one token, got T=%d", T);
    if (p->n_past + T > p->max_seq)
        FAIL("prefill of %d tokens at position %d would exceed max_seq=%d", T, p->n_past, p->max_seq);
    return run(p, x, ple, T, out, layer_out, err);
}

int rlxc_pipeline_seek(rlxc_pipeline *p, int pos, int *n_past, char *err) {
    if (pos < 0 || pos >= p->max_seq) FAIL("pos must be in [0, max_seq=%d), got %d", p->max_seq, pos);
    if (pos > p->n_past) FAIL("pos (%d) is past the %d cached tokens: positions must be filled in order", pos, p->n_past);
    if (rlxc_kv_check_rewind(p, pos, err)) return -1;
    *n_past = p->n_past;
    p->n_past = pos;
    return 0;
}

int rlxc_pipeline_decode(rlxc_pipeline *p, const float *x, const float *ple, int pos, float *out, float *layer_out,
                         char *err) {
    int n_past;
    if (rlxc_pipeline_seek(p, pos, &n_past, err)) return -1;
    if (!run(p, x, ple, 1, out, layer_out, err)) return 0;
    p->n_past = n_past;
    return -1;
}
