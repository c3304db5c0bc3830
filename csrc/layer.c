/* One decoder layer: defaults, weight slots and the consistency checks that make a
 * layer safe to run. Nothing here computes; see pipeline.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_ref.h"
#include "rlxc.h"

void rlxc_layer_init(rlxc_layer *l) {
    memset(l, 0, sizeof *l);
    l->eps = 1e-6f;
    l->head_dim = 16;
    l->num_q_heads = 4;
    l->num_kv_heads = 4;
    l->attn_scale = 0.25f; /* head_dim ** -0.5 */
    l->rope_base = 10000.0f;
    l->rotary_dim = 16;
    l->layer_scalar = 1.0f;
    l->norm_type = RLXC_RMSNORM;
    l->ffn_type = RLXC_GATED;
    l->activation = RLXC_SILU;
    l->hidden_size = 64;
    l->intermediate_size = 128;
    l->rope_layout = RLXC_ROPE_PREFIX;
    l->rope_attn_factor = 1.0f;
    l->kv_shared_from = -1;
    l->steer_scale = 1.0f;
}

void rlxc_layer_clear_weight(rlxc_layer *l, rlxc_wslot s) {
    if (!l->w[s].borrowed) free(l->w[s].data);
    rlxc_weight_unpack(&l->w[s]);
    memset(&l->w[s], 0, sizeof l->w[s]);
}

void rlxc_layer_free(rlxc_layer *l) {
    for (int s = 0; s < RLXC_W_COUNT; s++) rlxc_layer_clear_weight(l, (rlxc_wslot)s);
}

static const char *const slot_names[RLXC_W_COUNT] = {
    [RLXC_W_ATTN_NORM] = "attn_norm",      [RLXC_W_ATTN_NORM_B] = "attn_norm.bias",
    [RLXC_W_Q] = "q_proj",                 [RLXC_W_Q_B] = "q_proj.bias",
    [RLXC_W_K] = "k_proj",                 [RLXC_W_K_B] = "k_proj.bias",
    [RLXC_W_V] = "v_proj",                 [RLXC_W_V_B] = "v_proj.bias",
    [RLXC_W_O] = "o_proj",                 [RLXC_W_O_B] = "o_proj.bias",
    [RLXC_W_Q_NORM] = "q_norm",            [RLXC_W_K_NORM] = "k_norm",
    [RLXC_W_ATTN_POST_NORM] = "attn_post_norm",
    [RLXC_W_FFN_NORM] = "ffn_norm",        [RLXC_W_FFN_NORM_B] = "ffn_norm.bias",
    [RLXC_W_GATE] = "gate_proj",           [RLXC_W_GATE_B] = "gate_proj.bias",
    [RLXC_W_UP] = "up_proj",               [RLXC_W_UP_B] = "up_proj.bias",
    [RLXC_W_DOWN] = "down_proj",           [RLXC_W_DOWN_B] = "down_proj.bias",
    [RLXC_W_FFN_POST_NORM] = "ffn_post_norm",
    [RLXC_W_PLE_GATE] = "ple_gate",        [RLXC_W_PLE_PROJ] = "ple_proj",
    [RLXC_W_PLE_NORM] = "ple_norm",        [RLXC_W_ROPE_FREQ_FACTORS] = "rope_freq_factors",
    [RLXC_W_STEER_PRE] = "steer_resid_pre", [RLXC_W_STEER_MID] = "steer_resid_mid",
    [RLXC_W_STEER_POST] = "steer_resid_post",
    [RLXC_W_HEAD_SCALE] = "head_scale",    [RLXC_W_NEURON_SCALE] = "neuron_scale",
    [RLXC_W_ROUTER] = "router",            [RLXC_W_GATE_EXPS] = "gate_exps",
    [RLXC_W_UP_EXPS] = "up_exps",          [RLXC_W_DOWN_EXPS] = "down_exps",
    [RLXC_W_EXPERT_SCALE] = "expert_scale", [RLXC_W_ROUTER_NORM] = "router_norm",
    [RLXC_W_MOE_NORM] = "moe_norm",        [RLXC_W_SHARED_GATE] = "shared_gate",
    [RLXC_W_DENSE_POST_NORM] = "dense_post_norm", [RLXC_W_MOE_POST_NORM] = "moe_post_norm",
};

const char *rlxc_wslot_name(rlxc_wslot s) { return s >= 0 && s < RLXC_W_COUNT ? slot_names[s] : "?"; }

int rlxc_wslot_from_name(const char *name) {
    for (int s = 0; s < RLXC_W_COUNT; s++)
        if (!strcmp(name, slot_names[s])) return s;
    return -1;
}

int rlxc_wslot_is_matrix(rlxc_wslot s) {
    switch (s) {
    case RLXC_W_Q: case RLXC_W_K: case RLXC_W_V: case RLXC_W_O: case RLXC_W_GATE: case RLXC_W_UP:
    case RLXC_W_DOWN: case RLXC_W_PLE_GATE: case RLXC_W_PLE_PROJ: case RLXC_W_ROUTER: case RLXC_W_GATE_EXPS:
    case RLXC_W_UP_EXPS: case RLXC_W_DOWN_EXPS:
        return 1;
    default:
        return 0;
    }
}

void rlxc_wslot_shape(const rlxc_layer *l, rlxc_wslot s, int *rows, int *cols) {
    const int H = l->hidden_size, I = l->intermediate_size, hd = l->head_dim;
    const int Q = l->num_q_heads * hd, KV = l->num_kv_heads * hd, P = l->ple_dim, E = l->num_experts;
    int r = 1, c = H;
    switch (s) {
    case RLXC_W_Q: r = Q; break;
    case RLXC_W_K: case RLXC_W_V: r = KV; break;
    case RLXC_W_Q_B: c = Q; break;
    case RLXC_W_K_B: case RLXC_W_V_B: c = KV; break;
    case RLXC_W_O: r = H; c = Q; break;
    case RLXC_W_Q_NORM: case RLXC_W_K_NORM: c = hd; break;
    case RLXC_W_GATE: case RLXC_W_UP: r = I; break;
    case RLXC_W_GATE_B: case RLXC_W_UP_B: c = I; break;
    case RLXC_W_DOWN: r = H; c = I; break;
    case RLXC_W_PLE_GATE: r = P; break;
    case RLXC_W_PLE_PROJ: r = H; c = P; break;
    case RLXC_W_ROPE_FREQ_FACTORS: c = l->rotary_dim / 2; break;
    case RLXC_W_HEAD_SCALE: c = l->num_q_heads; break;
    case RLXC_W_NEURON_SCALE: c = I; break;
    case RLXC_W_ROUTER: r = E; break;
    case RLXC_W_GATE_EXPS: case RLXC_W_UP_EXPS: r = E * l->expert_intermediate_size; break;
    case RLXC_W_DOWN_EXPS: r = E * H; c = l->expert_intermediate_size; break;
    case RLXC_W_EXPERT_SCALE: c = E; break;
    default: break; /* norms and hidden-sized biases: [hidden] */
    }
    *rows = r;
    *cols = c;
}

int rlxc_wslot_used(const rlxc_layer *l, rlxc_wslot s) {
    const int own_kv = l->kv_shared_from < 0, ln = l->norm_type == RLXC_LAYERNORM;
    const int gated = l->ffn_type == RLXC_GATED, dense = l->intermediate_size > 0, moe = l->num_experts > 0;
    switch (s) {
    case RLXC_W_ATTN_NORM: case RLXC_W_Q: case RLXC_W_O: case RLXC_W_FFN_NORM:
        return 1;
    case RLXC_W_UP: case RLXC_W_DOWN: return dense;
    case RLXC_W_ATTN_NORM_B: return ln && l->input_norm_bias;
    case RLXC_W_FFN_NORM_B: return ln && l->post_attn_norm_bias;
    case RLXC_W_Q_B: return l->qkv_bias;
    case RLXC_W_K: return own_kv;
    case RLXC_W_K_B: return own_kv && l->qkv_bias;
    case RLXC_W_V: return own_kv && !l->v_from_k;
    case RLXC_W_V_B: return own_kv && !l->v_from_k && l->qkv_bias;
    case RLXC_W_O_B: return l->o_bias;
    case RLXC_W_Q_NORM: return l->has_qk_norm;
    case RLXC_W_K_NORM: return l->has_qk_norm && own_kv;
    case RLXC_W_ATTN_POST_NORM: case RLXC_W_FFN_POST_NORM: return l->sandwich_norm;
    case RLXC_W_GATE: return dense && gated;
    case RLXC_W_GATE_B: return dense && gated && l->ffn_up_bias;
    case RLXC_W_UP_B: return dense && l->ffn_up_bias;
    case RLXC_W_DOWN_B: return dense && l->ffn_down_bias;
    case RLXC_W_ROUTER: case RLXC_W_GATE_EXPS: case RLXC_W_UP_EXPS: case RLXC_W_DOWN_EXPS: return moe;
    case RLXC_W_EXPERT_SCALE: case RLXC_W_ROUTER_NORM: case RLXC_W_MOE_NORM: case RLXC_W_MOE_POST_NORM:
        return moe && l->w[s].data != NULL;
    case RLXC_W_SHARED_GATE: case RLXC_W_DENSE_POST_NORM: return moe && dense && l->w[s].data != NULL;
    case RLXC_W_PLE_GATE: case RLXC_W_PLE_PROJ: case RLXC_W_PLE_NORM: return l->ple_dim > 0;
    case RLXC_W_ROPE_FREQ_FACTORS: return l->rotary_dim > 0 && l->w[s].data != NULL;
    case RLXC_W_STEER_PRE: case RLXC_W_STEER_MID: case RLXC_W_STEER_POST: case RLXC_W_HEAD_SCALE:
        return l->w[s].data != NULL; /* interventions: on when set */
    case RLXC_W_NEURON_SCALE: return dense && l->w[s].data != NULL;
    default: return 0;
    }
}

/* Q4_K and Q5_K are made from floats by a search for scales (kernels_wtypes.c); Q5_0, Q2_K,
 * Q3_K, Q6_K and the IQ types are not. */
const rlxc_wtype_info rlxc_wtypes[] = {
    {RLXC_F32, "f32", 1, sizeof(float), 1},
    {RLXC_F16, "f16", 1, sizeof(rlxc_fp16), 1},
    {RLXC_BF16, "bf16", 1, sizeof(rlxc_bf16), 1},
    {RLXC_Q4_0, "q4_0", RLXC_QK, sizeof(block_q4_0), 1},
    {RLXC_Q4_1, "q4_1", RLXC_QK, sizeof(block_q4_1), 1},
    {RLXC_Q5_0, "q5_0", RLXC_QK, sizeof(block_q5_0), 0},
    {RLXC_Q5_1, "q5_1", RLXC_QK, sizeof(block_q5_1), 1},
    {RLXC_Q8_0, "q8_0", RLXC_QK, sizeof(block_q8_0), 1},
    {RLXC_Q2_K, "q2_k", RLXC_QK_K, sizeof(block_q2_k), 0},
    {RLXC_Q3_K, "q3_k", RLXC_QK_K, sizeof(block_q3_k), 0},
    {RLXC_Q4_K, "q4_k", RLXC_QK_K, sizeof(block_q4_k), 1},
    {RLXC_Q5_K, "q5_k", RLXC_QK_K, sizeof(block_q5_k), 1},
    {RLXC_Q6_K, "q6_k", RLXC_QK_K, sizeof(block_q6_k), 0},
    {RLXC_IQ4_NL, "iq4_nl", RLXC_QK, sizeof(block_iq4_nl), 0},
    {RLXC_IQ4_XS, "iq4_xs", RLXC_QK_K, sizeof(block_iq4_xs), 0},
};
const int rlxc_n_wtypes = (int)(sizeof rlxc_wtypes / sizeof *rlxc_wtypes);

static const rlxc_wtype_info *wtype_info(rlxc_wtype t) {
    for (int i = 0; i < rlxc_n_wtypes; i++)
        if (rlxc_wtypes[i].type == t) return &rlxc_wtypes[i];
    return NULL;
}

const char *rlxc_wtype_name(rlxc_wtype t) {
    const rlxc_wtype_info *i = wtype_info(t);
    return i ? i->name : "?";
}

int rlxc_wtype_from_name(const char *name) {
    for (int i = 0; i < rlxc_n_wtypes; i++)
        if (!strcmp(name, rlxc_wtypes[i].name)) return (int)rlxc_wtypes[i].type;
    return -1;
}

int rlxc_wtype_block_size(rlxc_wtype t) {
    const rlxc_wtype_info *i = wtype_info(t);
    return i ? i->block : 0;
}

size_t rlxc_wtype_row_bytes(rlxc_wtype t, int cols) {
    const rlxc_wtype_info *i = wtype_info(t);
    return i ? (size_t)(cols / i->block) * i->block_bytes : 0;
}

int rlxc_quantize_row(rlxc_wtype t, void *y, const float *x, int K) {
    switch (t) {
    case RLXC_F32: memcpy(y, x, (size_t)K * sizeof(float)); return 0;
    case RLXC_F16: for (int k = 0; k < K; k++) ((rlxc_fp16 *)y)[k] = rlxc_f32_to_fp16(x[k]); return 0;
    case RLXC_BF16: for (int k = 0; k < K; k++) ((rlxc_bf16 *)y)[k] = rlxc_f32_to_bf16(x[k]); return 0;
    case RLXC_Q4_0: rlxc_quantize_row_q4_0(y, x, K); return 0;
    case RLXC_Q4_1: rlxc_quantize_row_q4_1(y, x, K); return 0;
    case RLXC_Q5_1: rlxc_quantize_row_q5_1(y, x, K); return 0;
    case RLXC_Q4_K: rlxc_quantize_row_q4_k(y, x, K); return 0;
    case RLXC_Q5_K: rlxc_quantize_row_q5_k(y, x, K); return 0;
    case RLXC_Q8_0: rlxc_quantize_row_q8_0_scalar(y, x, K); return 0;
    default: return -1;
    }
}

void rlxc_dequantize_row(rlxc_wtype t, float *y, const void *x, int K) {
    switch (t) {
    case RLXC_F32: memcpy(y, x, (size_t)K * sizeof(float)); break;
    case RLXC_F16: rlxc_dequantize_row_f16(y, x, K); break;
    case RLXC_BF16: rlxc_dequantize_row_bf16(y, x, K); break;
    case RLXC_Q4_0: rlxc_dequantize_row_q4_0_scalar(y, x, K); break;
    case RLXC_Q4_1: rlxc_dequantize_row_q4_1_scalar(y, x, K); break;
    case RLXC_Q5_0: rlxc_dequantize_row_q5_0_scalar(y, x, K); break;
    case RLXC_Q5_1: rlxc_dequantize_row_q5_1_scalar(y, x, K); break;
    case RLXC_Q8_0: rlxc_dequantize_row_q8_0_scalar(y, x, K); break;
    case RLXC_Q2_K: rlxc_dequantize_row_q2_k_scalar(y, x, K); break;
    case RLXC_Q3_K: rlxc_dequantize_row_q3_k_scalar(y, x, K); break;
    case RLXC_Q4_K: rlxc_dequantize_row_q4_k_scalar(y, x, K); break;
    case RLXC_Q5_K: rlxc_dequantize_row_q5_k_scalar(y, x, K); break;
    case RLXC_Q6_K: rlxc_dequantize_row_q6_k_scalar(y, x, K); break;
    case RLXC_IQ4_NL: rlxc_dequantize_row_iq4_nl_scalar(y, x, K); break;
    case RLXC_IQ4_XS: rlxc_dequantize_row_iq4_xs_scalar(y, x, K); break;
    }
}

static int check_slot_shape(const rlxc_layer *l, rlxc_wslot s, int rows, int cols, rlxc_wtype type, char *err) {
    int er, ec;
    rlxc_wslot_shape(l, s, &er, &ec);
    if (rows != er || cols != ec) {
        if (er == 1)
            snprintf(err, RLXC_ERRLEN, "weight '%s' must have shape (%d,) under the layer's fields, got (%d, %d)",
                     slot_names[s], ec, rows, cols);
        else
            snprintf(err, RLXC_ERRLEN, "weight '%s' must have shape (%d, %d) under the layer's fields, got (%d, %d)",
                     slot_names[s], er, ec, rows, cols);
        return -1;
    }
    const int block = rlxc_wtype_block_size(type);
    if (!block) {
        snprintf(err, RLXC_ERRLEN, "weight '%s': unknown weight type %d", slot_names[s], (int)type);
        return -1;
    }
    if (type != RLXC_F32 && !rlxc_wslot_is_matrix(s)) {
        snprintf(err, RLXC_ERRLEN, "weight '%s' is a vector and is kept in f32; only matrices can be %s",
                 slot_names[s], rlxc_wtype_name(type));
        return -1;
    }
    if (cols % block) {
        snprintf(err, RLXC_ERRLEN, "weight '%s' has %d columns, not a multiple of %d, so it cannot be %s%s",
                 slot_names[s], cols, block, rlxc_wtype_name(type),
                 block == RLXC_QK_K ? " (K-quant rows are whole super-blocks of 256 weights)" : "");
        return -1;
    }
    return 0;
}

static void *alloc_slot(rlxc_layer *l, rlxc_wslot s, int rows, int cols, rlxc_wtype type, char *err) {
    const size_t bytes = (size_t)rows * rlxc_wtype_row_bytes(type, cols);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) {
        snprintf(err, RLXC_ERRLEN, "out of memory for weight '%s' (%zu bytes)", slot_names[s], bytes);
        return NULL;
    }
    rlxc_layer_clear_weight(l, s);
    l->w[s] = (rlxc_weight){.type = type, .rows = rows, .cols = cols, .data = data};
    return data;
}

int rlxc_layer_set_weight(rlxc_layer *l, rlxc_wslot s, const float *data, int rows, int cols, rlxc_wtype type,
                          char *err) {
    if (s < 0 || s >= RLXC_W_COUNT) {
        snprintf(err, RLXC_ERRLEN, "unknown weight slot %d", (int)s);
        return -1;
    }
    if (check_slot_shape(l, s, rows, cols, type, err)) return -1;
    if (!wtype_info(type)->from_floats) { /* known: check_slot_shape checked it */
        snprintf(err, RLXC_ERRLEN, "weight '%s': rlxc cannot quantize floats to %s; set %s weights from their GGUF "
                 "bytes (set_weight_raw / set_weight_view)", slot_names[s], rlxc_wtype_name(type), rlxc_wtype_name(type));
        return -1;
    }
    void *dst = alloc_slot(l, s, rows, cols, type, err);
    if (!dst) return -1;
    const size_t rb = rlxc_wtype_row_bytes(type, cols);
    for (int r = 0; r < rows; r++) rlxc_quantize_row(type, (char *)dst + (size_t)r * rb, data + (size_t)r * cols, cols);
    return 0;
}

int rlxc_layer_set_weight_raw(rlxc_layer *l, rlxc_wslot s, const void *data, int rows, int cols, rlxc_wtype type,
                              char *err) {
    if (s < 0 || s >= RLXC_W_COUNT) {
        snprintf(err, RLXC_ERRLEN, "unknown weight slot %d", (int)s);
        return -1;
    }
    if (check_slot_shape(l, s, rows, cols, type, err)) return -1;
    void *dst = alloc_slot(l, s, rows, cols, type, err);
    if (!dst) return -1;
    memcpy(dst, data, (size_t)rows * rlxc_wtype_row_bytes(type, cols));
    return 0;
}

int rlxc_layer_set_weight_view(rlxc_layer *l, rlxc_wslot s, const void *data, int rows, int cols, rlxc_wtype type,
                               char *err) {
    if (s < 0 || s >= RLXC_W_COUNT) {
        snprintf(err, RLXC_ERRLEN, "unknown weight slot %d", (int)s);
        return -1;
    }
    if (check_slot_shape(l, s, rows, cols, type, err)) return -1;
    rlxc_layer_clear_weight(l, s);
    l->w[s] = (rlxc_weight){.type = type, .rows = rows, .cols = cols, .data = (void *)data, .borrowed = 1};
    return 0;
}

#define FAIL(...) do { snprintf(err, RLXC_ERRLEN, __VA_ARGS__); return -1; } while (0)

static int check_fields(const rlxc_layer *l, char *err) {
    if (!(l->eps > 0.0f) || !isfinite(l->eps)) FAIL("eps must be a positive finite number, got %g", l->eps);
    if (!isfinite(l->attn_scale)) FAIL("attn_scale must be finite, got %g", l->attn_scale);
    if (l->hidden_size <= 0) FAIL("hidden_size must be > 0, got %d", l->hidden_size);
    if (l->num_experts < 0) FAIL("num_experts must be >= 0 (0 = a dense FFN only), got %d", l->num_experts);
    if (l->intermediate_size < 0 || (l->intermediate_size == 0 && l->num_experts == 0))
        FAIL("intermediate_size must be > 0%s, got %d", l->num_experts ? " or 0 (no dense FFN beside the experts)" : "",
             l->intermediate_size);
    if (l->num_experts > 0) {
        if (l->num_experts_used < 1 || l->num_experts_used > l->num_experts)
            FAIL("num_experts_used must be in [1, num_experts=%d], got %d", l->num_experts, l->num_experts_used);
        if (l->expert_intermediate_size <= 0)
            FAIL("expert_intermediate_size must be > 0 with num_experts > 0, got %d", l->expert_intermediate_size);
        if (l->ffn_type != RLXC_GATED) FAIL("experts are gated FFNs: num_experts > 0 needs ffn_type GATED");
        /* stacked expert matrices have num_experts times the rows of one, in an int */
        const long long most = l->hidden_size > l->expert_intermediate_size ? l->hidden_size : l->expert_intermediate_size;
        if ((long long)l->num_experts * most > 2147483647LL)
            FAIL("num_experts * max(hidden_size, expert_intermediate_size) (%d * %lld) must be < 2**31", l->num_experts, most);
    } else if (l->num_experts_used < 0 || l->expert_intermediate_size < 0) {
        FAIL("num_experts_used and expert_intermediate_size must be >= 0");
    }
    if (l->head_dim <= 0) FAIL("head_dim must be > 0, got %d", l->head_dim);
    if (l->num_q_heads <= 0) FAIL("num_q_heads must be > 0, got %d", l->num_q_heads);
    if (l->num_kv_heads <= 0) FAIL("num_kv_heads must be > 0, got %d", l->num_kv_heads);
    if (l->num_q_heads % l->num_kv_heads)
        FAIL("num_q_heads (%d) must be a multiple of num_kv_heads (%d)", l->num_q_heads, l->num_kv_heads);
    /* weight shapes are ints: num_q_heads * head_dim must not wrap (num_kv_heads divides num_q_heads) */
    if ((long long)l->num_q_heads * l->head_dim > 2147483647LL)
        FAIL("num_q_heads * head_dim (%d * %d) must be < 2**31", l->num_q_heads, l->head_dim);
    if (l->rotary_dim < 0 || l->rotary_dim % 2) FAIL("rotary_dim must be even and >= 0, got %d", l->rotary_dim);
    if (l->rotary_dim > l->head_dim)
        FAIL("rotary_dim (%d) must be <= head_dim (%d)", l->rotary_dim, l->head_dim);
    if (l->rope_layout != RLXC_ROPE_PREFIX && l->rope_layout != RLXC_ROPE_PROPORTIONAL)
        FAIL("rope_layout must be PREFIX (0) or PROPORTIONAL (1), got %d", (int)l->rope_layout);
    if (l->rope_layout == RLXC_ROPE_PROPORTIONAL && l->head_dim % 2)
        FAIL("rope_layout PROPORTIONAL needs an even head_dim, got %d", l->head_dim);
    if (l->rotary_dim > 0 && !(l->rope_base > 0.0f && isfinite(l->rope_base)))
        FAIL("rope_base must be a positive finite number, got %g", l->rope_base);
    if (!isfinite(l->rope_attn_factor)) FAIL("rope_attn_factor must be finite, got %g", l->rope_attn_factor);
    if (l->sliding_window < 0) FAIL("sliding_window must be >= 0 (0 = no window), got %d", l->sliding_window);
    if (!isfinite(l->steer_scale)) FAIL("steer_scale must be finite, got %g", l->steer_scale);
    if (!isfinite(l->layer_scalar)) FAIL("layer_scalar must be finite, got %g", l->layer_scalar);
    if (!isfinite(l->norm_offset)) FAIL("norm_offset must be finite, got %g", l->norm_offset);
    if (!isfinite(l->qk_norm_offset)) FAIL("qk_norm_offset must be finite, got %g", l->qk_norm_offset);
    if (!(l->attn_softcap >= 0.0f) || !isfinite(l->attn_softcap))
        FAIL("attn_softcap must be >= 0 (0 = off), got %g", l->attn_softcap);
    if (l->norm_type != RLXC_RMSNORM && l->norm_type != RLXC_LAYERNORM)
        FAIL("norm_type must be RMSNORM (0) or LAYERNORM (1), got %d", (int)l->norm_type);
    if (l->ffn_type != RLXC_GATED && l->ffn_type != RLXC_STANDARD)
        FAIL("ffn_type must be GATED (0) or STANDARD (1), got %d", (int)l->ffn_type);
    if (l->activation != RLXC_SILU && l->activation != RLXC_GELU_TANH)
        FAIL("activation must be SILU (0) or GELU_TANH (1), got %d", (int)l->activation);
    if (l->norm_type != RLXC_LAYERNORM && (l->input_norm_bias || l->post_attn_norm_bias))
        FAIL("input_norm_bias / post_attn_norm_bias need norm_type LAYERNORM");
    if (l->kv_shared_from < -1) FAIL("kv_shared_from must be -1 (own K/V) or a layer index, got %d", l->kv_shared_from);
    if (l->ple_dim < 0) FAIL("ple_dim must be >= 0, got %d", l->ple_dim);
    return 0;
}

int rlxc_layer_check(const rlxc_layer *l, char *err) {
    if (check_fields(l, err)) return -1;
    for (int s = 0; s < RLXC_W_COUNT; s++) {
        if (!rlxc_wslot_used(l, (rlxc_wslot)s)) continue;
        const rlxc_weight *w = &l->w[s];
        if (!w->data) FAIL("weight '%s' is required by the layer's fields but not set", slot_names[s]);
        if (check_slot_shape(l, (rlxc_wslot)s, w->rows, w->cols, w->type, err)) return -1;
    }
    return 0;
}

int rlxc_layer_check_fields(const rlxc_layer *l, char *err) { return check_fields(l, err); }
