/* Template of the quantized NEON products (Q4_0 and Q8_0 weights times Q8_0 activations,
 * matvec and blocked GEMM). Included once per integer-dot flavour, so the plain and the
 * dotprod tables share every line except the 32-element int8 dot itself. The includer
 * defines:
 *   QMAT_NAME(f)    the exported name of kernel f, e.g. f##_neon
 *   QMAT_DOT32      int32x4_t QMAT_DOT32(int32x4_t acc, int8x16_t w_lo, int8x16_t w_hi,
 *                                        int8x16_t x_lo, int8x16_t x_hi):
 *                   acc plus the 32 products w[j] * x[j], spread over the 4 lanes (exact).
 */
#ifndef QMAT_DOT32
#error "define QMAT_NAME and QMAT_DOT32 before including qmat.h"
#endif

/* Weight block i of a row-major Q4_0 (q4 = 1) or Q8_0 (q4 = 0) matrix -> its scale and 32
 * signed int8 in element order. Q4_0 low nibbles are elements 0..15, high nibbles 16..31,
 * each minus 8: unpacking to int8 once per row lets both weight types share the dot, and the
 * unpacked row serves every token of the tile. */
RLXC_INLINE float qmat_load_w(const void *w, size_t i, const int q4, int8x16_t *lo, int8x16_t *hi) {
    if (q4) {
        const block_q4_0 *b = (const block_q4_0 *)w + i;
        const uint8x16_t q = vld1q_u8(b->qs);
        const int8x16_t eight = vdupq_n_s8(8);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
        return rlxc_neon_h2f(b->d);
    }
    const block_q8_0 *b = (const block_q8_0 *)w + i;
    *lo = vld1q_s8(b->qs);
    *hi = vld1q_s8(b->qs + 16);
    return rlxc_neon_h2f(b->d);
}

/* R x C register tile: y[t * ldy + r] = sum over blocks of dot_int(w[r], x[t]) * dw * dx.
 * The integer block dots are exact; the float accumulation runs in 4 lanes, summed at the
 * end (another order than the scalar reference's, hence close but not bit-identical).
 * A decode tile (C == 1) prefetches the next R rows linearly, R blocks per block step; GEMM
 * tiles reuse their rows from cache across the token tiles of a chunk and skip it. */
RLXC_INLINE void qmat_tile(float *y, int ldy, const void *w, const block_q8_0 *x, int nb,
                           const int R, const int C, const int q4) {
    const size_t wsize = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    float32x4_t acc[TILE_MAX][TILE_MAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) acc[r][t] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_neon_prefetch((const char *)w + (size_t)(R * nb + R * b) * wsize, R * wsize);
        int8x16_t wl[TILE_MAX], wh[TILE_MAX];
        float dw[TILE_MAX];
        for (int r = 0; r < R; r++) dw[r] = qmat_load_w(w, (size_t)r * nb + b, q4, &wl[r], &wh[r]);
        for (int t = 0; t < C; t++) {
            const block_q8_0 *xb = x + (size_t)t * nb + b;
            const int8x16_t xl = vld1q_s8(xb->qs), xh = vld1q_s8(xb->qs + 16);
            const float dx = rlxc_neon_h2f(xb->d);
            for (int r = 0; r < R; r++) {
                const int32x4_t p = QMAT_DOT32(vdupq_n_s32(0), wl[r], wh[r], xl, xh);
                acc[r][t] = vfmaq_n_f32(acc[r][t], vcvtq_f32_s32(p), dw[r] * dx);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = vaddvq_f32(acc[r][t]);
}

RLXC_INLINE void qmat_tile_q4_0(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *x, int nb,
                                const int R, const int C) {
    qmat_tile(y, ldy, w, x, nb, R, C, 1);
}

RLXC_INLINE void qmat_tile_q8_0(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *x, int nb,
                                const int R, const int C) {
    qmat_tile(y, ldy, w, x, nb, R, C, 0);
}

/* Decode streams 4 rows per tile; the GEMM keeps 4 rows x 4 tokens of accumulators (16 of the
 * 32 vector registers, the unpacked rows another 8). */
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q4_0), block_q4_0, qmat_tile_q4_0, 4, 4, 4)
RLXC_DEFINE_QMATMUL(QMAT_NAME(rlxc_matmul_q8_0), block_q8_0, qmat_tile_q8_0, 4, 4, 4)
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q4_0), QMAT_NAME(rlxc_matmul_q4_0), block_q4_0, block_q8_0)
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q8_0), QMAT_NAME(rlxc_matmul_q8_0), block_q8_0, block_q8_0)
