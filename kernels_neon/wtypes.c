/* NEON kernels of the GGUF weight types beyond Q4_0/Q8_0 that need no integer dot (scalar
 * twins in csrc/kernels_wtypes.c and csrc/kernels_ref.c): F16 / BF16 x float products, the
 * Q8_K activation quantizer and the dequantizers of every block type. The Q5_0, Q4_K and Q6_K
 * integer products come from the templates qmat.h and kqmat.h, in quant.c and
 * quant_dotprod.c. */
#include "neon.h"

/* ---- F16 / BF16 ---- */

/* 4 weights widened to floats, exactly: FCVTL for fp16, a shift into the top half for bf16. */
RLXC_INLINE float32x4_t f16_load4(const rlxc_fp16 *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
RLXC_INLINE float32x4_t bf16_load4(const rlxc_bf16 *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

RLXC_NEON_DEFINE_FLOAT_TILE(f16_tile, rlxc_fp16, f16_load4, rlxc_neon_h2f)
RLXC_NEON_DEFINE_FLOAT_TILE(bf16_tile, rlxc_bf16, bf16_load4, rlxc_bf16_to_f32)

/* As f32.c: decode 4 rows, GEMM 4 rows x 4 tokens. Here K is the driver's "nb" (one weight per
 * block). */
RLXC_DEFINE_MATMUL(rlxc_matmul_f16_neon, rlxc_fp16, float, 1, f16_tile, 4, 4, 4)
RLXC_DEFINE_MATMUL(rlxc_matmul_bf16_neon, rlxc_bf16, float, 1, bf16_tile, 4, 4, 4)
RLXC_DEFINE_MATVEC(rlxc_matvec_f16_neon, rlxc_matmul_f16_neon)
RLXC_DEFINE_MATVEC(rlxc_matvec_bf16_neon, rlxc_matmul_bf16_neon)

/* ---- Q8_K activations ---- */

/* Bit-identical with rlxc_quantize_row_q8_k: FMAXNM skips NaNs as the reference's
 * fabsf(x) > amax does, the scale comes from the first element of that magnitude (with its
 * sign), and nearest_int's trick (add 1.5 * 2^23, read the mantissa) runs lane-wise: the same
 * product, the same float add, the same bits. XTN truncates like the reference's (int8_t). */
void rlxc_quantize_row_q8_k_neon(void *vy, const float *x, int K) {
    block_q8_k *y = vy;
    const float32x4_t magic = vdupq_n_f32(12582912.0f);
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        float32x4_t amax = vdupq_n_f32(0.0f);
        for (int i = 0; i < RLXC_QK_K; i += 4) amax = vmaxnmq_f32(amax, vabsq_f32(vld1q_f32(x + i)));
        const float am = vmaxnmvq_f32(amax);
        memset(&y[b], 0, sizeof y[b]);
        if (am == 0.0f) continue;
        int j = 0;
        while (fabsf(x[j]) != am) j++; /* am is some |x[j]|: FMAXNM returns one of its inputs */
        const float iscale = -127.0f / x[j];
        for (int g = 0; g < RLXC_QK_K; g += 16) {
            int16x8_t h[2];
            for (int i = 0; i < 2; i++) {
                int32x4_t v[2];
                for (int k = 0; k < 2; k++) {
                    const float32x4_t f = vaddq_f32(vmulq_n_f32(vld1q_f32(x + g + 8 * i + 4 * k), iscale), magic);
                    const int32x4_t n = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(f), vdupq_n_s32(0x007fffff)),
                                                  vdupq_n_s32(0x00400000));
                    v[k] = vminq_s32(n, vdupq_n_s32(127));
                }
                h[i] = vcombine_s16(vmovn_s32(v[0]), vmovn_s32(v[1]));
            }
            const int8x16_t q = vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1]));
            vst1q_s8(y[b].qs + g, q);
            y[b].bsums[g / 16] = vaddlvq_s8(q);
        }
        y[b].d = 1.0f / iscale;
    }
}

/* ---- dequantization (the f32-activation path), bit-identical with the scalar twins ---- */

/* y[0..16) = d * q - m: the product rounded, then the difference, as the scalar twins round;
 * the types without mins pass m = 0 (x - 0 is x, -0 included). */
RLXC_INLINE void dequant16(float *y, int8x16_t q, float d, float m) {
    const int16x8_t h[2] = {vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)};
    for (int i = 0; i < 4; i++) {
        const int32x4_t v = i & 1 ? vmovl_high_s16(h[i / 2]) : vmovl_s16(vget_low_s16(h[i / 2]));
        vst1q_f32(y + 4 * i, vsubq_f32(vmulq_n_f32(vcvtq_f32_s32(v), d), vdupq_n_f32(m)));
    }
}

/* The blocks of 32 with one scale: d * q over their signed quants. */
#define DEFINE_DEQUANTIZE_32(type, btype)                                     \
    void rlxc_dequantize_row_##type##_neon(float *y, const void *vx, int K) { \
        const btype *x = vx;                                                  \
        for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {                 \
            int8x16_t q[2];                                                   \
            rlxc_neon_##type##_quants(&x[b], q);                              \
            const float d = rlxc_neon_h2f(x[b].d);                            \
            dequant16(y, q[0], d, 0.0f);                                      \
            dequant16(y + 16, q[1], d, 0.0f);                                 \
        }                                                                     \
    }
DEFINE_DEQUANTIZE_32(q4_0, block_q4_0)
DEFINE_DEQUANTIZE_32(q5_0, block_q5_0)
DEFINE_DEQUANTIZE_32(q8_0, block_q8_0)
DEFINE_DEQUANTIZE_32(iq4_nl, block_iq4_nl)

/* d * ls[j] first, then times the level (the scalar twin's order) */
void rlxc_dequantize_row_iq4_xs_neon(float *y, const void *vx, int K) {
    const block_iq4_xs *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_neon_h2f(x[b].d);
        for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++, y += RLXC_QK) {
            int8x16_t q[2];
            rlxc_neon_iq4_levels(x[b].qs + 16 * j, q);
            const float dl = d * (float)rlxc_iq4_xs_scale(&x[b], j);
            dequant16(y, q[0], dl, 0.0f);
            dequant16(y + 16, q[1], dl, 0.0f);
        }
    }
}

/* d * q + m as d * q - (-m): the same rounding */
#define DEFINE_DEQUANTIZE_MIN(type)                                           \
    void rlxc_dequantize_row_##type##_neon(float *y, const void *vx, int K) { \
        const block_##type *x = vx;                                           \
        for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {                 \
            int8x16_t q[2];                                                   \
            rlxc_neon_##type##_quants(&x[b], q);                              \
            const float d = rlxc_neon_h2f(x[b].d), m = -rlxc_neon_h2f(x[b].m); \
            dequant16(y, q[0], d, m);                                         \
            dequant16(y + 16, q[1], d, m);                                    \
        }                                                                     \
    }
DEFINE_DEQUANTIZE_MIN(q4_1)
DEFINE_DEQUANTIZE_MIN(q5_1)

#define DEFINE_DEQUANTIZE_K_MIN(type)                                                          \
    void rlxc_dequantize_row_##type##_neon(float *y, const void *vx, int K) {                 \
        const block_##type *x = vx;                                                            \
        uint8_t sm[16];                                                                        \
        for (int b = 0; b < K / RLXC_QK_K; b++) {                                              \
            const float d = rlxc_neon_h2f(x[b].d), dmin = rlxc_neon_h2f(x[b].dmin);            \
            rlxc_q4_k_scales(sm, x[b].scales);                                                 \
            for (int i = 0; i < 4; i++) {                                                      \
                int8x16_t q[4];                                                                \
                rlxc_neon_##type##_quants(&x[b], i, q);                                        \
                for (int h = 0; h < 2; h++) { /* sub-block j = 2i + h */                       \
                    const int j = 2 * i + h;                                                   \
                    const float dj = d * (float)sm[j], mj = dmin * (float)sm[8 + j]; /* gguf's order */ \
                    for (int v = 0; v < 2; v++, y += 16) dequant16(y, q[2 * h + v], dj, mj);   \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
DEFINE_DEQUANTIZE_K_MIN(q4_k)
DEFINE_DEQUANTIZE_K_MIN(q5_k)

void rlxc_dequantize_row_q2_k_neon(float *y, const void *vx, int K) {
    const block_q2_k *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_neon_h2f(x[b].d), dmin = rlxc_neon_h2f(x[b].dmin);
        for (int v = 0; v < 8; v++) {
            int8x16_t q[2];
            rlxc_neon_q2_k_quants(&x[b], v, q);
            for (int i = 0; i < 2; i++, y += 16) {
                const int sc = x[b].scales[2 * v + i];
                dequant16(y, q[i], d * (float)(sc & 0x0F), dmin * (float)(sc >> 4));
            }
        }
    }
}

void rlxc_dequantize_row_q3_k_neon(float *y, const void *vx, int K) {
    const block_q3_k *x = vx;
    int8_t sc[16];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_neon_h2f(x[b].d);
        rlxc_q3_k_scales(sc, x[b].scales);
        for (int v = 0; v < 8; v++) {
            int8x16_t q[2];
            rlxc_neon_q3_k_quants(&x[b], v, q);
            for (int i = 0; i < 2; i++, y += 16) dequant16(y, q[i], d * (float)sc[2 * v + i], 0.0f);
        }
    }
}

void rlxc_dequantize_row_q6_k_neon(float *y, const void *vx, int K) {
    const block_q6_k *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_neon_h2f(x[b].d);
        for (int v = 0; v < 8; v++) {
            int8x16_t q[2];
            rlxc_neon_q6_k_quants(&x[b], v, q);
            for (int i = 0; i < 2; i++, y += 16) dequant16(y, q[i], d * (float)x[b].scales[2 * v + i], 0.0f);
        }
    }
}
