/* The scalar reference kernels by name, so SIMD tables can fall back to them and
 * SIMD files can reuse them for tails. */
#ifndef RLXC_KERNELS_REF_H
#define RLXC_KERNELS_REF_H

#include "kernels.h"

void rlxc_matvec_f32_scalar(float *y, const float *w, const float *x, int N, int K);
void rlxc_matmul_f32_scalar(float *y, int ldy, const float *w, const float *x, int N, int K, int T);
void rlxc_matvec_q4_0_scalar(float *y, const block_q4_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q4_0_scalar(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q8_0_scalar(float *y, const block_q8_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q8_0_scalar(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);
/* Block types x float activations (kernels_wtypes.c): dequantized chunks dotted in order. */
void rlxc_matvec_fx_q4_0_scalar(float *y, const block_q4_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q8_0_scalar(float *y, const block_q8_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q5_0_scalar(float *y, const block_q5_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q4_k_scalar(float *y, const block_q4_k *w, const float *x, int N, int K);
void rlxc_matvec_fx_q6_k_scalar(float *y, const block_q6_k *w, const float *x, int N, int K);
void rlxc_rmsnorm_scalar(float *y, const float *x, const float *w, float w_offset, float eps, int n);
void rlxc_layernorm_scalar(float *y, const float *x, const float *w, const float *b, float eps, int n);
void rlxc_rope_scalar(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half);
void rlxc_attn_head_scalar(float *out, const float *q, const float *k, const float *v, int head_dim,
                           int n_keys, float scale, float softcap, float *scratch);
void rlxc_silu_scalar(float *y, const float *x, int n);
void rlxc_gelu_tanh_scalar(float *y, const float *x, int n);
void rlxc_mul_scalar(float *y, const float *a, const float *b, int n);
void rlxc_add_scalar(float *y, const float *a, int n);
void rlxc_scale_scalar(float *y, float s, int n);
void rlxc_softcap_scalar(float *y, float cap, int n);

/* The other GGUF weight types (kernels_wtypes.c). */
void rlxc_matvec_q5_0_scalar(float *y, const block_q5_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q5_0_scalar(float *y, int ldy, const block_q5_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q4_k_scalar(float *y, const block_q4_k *w, const block_q8_k *xq, int N, int K);
void rlxc_matmul_q4_k_scalar(float *y, int ldy, const block_q4_k *w, const block_q8_k *xq, int N, int K, int T);
void rlxc_matvec_q6_k_scalar(float *y, const block_q6_k *w, const block_q8_k *xq, int N, int K);
void rlxc_matmul_q6_k_scalar(float *y, int ldy, const block_q6_k *w, const block_q8_k *xq, int N, int K, int T);
void rlxc_matvec_f16_scalar(float *y, const rlxc_fp16 *w, const float *x, int N, int K);
void rlxc_matmul_f16_scalar(float *y, int ldy, const rlxc_fp16 *w, const float *x, int N, int K, int T);
void rlxc_matvec_bf16_scalar(float *y, const rlxc_bf16 *w, const float *x, int N, int K);
void rlxc_matmul_bf16_scalar(float *y, int ldy, const rlxc_bf16 *w, const float *x, int N, int K, int T);

/* Fills a Q8_K block's sums of 16 from its quants. */
void rlxc_q8_k_bsums(block_q8_k *b);

/* The scalar matvec of a weight type, one dot_<kind>(w_row, x, blocks) per row, and its matmul,
 * one matvec per token; a row holds K / qk blocks. */
#define RLXC_DEFINE_SCALAR_MAT(kind, wtype, xtype, qk)                                                 \
    void rlxc_matvec_##kind##_scalar(float *y, const wtype *w, const xtype *xq, int N, int K) {        \
        const int nb = K / (qk);                                                                       \
        for (int n = 0; n < N; n++) y[n] = dot_##kind(w + (size_t)n * nb, xq, nb);                     \
    }                                                                                                  \
    void rlxc_matmul_##kind##_scalar(float *y, int ldy, const wtype *w, const xtype *xq, int N, int K, \
                                      int T) {                                                         \
        for (int t = 0; t < T; t++)                                                                    \
            rlxc_matvec_##kind##_scalar(y + (size_t)t * ldy, w, xq + (size_t)t * (K / (qk)), N, K);    \
    }

#endif
