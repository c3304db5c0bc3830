/* Template of the K-quant NEON products: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights times Q8_K activations, matvec
 * and blocked GEMM. Included after qmat.h, with its QMAT_NAME and QMAT_DOT16.
 *
 * Per super-block of 256 the integer sums are the scalar twin's (kernels_wtypes.c), exact in
 * int32: sumi = sum_j sc[j] * (q . x over sub-block j) and, for Q2_K / Q4_K / Q5_K, summ =
 * sum_j m[j] * (sum of x over sub-block j) from Q8_K's bsums. Four sub-blocks at a time, their lane-spread
 * dots fold into one vector (lane k = sub-block k) that one multiply-add scales by their four
 * scales. Each super-block then ends in the scalar twin's own float expression, so the outputs
 * are bit-identical with it; its one lane reduction per 256 weights costs little. */

/* 4 int8 scales -> int32 lanes */
RLXC_INLINE int32x4_t kq_scales4(const int8_t *s) {
    int32_t u;
    memcpy(&u, s, sizeof u);
    return vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(u)))));
}

enum { KQ_Q2_K, KQ_Q3_K, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_IQ4_XS };

/* Sub-blocks of 16 (one vector each) or of 32 (two). */
RLXC_INLINE int kq_sub16(const int kind) { return kind == KQ_Q2_K || kind == KQ_Q3_K || kind == KQ_Q6_K; }

/* Sub-blocks 4g .. 4g+4 of a block as int8 in element order. */
RLXC_INLINE void kq_load_w(const void *wb, const int g, const int kind, int8x16_t q[8]) {
    switch (kind) {
    case KQ_IQ4_XS:
        for (int k = 0; k < 4; k++) rlxc_neon_iq4_levels(((const block_iq4_xs *)wb)->qs + 16 * (4 * g + k), q + 2 * k);
        break;
    case KQ_Q2_K:
        rlxc_neon_q2_k_quants(wb, 2 * g, q);
        rlxc_neon_q2_k_quants(wb, 2 * g + 1, q + 2);
        break;
    case KQ_Q3_K:
        rlxc_neon_q3_k_quants(wb, 2 * g, q);
        rlxc_neon_q3_k_quants(wb, 2 * g + 1, q + 2);
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

/* What a super-block's sums are scaled by: sc[j] per sub-block (6 bits at most, so int8), and
 * for the types with mins m[j] and dmin. */
typedef struct {
    int8_t sc[16];
    uint8_t m[16];
    int mins; /* 0; 8 (Q4_K, Q5_K: sub-blocks of 32); 16 (Q2_K) */
    float d, dmin;
} kq_scales;

RLXC_INLINE void kq_block_scales(kq_scales *s, const void *wb, const int kind) {
    s->mins = 0;
    switch (kind) {
    case KQ_Q2_K: {
        const block_q2_k *b = wb;
        const uint8x16_t v = vld1q_u8(b->scales);
        vst1q_s8(s->sc, vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))));
        vst1q_u8(s->m, vshrq_n_u8(v, 4));
        s->mins = 16, s->d = rlxc_neon_h2f(b->d), s->dmin = rlxc_neon_h2f(b->dmin);
        break;
    }
    case KQ_Q3_K: {
        const block_q3_k *b = wb;
        rlxc_q3_k_scales(s->sc, b->scales);
        s->d = rlxc_neon_h2f(b->d);
        break;
    }
    case KQ_Q6_K: {
        const block_q6_k *b = wb;
        memcpy(s->sc, b->scales, 16);
        s->d = rlxc_neon_h2f(b->d);
        break;
    }
    case KQ_IQ4_XS: {
        const block_iq4_xs *b = wb;
        for (int j = 0; j < 8; j++) s->sc[j] = (int8_t)rlxc_iq4_xs_scale(b, j);
        s->d = rlxc_neon_h2f(b->d);
        break;
    }
    default: { /* Q4_K, Q5_K: the same fields at other offsets */
        const block_q4_k *b4 = wb;
        const block_q5_k *b5 = wb;
        const int q5 = kind == KQ_Q5_K;
        uint8_t sm[16];
        rlxc_q4_k_scales(sm, q5 ? b5->scales : b4->scales);
        memcpy(s->sc, sm, 8), memcpy(s->m, sm + 8, 8);
        s->mins = 8, s->d = rlxc_neon_h2f(q5 ? b5->d : b4->d), s->dmin = rlxc_neon_h2f(q5 ? b5->dmin : b4->dmin);
    }
    }
}

/* sum_j m[j] * (sum of x over sub-block j), from Q8_K's sums of 16 (adjacent ones added for
 * sub-blocks of 32). */
RLXC_INLINE int kq_min_sum(const kq_scales *s, const block_q8_k *x) {
    const int16x8_t b0 = vld1q_s16(x->bsums), b1 = vld1q_s16(x->bsums + 8);
    if (s->mins == 8) {
        const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(s->m))), xs = vpaddq_s16(b0, b1);
        return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(m), vget_low_s16(xs)), m, xs));
    }
    const uint8x16_t mu = vld1q_u8(s->m);
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mu))), m1 = vreinterpretq_s16_u16(vmovl_high_u8(mu));
    int32x4_t a = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    a = vmlal_high_s16(a, m0, b0);
    a = vmlal_s16(a, vget_low_s16(m1), vget_low_s16(b1));
    return vaddvq_s32(vmlal_high_s16(a, m1, b1));
}

/* R x C tile, row by row within a super-block: a row's unpacked group of sub-blocks serves the
 * C tokens from registers, the tokens' activations come back from L1 for the next row. Decode
 * tiles (C == 1) prefetch the next R rows as qmat.h's do. */
RLXC_INLINE void kq_tile(float *y, int ldy, const void *w, const block_q8_k *x, int nb, const int R, const int C,
                         const int kind) {
    static const size_t sizes[] = {[KQ_Q2_K] = sizeof(block_q2_k), [KQ_Q3_K] = sizeof(block_q3_k),
                                   [KQ_Q4_K] = sizeof(block_q4_k), [KQ_Q5_K] = sizeof(block_q5_k),
                                   [KQ_Q6_K] = sizeof(block_q6_k), [KQ_IQ4_XS] = sizeof(block_iq4_xs)};
    const size_t wsize = sizes[kind];
    const int S = kq_sub16(kind) ? 1 : 2; /* vectors per sub-block */
    float acc[TILE_MAX][TILE_MAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) acc[r][t] = 0.0f;
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_neon_prefetch((const char *)w + (size_t)R * (nb + b) * wsize, R * wsize);
        for (int r = 0; r < R; r++) {
            const void *wb = (const char *)w + ((size_t)r * nb + b) * wsize;
            kq_scales ks;
            kq_block_scales(&ks, wb, kind);
            int32x4_t sumi[TILE_MAX];
            for (int t = 0; t < C; t++) sumi[t] = vdupq_n_s32(0);
            for (int g = 0; g < 4 / S; g++) {
                int8x16_t q[8];
                kq_load_w(wb, g, kind, q);
                const int32x4_t s4 = kq_scales4(ks.sc + 4 * g);
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
                if (!ks.mins) acc[r][t] += ks.d * xb->d * (float)si;
                else acc[r][t] += ks.d * xb->d * (float)si - ks.dmin * xb->d * (float)kq_min_sum(&ks, xb);
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
KQ_DEFINE_TILE(q2_k, KQ_Q2_K)
KQ_DEFINE_TILE(q3_k, KQ_Q3_K)
KQ_DEFINE_TILE(q4_k, KQ_Q4_K)
KQ_DEFINE_TILE(q5_k, KQ_Q5_K)
KQ_DEFINE_TILE(q6_k, KQ_Q6_K)
KQ_DEFINE_TILE(iq4_xs, KQ_IQ4_XS)

/* Tiles as qmat.h's: decode 4 rows, GEMM 4 rows x 4 tokens. Only one row's integer sums are
 * live at a time and the float sums are touched once per super-block, so the tile size sets
 * little register pressure here: C is how many tokens a row's unpacking serves, R how many
 * rows share the activations in L1. */
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q2_k), block_q2_k, block_q8_k, RLXC_QK_K, kq_tile_q2_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q3_k), block_q3_k, block_q8_k, RLXC_QK_K, kq_tile_q3_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q4_k), block_q4_k, block_q8_k, RLXC_QK_K, kq_tile_q4_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q5_k), block_q5_k, block_q8_k, RLXC_QK_K, kq_tile_q5_k, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_iq4_xs), block_iq4_xs, block_q8_k, RLXC_QK_K, kq_tile_iq4_xs, 4, 4, 4)
RLXC_DEFINE_MATMUL(QMAT_NAME(rlxc_matmul_q6_k), block_q6_k, block_q8_k, RLXC_QK_K, kq_tile_q6_k, 4, 4, 4)
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q2_k), QMAT_NAME(rlxc_matmul_q2_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q3_k), QMAT_NAME(rlxc_matmul_q3_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q4_k), QMAT_NAME(rlxc_matmul_q4_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q5_k), QMAT_NAME(rlxc_matmul_q5_k))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_iq4_xs), QMAT_NAME(rlxc_matmul_iq4_xs))
RLXC_DEFINE_MATVEC(QMAT_NAME(rlxc_matvec_q6_k), QMAT_NAME(rlxc_matmul_q6_k))
