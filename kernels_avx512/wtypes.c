/* AVX-512 (BW, VNNI) versions of the Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K dots of kernels_avx2/wtypes.c: the
 * same arithmetic with fewer instructions, which is what these compute-bound kernels need.
 * Q4_K and Q6_K take 64 quants per register and fold the scale into the widening step
 * (vpdpwssd: int16 pairs times the int16 scale, accumulated in int32); Q5_0 sets its fifth
 * bit with a byte mask straight from qh and takes vpdpbusd for maddubs + madd + add. The
 * unsigned-offset corrections of the AVX2 kernels become the initial int32 accumulators. */
#include <string.h>

#include "avx512.h"
#include "kquants.h"
#include "../kernels_avx2/iq4.h"
#include "../kernels_avx2/q8_0_tile.h"

/* ---- Q5_0 (256-bit) ---- */

/* Quants 0..31 of the Q5 layout (Q5_0, Q5_1): the nibbles, plus 16 where qh has the bit. */
RLXC_INLINE __m256i q5_quants(const uint8_t qh_bytes[4], const uint8_t *qs) {
    const __m256i nib = rlxc_q4_nibbles256(qs);
    uint32_t qh;
    memcpy(&qh, qh_bytes, sizeof qh);
    return _mm256_mask_add_epi8(nib, _cvtu32_mask32(qh), nib, _mm256_set1_epi8(16));
}
RLXC_INLINE __m256i q5_0_quants(const block_q5_0 *b) { return q5_quants(b->qh, b->qs); }

/* -16 * sum(x) per 4-byte group: the dots start from it */
RLXC_INLINE __m256i q5_0_offset_start(__m256i xq) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), xq));
}

RLXC_INLINE __m256i q5_0_dot(__m256i q, __m256i xq, __m256i start) { return _mm256_dpbusd_epi32(start, q, xq); }

RLXC_DEFINE_Q8_0_TILE(q5_0_tile, block_q5_0, q5_0_quants, q5_0_offset_start, q5_0_dot)

/* ---- Q4_1, Q5_1: unsigned quants, the minimum times the activation sums ---- */

RLXC_INLINE __m256i q4_1_quants(const block_q4_1 *b) { return rlxc_q4_nibbles256(b->qs); }
RLXC_INLINE __m256i q5_1_quants(const block_q5_1 *b) { return q5_quants(b->qh, b->qs); }
RLXC_INLINE __m256i x_sums(__m256i xq) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), xq);
}
RLXC_INLINE __m256i unsigned_dot(__m256i q, __m256i xq, __m256i sums) {
    (void)sums;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xq);
}
RLXC_DEFINE_Q8_0_MIN_TILE(q4_1_tile, block_q4_1, q4_1_quants, x_sums, unsigned_dot)
RLXC_DEFINE_Q8_0_MIN_TILE(q5_1_tile, block_q5_1, q5_1_quants, x_sums, unsigned_dot)

/* ---- IQ4_NL: the levels + 128 as unsigned bytes for vpdpbusd, less 128 * sum(x) ---- */

RLXC_INLINE __m256i iq4_nl_biased(const block_iq4_nl *b) { return iq4_levels_biased(b->qs); }
RLXC_INLINE __m256i iq4_offset_start(__m256i xq) {
    return _mm256_sub_epi32(_mm256_setzero_si256(),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), xq));
}
RLXC_INLINE __m256i iq4_biased_dot(__m256i q, __m256i xq, __m256i start) { return _mm256_dpbusd_epi32(start, q, xq); }
RLXC_DEFINE_Q8_0_TILE(iq4_nl_tile, block_iq4_nl, iq4_nl_biased, iq4_offset_start, iq4_biased_dot)

/* ---- Q4_K, Q5_K ---- */

/* Sub-block j contributes sc[j] * (q . x) - m[j] * sum(x): the q . x pairs (maddubs, within
 * 2 * 31 * 128) times sc[j] accumulate in int32 with vpdpwssd; the mins as in AVX2. */
#define DEFINE_K_MIN_TILE(name, wtype, quants)                                                                        \
    RLXC_INLINE void name(float *y, int ldy, const wtype *w, const block_q8_k *x, int nb, const int R, const int C) { \
        __m512 acc[TILE_MAX][TILE_MAX];                                                                               \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                       \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();                                  \
        for (int b = 0; b < nb; b++) {                                                                                \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(wtype));                                    \
            __m512i sc[TILE_MAX]; /* sc[0..8) as int16 in every 128-bit lane */                                       \
            __m128i mins[TILE_MAX];                                                                                   \
            __m512i sumi[TILE_MAX][TILE_MAX];                                                                         \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                 \
                sc[r] = _mm512_broadcast_i32x4(rlxc_q4_k_scales16(w[(size_t)r * nb + b].scales, &mins[r]));           \
                RLXC_UNROLL for (int t = 0; t < C; t++) sumi[r][t] = _mm512_setzero_si512();                          \
            }                                                                                                         \
            RLXC_UNROLL for (int i = 0; i < RLXC_QK_K / 64; i++) {                                                    \
                /* word 2i of each lane in the low 256 bits, word 2i + 1 in the high */                               \
                const __m512i pick = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(RLXC_PICK_WORD(2 * i)),          \
                                                             _mm512_set1_epi16(RLXC_PICK_WORD(2 * i + 1)));           \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                             \
                    const __m512i q = quants(&w[(size_t)r * nb + b], i), s = _mm512_shuffle_epi8(sc[r], pick);        \
                    RLXC_UNROLL for (int t = 0; t < C; t++) {                                                         \
                        const __m512i xq = _mm512_loadu_si512(x[(size_t)t * nb + b].qs + 64 * i);                     \
                        sumi[r][t] = _mm512_dpwssd_epi32(sumi[r][t], _mm512_maddubs_epi16(q, xq), s);                 \
                    }                                                                                                 \
                }                                                                                                     \
            }                                                                                                         \
            RLXC_UNROLL for (int t = 0; t < C; t++) {                                                                 \
                const block_q8_k *xb = x + (size_t)t * nb + b;                                                        \
                const __m128i xs = rlxc_q8_k_sums32(xb);                                                              \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                             \
                    const wtype *wb = w + (size_t)r * nb + b;                                                         \
                    const __m512i msum = _mm512_zextsi128_si512(_mm_madd_epi16(mins[r], xs));                         \
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[r][t]),                                       \
                                                _mm512_set1_ps(rlxc_h2f(wb->d) * xb->d), acc[r][t]);                  \
                    acc[r][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum),                                            \
                                                 _mm512_set1_ps(rlxc_h2f(wb->dmin) * xb->d), acc[r][t]);              \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                       \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);         \
    }
DEFINE_K_MIN_TILE(q4_k_tile, block_q4_k, q4_k_quants)
DEFINE_K_MIN_TILE(q5_k_tile, block_q5_k, q5_k_quants)

/* ---- Q2_K, Q3_K, Q6_K: 16 sub-blocks of 16 ---- */

/* The int32 accumulator a super-block starts from: minus Q3_K's / Q6_K's unsigned offset
 * (rlxc_k16_offset_sums), 0 for Q2_K, whose mins come in at the end at dmin. */
RLXC_INLINE __m512i q2_k_start(const block_q2_k *w, const block_q8_k *x) {
    (void)w, (void)x;
    return _mm512_setzero_si512();
}
RLXC_INLINE __m512i q3_k_start(const block_q3_k *w, const block_q8_k *x) {
    return _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), rlxc_k16_offset_sums(rlxc_q3_k_scales8(w), x, 2)));
}
RLXC_INLINE __m512i q6_k_start(const block_q6_k *w, const block_q8_k *x) {
    return _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), rlxc_k16_offset_sums(rlxc_q6_k_scales8(w), x, 5)));
}
RLXC_INLINE __m512 d_finish(__m512 acc, __m512i sumi, rlxc_fp16 d, const block_q8_k *x) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(rlxc_h2f(d) * x->d), acc);
}
RLXC_INLINE __m512 q2_k_finish(__m512 acc, __m512i sumi, const block_q2_k *w, const block_q8_k *x) {
    acc = d_finish(acc, sumi, w->d, x);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(rlxc_q2_k_min_sums(w, x))),
                            _mm512_set1_ps(rlxc_h2f(w->dmin) * x->d), acc);
}
RLXC_INLINE __m512 q3_k_finish(__m512 acc, __m512i sumi, const block_q3_k *w, const block_q8_k *x) {
    return d_finish(acc, sumi, w->d, x);
}
RLXC_INLINE __m512 q6_k_finish(__m512 acc, __m512i sumi, const block_q6_k *w, const block_q8_k *x) {
    return d_finish(acc, sumi, w->d, x);
}

/* Per super-block, from type_start: each 64 quants add sc[j] * (q . x)_j for their four
 * sub-blocks of 16 (maddubs pairs within 2 * 63 * 128, widened by vpdpwssd with the signed
 * scales), exact in int32; then type_finish. */
#define DEFINE_K16_TILE(type)                                                                                          \
    RLXC_INLINE void type##_tile(float *y, int ldy, const block_##type *w, const block_q8_k *x, int nb, const int R,     \
                                 const int C) {                                                                        \
        __m512 acc[TILE_MAX][TILE_MAX];                                                                                \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                        \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();                                   \
        for (int b = 0; b < nb; b++) {                                                                                 \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(block_##type));                              \
            __m512i sc[TILE_MAX]; /* the 16 scales as int16 in the low 256 bits */                                     \
            __m512i sumi[TILE_MAX][TILE_MAX];                                                                          \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                  \
                sc[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(rlxc_##type##_scales8(&w[(size_t)r * nb + b])));   \
                RLXC_UNROLL for (int t = 0; t < C; t++)                                                                \
                    sumi[r][t] = type##_start(&w[(size_t)r * nb + b], &x[(size_t)t * nb + b]);                         \
            }                                                                                                          \
            RLXC_UNROLL for (int u = 0; u < RLXC_QK_K / 64; u++) {                                                     \
                /* sub-block 4u + l's scale in 128-bit lane l */                                                       \
                const __m512i pick = _mm512_setr_epi64(                                                                \
                    0x0001000100010001ll * (4 * u), 0x0001000100010001ll * (4 * u), 0x0001000100010001ll * (4 * u + 1), \
                    0x0001000100010001ll * (4 * u + 1), 0x0001000100010001ll * (4 * u + 2),                            \
                    0x0001000100010001ll * (4 * u + 2), 0x0001000100010001ll * (4 * u + 3),                            \
                    0x0001000100010001ll * (4 * u + 3));                                                               \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                              \
                    const __m512i q = type##_quants(w + (size_t)r * nb + b, u), s = _mm512_permutexvar_epi16(pick, sc[r]); \
                    RLXC_UNROLL for (int t = 0; t < C; t++) {                                                          \
                        const __m512i xq = _mm512_loadu_si512(x[(size_t)t * nb + b].qs + 64 * u);                      \
                        sumi[r][t] = _mm512_dpwssd_epi32(sumi[r][t], _mm512_maddubs_epi16(q, xq), s);                  \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
            RLXC_UNROLL for (int r = 0; r < R; r++)                                                                    \
                RLXC_UNROLL for (int t = 0; t < C; t++)                                                                \
                    acc[r][t] = type##_finish(acc[r][t], sumi[r][t], w + (size_t)r * nb + b, x + (size_t)t * nb + b);  \
        }                                                                                                              \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                        \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);          \
    }
DEFINE_K16_TILE(q2_k)
DEFINE_K16_TILE(q3_k)
DEFINE_K16_TILE(q6_k)

/* Decode tiles of 4 rows, but 1 for Q6_K (from DRAM 25 against 11-19 GB/s with 4 rows, 1 thread,
 * EPYC: its 4 streams of 210-byte blocks defeat the prefetching); GEMM tiles of 4 rows x 3 tokens
 * (32 registers). Q5_0 GEMMs of 8 or
 * more tokens, and those of the 256-blocks from KQ_MIN_T tokens, take the interleaved tiles of
 * gemm.c instead. */
RLXC_DEFINE_QMATMUL(rlxc_matmul_q5_0_rows_avx512, block_q5_0, q5_0_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q2_k_tiles_avx512, block_q2_k, block_q8_k, RLXC_QK_K, q2_k_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q3_k_tiles_avx512, block_q3_k, block_q8_k, RLXC_QK_K, q3_k_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q4_k_tiles_avx512, block_q4_k, block_q8_k, RLXC_QK_K, q4_k_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q5_k_tiles_avx512, block_q5_k, block_q8_k, RLXC_QK_K, q5_k_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q6_k_tiles_avx512, block_q6_k, block_q8_k, RLXC_QK_K, q6_k_tile, 1, 4, 3)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_0_avx512, rlxc_matmul_q5_0_rows_avx512)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q4_1_avx512, block_q4_1, q4_1_tile, 4, 4, 3)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q5_1_avx512, block_q5_1, q5_1_tile, 4, 4, 3)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_1_avx512, rlxc_matmul_q4_1_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_1_avx512, rlxc_matmul_q5_1_avx512)
RLXC_DEFINE_QMATMUL(rlxc_matmul_iq4_nl_avx512, block_iq4_nl, iq4_nl_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_iq4_xs_tiles_avx512, block_iq4_xs, block_q8_k, RLXC_QK_K, iq4_xs_tile, 2, 2, 3)
RLXC_DEFINE_MATVEC(rlxc_matvec_iq4_nl_avx512, rlxc_matmul_iq4_nl_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_iq4_xs_avx512, rlxc_matmul_iq4_xs_tiles_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q2_k_avx512, rlxc_matmul_q2_k_tiles_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q3_k_avx512, rlxc_matmul_q3_k_tiles_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_k_avx512, rlxc_matmul_q4_k_tiles_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_k_avx512, rlxc_matmul_q5_k_tiles_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q6_k_avx512, rlxc_matmul_q6_k_tiles_avx512)

/* ---- float activations (decode of the f32-activation path) ----
 * Quants are widened to float in registers and multiplied with x, then scaled per block (or
 * sub-block): sum_b d_b * (q_b . x_b) instead of dequantizing to memory and dotting again,
 * three instructions per 16 weights. Versus the scalar twin (which rounds d * q first) the
 * sums differ only in rounding. */

/* 16 signed quants (bytes) as floats. */
RLXC_INLINE __m512 float16(__m128i q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)); }

/* 16 signed quants times x[0..16), lane by lane. */
RLXC_INLINE __m512 mul16(__m128i q, const float *x) { return _mm512_mul_ps(float16(q), _mm512_loadu_ps(x)); }

/* acc + d * (q . x) for 32 signed quants in element order. */
RLXC_INLINE __m512 fma32(__m512 acc, __m256i q, const float *x, __m512 d) {
    const __m512 p = _mm512_fmadd_ps(float16(_mm256_extracti128_si256(q, 1)), _mm512_loadu_ps(x + 16),
                                     mul16(_mm256_castsi256_si128(q), x));
    return _mm512_fmadd_ps(p, d, acc);
}

/* An fp16 block scale in every lane: a word broadcast from memory and one conversion, instead
 * of a scalar conversion and a broadcast. */
RLXC_INLINE __m512 scale16(const rlxc_fp16 *d) { return _mm512_cvtph_ps(_mm256_set1_epi16((short)*d)); }

/* Each row sums into ACCS independent accumulators (one FMA chain would be latency-bound),
 * added at the end. */
#define ACCS 4

/* The row loop around row_dot(acc, w_row, x, K). */
#define DEFINE_MATVEC_FX(name, wtype, qk, row_dot)                                             \
    void name(float *y, const void *vw, const float *x, int N, int K) {                        \
        const wtype *w = vw;                                                                   \
        for (int n = 0; n < N; n++) {                                                          \
            __m512 acc[ACCS];                                                                  \
            RLXC_UNROLL for (int i = 0; i < ACCS; i++) acc[i] = _mm512_setzero_ps();           \
            row_dot(acc, w + (size_t)n * (K / (qk)), x, K);                                    \
            RLXC_UNROLL for (int i = 1; i < ACCS; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]); \
            y[n] = _mm512_reduce_add_ps(acc[0]);                                               \
        }                                                                                      \
    }

/* Blocks of 32 with one scale: ACCS blocks per step, so each accumulator index is a constant. */
#define ROW_32(name, wtype, quants)                                                                            \
    RLXC_INLINE void name(__m512 acc[ACCS], const wtype *w, const float *x, int K) {                           \
        const int nb = K / RLXC_QK;                                                                            \
        for (int b0 = 0; b0 < nb; b0 += ACCS)                                                                  \
            RLXC_UNROLL for (int i = 0; i < ACCS; i++)                                                         \
                if (b0 + i < nb)                                                                               \
                    acc[i] = fma32(acc[i], quants(&w[b0 + i]), x + RLXC_QK * (b0 + i), scale16(&w[b0 + i].d)); \
    }

RLXC_INLINE __m256i q4_0_signed(const block_q4_0 *b) {
    return _mm256_sub_epi8(rlxc_q4_nibbles256(b->qs), _mm256_set1_epi8(8));
}
RLXC_INLINE __m256i q8_0_signed(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
RLXC_INLINE __m256i q5_0_signed(const block_q5_0 *b) { return _mm256_sub_epi8(q5_0_quants(b), _mm256_set1_epi8(16)); }
ROW_32(row_q4_0, block_q4_0, q4_0_signed)
ROW_32(row_q8_0, block_q8_0, q8_0_signed)
ROW_32(row_q5_0, block_q5_0, q5_0_signed)

/* Q4_1 / Q5_1: d * (q . x) + m * sum(x) per block. */
#define ROW_32_MIN(name, wtype, quants)                                                              \
    RLXC_INLINE void name(__m512 acc[ACCS], const wtype *w, const float *x, int K) {                 \
        const int nb = K / RLXC_QK;                                                                  \
        for (int b0 = 0; b0 < nb; b0 += ACCS)                                                        \
            RLXC_UNROLL for (int i = 0; i < ACCS; i++) if (b0 + i < nb) {                            \
                const float *xb = x + RLXC_QK * (b0 + i);                                            \
                acc[i] = fma32(acc[i], quants(&w[b0 + i]), xb, scale16(&w[b0 + i].d));               \
                acc[i] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)), \
                                         scale16(&w[b0 + i].m), acc[i]);                            \
            }                                                                                        \
    }
RLXC_INLINE __m256i iq4_nl_signed(const block_iq4_nl *b) { return iq4_levels(b->qs); }
ROW_32(row_iq4_nl, block_iq4_nl, iq4_nl_signed)

/* IQ4_XS: sub-block j at d * ls[j] */
RLXC_INLINE void row_iq4_xs(__m512 acc[ACCS], const block_iq4_xs *w, const float *x, int K) {
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        const float d = rlxc_h2f(w[b].d);
        RLXC_UNROLL for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++)
            acc[j % ACCS] = fma32(acc[j % ACCS], iq4_levels(w[b].qs + 16 * j), x + RLXC_QK * j,
                                  _mm512_set1_ps(d * (float)rlxc_iq4_xs_scale(&w[b], j)));
    }
}

ROW_32_MIN(row_q4_1, block_q4_1, q4_1_quants)
ROW_32_MIN(row_q5_1, block_q5_1, q5_1_quants)

/* Sub-block j: d * sc[j] * (q . x) - dmin * m[j] * sum(x); quants 0..31 read as signed. */
#define ROW_K_MIN(name, wtype, quants)                                                                     \
    RLXC_INLINE void name(__m512 acc[ACCS], const wtype *w, const float *x, int K) {                       \
        uint8_t sm[16];                                                                                    \
        for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {                                          \
            const float d = rlxc_h2f(w[b].d), dmin = rlxc_h2f(w[b].dmin);                                  \
            rlxc_q4_k_scales(sm, w[b].scales);                                                             \
            RLXC_UNROLL for (int i = 0; i < 4; i++) {                                                      \
                const __m512i q = quants(&w[b], i);                                                        \
                RLXC_UNROLL for (int h = 0; h < 2; h++) {                                                  \
                    const int j = 2 * i + h;                                                               \
                    const float *xj = x + 32 * j;                                                          \
                    __m512 *a = &acc[j % ACCS];                                                            \
                    *a = fma32(*a, _mm512_extracti64x4_epi64(q, h), xj, _mm512_set1_ps(d * (float)sm[j])); \
                    *a = _mm512_fnmadd_ps(_mm512_add_ps(_mm512_loadu_ps(xj), _mm512_loadu_ps(xj + 16)),    \
                                          _mm512_set1_ps(dmin * (float)sm[8 + j]), *a);                    \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }
ROW_K_MIN(row_q4_k, block_q4_k, q4_k_quants)
ROW_K_MIN(row_q5_k, block_q5_k, q5_k_quants)

/* 16 sub-blocks of 16, each with its own scale; quants 0..63 less 32. */
RLXC_INLINE void row_q6_k(__m512 acc[ACCS], const block_q6_k *w, const float *x, int K) {
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        const float d = rlxc_h2f(w[b].d);
        RLXC_UNROLL for (int u = 0; u < 4; u++) {
            const __m512i q = _mm512_sub_epi8(q6_k_quants(&w[b], u), _mm512_set1_epi8(32));
            RLXC_UNROLL for (int i = 0; i < 4; i++)
                acc[i] = _mm512_fmadd_ps(mul16(_mm512_extracti32x4_epi32(q, i), x + 64 * u + 16 * i),
                                         _mm512_set1_ps(d * (float)w[b].scales[4 * u + i]), acc[i]);
        }
    }
}

/* Q2_K: sub-block j of 16 at d * sc[j], less dmin * m[j] * sum(x) */
RLXC_INLINE void row_q2_k(__m512 acc[ACCS], const block_q2_k *w, const float *x, int K) {
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        const float d = rlxc_h2f(w[b].d), dmin = rlxc_h2f(w[b].dmin);
        RLXC_UNROLL for (int u = 0; u < 4; u++) {
            const __m512i q = q2_k_quants(&w[b], u);
            RLXC_UNROLL for (int i = 0; i < 4; i++) {
                const int j = 4 * u + i, sc = w[b].scales[j];
                const __m512 xv = _mm512_loadu_ps(x + 16 * j);
                acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(float16(_mm512_extracti32x4_epi32(q, i)), xv),
                                         _mm512_set1_ps(d * (float)(sc & 0x0F)), acc[i]);
                acc[i] = _mm512_fnmadd_ps(xv, _mm512_set1_ps(dmin * (float)(sc >> 4)), acc[i]);
            }
        }
    }
}

/* Q3_K: quants 0..7 less 4 at d * sc[j] */
RLXC_INLINE void row_q3_k(__m512 acc[ACCS], const block_q3_k *w, const float *x, int K) {
    int8_t sc[16];
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        const float d = rlxc_h2f(w[b].d);
        rlxc_q3_k_scales(sc, w[b].scales);
        RLXC_UNROLL for (int u = 0; u < 4; u++) {
            const __m512i q = _mm512_sub_epi8(q3_k_quants(&w[b], u), _mm512_set1_epi8(4));
            RLXC_UNROLL for (int i = 0; i < 4; i++)
                acc[i] = _mm512_fmadd_ps(mul16(_mm512_extracti32x4_epi32(q, i), x + 64 * u + 16 * i),
                                         _mm512_set1_ps(d * (float)sc[4 * u + i]), acc[i]);
        }
    }
}

DEFINE_MATVEC_FX(rlxc_matvec_fx_q2_k_avx512, block_q2_k, RLXC_QK_K, row_q2_k)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q3_k_avx512, block_q3_k, RLXC_QK_K, row_q3_k)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_0_avx512, block_q4_0, RLXC_QK, row_q4_0)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q8_0_avx512, block_q8_0, RLXC_QK, row_q8_0)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_0_avx512, block_q5_0, RLXC_QK, row_q5_0)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_1_avx512, block_q4_1, RLXC_QK, row_q4_1)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_1_avx512, block_q5_1, RLXC_QK, row_q5_1)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q4_k_avx512, block_q4_k, RLXC_QK_K, row_q4_k)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q5_k_avx512, block_q5_k, RLXC_QK_K, row_q5_k)
DEFINE_MATVEC_FX(rlxc_matvec_fx_q6_k_avx512, block_q6_k, RLXC_QK_K, row_q6_k)
DEFINE_MATVEC_FX(rlxc_matvec_fx_iq4_nl_avx512, block_iq4_nl, RLXC_QK, row_iq4_nl)
DEFINE_MATVEC_FX(rlxc_matvec_fx_iq4_xs_avx512, block_iq4_xs, RLXC_QK_K, row_iq4_xs)
