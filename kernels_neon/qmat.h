/* Template of the quantized NEON products of the weight types with Q8_0 activations (Q4_0,
 * Q5_0, Q8_0, Q4_1, Q5_1 and IQ4_NL weights; matvec and blocked GEMM). Included once per integer-dot flavour, so
 * the plain and the dotprod tables share every line except the int8 dot itself; kqmat.h, the
 * K-quants' template, takes the same two definitions. The includer defines:
 *   QMAT_NAME(f)    the exported name of kernel f, e.g. f##_neon
 *   QMAT_DOT16      int32x4_t QMAT_DOT16(int32x4_t acc, int8x16_t w, int8x16_t x):
 *                   acc plus the 16 products w[j] * x[j], spread over the 4 lanes (exact;
 *                   which lane gets which product is the flavour's own, so only the sum
 *                   of the lanes means anything).
 */
#ifndef QMAT_DOT16
#error "define QMAT_NAME and QMAT_DOT16 before including qmat.h"
#endif

enum { QMAT_Q4_0, QMAT_Q5_0, QMAT_Q8_0, QMAT_Q4_1, QMAT_Q5_1, QMAT_IQ4_NL };

/* Weight block i of a row-major matrix of the given kind -> its scale and 32 signed int8 in
 * element order: unpacking once per row lets every kind share the dot, and the unpacked row
 * serves every token of the tile. */
RLXC_INLINE float qmat_load_w(const void *w, size_t i, const int kind, int8x16_t q[2], float *m) {
    switch (kind) {
    case QMAT_IQ4_NL: {
        const block_iq4_nl *b = (const block_iq4_nl *)w + i;
        rlxc_neon_iq4_nl_quants(b, q);
        return rlxc_neon_h2f(b->d);
    }
    case QMAT_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)w + i;
        rlxc_neon_q4_1_quants(b, q);
        *m = rlxc_neon_h2f(b->m);
        return rlxc_neon_h2f(b->d);
    }
    case QMAT_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)w + i;
        rlxc_neon_q5_1_quants(b, q);
        *m = rlxc_neon_h2f(b->m);
        return rlxc_neon_h2f(b->d);
    }
    case QMAT_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)w + i;
        rlxc_neon_q4_0_quants(b, q);
        return rlxc_neon_h2f(b->d);
    }
    case QMAT_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)w + i;
        rlxc_neon_q5_0_quants(b, q);
        return rlxc_neon_h2f(b->d);
    }
    default: {
        const block_q8_0 *b = (const block_q8_0 *)w + i;
        rlxc_neon_q8_0_quants(b, q);
        return rlxc_neon_h2f(b->d);
    }
    }
}

/* R x C register tile: y[t * ldy + r] = sum over blocks of dot_int(w[r], x[t]) * dw * dx, plus
 * mw * dx * sum(x[t]) for the kinds with a minimum (the sums of 4 lanes, exact in int32).
 * The integer block dots are exact; the float accumulation runs in 4 lanes, summed at the
 * end (another order than the scalar reference's, hence close but not bit-identical).
 * A decode tile (C == 1) prefetches the next R rows linearly, R blocks per block step; GEMM
 * tiles reuse their rows from cache across the token tiles of a chunk and skip it. */
RLXC_INLINE void qmat_tile(float *y, int ldy, const void *w, const block_q8_0 *x, int nb,
                           const int R, const int C, const int kind) {
    const int has_min = kind == QMAT_Q4_1 || kind == QMAT_Q5_1;
    const size_t wsize = kind == QMAT_Q4_0   ? sizeof(block_q4_0)
                         : kind == QMAT_Q5_0 ? sizeof(block_q5_0)
                         : kind == QMAT_Q4_1 ? sizeof(block_q4_1)
                         : kind == QMAT_Q5_1 ? sizeof(block_q5_1)
                         : kind == QMAT_IQ4_NL ? sizeof(block_iq4_nl)
                                             : sizeof(block_q8_0);
    float32x4_t acc[TILE_MAX][TILE_MAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) acc[r][t] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_neon_prefetch((const char *)w + (size_t)R * (nb + b) * wsize, R * wsize);
        int8x16_t wq[TILE_MAX][2];
        float dw[TILE_MAX], mw[TILE_MAX];
        for (int r = 0; r < R; r++) dw[r] = qmat_load_w(w, (size_t)r * nb + b, kind, wq[r], &mw[r]);
        for (int t = 0; t < C; t++) {
            const block_q8_0 *xb = x + (size_t)t * nb + b;
            const int8x16_t xl = vld1q_s8(xb->qs), xh = vld1q_s8(xb->qs + 16);
            const float dx = rlxc_neon_h2f(xb->d);
            const float32x4_t xs = has_min ? vcvtq_f32_s32(vpaddlq_s16(vaddq_s16(vpaddlq_s8(xl), vpaddlq_s8(xh))))
                                           : vdupq_n_f32(0.0f);
            for (int r = 0; r < R; r++) {
                const int32x4_t p = QMAT_DOT16(QMAT_DOT16(vdupq_n_s32(0), wq[r][0], xl), wq[r][1], xh);
                acc[r][t] = vfmaq_n_f32(acc[r][t], vcvtq_f32_s32(p), dw[r] * dx);
                if (has_min) acc[r][t] = vfmaq_n_f32(acc[r][t], xs, mw[r] * dx);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = vaddvq_f32(acc[r][t]);
}

#define QMAT_DEFINE_TILE(kind, wtype)                                                                           \
    RLXC_INLINE void qmat_tile_##kind(float *y, int ldy, const wtype *w, const block_q8_0 *x, int nb, const int R, \
                                      const int C) {                                                            \
        qmat_tile(y, ldy, w, x, nb, R, C, QMAT_##kind);                                                         \
    }
QMAT_DEFINE_TILE(Q4_0, block_q4_0)
QMAT_DEFINE_TILE(Q5_0, block_q5_0)
QMAT_DEFINE_TILE(Q8_0, block_q8_0)
QMAT_DEFINE_TILE(Q4_1, block_q4_1)
QMAT_DEFINE_TILE(Q5_1, block_q5_1)
QMAT_DEFINE_TILE(IQ4_NL, block_iq4_nl)

/* Decode streams 4 rows per tile; the GEMM keeps 4 rows x 4 tokens of accumulators (16 of the
 * 32 vector registers, the unpacked rows another 8). */
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q4_0), block_q4_0, qmat_tile_Q4_0, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q5_0), block_q5_0, qmat_tile_Q5_0, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q8_0), block_q8_0, qmat_tile_Q8_0, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q4_1), block_q4_1, qmat_tile_Q4_1, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q5_1), block_q5_1, qmat_tile_Q5_1, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_iq4_nl), block_iq4_nl, qmat_tile_IQ4_NL, 4, 4, 4)
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q4_0), QMAT_NAME(rlxc_matmul_q4_0))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q5_0), QMAT_NAME(rlxc_matmul_q5_0))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q8_0), QMAT_NAME(rlxc_matmul_q8_0))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q4_1), QMAT_NAME(rlxc_matmul_q4_1))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q5_1), QMAT_NAME(rlxc_matmul_q5_1))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_iq4_nl), QMAT_NAME(rlxc_matmul_iq4_nl))
