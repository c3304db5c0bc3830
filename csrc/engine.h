/* Internals shared by the engine's files (linear.c, pipeline.c, model.c): the team-split
 * products and the pipeline's state. Not part of the public API (rlxc.h). */
#ifndef RLXC_ENGINE_H
#define RLXC_ENGINE_H

#include "kernels.h"
#include "rlxc.h"
#include "team.h"

/* Distinct activation formats one stage may need: Q8_0 (q4_0, q5_0, q8_0) and Q8_K (K-quants). */
#define RLXC_X_FORMATS 2

/* One stage's input x[T][K]: the float rows and, with RLXC_ACT_Q8, their quantized copies, one
 * per activation format the stage's weights take. Every thread builds the same descriptor. */
typedef struct {
    const float *x;
    int T, K;
    rlxc_act act;
    int n_fmt;
    void (*fmt[RLXC_X_FORMATS])(void *y, const float *x, int K);
    int x_block[RLXC_X_FORMATS];
    size_t block_bytes[RLXC_X_FORMATS], row_bytes[RLXC_X_FORMATS];
    void *q[RLXC_X_FORMATS];
    /* For T > 1, the Q8_0 copy's block terms, computed once for all the stage's GEMMs (else NULLs). */
    rlxc_q8_terms q8_terms;
    const void *q8; /* the Q8_0 copy they belong to */
} rlxc_xin;

/* in's Q8_0 terms from token t on (rows of the copy are contiguous, K / 32 blocks each). */
static inline rlxc_q8_terms rlxc_xin_q8_terms_from(const rlxc_xin *in, int t) {
    const size_t skip = (size_t)t * (size_t)(in->K / RLXC_QK);
    return (rlxc_q8_terms){in->q8_terms.sum + skip, in->q8_terms.d + skip};
}

/* y[T][w->rows] = x W^T + bias (bias NULL or unset: none). */
typedef struct {
    float *y;
    const rlxc_weight *w, *bias;
} rlxc_product;

/* Bytes of the quantized copies of T rows of K (every format slot and, for T > 1, the Q8_0 copy's
 * terms; for one token, a copy per thread). */
size_t rlxc_xin_scratch_bytes(int K, int T, int n_threads);
/* Floats of one thread's dequantized rows (RLXC_ACT_F32 with T > 1; else 0). */
size_t rlxc_dq_scratch_floats(int K, int T, rlxc_act act);
/* Whole team: quantize x for the weights ws[0..n) into scratch (rlxc_xin_scratch_bytes): T > 1
 * split between threads and ending with a barrier, one token by each thread for itself. */
void rlxc_xin_prepare(const rlxc_team *tm, rlxc_xin *in, const float *x, int T, int K,
                      const rlxc_weight *const *ws, int n, rlxc_act act, void *scratch);
/* This thread's part of several products of one input, their rows taken as one range in chunks
 * (rlxc_team_next); dq: this thread's rlxc_dq_scratch_floats. No barrier. */
void rlxc_linear_team(const rlxc_team *tm, const rlxc_xin *in, const rlxc_product *ps, int n, float *dq);
/* What follows products split alike on the rows [r0, r1) of each that this thread just computed
 * (an element-wise op on their outputs, which so needs no barrier). */
typedef void (*rlxc_rows_done)(void *ctx, int r0, int r1);
/* Products with the same number of rows, each cut into the same chunks: this thread computes
 * a chunk of every one, then done(ctx, r0, r1) on it. No barrier. */
void rlxc_linear_alike(const rlxc_team *tm, const rlxc_xin *in, const rlxc_product *ps, int n, float *dq,
                       rlxc_rows_done done, void *ctx);

/* One layer's K/V (kvcache.c): [heads][rows][dim] of type; position p in cell p % cells, and a
 * ring (window W > 0: cells < max_seq, rows = cells + W - 1) writes cell c < W - 1 at rows c and
 * c + cells too. */
typedef struct {
    void *k, *v;    /* NULL for layers that read another layer's */
    int heads, dim; /* the shape the cache was allocated for */
    int shared;     /* the layer read another layer's cache when this was allocated */
    rlxc_wtype type;
    int cells, rows, window; /* window 0: a full cache (cells == max_seq) */
} rlxc_kv_cache;

/* Every sequence's caches, under the current settings (-2: out of memory). */
int rlxc_kv_alloc(rlxc_pipeline *p, char *err);
void rlxc_kv_free(rlxc_pipeline *p);
/* Before a call with an empty cache and no views out: rings re-sized where a window changed
 * (nothing is lost), so editing sliding_window needs no reset; K/V shape, sharing and type
 * changes still need one. */
int rlxc_kv_refresh(rlxc_pipeline *p, char *err);
/* The layer's cache (own or shared) fits the layer and the settings now. */
int rlxc_kv_check(const rlxc_pipeline *p, int i, char *err);
/* A decode at pos < n_past needs the window before pos still in every ring. */
int rlxc_kv_check_rewind(const rlxc_pipeline *p, int pos, char *err);
/* Row of position pos; the positions after it follow in the next rows (up to `cells` of them). */
size_t rlxc_kv_row(const rlxc_kv_cache *c, int pos);
void *rlxc_kv_at(const rlxc_kv_cache *c, void *base, int h, size_t row); /* base: c->k or c->v */
void rlxc_kv_store(const rlxc_kv_cache *c, int h, int pos, const float *k, const float *v);
/* Row `row` of head h of base (c->k or c->v) as floats: in place for f32, else converted into tmp[dim]. */
const float *rlxc_kv_row_f32(const rlxc_kv_cache *c, const void *base, int h, size_t row, float *tmp);
/* Before a call: rows edited through views copied to their ring mirrors. */
void rlxc_kv_sync(rlxc_pipeline *p);

/* Attention (attention.c) of a tile: T tokens at positions pos0.. and G query heads of kv head
 * kvh, over the keys each sees (the last `window` up to its own position; 0: all) in cache c.
 * The query of token t, head g is at q + t * q_stride + g * head_dim, its output at the same
 * place in out. The queries are numbered r = t * G + g. */
typedef struct {
    const rlxc_kv_cache *c;
    int kvh, window;
    const float *q;
    float *out;
    size_t q_stride;
    int T, G, pos0;
    float scale, softcap;
} rlxc_attn_tile;

/* Keys per block for a window (0: none). */
int rlxc_attn_block_keys(int window);
/* Floats of one thread's scratch for tiles of `queries` queries of head_dim hd. */
size_t rlxc_attn_scratch_floats(int queries, int hd);
/* Floats of the state of one block (rlxc_attn_tile_block) of `queries` queries. */
size_t rlxc_attn_state_floats(int queries, int hd);
/* Blocks the tile's keys span: *first, and the count returned. */
int rlxc_attn_tile_blocks(const rlxc_attn_tile *t, int *first);
/* The whole tile by one thread. */
void rlxc_attn_tile_run(const rlxc_attn_tile *t, float *scratch);
/* The same in steps the team can share, with the same bits: prepare (each thread, into its
 * scratch), block states (any thread, into state buffers), then per query: merge the states in
 * block order, end (writes the output). */
void rlxc_attn_tile_prepare(const rlxc_attn_tile *t, float *scratch);
void rlxc_attn_tile_block(const rlxc_attn_tile *t, int b, float *scratch, float *state);
void rlxc_attn_tile_merge(const rlxc_attn_tile *t, const float *state, float *scratch, int r);
void rlxc_attn_tile_end(const rlxc_attn_tile *t, float *scratch, int r);

/* Scratch, grown only when a call needs more (more tokens, wider layers, more threads): decode
 * after a prefill of the same model never allocates. */
typedef struct {
    size_t cap_floats, cap_xq, cap_dq; /* cap_xq in bytes */
    float *act;     /* per-token buffers of the widest layer, T tokens (rlxc_pipeline_bufs) */
    void *xq;       /* quantized activations (rlxc_xin_scratch_bytes) */
    float *dq;      /* each thread's dequantized rows */
    float *scores;  /* each thread's attention scratch (attention.c; at least head_dim floats) */
    size_t cap_scores;
    float *states;  /* block states of attention shared by blocks of keys (a decode on several threads) */
    size_t cap_states;
    float *probs;   /* attention weights of a tapped attn_probs stage: [T][num_q_heads][n_keys] */
    size_t cap_probs;
    float *moe;     /* the widest mixture-of-experts layer's buffers (rlxc_moe_scratch) */
    int *moe_idx;
    size_t cap_moe, cap_moe_idx;
    float *rows;    /* each thread's RLXC_OWN_ROWS rows of hidden_size (pipeline.c) */
    size_t cap_rows;
} rlxc_scratch;

struct rlxc_pipeline {
    rlxc_layer **layers;
    int n_layers, max_seq, n_threads, n_past;
    rlxc_act act;
    /* Independent sequences (rlxc_pipeline_set_seqs), each with its own caches: kv_all holds
     * [n_seq][n_layers]; kv is the active sequence's, n_past its length, seq_past the others'. */
    rlxc_kv_cache *kv, *kv_all;
    int n_seq, seq;
    int *seq_past;
    /* A batch call (rlxc_model_decode_batch): token t belongs to sequence batch_seq[t], at
     * position batch_pos[t]; NULL otherwise (the active sequence, positions pos0..). */
    const int32_t *batch_seq;
    int *batch_pos, cap_batch;
    rlxc_scratch s;
    size_t dq_stride;   /* floats of one thread's dq */
    size_t scores_stride; /* floats of one thread's attention scratch (scores) */
    size_t rope_floats; /* the widest layer's rotary_dim / 2: room for its RoPE frequencies */
    rlxc_wtype kv_type; /* rlxc_pipeline_set_kv */
    int kv_ring, ubatch;
    int kv_exported;    /* views handed out (rlxc_pipeline_kv) since the last rlxc_pipeline_kv_released */
    rlxc_tap_fn tap_fn; /* rlxc_pipeline_set_taps */
    void *tap_ctx;
    uint32_t *tap_masks; /* [n_layers + 1] */
    int tap_failed, tap_failed_layer; /* the call's first failed tap, set by rlxc_tap */
    rlxc_stage tap_failed_stage;
};

/* Whether stage s of layer li (-1: the model) is tapped. */
int rlxc_tapped(const rlxc_pipeline *p, int li, rlxc_stage s);
/* Whole team: when the stage is tapped, a barrier, the tap on one thread, a barrier (returns 1);
 * else nothing (returns 0). data[T][width] at positions pos0... */
int rlxc_tap(rlxc_pipeline *p, const rlxc_team *tm, int li, rlxc_stage s, float *data, int T, int pos0, size_t width);
/* After a call's team: -1 with the message if a tap failed (and clears the failure). */
int rlxc_taps_failed(rlxc_pipeline *p, char *err);

/* Checks everything a run of T tokens depends on (layers may have been edited) and grows the
 * scratch; extra_floats more floats per token at the end of the activation buffers are the
 * caller's (rlxc_pipeline_extra). */
int rlxc_pipeline_begin(rlxc_pipeline *p, int T, size_t extra_floats, int n_threads, char *err);
float *rlxc_pipeline_extra(const rlxc_pipeline *p, int T);
/* Whole team, one product stage: x[T][K] prepared for the products' weights (at most 4), then
 * this thread's rows of each. No barrier after it. */
void rlxc_products(rlxc_pipeline *p, const rlxc_team *tm, const float *x, int T, int K, const rlxc_product *ps,
                   int n);
/* The same for products with the same rows, cut alike (rlxc_linear_alike), done(ctx, r0, r1) on
 * each chunk this thread computed. No barrier after it. */
void rlxc_products_alike(rlxc_pipeline *p, const rlxc_team *tm, const float *x, int T, int K,
                         const rlxc_product *ps, int n, rlxc_rows_done done, void *ctx);
/* The element-wise part of gated products, a rlxc_rows_done: on rows [r0, r1) of T rows of
 * width I, f = act(f) * up * g * neuron_scale (each factor optional; g: the token's per-layer
 * inputs, g_stride floats apart). */
typedef struct {
    const rlxc_layer *l;
    float *f;
    const float *up, *neuron_scale, *g;
    size_t g_stride, I;
    int T;
} rlxc_ffn_act;
void rlxc_ffn_activate(void *ctx, int r0, int r1);
/* Layer li's cache (its own or the one it reads) for token t of a call. */
rlxc_kv_cache *rlxc_kv_of(const rlxc_pipeline *p, int li, int t);
/* Position of token t of a call that starts at pos0. */
static inline int rlxc_pos_of(const rlxc_pipeline *p, int pos0, int t) { return p->batch_seq ? p->batch_pos[t] : pos0 + t; }
/* A decode at pos: bounds, order and what the rings keep checked, then the cache rewound to pos
 * (*n_past: where it was, to restore if the call fails). */
int rlxc_pipeline_seek(rlxc_pipeline *p, int pos, int *n_past, char *err);
/* Whole team: the layers over x[T][H] in place at positions pos0..; ple [T][ple_stride] or NULL;
 * layer_out NULL or layer i's rows at layer_out + i * layer_out_T * H. Enters and leaves without a barrier of its own: x rows are
 * read and written by the thread that owns them in rlxc_team_share(T, 1). */
void rlxc_pipeline_layers(rlxc_pipeline *p, const rlxc_team *tm, float *x, const float *ple, int T, int pos0,
                          float *layer_out, int layer_out_T);

/* The layer's activation over x[n] in place. */
void rlxc_activate(const rlxc_layer *l, float *x, size_t n);

/* Mixture of experts (moe.c). Floats and ints of scratch a call of T tokens of layer l needs
 * (0 for a dense layer). */
void rlxc_moe_scratch(const rlxc_layer *l, int T, size_t *floats, size_t *ints);
/* Whether an expert's rows of slot s are whole groups of the repacked copy (else it is not packed). */
int rlxc_moe_packable(const rlxc_layer *l, rlxc_wslot s);
/* Whole team: the experts' part of layer li's FFN for x[T][H] (resid_mid), xa its FFN norm
 * (mlp_in); returns the output [T][H], this thread's tokens (rlxc_team_share(T, 1)) written when it
 * returns. Starts with a barrier, so the products before it may still be running. */
float *rlxc_moe(rlxc_pipeline *p, const rlxc_team *tm, int li, const float *x, const float *xa, int T);

#endif
