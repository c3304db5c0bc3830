/* AVX2 kernels of the GGUF weight types beyond Q4_0/Q8_0 (scalar twins in
 * csrc/kernels_wtypes.c): Q5_0 / Q4_1 / Q5_1 x Q8_0 (the latter two add min * sum(x) per block),
 * Q5_K (Q4_K with a fifth bit) x Q8_K, Q4_K x Q8_K and Q2_K / Q3_K / Q6_K x Q8_K integer dots, F16 / BF16 x
 * float, and the dequantizers of every block type. The integer dots multiply unsigned weight
 * quants by signed activations with maddubs and correct for the unsigned offset afterwards,
 * once per token where possible: Q5_0 subtracts 16 * sum(x) per block, Q6_K (Q3_K)
 * 32 (4) * sum_j sc[j] * sum(x over sub-block j) per super-block from Q8_K's sums of 16 (bsums),
 * and Q4_K's and Q2_K's mins use the same sums. Matvec tiles prefetch the next tile's rows as quant.c explains. */
#include <string.h>

#include "../csrc/kernels_ref.h"
#include "iq4.h"
#include "kquants.h"
#include "q8_0_tile.h"

/* ---- Q5_0 ---- */

/* The fifth bits as 0x10 in the byte of each element: element i is bit i of the word qh. */
RLXC_INLINE __m256i q5_0_high(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    /* byte i <- byte i / 8 of qh, then keep its bit i % 8 */
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                              _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

/* Quants 0..31, offset 16: the int16 pair sums stay within 2 * 31 * 128, so maddubs never
 * saturates. */
RLXC_INLINE __m256i q5_0_quants(const block_q5_0 *b) {
    return _mm256_or_si256(rlxc_q4_nibbles256(b->qs), q5_0_high(b->qh));
}
RLXC_INLINE __m256i q5_0_offset_sums(__m256i xq) { return rlxc_dot_u8s8(_mm256_set1_epi8(16), xq); }
RLXC_INLINE __m256i q5_0_dot(__m256i q, __m256i xq, __m256i offset_sums) {
    return _mm256_sub_epi32(rlxc_dot_u8s8(q, xq), offset_sums);
}
RLXC_DEFINE_Q8_0_TILE(q5_0_tile, block_q5_0, q5_0_quants, q5_0_offset_sums, q5_0_dot)

/* ---- Q4_1, Q5_1: unsigned quants 0..15 / 0..31 and a minimum per block ---- */

RLXC_INLINE __m256i q4_1_quants(const block_q4_1 *b) { return rlxc_q4_nibbles256(b->qs); }
RLXC_INLINE __m256i q5_1_quants(const block_q5_1 *b) {
    return _mm256_or_si256(rlxc_q4_nibbles256(b->qs), q5_0_high(b->qh));
}
RLXC_INLINE __m256i x_sums(__m256i xq) { return rlxc_dot_u8s8(_mm256_set1_epi8(1), xq); }
RLXC_INLINE __m256i unsigned_dot(__m256i q, __m256i xq, __m256i sums) {
    (void)sums;
    return rlxc_dot_u8s8(q, xq);
}
RLXC_DEFINE_Q8_0_MIN_TILE(q4_1_tile, block_q4_1, q4_1_quants, x_sums, unsigned_dot)
RLXC_DEFINE_Q8_0_MIN_TILE(q5_1_tile, block_q5_1, q5_1_quants, x_sums, unsigned_dot)
RLXC_DEFINE_Q8_0_TILE(iq4_nl_tile, block_iq4_nl, iq4_nl_quants, iq4_no_xterm, iq4_nl_dot)

/* ---- Q4_K, Q5_K ---- */

/* Sub-block j (32 quants) contributes sc[j] * (q . x) - m[j] * sum(x) at the super-block's
 * scales d and dmin. The q . x pairs (maddubs: within 2 * 31 * 128) widen to int32 in the madd
 * by sc[j] in every word; the whole super-block sums exactly in int32. */
#define DEFINE_K_MIN_TILE(name, wtype, quants64)                                                                      \
    RLXC_INLINE void name(float *y, int ldy, const wtype *w, const block_q8_k *x, int nb, const int R, const int C) { \
        __m256 acc[TILE_MAX][TILE_MAX];                                                                               \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                       \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();                                  \
        for (int b = 0; b < nb; b++) {                                                                                \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(wtype));                                    \
            __m256i sc[TILE_MAX];   /* sc[0..8) as int16 in both lanes */                                             \
            __m128i mins[TILE_MAX]; /* m[0..8) as int16 */                                                            \
            __m256i sumi[TILE_MAX][TILE_MAX];                                                                         \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                 \
                sc[r] = _mm256_broadcastsi128_si256(rlxc_q4_k_scales16(w[(size_t)r * nb + b].scales, &mins[r]));       \
                RLXC_UNROLL for (int t = 0; t < C; t++) sumi[r][t] = _mm256_setzero_si256();                          \
            }                                                                                                         \
            RLXC_UNROLL for (int i = 0; i < RLXC_QK_K / 64; i++)                                                      \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                             \
                    __m256i lo, hi;                                                                                   \
                    quants64(&w[(size_t)r * nb + b], i, &lo, &hi);                                                    \
                    const __m256i sl = _mm256_shuffle_epi8(sc[r], _mm256_set1_epi16(RLXC_PICK_WORD(2 * i)));         \
                    const __m256i sh = _mm256_shuffle_epi8(sc[r], _mm256_set1_epi16(RLXC_PICK_WORD(2 * i + 1)));     \
                    RLXC_UNROLL for (int t = 0; t < C; t++) {                                                         \
                        const int8_t *xq = x[(size_t)t * nb + b].qs + 64 * i;                                         \
                        const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));         \
                        const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));  \
                        sumi[r][t] = _mm256_add_epi32(sumi[r][t], _mm256_add_epi32(_mm256_madd_epi16(sl, pl),         \
                                                                                   _mm256_madd_epi16(sh, ph)));       \
                    }                                                                                                 \
                }                                                                                                     \
            RLXC_UNROLL for (int t = 0; t < C; t++) {                                                                 \
                const block_q8_k *xb = x + (size_t)t * nb + b;                                                        \
                const __m128i xs = rlxc_q8_k_sums32(xb);                                                              \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                             \
                    const wtype *wb = w + (size_t)r * nb + b;                                                         \
                    const __m256i msum = _mm256_zextsi128_si256(_mm_madd_epi16(mins[r], xs)); /* 4 lanes, rest 0 */   \
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r][t]),                                       \
                                                _mm256_set1_ps(rlxc_h2f(wb->d) * xb->d), acc[r][t]);                  \
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),                                            \
                                                 _mm256_set1_ps(rlxc_h2f(wb->dmin) * xb->d), acc[r][t]);              \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                       \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);                 \
    }
DEFINE_K_MIN_TILE(q4_k_tile, block_q4_k, q4_k_quants64)
DEFINE_K_MIN_TILE(q5_k_tile, block_q5_k, q5_k_quants64)

/* ---- Q2_K, Q3_K, Q6_K: 16 sub-blocks of 16 ---- */

/* A super-block's int32 sums -> the float accumulator: Q3_K / Q6_K take off their offset
 * first (exact in int32) and scale by d; Q2_K subtracts its mins at dmin. */
RLXC_INLINE __m256 q2_k_finish(__m256 acc, __m256i sumi, const block_q2_k *w, const block_q8_k *x) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(rlxc_h2f(w->d) * x->d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(rlxc_q2_k_min_sums(w, x)), _mm256_set1_ps(rlxc_h2f(w->dmin) * x->d), acc);
}
#define DEFINE_K16_OFFSET_FINISH(type, shift)                                                                     \
    RLXC_INLINE __m256 type##_finish(__m256 acc, __m256i sumi, const block_##type *w, const block_q8_k *x) {       \
        const __m256i bias = rlxc_k16_offset_sums(rlxc_##type##_scales8(w), x, shift);                            \
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, bias)), _mm256_set1_ps(rlxc_h2f(w->d) * x->d), \
                               acc);                                                                              \
    }
DEFINE_K16_OFFSET_FINISH(q3_k, 2)
DEFINE_K16_OFFSET_FINISH(q6_k, 5)

/* Per super-block: sum_j sc[j] * (q . x)_j over 16 sub-blocks of 16 (maddubs pairs within
 * 2 * 63 * 128, the madd by the int16 scales widens them), exact in int32; then type_finish.
 * The scales sit as int16 with the even ones in the low lane and the odd ones in the high:
 * quants 32v .. 32v+32 (sub-blocks 2v, 2v+1, one per lane) take word v of each lane. */
#define DEFINE_K16_TILE(type)                                                                                             \
    RLXC_INLINE void type##_tile(float *y, int ldy, const block_##type *w, const block_q8_k *x, int nb, const int R,        \
                                 const int C) {                                                                           \
        const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);                      \
        __m256 acc[TILE_MAX][TILE_MAX];                                                                                   \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                           \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();                                      \
        for (int b = 0; b < nb; b++) {                                                                                    \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(block_##type));                                 \
            __m256i sumi[TILE_MAX][TILE_MAX], sc[TILE_MAX];                                                               \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                     \
                sc[r] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(rlxc_##type##_scales8(w + (size_t)r * nb + b), even_odd));  \
                RLXC_UNROLL for (int t = 0; t < C; t++) sumi[r][t] = _mm256_setzero_si256();                              \
            }                                                                                                             \
            RLXC_UNROLL for (int v = 0; v < RLXC_QK_K / 32; v++)                                                          \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                 \
                    const __m256i q = type##_quants(w + (size_t)r * nb + b, v);                                           \
                    const __m256i s = _mm256_shuffle_epi8(sc[r], _mm256_set1_epi16(RLXC_PICK_WORD(v)));                   \
                    RLXC_UNROLL for (int t = 0; t < C; t++) {                                                             \
                        const __m256i xq = _mm256_loadu_si256((const __m256i *)(x[(size_t)t * nb + b].qs + 32 * v));      \
                        sumi[r][t] = _mm256_add_epi32(sumi[r][t], _mm256_madd_epi16(s, _mm256_maddubs_epi16(q, xq)));     \
                    }                                                                                                     \
                }                                                                                                         \
            RLXC_UNROLL for (int r = 0; r < R; r++)                                                                       \
                RLXC_UNROLL for (int t = 0; t < C; t++)                                                                   \
                    acc[r][t] = type##_finish(acc[r][t], sumi[r][t], w + (size_t)r * nb + b, x + (size_t)t * nb + b);     \
        }                                                                                                                 \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                           \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);                     \
    }
DEFINE_K16_TILE(q2_k)
DEFINE_K16_TILE(q3_k)
DEFINE_K16_TILE(q6_k)

/* ---- Q8_K activations: bit-identical with rlxc_quantize_row_q8_k ---- */

void rlxc_quantize_row_q8_k_avx2(void *vy, const float *x, int K) {
    block_q8_k *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < RLXC_QK_K; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        const float am = rlxc_hmax256(amax);
        memset(&y[b], 0, sizeof y[b]);
        if (am == 0.0f) continue;
        /* the reference's choice: the first element of largest magnitude */
        int j = 0;
        for (; j < RLXC_QK_K; j += 8) {
            const __m256 hit = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), _mm256_set1_ps(am), _CMP_EQ_OQ);
            const int m = _mm256_movemask_ps(hit);
            if (m) {
                j += __builtin_ctz((unsigned)m);
                break;
            }
        }
        if (j >= RLXC_QK_K) { /* am is NaN (NaN inputs): no element equals it; the block is NaN */
            y[b].d = am;
            continue;
        }
        const float iscale = -127.0f / x[j];
        const __m256 is = _mm256_set1_ps(iscale);
        for (int g = 0; g < RLXC_QK_K; g += 32) {
            __m256i q[4];
            for (int i = 0; i < 4; i++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + g + 8 * i), is);
                RLXC_NO_CONTRACT(v);
                /* nearest, ties to even, as nearest_int; |v| <= 127, so packing never clamps */
                q[i] = _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
            _mm256_storeu_si256((__m256i *)(y[b].qs + g), rlxc_pack_i8x32(q));
        }
        y[b].d = 1.0f / iscale;
        rlxc_q8_k_bsums(&y[b]);
    }
}

/* ---- F16 / BF16 ---- */

/* 8 weights widened to float: exact for both types. */
RLXC_INLINE __m256 f16_load8(const rlxc_fp16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
RLXC_INLINE __m256 bf16_load8(const rlxc_bf16 *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* As f32.c's tile, the weights widened on load: each serves C tokens. Here K is the tile's
 * "nb" (one weight per block); the K % 8 tail is scalar. */
#define DEFINE_HALF_TILE(name, htype, load8, to_f32)                                                            \
    RLXC_INLINE void name(float *y, int ldy, const htype *w, const float *x, int K, const int R, const int C) { \
        __m256 acc[TILE_MAX][TILE_MAX];                                                                         \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                 \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();                            \
        int k = 0;                                                                                              \
        for (; k + 8 <= K; k += 8) {                                                                            \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (K + k), R * 8 * sizeof(htype));                          \
            __m256 xv[TILE_MAX];                                                                                \
            RLXC_UNROLL for (int t = 0; t < C; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * K + k);             \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                           \
                const __m256 wv = load8(w + (size_t)r * K + k);                                                 \
                RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);      \
            }                                                                                                   \
        }                                                                                                       \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                 \
            RLXC_UNROLL for (int t = 0; t < C; t++) {                                                           \
                float s = rlxc_hsum256(acc[r][t]);                                                              \
                for (int j = k; j < K; j++) s += to_f32(w[(size_t)r * K + j]) * x[(size_t)t * K + j];           \
                y[(size_t)t * ldy + r] = s;                                                                     \
            }                                                                                                   \
    }

DEFINE_HALF_TILE(f16_tile, rlxc_fp16, f16_load8, rlxc_h2f)
DEFINE_HALF_TILE(bf16_tile, rlxc_bf16, bf16_load8, rlxc_bf16_to_f32)

/* ---- drivers (avx2.h) ----
 * Decode tiles of 4 rows, but 1 for the K-quants: their 4-row tiles spill (16 registers) and
 * measured slower (Q4_K 23 vs 26 GB/s, Q6_K 31 vs 36 GB/s in cache). GEMM tiles of 2 rows x
 * 3 tokens; 4 x 3 for the float types, whose tile needs no integer accumulators. */

RLXC_DEFINE_QMATMUL(rlxc_matmul_q5_0_avx2, block_q5_0, q5_0_tile, 4, 2, 3)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q4_1_avx2, block_q4_1, q4_1_tile, 4, 2, 3)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q5_1_avx2, block_q5_1, q5_1_tile, 4, 2, 3)
RLXC_DEFINE_QMATMUL(rlxc_matmul_iq4_nl_avx2, block_iq4_nl, iq4_nl_tile, 4, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_iq4_xs_avx2, block_iq4_xs, block_q8_k, RLXC_QK_K, iq4_xs_tile, 2, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q2_k_tiles_avx2, block_q2_k, block_q8_k, RLXC_QK_K, q2_k_tile, 1, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q3_k_tiles_avx2, block_q3_k, block_q8_k, RLXC_QK_K, q3_k_tile, 1, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q4_k_tiles_avx2, block_q4_k, block_q8_k, RLXC_QK_K, q4_k_tile, 1, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q5_k_tiles_avx2, block_q5_k, block_q8_k, RLXC_QK_K, q5_k_tile, 1, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_q6_k_tiles_avx2, block_q6_k, block_q8_k, RLXC_QK_K, q6_k_tile, 1, 2, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_f16_avx2, rlxc_fp16, float, 1, f16_tile, 4, 4, 3)
RLXC_DEFINE_MATMUL(rlxc_matmul_bf16_avx2, rlxc_bf16, float, 1, bf16_tile, 4, 4, 3)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_0_avx2, rlxc_matmul_q5_0_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_1_avx2, rlxc_matmul_q4_1_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_1_avx2, rlxc_matmul_q5_1_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_iq4_nl_avx2, rlxc_matmul_iq4_nl_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_iq4_xs_avx2, rlxc_matmul_iq4_xs_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q2_k_avx2, rlxc_matmul_q2_k_tiles_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q3_k_avx2, rlxc_matmul_q3_k_tiles_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_k_avx2, rlxc_matmul_q4_k_tiles_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q5_k_avx2, rlxc_matmul_q5_k_tiles_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q6_k_avx2, rlxc_matmul_q6_k_tiles_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_f16_avx2, rlxc_matmul_f16_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_bf16_avx2, rlxc_matmul_bf16_avx2)

/* ---- dequantization (the f32-activation path), bit-exact with the scalar twins ---- */

/* y[0..16) = d * (q - offset) - m for 16 unsigned quants in element order, m = 0 but for the
 * types with mins: the product rounded, then the difference, as in the scalar twins (x - 0 is
 * exact). */
RLXC_INLINE void store_scaled16(float *y, __m128i q, int offset, __m256 d, __m256 m) {
    RLXC_UNROLL for (int j = 0; j < 2; j++) {
        const __m128i bytes = j ? _mm_srli_si128(q, 8) : q;
        const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_set1_epi32(offset));
        __m256 p = _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
        RLXC_NO_CONTRACT(p);
        _mm256_storeu_ps(y + 8 * j, _mm256_sub_ps(p, m));
    }
}
/* The same for 32 quants, d_lo for the first 16 and d_hi for the rest (sub-blocks of 16). */
RLXC_INLINE void store_scaled32(float *y, __m256i q, int offset, __m256 d_lo, __m256 d_hi, __m256 m) {
    store_scaled16(y, _mm256_castsi256_si128(q), offset, d_lo, m);
    store_scaled16(y + 16, _mm256_extracti128_si256(q, 1), offset, d_hi, m);
}

void rlxc_dequantize_row_q4_0_avx2(float *y, const void *vx, int K) {
    const block_q4_0 *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const __m256 d = _mm256_set1_ps(rlxc_h2f(x[b].d));
        store_scaled32(y, rlxc_q4_nibbles256(x[b].qs), 8, d, d, _mm256_setzero_ps());
    }
}

void rlxc_dequantize_row_q8_0_avx2(float *y, const void *vx, int K) {
    const block_q8_0 *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const __m256 d = _mm256_set1_ps(rlxc_h2f(x[b].d));
        /* flipping the sign bit makes the int8 quants unsigned, offset 128 */
        const __m256i q = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_set1_epi8((char)0x80));
        store_scaled32(y, q, 128, d, d, _mm256_setzero_ps());
    }
}

void rlxc_dequantize_row_q5_0_avx2(float *y, const void *vx, int K) {
    const block_q5_0 *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const __m256 d = _mm256_set1_ps(rlxc_h2f(x[b].d));
        store_scaled32(y, q5_0_quants(&x[b]), 16, d, d, _mm256_setzero_ps());
    }
}

/* d * q + m as d * q - (-m): the same rounding */
#define DEFINE_DEQUANTIZE_MIN(type)                                                      \
    void rlxc_dequantize_row_##type##_avx2(float *y, const void *vx, int K) {           \
        const block_##type *x = vx;                                                      \
        for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {                            \
            const __m256 d = _mm256_set1_ps(rlxc_h2f(x[b].d));                           \
            store_scaled32(y, type##_quants(&x[b]), 0, d, d, _mm256_set1_ps(-rlxc_h2f(x[b].m))); \
        }                                                                                \
    }
DEFINE_DEQUANTIZE_MIN(q4_1)
DEFINE_DEQUANTIZE_MIN(q5_1)

#define DEFINE_DEQUANTIZE_K_MIN(type)                                                                 \
    void rlxc_dequantize_row_##type##_avx2(float *y, const void *vx, int K) {                        \
        const block_##type *x = vx;                                                                   \
        uint8_t sm[16];                                                                               \
        for (int b = 0; b < K / RLXC_QK_K; b++) {                                                     \
            const float d = rlxc_h2f(x[b].d), dmin = rlxc_h2f(x[b].dmin);                             \
            rlxc_q4_k_scales(sm, x[b].scales);                                                        \
            for (int i = 0; i < RLXC_QK_K / 64; i++) {                                                \
                __m256i q[2];                                                                         \
                type##_quants64(&x[b], i, &q[0], &q[1]);                                              \
                for (int h = 0; h < 2; h++, y += 32) {                                                \
                    const int j = 2 * i + h;                                                          \
                    const __m256 dj = _mm256_set1_ps(d * (float)sm[j]), mj = _mm256_set1_ps(dmin * (float)sm[8 + j]); \
                    store_scaled32(y, q[h], 0, dj, dj, mj);                                           \
                }                                                                                     \
            }                                                                                         \
        }                                                                                             \
    }
DEFINE_DEQUANTIZE_K_MIN(q4_k)
DEFINE_DEQUANTIZE_K_MIN(q5_k)

void rlxc_dequantize_row_iq4_nl_avx2(float *y, const void *vx, int K) {
    const block_iq4_nl *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const __m256 d = _mm256_set1_ps(rlxc_h2f(x[b].d));
        store_scaled32(y, iq4_levels_biased(x[b].qs), 128, d, d, _mm256_setzero_ps());
    }
}

void rlxc_dequantize_row_iq4_xs_avx2(float *y, const void *vx, int K) {
    const block_iq4_xs *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_h2f(x[b].d);
        for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++, y += RLXC_QK) {
            const __m256 dl = _mm256_set1_ps(d * (float)rlxc_iq4_xs_scale(&x[b], j));
            store_scaled32(y, iq4_levels_biased(x[b].qs + 16 * j), 128, dl, dl, _mm256_setzero_ps());
        }
    }
}

void rlxc_dequantize_row_q2_k_avx2(float *y, const void *vx, int K) {
    const block_q2_k *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_h2f(x[b].d), dmin = rlxc_h2f(x[b].dmin);
        for (int v = 0; v < 8; v++) {
            const __m256i q = q2_k_quants(&x[b], v);
            for (int i = 0; i < 2; i++, y += 16) {
                const int sc = x[b].scales[2 * v + i];
                store_scaled16(y, i ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q), 0,
                               _mm256_set1_ps(d * (float)(sc & 0x0F)), _mm256_set1_ps(dmin * (float)(sc >> 4)));
            }
        }
    }
}

void rlxc_dequantize_row_q3_k_avx2(float *y, const void *vx, int K) {
    const block_q3_k *x = vx;
    int8_t sc[16];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_h2f(x[b].d);
        rlxc_q3_k_scales(sc, x[b].scales);
        for (int v = 0; v < 8; v++, y += 32)
            store_scaled32(y, q3_k_quants(&x[b], v), 4, _mm256_set1_ps(d * (float)sc[2 * v]),
                           _mm256_set1_ps(d * (float)sc[2 * v + 1]), _mm256_setzero_ps());
    }
}

void rlxc_dequantize_row_q6_k_avx2(float *y, const void *vx, int K) {
    const block_q6_k *x = vx;
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_h2f(x[b].d);
        for (int v = 0; v < 8; v++, y += 32)
            store_scaled32(y, q6_k_quants(&x[b], v), 32, _mm256_set1_ps(d * (float)x[b].scales[2 * v]),
                           _mm256_set1_ps(d * (float)x[b].scales[2 * v + 1]), _mm256_setzero_ps());
    }
}

RLXC_DEFINE_MATVECS_FX(avx2, avx2, avx2)
