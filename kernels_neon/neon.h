/* NEON kernels: declarations and the small helpers several files share.
 *
 * Everything here is plain ARMv8.0 Advanced SIMD (mandatory on AArch64), so the directory
 * compiles for -march=armv8-a and runs on every aarch64 CPU. The only newer instruction used
 * is SDOT (ARMv8.2 dotprod), confined to the functions of quant_dotprod.c, which that file
 * alone compiles for the dotprod target; rlxc_kernels_neon() picks that table only when
 * HWCAP_ASIMDDP says the CPU has it. */
#ifndef RLXC_KERNELS_NEON_H
#define RLXC_KERNELS_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../csrc/kernels_simd.h"

/* Register tiles are R x C with R, C <= TILE_MAX, compile-time constants after inlining;
 * fixed-size arrays (not VLAs) let gcc keep them in the 32 vector registers. */
#define TILE_MAX 4

/* fp16 <-> f32 through the base-ARMv8 FCVT (no +fp16 needed: that extension is fp16
 * arithmetic). FCVT rounds to nearest even under the default FPCR, like rlxc_f32_to_fp16,
 * and overflows to inf / keeps subnormals exactly as it does. */
RLXC_INLINE float rlxc_neon_h2f(rlxc_fp16 h) {
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

RLXC_INLINE rlxc_fp16 rlxc_neon_f2h(float x) {
    const __fp16 f = (__fp16)x;
    rlxc_fp16 h;
    memcpy(&h, &f, sizeof h);
    return h;
}

/* Prefetch [p, p + n) into L1: a decode tile streams R rows at once, short interleaved
 * streams the hardware prefetcher follows poorly, so each tile asks for the next one. */
RLXC_INLINE void rlxc_neon_prefetch(const void *p, const size_t n) {
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* R x C register tile of a float product whose weights are wtype, widened exactly to floats by
 * load4 (4 at a time) and to_f32: every weight vector loaded serves C tokens, every activation
 * vector R rows. The K % 4 tail goes through a scalar loop after the lane sums. */
#define RLXC_NEON_DEFINE_FLOAT_TILE(name, wtype, load4, to_f32)                                                 \
    RLXC_INLINE void name(float *y, int ldy, const wtype *w, const float *x, int K, const int R, const int C) { \
        float32x4_t acc[TILE_MAX][TILE_MAX];                                                                    \
        for (int r = 0; r < R; r++)                                                                             \
            for (int t = 0; t < C; t++) acc[r][t] = vdupq_n_f32(0.0f);                                          \
        int k = 0;                                                                                              \
        for (; k + 4 <= K; k += 4) {                                                                            \
            float32x4_t xv[TILE_MAX];                                                                           \
            for (int t = 0; t < C; t++) xv[t] = vld1q_f32(x + (size_t)t * K + k);                               \
            for (int r = 0; r < R; r++) {                                                                       \
                const float32x4_t wv = load4(w + (size_t)r * K + k);                                            \
                for (int t = 0; t < C; t++) acc[r][t] = vfmaq_f32(acc[r][t], wv, xv[t]);                        \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++)                                                                             \
            for (int t = 0; t < C; t++) {                                                                       \
                float s = vaddvq_f32(acc[r][t]);                                                                \
                for (int j = k; j < K; j++) s += to_f32(w[(size_t)r * K + j]) * x[(size_t)t * K + j];           \
                y[(size_t)t * ldy + r] = s;                                                                     \
            }                                                                                                   \
    }

/* The quants of the block types as int8 in element order, 16 per vector: the integer dots
 * multiply them with the activations' int8 quants, the dequantizers scale them. Offsets are
 * removed (signed quants) except Q4_K's 0..15 and Q4_1 / Q5_1's, whose offset is the mins term. */

RLXC_INLINE void rlxc_neon_q8_0_quants(const block_q8_0 *b, int8x16_t q[2]) {
    q[0] = vld1q_s8(b->qs);
    q[1] = vld1q_s8(b->qs + 16);
}

/* 0..15: low nibbles are elements 0..15, high nibbles 16..31 (Q4_0, Q4_1) */
RLXC_INLINE void rlxc_neon_q4_unsigned(const uint8_t *qs, int8x16_t q[2]) {
    const uint8x16_t v = vld1q_u8(qs);
    q[0] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
    q[1] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
}

/* 0..31 (Q5_0, Q5_1): the nibbles as Q4_0, the fifth bit of element j is bit j of qh, i.e.
 * bit j % 8 of byte j / 8, found by testing each lane's byte against its own bit. */
RLXC_INLINE void rlxc_neon_q5_unsigned(const uint8_t *qh, const uint8_t *qs, int8x16_t q[2]) {
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull)); /* lane l: 1 << l % 8 */
    rlxc_neon_q4_unsigned(qs, q);
    for (int i = 0; i < 2; i++) {
        const uint8x16_t h = vcombine_u8(vdup_n_u8(qh[2 * i]), vdup_n_u8(qh[2 * i + 1]));
        const uint8x16_t fifth = vandq_u8(vtstq_u8(h, bit), vdupq_n_u8(0x10));
        q[i] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[i]), fifth));
    }
}

/* q - 8 */
RLXC_INLINE void rlxc_neon_q4_0_quants(const block_q4_0 *b, int8x16_t q[2]) {
    rlxc_neon_q4_unsigned(b->qs, q);
    for (int i = 0; i < 2; i++) q[i] = vsubq_s8(q[i], vdupq_n_s8(8));
}

/* q - 16 */
RLXC_INLINE void rlxc_neon_q5_0_quants(const block_q5_0 *b, int8x16_t q[2]) {
    rlxc_neon_q5_unsigned(b->qh, b->qs, q);
    for (int i = 0; i < 2; i++) q[i] = vsubq_s8(q[i], vdupq_n_s8(16));
}

/* IQ4 levels of 16 index bytes in Q4_0's layout (IQ4_NL blocks, IQ4_XS sub-blocks) */
RLXC_INLINE void rlxc_neon_iq4_levels(const uint8_t *qs, int8x16_t q[2]) {
    const int8x16_t table = vld1q_s8(rlxc_iq4_values);
    rlxc_neon_q4_unsigned(qs, q);
    for (int i = 0; i < 2; i++) q[i] = vqtbl1q_s8(table, vreinterpretq_u8_s8(q[i]));
}
RLXC_INLINE void rlxc_neon_iq4_nl_quants(const block_iq4_nl *b, int8x16_t q[2]) { rlxc_neon_iq4_levels(b->qs, q); }

/* Q4_1 / Q5_1: unsigned, the block's minimum is added apart */
RLXC_INLINE void rlxc_neon_q4_1_quants(const block_q4_1 *b, int8x16_t q[2]) { rlxc_neon_q4_unsigned(b->qs, q); }
RLXC_INLINE void rlxc_neon_q5_1_quants(const block_q5_1 *b, int8x16_t q[2]) {
    rlxc_neon_q5_unsigned(b->qh, b->qs, q);
}

/* Elements 64i .. 64i+64 (sub-blocks 2i, 2i+1), 0..15: q[0..2) the low nibbles of qs[32i ..
 * 32i+32), q[2..4) the high ones. */
RLXC_INLINE void rlxc_neon_k_nibbles(const uint8_t *qs, int8x16_t q[4]) {
    for (int h = 0; h < 2; h++) {
        const uint8x16_t v = vld1q_u8(qs + 16 * h);
        q[h] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));
        q[2 + h] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
    }
}
RLXC_INLINE void rlxc_neon_q4_k_quants(const block_q4_k *b, const int i, int8x16_t q[4]) {
    rlxc_neon_k_nibbles(b->qs + 32 * i, q);
}

/* The same for Q5_K, 0..31: 0x10 added where qh[l] has bit 2i (sub-block 2i) or 2i + 1. */
RLXC_INLINE void rlxc_neon_q5_k_quants(const block_q5_k *b, const int i, int8x16_t q[4]) {
    rlxc_neon_k_nibbles(b->qs + 32 * i, q);
    for (int h = 0; h < 2; h++) {
        const uint8x16_t qh = vld1q_u8(b->qh + 16 * h);
        for (int s = 0; s < 2; s++) {
            const uint8x16_t fifth = vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1 << (2 * i + s)))), vdupq_n_u8(0x10));
            q[2 * s + h] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[2 * s + h]), fifth));
        }
    }
}

/* Elements 32v .. 32v+32 (v = 4h + k, sub-blocks 2v, 2v+1) of Q2_K, 0..3: bits 2k, 2k+1 of
 * qs[32h ..] (layout in kernels.h). */
RLXC_INLINE void rlxc_neon_q2_k_quants(const block_q2_k *b, const int v, int8x16_t q[2]) {
    for (int i = 0; i < 2; i++)
        q[i] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vld1q_u8(b->qs + 32 * (v / 4) + 16 * i), vdupq_n_s8((int8_t)(-2 * (v % 4)))),
                                            vdupq_n_u8(3)));
}

/* The same of Q3_K, q - 4: Q2_K's two bits, less 4 where bit v of hmask[l] is clear. */
RLXC_INLINE void rlxc_neon_q3_k_quants(const block_q3_k *b, const int v, int8x16_t q[2]) {
    for (int i = 0; i < 2; i++) {
        const uint8x16_t lo = vandq_u8(vshlq_u8(vld1q_u8(b->qs + 32 * (v / 4) + 16 * i), vdupq_n_s8((int8_t)(-2 * (v % 4)))),
                                       vdupq_n_u8(3));
        const uint8x16_t missing = vbicq_u8(vdupq_n_u8(4), vtstq_u8(vld1q_u8(b->hmask + 16 * i), vdupq_n_u8((uint8_t)(1 << v))));
        q[i] = vsubq_s8(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(missing));
    }
}

/* Elements 32v .. 32v+32 (v = 4h + k, sub-blocks 2v, 2v+1), q - 32: the low 4 bits from ql,
 * the top 2 from bits 2k, 2k+1 of qh (layout in kernels.h), shifted to bits 4, 5 by 4 - 2k
 * (a negative USHL count shifts right). */
RLXC_INLINE void rlxc_neon_q6_k_quants(const block_q6_k *b, const int v, int8x16_t q[2]) {
    const int h = v / 4, k = v % 4;
    for (int i = 0; i < 2; i++) {
        const uint8x16_t l = vld1q_u8(b->ql + 64 * h + 32 * (k & 1) + 16 * i);
        const uint8x16_t lo = k >= 2 ? vshrq_n_u8(l, 4) : vandq_u8(l, vdupq_n_u8(0x0F));
        const uint8x16_t top = vshlq_u8(vld1q_u8(b->qh + 32 * h + 16 * i), vdupq_n_s8((int8_t)(4 - 2 * k)));
        q[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(top, vdupq_n_u8(0x30)))), vdupq_n_s8(32));
    }
}

/* Every kernel of the plain table (plain ARMv8.0 NEON): the float products (f32.c, wtypes.c),
 * the quantizers and dequantizers, bit-identical with their scalar twins (quant.c, wtypes.c),
 * the block types' matvecs with float activations (f32.c), the norms, RoPE, attention and
 * element-wise kernels, and the quantized products, whose integer dots use SMULL + SADALP
 * (quant.c). The dotprod table's quantized products take SDOT (quant_dotprod.c); both come from
 * the templates qmat.h (Q8_0 activations) and kqmat.h (Q8_K activations). */
RLXC_DECLARE_KERNELS(neon)
RLXC_DECLARE_Q(neon_dotprod)
RLXC_DECLARE_WQ(neon_dotprod)
void rlxc_matvec_q4_0x16_neon_dotprod(float *y, const void *w, const void *x, int G, int K);
void rlxc_matvec_q8_0x16_neon_dotprod(float *y, const void *w, const void *x, int G, int K);
/* Prefill keeps qmat.h's GEMM on the GGUF layout, which reuses each weight register across
 * tokens: NEON has no interleaved GEMM for the repacked rows. */
#define rlxc_matmul_q4_0x16_neon_dotprod NULL
#define rlxc_matmul_q8_0x16_neon_dotprod NULL

#endif
