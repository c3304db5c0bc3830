/* Template of the K-quant NEON products: Q4_K, Q5_K, Q6_K and IQ4_XS weights times Q8_K activations, matvec
 * and blocked GEMM. Included after qmat.h, with its QMAT_NAME and QMAT_DOT16.
 *
 * Per super-block of 256 the integer sums are the scalar twin's (kernels_wtypes.c), exact in
 * int32: sumi = sum_j sc[j] * (q . x over sub-block j) and, for Q4_K, summ = sum_j m[j] *
 * (sum of x over sub-block j) from Q8_K's bsums (and so for Q5_K). Four sub-blocks at a time, their lane-spread
 * dots fold into one vector (lane k = sub-block k) that one multiply-add scales by their four
 * scales. Each super-block then ends in the scalar twin's own float expression, so the outputs
 * are bit-identical with it; its one lane reduction per 256 weights costs little. */

/* 4 int8 scales -> int32 lanes */
RLXC_INLINE int32x4_t kq_scales4(const int8_t *s) {
    int32_t u;
    memcpy(&u, s, sizeof u);
    return vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(u)))));
}

enum { KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_IQ4_XS };

/* Sub-blocks 4g .. 4g+4 of a block as int8 in element order: Q4_K's and Q5_K's sub-blocks of 32
 * take two vectors each, Q6_K's of 16 one. */
RLXC_INLINE void kq_load_w(const void *wb, const int g, const int kind, int8x16_t q[8]) {
    switch (kind) {
    case KQ_IQ4_XS:
        for (int k = 0; k < 4; k++) rlxc_neon_iq4_levels(((const block_iq4_xs *)wb)->qs + 16 * (4 * g + k), q + 2 * k);
        break;
    case KQ_Q6_K:
        rlxc_neon_q6_k_quants(wb, 2 * g, q);
        rlxc_neon_q6_k_quants(wb, 2 * g + 1, q + 2);
        break;
    case KQ_Q5_K:
        rlxc_neon_q5_k_quants(wb, 2 * g, q);
        rlxc_neon_q5_k_quants(wb, 2 * g + 1, q + 4);
        break;
    default:
        rlxc_neon_q4_k_quants(wb, 2 * g, q);
        rlxc_neon_q4_k_quants(wb, 2 * g + 1, q + 4);
    }
}

/* The scales of a block with mins (Q4_K, Q5_K: same fields, other layouts) */
typedef struct {
    const uint8_t *scales;
    rlxc_fp16 d, dmin;
} kq_min_scales;
RLXC_INLINE kq_min_scales kq_min_fields(const void *wb, const int kind) {
    if (kind == KQ_Q5_K) {
        const block_q5_k *b = wb;
        return (kq_min_scales){b->scales, b->d, b->dmin};
    }
    const block_q4_k *b = wb;
    return (kq_min_scales){b->scales, b->d, b->dmin};
}

/* R x C tile, row by row within a super-block: a row's unpacked group of sub-blocks serves the
 * C tokens from registers, the tokens' activations come back from L1 for the next row. Decode
 * tiles (C == 1) prefetch the next R rows as qmat.h's do. */
RLXC_INLINE void kq_tile(float *y, int ldy, const void *w, const block_q8_k *x, int nb, const int R, const int C,
                         const int kind) {
    const int q6 = kind == KQ_Q6_K, xs = kind == KQ_IQ4_XS, mins = !q6 && !xs;
    const size_t wsize = q6 ? sizeof(block_q6_k) : xs ? sizeof(block_iq4_xs) : kind == KQ_Q5_K ? sizeof(block_q5_k)
                                                                                               : sizeof(block_q4_k);
    const int S = q6 ? 1 : 2; /* vectors per sub-block */
    float acc[TILE_MAX][TILE_MAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) acc[r][t] = 0.0f;
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_neon_prefetch((const char *)w + (size_t)R * (nb + b) * wsize, R * wsize);
        for (int r = 0; r < R; r++) {
            const void *wb = (const char *)w + ((size_t)r * nb + b) * wsize;
            const block_q6_k *b6 = wb;
            const block_iq4_xs *bx = wb;
            kq_min_scales ms = {0};
            uint8_t sm[16]; /* Q4_K / Q5_K: sc[0..8), m[0..8); 6-bit, so also valid as int8 */
            int8_t ls[8];   /* IQ4_XS: ls[j] - 32 */
            if (mins) ms = kq_min_fields(wb, kind), rlxc_q4_k_scales(sm, ms.scales);
            if (xs)
                for (int j = 0; j < 8; j++) ls[j] = (int8_t)rlxc_iq4_xs_scale(bx, j);
            const int8_t *sc = q6 ? b6->scales : xs ? ls : (const int8_t *)sm;
            int32x4_t sumi[TILE_MAX];
            for (int t = 0; t < C; t++) sumi[t] = vdupq_n_s32(0);
            for (int g = 0; g < 4 / S; g++) {
                int8x16_t q[8];
                kq_load_w(wb, g, kind, q);
                const int32x4_t s4 = kq_scales4(sc + 4 * g);
                for (int t = 0; t < C; t++) {
                    const int8_t *xq = x[(size_t)t * nb + b].qs + 64 * S * g;
                    int32x4_t d[4];
                    for (int k = 0; k < 4; k++) {
                        d[k] = vdupq_n_s32(0);
                        for (int v = 0; v < S; v++) d[k] = QMAT_DOT16(d[k], q[S * k + v], vld1q_s8(xq + 16 * (S * k + v)));
                    }
                    sumi[t] = vmlaq_s32(sumi[t], vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3])), s4);
                }
            }
            for (int t = 0; t < C; t++) {
                const block_q8_k *xb = x + (size_t)t * nb + b;
                const int si = vaddvq_s32(sumi[t]);
                if (!mins) {
                    acc[r][t] += rlxc_neon_h2f(q6 ? b6->d : bx->d) * xb->d * (float)si;
                } else {
                    /* the mins against the sums of 32: adjacent bsums added, lane j = sub-block j */
                    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
                    const int16x8_t xs = vpaddq_s16(vld1q_s16(xb->bsums), vld1q_s16(xb->bsums + 8));
                    const int summ = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(xs)), m, xs));
                    acc[r][t] += rlxc_neon_h2f(ms.d) * xb->d * (float)si - rlxc_neon_h2f(ms.dmin) * xb->d * (float)summ;
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = acc[r][t];
}

#define KQ_DEFINE_TILE(type, kind)                                                                              \
    RLXC_INLINE void kq_tile_##type(float *y, int ldy, const block_##type *w, const block_q8_k *x, int nb, const int R, \
                                    const int C) {                                                                  \
        kq_tile(y, ldy, w, x, nb, R, C, kind);                                                                      \
    }
KQ_DEFINE_TILE(q4_k, KQ_Q4_K)
KQ_DEFINE_TILE(q5_k, KQ_Q5_K)
KQ_DEFINE_TILE(q6_k, KQ_Q6_K)
KQ_DEFINE_TILE(iq4_xs, KQ_IQ4_XS)

/* Tiles as qmat.h's: decode 4 rows, GEMM 4 rows x 4 tokens. Only one row's integer sums are
 * live at a time and the float sums are touched once per super-block, so the tile size sets
 * little register pressure here: C is how many tokens a row's unpacking serves, R how many
 * rows share the activations in L1. */
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q4_k), block_q4_k, block_q8_k, RLXC_QK_K, kq_tile_q4_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q5_k), block_q5_k, block_q8_k, RLXC_QK_K, kq_tile_q5_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_iq4_xs), block_iq4_xs, block_q8_k, RLXC_QK_K, kq_tile_iq4_xs, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q6_k), block_q6_k, block_q8_k, RLXC_QK_K, kq_tile_q6_k, 4, 4, 4)
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q4_k), QMAT_NAME(rlxc_matmul_q4_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q5_k), QMAT_NAME(rlxc_matmul_q5_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_iq4_xs), QMAT_NAME(rlxc_matmul_iq4_xs))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q6_k), QMAT_NAME(rlxc_matmul_q6_k))
