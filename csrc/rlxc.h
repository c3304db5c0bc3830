/* rlxc engine: the public C API. Plain C, no Python: a C program can build layers,
 * fill their weights, run a pipeline and read the results through this header alone. */
#ifndef RLXC_H
#define RLXC_H

#include <stddef.h>
#include <stdint.h>

#define RLXC_ERRLEN 256

typedef enum { RLXC_RMSNORM = 0, RLXC_LAYERNORM = 1 } rlxc_norm_type;
typedef enum { RLXC_GATED = 0, RLXC_STANDARD = 1 } rlxc_ffn_type;
typedef enum { RLXC_SILU = 0, RLXC_GELU_TANH = 1 } rlxc_activation;
/* PREFIX: rotate the leading rotary_dim dims, pairs (k, k + rotary_dim/2), exponent over rotary_dim.
 * PROPORTIONAL (Gemma 4 full layers): pairs (k, k + head_dim/2) for k < rotary_dim/2,
 * exponent over head_dim. */
typedef enum { RLXC_ROPE_PREFIX = 0, RLXC_ROPE_PROPORTIONAL = 1 } rlxc_rope_layout;
/* Values are ggml's type ids, so GGUF tensors map without a table. */
typedef enum {
    RLXC_F32 = 0, RLXC_F16 = 1, RLXC_Q4_0 = 2, RLXC_Q4_1 = 3, RLXC_Q5_0 = 6, RLXC_Q5_1 = 7, RLXC_Q8_0 = 8, RLXC_Q2_K = 10, RLXC_Q3_K = 11, RLXC_Q4_K = 12, RLXC_Q5_K = 13, RLXC_Q6_K = 14, RLXC_IQ4_NL = 20, RLXC_IQ4_XS = 23,
    RLXC_BF16 = 30
} rlxc_wtype;

/* Weight slots of one layer. Matrices are [out][in] (y = W x), as in HF's nn.Linear. */
typedef enum {
    RLXC_W_ATTN_NORM, RLXC_W_ATTN_NORM_B,       /* input norm, [hidden] */
    RLXC_W_Q, RLXC_W_Q_B,                       /* [nq*hd][hidden], [nq*hd] */
    RLXC_W_K, RLXC_W_K_B,                       /* [nkv*hd][hidden], [nkv*hd] */
    RLXC_W_V, RLXC_W_V_B,
    RLXC_W_O, RLXC_W_O_B,                       /* [hidden][nq*hd], [hidden] */
    RLXC_W_Q_NORM, RLXC_W_K_NORM,               /* per-head norms, [hd] */
    RLXC_W_ATTN_POST_NORM,                      /* sandwich: norm of the attention output */
    RLXC_W_FFN_NORM, RLXC_W_FFN_NORM_B,         /* pre-FFN norm (HF Llama "post_attention_layernorm") */
    RLXC_W_GATE, RLXC_W_GATE_B,                 /* [inter][hidden] (gated FFN only) */
    RLXC_W_UP, RLXC_W_UP_B,                     /* [inter][hidden] (c_fc for standard FFN) */
    RLXC_W_DOWN, RLXC_W_DOWN_B,                 /* [hidden][inter] (c_proj) */
    RLXC_W_FFN_POST_NORM,                       /* sandwich: norm of the FFN output */
    RLXC_W_PLE_GATE, RLXC_W_PLE_PROJ, RLXC_W_PLE_NORM, /* Gemma 4 per-layer input block */
    RLXC_W_ROPE_FREQ_FACTORS,                   /* [rotary_dim/2] divisors of the RoPE frequencies */
    /* Mixture of experts (num_experts > 0). Expert e's rows of the stacked matrices are
     * e * (their rows per expert) onwards, as in GGUF's ffn_*_exps. */
    RLXC_W_ROUTER,                              /* [num_experts][hidden] */
    RLXC_W_GATE_EXPS, RLXC_W_UP_EXPS,           /* [num_experts * expert_intermediate_size][hidden] */
    RLXC_W_DOWN_EXPS,                           /* [num_experts * hidden][expert_intermediate_size] */
    /* each optional (unset: none) */
    RLXC_W_EXPERT_SCALE,                        /* [num_experts] multiplies a routed expert's weight (Gemma 4) */
    RLXC_W_ROUTER_NORM,                         /* [hidden]: the router reads RMSNorm(resid_mid) * w (offset 0), not mlp_in */
    RLXC_W_MOE_NORM,                            /* [hidden]: the experts read the layer's norm of resid_mid with w, not mlp_in */
    RLXC_W_SHARED_GATE,                         /* [hidden]: the dense FFN's output times sigmoid(w . mlp_in) (Qwen2-MoE) */
    RLXC_W_DENSE_POST_NORM, RLXC_W_MOE_POST_NORM, /* [hidden]: norms of the dense and expert outputs before their sum */
    /* Interventions, each optional (unset: none): steer_scale times a vector added to the
     * residual stream at a stage, and multipliers of the attention heads' outputs before o_proj
     * (0 ablates a head) and of the FFN's neurons (mlp_act). */
    RLXC_W_STEER_PRE, RLXC_W_STEER_MID, RLXC_W_STEER_POST, /* [hidden]: resid_pre, resid_mid, resid_post */
    RLXC_W_HEAD_SCALE,                          /* [num_q_heads] */
    RLXC_W_NEURON_SCALE,                        /* [intermediate_size] */
    RLXC_W_COUNT
} rlxc_wslot;

typedef struct {
    rlxc_wtype type;
    int rows, cols;  /* vectors: rows == 1 */
    void *data;      /* NULL = not set */
    int borrowed;    /* data belongs to the caller (e.g. a memory-mapped file) and is not freed */
    void *packed;    /* the engine's repacked copy of data (rlxc_weight_pack) or NULL; freed with the weight */
} rlxc_weight;

/* Makes w->packed where the active kernels multiply w's type faster from a repacked copy (Q4_0,
 * Q8_0, Q4_K in 16-row groups, rows past the last whole group stay in data): the engine calls it
 * for every matrix it multiplies, once; safe from several threads. The copy costs as much memory
 * as the rows it covers. page_out: caller-owned (borrowed) rows the engine then reads only from the
 * copy are paged out (MADV_PAGEOUT keeps their contents), so a memory-mapped file's pages do not
 * stay resident beside it. */
void rlxc_weight_pack(rlxc_weight *w, int page_out);
void rlxc_weight_unpack(rlxc_weight *w); /* frees w->packed */
/* Row r of w as K floats, from the packed copy where it has the row (what rlxc_dequantize_row
 * gives on data, bit for bit), so a tied embedding's lookups leave the mapped rows alone. */
void rlxc_weight_row(const rlxc_weight *w, int r, float *y);

/* The FullPipelineLayer: every per-layer parameter of a decoder layer. Adjacent layers may
 * differ in any field; the compute path reads nothing model-wide. */
typedef struct rlxc_layer {
    float eps;
    float attn_scale;
    int head_dim;
    int num_q_heads;
    int num_kv_heads;
    float rope_base;
    int rotary_dim;         /* 0 = no RoPE */
    int sliding_window;     /* key j visible to query i iff j <= i and i - j < W; 0 = full */
    int has_v_norm;         /* weightless RMSNorm over each V head */
    float layer_scalar;     /* multiplies the whole residual stream at the end */
    rlxc_norm_type norm_type;
    rlxc_ffn_type ffn_type;
    rlxc_activation activation;
    float qk_norm_offset;   /* q/k norm weight is (offset + w) */
    int input_norm_bias;    /* LayerNorm bias on the input norm */
    int post_attn_norm_bias;/* LayerNorm bias on the pre-FFN norm (HF post_attention_layernorm) */
    int ffn_up_bias;        /* bias on up (and gate) projections */
    int ffn_down_bias;

    /* What the 18 fields above cannot express: widths, norm offsets, biases, Gemma 2-4 and YaRN
     * details, shared K/V and per-layer inputs. */
    int hidden_size;
    int intermediate_size;
    float norm_offset;      /* main norms use (offset + w): Gemma 1-3 use 1 */
    int qkv_bias;
    int o_bias;
    int has_qk_norm;
    int sandwich_norm;      /* Gemma 2/3/4: norms after attention and after the FFN */
    float attn_softcap;     /* scores = cap * tanh(scores / cap); 0 = off */
    rlxc_rope_layout rope_layout;
    float rope_attn_factor; /* multiplies cos and sin (YaRN, LongRoPE); 1 otherwise */
    int v_from_k;           /* Gemma 4 attention_k_eq_v: V is the raw K projection */
    int kv_shared_from;     /* -1: own K/V; else an earlier layer's index whose cache is read */
    int ple_dim;            /* per-layer embedding width, 0 = none */
    float steer_scale;      /* multiplies the steering vectors (RLXC_W_STEER_*) */
    /* Mixture of experts: each token's FFN output is the sum of its num_experts_used best experts
     * (gated FFNs of expert_intermediate_size), weighted by the softmax of the router's logits
     * (renormalised over the chosen ones if moe_norm_topk), plus the dense FFN when
     * intermediate_size > 0 (a shared expert, or Gemma 4's parallel MLP). 0 experts: dense only. */
    int num_experts;
    int num_experts_used;
    int expert_intermediate_size;
    int moe_norm_topk;

    rlxc_weight w[RLXC_W_COUNT];
} rlxc_layer;

/* Llama-style defaults: hidden 64, 4 heads of 16, SiLU gated FFN of 128, RMSNorm. */
void rlxc_layer_init(rlxc_layer *l);
void rlxc_layer_free(rlxc_layer *l);

const char *rlxc_wslot_name(rlxc_wslot s);   /* e.g. "q_proj", "q_proj.bias" */
int rlxc_wslot_from_name(const char *name);  /* -1 if unknown */
int rlxc_wslot_is_matrix(rlxc_wslot s);
/* Shape the slot must have under the layer's current fields (rows == 1 for vectors). */
void rlxc_wslot_shape(const rlxc_layer *l, rlxc_wslot s, int *rows, int *cols);
/* Whether the layer's current fields use this slot. */
int rlxc_wslot_used(const rlxc_layer *l, rlxc_wslot s);

/* Copy float weights into a slot, converting to `type` (f32; for matrices also f16, bf16,
 * q4_0, q8_0: the types rlxc_quantize_row makes). Shape-checked against the current fields. */
int rlxc_layer_set_weight(rlxc_layer *l, rlxc_wslot s, const float *data, int rows, int cols,
                          rlxc_wtype type, char *err);
/* Copy already-quantized GGUF bytes (rows * row_bytes) into a slot. */
int rlxc_layer_set_weight_raw(rlxc_layer *l, rlxc_wslot s, const void *data, int rows, int cols,
                              rlxc_wtype type, char *err);
/* Point a slot at caller-owned bytes (e.g. a memory-mapped GGUF tensor) without copying;
 * the caller keeps them alive and unchanged while the layer uses them. */
int rlxc_layer_set_weight_view(rlxc_layer *l, rlxc_wslot s, const void *data, int rows, int cols,
                               rlxc_wtype type, char *err);
void rlxc_layer_clear_weight(rlxc_layer *l, rlxc_wslot s);
/* Every weight type rlxc knows, rlxc_n_wtypes of them in this order: f32, f16, bf16, q4_0, q4_1,
 * q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, iq4_nl, iq4_xs. from_floats: rlxc_layer_set_weight makes it from floats (q5_0 and the
 * K-quants arrive already quantized, as GGUF bytes). */
typedef struct {
    rlxc_wtype type;    /* ggml's type id */
    const char *name;   /* "f32", "q4_k", ... */
    int block;          /* weights per block: 1, 32, 256 */
    size_t block_bytes; /* bytes per block */
    int from_floats;
} rlxc_wtype_info;
extern const rlxc_wtype_info rlxc_wtypes[];
extern const int rlxc_n_wtypes;
/* Whether the active kernel table multiplies weights of type t (0 for unknown types). */
int rlxc_wtype_runs(rlxc_wtype t);
size_t rlxc_wtype_row_bytes(rlxc_wtype t, int cols);   /* cols: a multiple of the block size */
const char *rlxc_wtype_name(rlxc_wtype t);             /* "f32", "q4_k", ...; "?" if unknown */
int rlxc_wtype_from_name(const char *name);            /* -1 if unknown */
int rlxc_wtype_block_size(rlxc_wtype t);               /* weights per block: 1, 32, 256; 0 if unknown */
/* One row of K floats -> `type`: 0, or -1 for types rlxc does not make (q5_0 and the K-quants
 * arrive already quantized, as GGUF bytes). */
int rlxc_quantize_row(rlxc_wtype t, void *y, const float *x, int K);
/* One row of any type -> K floats (bit-exact with gguf.quants.dequantize). */
void rlxc_dequantize_row(rlxc_wtype t, float *y, const void *x, int K);

/* Field ranges and cross-field consistency only. */
int rlxc_layer_check_fields(const rlxc_layer *l, char *err);
/* Fields plus weight presence and shapes; 0 if the layer can run. */
int rlxc_layer_check(const rlxc_layer *l, char *err);

/* How rlxc_linear multiplies block-quantized weights. RLXC_ACT_Q8 rounds the activations to
 * 8-bit blocks (Q8_0 for q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / iq4_nl, Q8_K for q4_k / q5_k / q6_k / iq4_xs) for integer dots: llama.cpp's
 * numerics, and the fastest. RLXC_ACT_F32 dequantizes 48 weight rows at a time and multiplies
 * them with the f32 activations: transformers' numerics on the dequantized weights. f32 / f16 /
 * bf16 weights always take f32 activations. */
typedef enum { RLXC_ACT_Q8 = 0, RLXC_ACT_F32 = 1 } rlxc_act;

/* y[T][w->rows] = x[T][w->cols] W^T with rows split over n_threads. scratch holds
 * rlxc_linear_scratch_bytes(cols, T, n_threads, act) bytes: x quantized once per call (RLXC_ACT_Q8),
 * or each thread's dequantized rows (RLXC_ACT_F32). */
void rlxc_linear(float *y, const rlxc_weight *w, const float *x, int T, int n_threads, void *scratch, rlxc_act act);
size_t rlxc_linear_scratch_bytes(int cols, int T, int n_threads, rlxc_act act);
/* Inverse frequencies of the layer's rotary_dim/2 pairs (base, layout, freq factors). */
void rlxc_rope_inv_freq(const rlxc_layer *l, float *inv);
/* cos and sin (times rope_attn_factor) of each pair at pos, from rlxc_rope_inv_freq's output. */
void rlxc_rope_angles(const rlxc_layer *l, const float *inv, int pos, float *cos_out, float *sin_out);

/* Threads a call may use: `requested`, or 1 in a process forked after OpenMP ran. */
int rlxc_threads_usable(int requested);
/* OMP_NUM_THREADS if set, else the physical cores this process may use (1 in a forked child). */
int rlxc_threads_default(void);

/* Where a forward's time goes. Between rlxc_profile_start and rlxc_profile_stop every team run
 * (a prefill, a decoded token, an rlxc_linear) charges each thread's time to the stage it is in,
 * from one stage's start to the next, and its waits at the team's barriers to RLXC_TIME_WAIT: a
 * stage whose work is split unevenly, or a thread the machine slows, shows there. The counters
 * are the process's: time one call, or calls of one model, at a time. */
typedef enum {
    RLXC_TIME_OTHER,     /* outside the stages below (an rlxc_linear of its own) */
    RLXC_TIME_EMBED,     /* embedding rows, Gemma 4's per-layer inputs */
    RLXC_TIME_NORM,      /* norms, residual adds, steering */
    RLXC_TIME_QUANTIZE,  /* activations into 8-bit blocks for the products */
    RLXC_TIME_QKV,       /* q, k, v products */
    RLXC_TIME_HEADS,     /* RoPE angles, q/k norms, RoPE, K/V into the cache */
    RLXC_TIME_ATTENTION, /* softmax(q k) v over the cache */
    RLXC_TIME_O,         /* o_proj */
    RLXC_TIME_FFN_UP,    /* gate and up products, the activation */
    RLXC_TIME_FFN_DOWN,  /* down product */
    RLXC_TIME_EXPERTS,   /* router, routed experts, their mix */
    RLXC_TIME_PLE,       /* Gemma 4's per-layer input block */
    RLXC_TIME_LM_HEAD,   /* final norm, lm_head, softcap */
    RLXC_TIME_TAPS,      /* hooks and collected stages */
    RLXC_TIME_WAIT,      /* at a barrier, for the team's slowest thread */
    RLXC_TIMES
} rlxc_time;

#define RLXC_PROFILE_THREADS 256 /* threads of a team timed (index < this) */

const char *rlxc_time_name(rlxc_time t); /* "qkv", ...; "?" if unknown */
/* Zero the counters and time every team run from now on; -1 if a profile already runs. */
int rlxc_profile_start(void);
/* Stop timing: ns[t * RLXC_TIMES + s] of thread t < max_threads in stage s, *wall_ns the team
 * runs' time as their callers saw it (fork and join included), *runs their count. Returns the
 * largest team seen (the rows of ns filled, at most max_threads), -1 if no profile ran. */
int rlxc_profile_stop(uint64_t *ns, int max_threads, uint64_t *wall_ns, uint64_t *runs);

/* Pipeline: a stack of layers (borrowed, not copied: edits to a layer between calls take
 * effect) with a per-layer KV cache sized by each layer's own num_kv_heads * head_dim. */
typedef struct rlxc_pipeline rlxc_pipeline;

rlxc_pipeline *rlxc_pipeline_create(rlxc_layer *const *layers, int n_layers, int max_seq,
                                    int n_threads, char *err);
void rlxc_pipeline_free(rlxc_pipeline *p);
/* Empty the cache; re-sizes caches for layers whose K/V shape changed since creation. -1 when the
 * settings cannot be met (err says why), -2 when memory runs out. */
int rlxc_pipeline_reset(rlxc_pipeline *p, char *err);
int rlxc_pipeline_n_past(const rlxc_pipeline *p);
int rlxc_pipeline_max_seq(const rlxc_pipeline *p);
int rlxc_pipeline_hidden_size(const rlxc_pipeline *p);
/* Sum of ple_dim over the layers: up to 100000 * (2^31 - 1), so in size_t, never wrapped. */
size_t rlxc_pipeline_ple_stride(const rlxc_pipeline *p);
void rlxc_pipeline_set_threads(rlxc_pipeline *p, int n_threads);
int rlxc_pipeline_threads(const rlxc_pipeline *p);
void rlxc_pipeline_set_act(rlxc_pipeline *p, rlxc_act act); /* RLXC_ACT_Q8 at creation */
rlxc_act rlxc_pipeline_act(const rlxc_pipeline *p);

/* Independent sequences, each with its own KV caches and length (default 1). set_seqs empties
 * every cache and makes sequence 0 active; the calls for one sequence (prefill, decode, views,
 * n_past) act on the active one, chosen by use_seq; rlxc_model_decode_batch runs one token of
 * several sequences in one pass. */
#define RLXC_MAX_SEQS 4096
int rlxc_pipeline_set_seqs(rlxc_pipeline *p, int n_seq, char *err);
int rlxc_pipeline_seqs(const rlxc_pipeline *p);
int rlxc_pipeline_use_seq(rlxc_pipeline *p, int seq, char *err);
int rlxc_pipeline_seq(const rlxc_pipeline *p);
int rlxc_pipeline_seq_past(const rlxc_pipeline *p, int seq); /* tokens in sequence seq's cache */

/* KV storage, for the caches allocated at the next reset (and at creation): type RLXC_F32
 * (exact, the default) or RLXC_F16; ring (default on): a windowed layer keeps only its last
 * W - 1 + ubatch positions where that takes less memory than max_seq positions (kvcache.c);
 * ubatch (default 512): the most tokens a call runs at once (a longer prefill runs in passes). */
int rlxc_pipeline_set_kv(rlxc_pipeline *p, rlxc_wtype type, int ring, int ubatch, char *err);
void rlxc_pipeline_get_kv(const rlxc_pipeline *p, rlxc_wtype *type, int *ring, int *ubatch);
/* Bytes the KV caches take (virtual: pages are touched as positions fill) under the current
 * layers and settings. */
size_t rlxc_pipeline_kv_bytes(const rlxc_pipeline *p);

/* Where a layer's cached K/V are: k, v [heads][rows][dim] of type (f32 or f16); positions
 * n_past - n .. n_past - 1 are rows first .. first + n - 1 of every head (a full cache: every
 * position; a windowed layer's ring: its last sliding_window, all that later tokens see). */
typedef struct {
    void *k, *v;
    rlxc_wtype type;
    int heads, dim, rows, first, n;
} rlxc_kv_view;
/* Layer i's view (a layer that reads another's K/V gets that layer's); returns the index of the
 * layer that owns the cache. Valid until a reset that re-allocates (rlxc_pipeline_kv_reshaped).
 * Rows may be edited: each call copies the kept rows of a ring to their mirror until
 * rlxc_pipeline_kv_released says the caller holds no views any more. */
int rlxc_pipeline_kv(rlxc_pipeline *p, int i, rlxc_kv_view *out);
void rlxc_pipeline_kv_released(rlxc_pipeline *p);
/* Whether the next reset re-allocates some cache (a layer's K/V shape, sharing or window, or the
 * KV settings changed). */
int rlxc_pipeline_kv_reshaped(const rlxc_pipeline *p);
/* Declare the first n positions of the cache valid (0 <= n <= max_seq), e.g. after writing K/V
 * saved from another run; -1 otherwise. */
int rlxc_pipeline_set_n_past(rlxc_pipeline *p, int n, char *err);

/* Run T tokens at positions n_past .. n_past+T-1 and append them to the cache.
 * x, out: [T][hidden] (may alias). ple: [T][ple_stride] or NULL when no layer has ple_dim.
 * layer_out: NULL or [n_layers][T][hidden], each layer's output. */
int rlxc_pipeline_prefill(rlxc_pipeline *p, const float *x, const float *ple, int T, float *out,
                          float *layer_out, char *err);
/* One token at position pos <= n_past (pos < n_past rewinds the cache to pos). */
int rlxc_pipeline_decode(rlxc_pipeline *p, const float *x, const float *ple, int pos, float *out,
                         float *layer_out, char *err);

/* Stages: the named points a token passes, in order. EMBED, FINAL_NORM and LOGITS are the
 * model's (layer -1), the others each layer's. Per token: attn_in, resid_pre, resid_mid, mlp_in,
 * attn_out, mlp_out, resid_post, embed, final_norm [hidden]; q, attn_z [num_q_heads][head_dim]; k,
 * v [num_kv_heads][head_dim] (layers with their own K/V only); attn_probs [num_q_heads][n_keys]
 * (keys 0 .. pos0+T-1, zero where masked); mlp_act [intermediate_size]; logits [n_logits]. */
typedef enum {
    RLXC_STAGE_EMBED,
    RLXC_STAGE_RESID_PRE, RLXC_STAGE_ATTN_IN, RLXC_STAGE_Q, RLXC_STAGE_K, RLXC_STAGE_V, RLXC_STAGE_ATTN_PROBS,
    RLXC_STAGE_ATTN_Z, RLXC_STAGE_ATTN_OUT, RLXC_STAGE_RESID_MID, RLXC_STAGE_MLP_IN, RLXC_STAGE_MLP_ACT,
    RLXC_STAGE_MLP_OUT, RLXC_STAGE_RESID_POST,
    RLXC_STAGE_FINAL_NORM, RLXC_STAGE_LOGITS,
    RLXC_STAGE_COUNT
} rlxc_stage;
const char *rlxc_stage_name(rlxc_stage s); /* "attn_in", ...; "?" if unknown */
int rlxc_stage_from_name(const char *name); /* -1 if unknown */
int rlxc_stage_is_model(rlxc_stage s);      /* embed, final_norm, logits */

/* A tap sees (and may rewrite) a stage's values for the T tokens of a call at positions pos0..:
 * data[T][width]. One thread of the team calls it while the others wait; what it writes is what
 * the rest of the forward reads (K and V are stored to the cache after it). A nonzero return fails
 * the call: the forward finishes without further taps and the cache keeps its n_past. */
typedef int (*rlxc_tap_fn)(void *ctx, int layer, rlxc_stage s, float *data, int T, int pos0, int width);
/* Tap the stages whose bit (1u << stage) is set in masks[layer] (layer stages) and in
 * masks[n_layers] (model stages): n_layers + 1 masks, copied. fn NULL: no taps (the default). */
int rlxc_pipeline_set_taps(rlxc_pipeline *p, rlxc_tap_fn fn, void *ctx, const uint32_t *masks, char *err);

/* Model: a pipeline (borrowed) and the parts around it, so that a token's whole path, from its
 * id to its logits, is one call and one thread team. Weights are borrowed like a layer's views:
 * the caller keeps them alive and unchanged while the model uses them. */
typedef struct {
    rlxc_weight embed;           /* [vocab][hidden], any type: rows dequantized on lookup */
    float embed_scale;           /* the embedding rows are multiplied by it (Gemma: sqrt(hidden)) */
    rlxc_weight lm_head;         /* [n_logits][hidden], any type the kernels multiply; data NULL: tied */
    rlxc_norm_type norm_type;    /* the final norm: RMS with weight (norm_offset + w), or LayerNorm */
    rlxc_weight norm, norm_bias; /* f32 [hidden]; norm.data NULL: no final norm */
    float norm_eps, norm_offset;
    float final_softcap;         /* logits = cap * tanh(logits / cap); 0 = off */
    /* Gemma 4 per-layer inputs (ple_embed.data NULL: none). For token id and layer i's slice of
     * its ple_dim: ple = (RMSNorm(ple_proj_scale * x W_proj^T) * ple_norm
     *                     + ple_embed_scale * E[id]) * ple_input_scale, x the scaled embedding. */
    rlxc_weight ple_embed;       /* [vocab][sum of ple_dim], any type */
    rlxc_weight ple_proj;        /* [sum of ple_dim][hidden] */
    rlxc_weight ple_norm;        /* f32 [ple_dim] */
    float ple_embed_scale, ple_proj_scale, ple_input_scale, ple_eps;
} rlxc_model_parts;

typedef struct rlxc_model rlxc_model;

/* The parts are copied (their weights borrowed) and checked at every call, against the
 * pipeline's layers as they are then. */
rlxc_model *rlxc_model_create(rlxc_pipeline *p, const rlxc_model_parts *parts, char *err);
void rlxc_model_free(rlxc_model *m);
rlxc_pipeline *rlxc_model_pipeline(const rlxc_model *m);
int rlxc_model_vocab(const rlxc_model *m);    /* embedding rows */
int rlxc_model_n_logits(const rlxc_model *m); /* lm_head rows: the width of a logits row */

typedef enum { RLXC_LOGITS_ALL = 0, RLXC_LOGITS_LAST = 1, RLXC_LOGITS_NONE = 2 } rlxc_logits;
/* What a prefill may also keep, each NULL or: embeddings [T][hidden] (scaled), layers
 * [n_layers][T][hidden] (each layer's output), final_norm [T][hidden] (needs RLXC_LOGITS_ALL). */
typedef struct {
    float *embeddings, *layers, *final_norm;
} rlxc_trace;

/* Tokens ids[0..T) at positions n_past.. appended to the cache; logits: [T][n_logits]
 * (RLXC_LOGITS_ALL), [n_logits] (LAST) or unused (NONE). trace may be NULL. */
int rlxc_model_prefill(rlxc_model *m, const int32_t *ids, int T, rlxc_logits which, float *logits,
                       const rlxc_trace *trace, char *err);
/* One token at position pos <= n_past (pos < n_past rewinds); logits: [n_logits]. */
int rlxc_model_decode(rlxc_model *m, int32_t id, int pos, float *logits, char *err);
/* One token of each of B distinct sequences (ids[b] appended to sequence seqs[b] at its length)
 * in one pass: each weight row is read once for all B. logits [B][n_logits]. Refused while
 * taps are set. A failed call leaves every sequence as it was. */
int rlxc_model_decode_batch(rlxc_model *m, const int32_t *seqs, const int32_t *ids, int B, float *logits, char *err);

/* One token's attention: q [nq][hd] at position pos against k, v [nkv][S][hd] (f32), keys
 * 0..pos (the last `window` of them if window > 0), scores softcap(scale * q.k) (softcap 0:
 * none); nq a multiple of nkv. The engine's arithmetic (attention.c). -1 when out of memory. */
int rlxc_attention(float *out, const float *q, int nq, const float *k, const float *v, int nkv, int S, int hd, int pos,
                   int window, float scale, float softcap);

#endif
