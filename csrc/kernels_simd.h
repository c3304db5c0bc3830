/* What the SIMD kernel directories share that needs no intrinsics: the loops around their
 * register tiles and vector bodies, written once for kernels_avx2/avx2.h and
 * kernels_neon/neon.h, which pass in their own tiles, loads and stores. */
#ifndef RLXC_KERNELS_SIMD_H
#define RLXC_KERNELS_SIMD_H

#include "kernels.h"

#define RLXC_INLINE static inline __attribute__((always_inline))

/* Runs a W-wide body over n floats; the n % W tail goes through the same body on a padded
 * copy, so tails and bulk share one formula (and one rounding). */
#define RLXC_MAP_PADDED(W, load, store, n, body_v_to_v, y, x)                            \
    do {                                                                                 \
        int i_ = 0;                                                                      \
        for (; i_ + (W) <= (n); i_ += (W)) store((y) + i_, body_v_to_v(load((x) + i_))); \
        if (i_ < (n)) {                                                                  \
            float buf_[W] = {0};                                                         \
            for (int j_ = i_; j_ < (n); j_++) buf_[j_ - i_] = (x)[j_];                   \
            store(buf_, body_v_to_v(load(buf_)));                                        \
            for (int j_ = i_; j_ < (n); j_++) (y)[j_] = buf_[j_ - i_];                   \
        }                                                                                \
    } while (0)

/* Row/token driver of a matrix product (and its T == 1 matvec) around a register tile
 * tile(y, ldy, w, xq, nb, R, C), for activations of type xtype holding qk weights' worth per
 * block (Q8_0: 32, Q8_K: 256, float: 1). Decode uses MV_R x 1 tiles; the GEMM GM_R x GM_C
 * tiles, so every weight block loaded serves GM_C tokens, over chunks of RLXC_TCHUNK tokens so
 * that a chunk's activations stay in L2 while every row streams past them. Leftover rows and
 * tokens take 1-row / 1-token tiles. */
#define RLXC_TCHUNK 64
#define RLXC_DEFINE_MATMUL(name, wtype, xtype, qk, tile, MV_R, GM_R, GM_C)                                       \
    void name(float *y, int ldy, const void *vw, const void *vx, int N, int K, int T) {                          \
        const wtype *w = vw;                                                                                     \
        const xtype *xq = vx;                                                                                    \
        const int nb = K / (qk);                                                                                 \
        for (int t0 = 0; t0 < T; t0 += RLXC_TCHUNK) {                                                            \
            const int t1 = t0 + RLXC_TCHUNK < T ? t0 + RLXC_TCHUNK : T;                                          \
            int n = 0;                                                                                           \
            for (; t1 - t0 >= (GM_C) && n + (GM_R) <= N; n += (GM_R)) {                                          \
                int t = t0;                                                                                      \
                for (; t + (GM_C) <= t1; t += (GM_C))                                                            \
                    tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * nb, xq + (size_t)t * nb, nb, GM_R, GM_C); \
                for (; t < t1; t++)                                                                              \
                    tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * nb, xq + (size_t)t * nb, nb, GM_R, 1);    \
            }                                                                                                    \
            for (int t = t0; t < t1; t++) {                                                                      \
                int m = n;                                                                                       \
                for (; m + (MV_R) <= N; m += (MV_R))                                                             \
                    tile(y + (size_t)t * ldy + m, ldy, w + (size_t)m * nb, xq + (size_t)t * nb, nb, MV_R, 1);    \
                for (; m < N; m++)                                                                               \
                    tile(y + (size_t)t * ldy + m, ldy, w + (size_t)m * nb, xq + (size_t)t * nb, nb, 1, 1);       \
            }                                                                                                    \
        }                                                                                                        \
    }
/* The same for weights whose activations are Q8_0 blocks. */
#define RLXC_DEFINE_QMATMUL(name, wtype, tile, MV_R, GM_R, GM_C) \
    RLXC_DEFINE_MATMUL(name, wtype, block_q8_0, RLXC_QK, tile, MV_R, GM_R, GM_C)

/* A matvec as the one-token case of its matmul. */
#define RLXC_DEFINE_MATVEC(name, matmul) \
    void name(float *y, const void *w, const void *x, int N, int K) { matmul(y, N, w, x, N, K, 1); }

/* A repacked product (matmul_x16 of type t) one token at a time, each group's rows staying in
 * L1/L2 across the tokens: for fewer tokens than pay for an ISA's interleaved GEMM tiles, or an
 * ISA without them. */
RLXC_INLINE void rlxc_matmul_x16_by_token(void (*matvec_x16)(float *, const void *, const void *, int, int), rlxc_wtype t,
                                          float *y, int ldy, const void *w, const void *x, int G, int K, int T) {
    const size_t group_bytes = rlxc_x16_type_group_bytes(t, K), x_bytes = rlxc_x16_x_bytes(t, K);
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++)
            matvec_x16(y + (size_t)t * ldy + (size_t)g * RLXC_PACK_ROWS, (const char *)w + g * group_bytes,
                       (const char *)x + t * x_bytes, 1, K);
}

/* Matvec of a block type with float activations for ISAs without a fused kernel: each row is
 * dequantized RLXC_FX_CHUNK weights at a time into an L1 buffer and dotted with the ISA's f32
 * matvec (a multiple of every block size, so chunks hold whole blocks). */
#define RLXC_FX_CHUNK 1024
#define RLXC_DEFINE_MATVEC_FX(name, wtype, qk, dequantize, matvec_f32)          \
    void name(float *y, const void *vw, const float *x, int N, int K) {         \
        const wtype *w = vw;                                                    \
        float buf_[RLXC_FX_CHUNK];                                              \
        const int nb = K / (qk);                                                \
        for (int n = 0; n < N; n++) {                                           \
            float s = 0.0f;                                                     \
            for (int k0 = 0; k0 < K; k0 += RLXC_FX_CHUNK) {                     \
                const int kc = K - k0 < RLXC_FX_CHUNK ? K - k0 : RLXC_FX_CHUNK; \
                float part;                                                     \
                dequantize(buf_, w + (size_t)n * nb + k0 / (qk), kc);           \
                matvec_f32(&part, buf_, x + k0, 1, kc);                         \
                s += part;                                                      \
            }                                                                   \
            y[n] = s;                                                           \
        }                                                                       \
    }

/* Every block type's of an ISA, from its dequantizers (suffix dq) and f32 matvec (suffix f32). */
#define RLXC_DEFINE_MATVECS_FX(sfx, dq, f32)                                                                        \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_0_##sfx, block_q4_0, RLXC_QK, rlxc_dequantize_row_q4_0_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q8_0_##sfx, block_q8_0, RLXC_QK, rlxc_dequantize_row_q8_0_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_0_##sfx, block_q5_0, RLXC_QK, rlxc_dequantize_row_q5_0_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_1_##sfx, block_q4_1, RLXC_QK, rlxc_dequantize_row_q4_1_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_1_##sfx, block_q5_1, RLXC_QK, rlxc_dequantize_row_q5_1_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q2_k_##sfx, block_q2_k, RLXC_QK_K, rlxc_dequantize_row_q2_k_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q3_k_##sfx, block_q3_k, RLXC_QK_K, rlxc_dequantize_row_q3_k_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_k_##sfx, block_q4_k, RLXC_QK_K, rlxc_dequantize_row_q4_k_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_k_##sfx, block_q5_k, RLXC_QK_K, rlxc_dequantize_row_q5_k_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_q6_k_##sfx, block_q6_k, RLXC_QK_K, rlxc_dequantize_row_q6_k_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_iq4_nl_##sfx, block_iq4_nl, RLXC_QK, rlxc_dequantize_row_iq4_nl_##dq, rlxc_matvec_f32_##f32) \
    RLXC_DEFINE_MATVEC_FX(rlxc_matvec_fx_iq4_xs_##sfx, block_iq4_xs, RLXC_QK_K, rlxc_dequantize_row_iq4_xs_##dq, rlxc_matvec_f32_##f32)

#endif
