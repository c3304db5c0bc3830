/* AVX2 Q4_0 GEMM for many tokens: 8 weight rows interleaved so that one 32-bit lane holds
 * one row. A block's dot product for 8 rows is then 8 vpmaddubsw (nibbles times one 4-byte
 * activation group broadcast), summed in int16 (8 groups of at most 2 * 15 * 128 fit in
 * 32767), widened once with vpmaddwd, and scaled once per block and token for all 8 rows:
 * about 20 ops where the per-row kernels of quant.c take 48. Q8_0 weights (up to 255 once
 * made unsigned) would overflow the int16 sums and keep the per-row kernels. */
#include <string.h>

#include "avx2.h"
#include "kq_form.h"

#define IL_ROWS 8
#define IL_C 4 /* tokens per register tile (8 weight registers + 4 accumulators), */
#define IL_C2 2 /* then per leftover tile */
#define IL_MIN_T 4

/* One block of 8 interleaved rows: lane r of w[g] holds the 4 nibbles of row r that multiply
 * activation bytes 4g .. 4g + 3; d[r] is row r's block scale. */
typedef struct {
    __m256i w[8];
    __m256 d;
} il_block;

/* From repacked Q4_0 (rlxc_pack_x16): an 8-row tile is the low or high half of a group (the low or
 * high 32 bytes of each 64-byte run), nothing to gather. */
static void pack_q4_0x16(il_block *dst, const void *w, int row0, int nb, int nr) {
    const uint8_t *grp = (const uint8_t *)w + (size_t)(row0 / RLXC_PACK_ROWS) * rlxc_x16_group_bytes(16, nb * RLXC_QK);
    const int half = row0 % RLXC_PACK_ROWS / IL_ROWS;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    (void)nr; /* always 8: G groups make 2 G whole tiles */
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = rlxc_x16_quants(grp, 16, b) + 32 * half;
        for (int j = 0; j < 4; j++) {
            const __m256i z = _mm256_loadu_si256((const __m256i *)(q + 64 * j));
            dst[b].w[j] = _mm256_and_si256(z, m4);
            dst[b].w[4 + j] = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
        }
        dst[b].d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rlxc_x16_scales(grp, 16, b) + 8 * half)));
    }
}

/* Raw qs dword g of a Q4_0 block holds elements 4g..4g+3 in its low nibbles and 16+4g.. in
 * its high ones. Rows r and 4 + r share a register (128-bit lanes), so 4 x 4 dword transposes
 * within lanes give dword g of rows 0..7 in order. Rows >= nr read as zero. */
static void pack_q4_0(il_block *dst, const void *rows, int row0, int nb, int nr) {
    const block_q4_0 *w = (const block_q4_0 *)rows + (size_t)row0 * nb;
    const int stride = nb; /* blocks per row */
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int b = 0; b < nb; b++) {
        __m256i z[4];
        for (int k = 0; k < 4; k++) {
            const __m128i lo = k < nr ? _mm_loadu_si128((const __m128i *)w[(size_t)k * stride + b].qs) : _mm_setzero_si128();
            const __m128i hi = 4 + k < nr ? _mm_loadu_si128((const __m128i *)w[(size_t)(4 + k) * stride + b].qs) : _mm_setzero_si128();
            z[k] = _mm256_set_m128i(hi, lo);
        }
        const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
        const __m256i g[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                              _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        for (int j = 0; j < 4; j++) {
            dst[b].w[j] = _mm256_and_si256(g[j], m4);
            dst[b].w[4 + j] = _mm256_and_si256(_mm256_srli_epi32(g[j], 4), m4);
        }
        rlxc_fp16 d[IL_ROWS] = {0};
        for (int r = 0; r < nr; r++) d[r] = w[(size_t)r * stride + b].d;
        dst[b].d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    }
}

RLXC_INLINE void il_tile(float *y, int ldy, const il_block *wp, const block_q8_0 *x, const int32_t *bias,
                         const float *dx, int nb, int nr, const int C) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[IL_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) acc[t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i w[8];
        RLXC_UNROLL for (int g = 0; g < 8; g++) w[g] = _mm256_load_si256(&wp[b].w[g]);
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const unaligned_i32 *q = (const unaligned_i32 *)x[(size_t)t * nb + b].qs;
            __m256i s16 = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(q[0]));
            RLXC_UNROLL for (int g = 1; g < 8; g++)
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[g], _mm256_set1_epi32(q[g])));
            const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(bias[(size_t)t * nb + b]));
            const __m256 scale = _mm256_mul_ps(wp[b].d, _mm256_set1_ps(dx[(size_t)t * nb + b]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[t]);
        }
    }
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    RLXC_UNROLL for (int t = 0; t < C; t++) _mm256_maskstore_ps(y + (size_t)t * ldy, keep, acc[t]);
}

#include "il_gemm.h"

void rlxc_matmul_q4_0_avx2(float *y, int ldy, const void *w, const void *xq, int N, int K, int T) {
    if (T < IL_MIN_T || !il_gemm(y, ldy, w, xq, NULL, N, K, T, pack_q4_0, 8))
        rlxc_matmul_q4_0_rows_avx2(y, ldy, w, xq, N, K, T);
}

void rlxc_matmul_q4_0x16_avx2(float *y, int ldy, const void *w, const void *xq, const rlxc_q8_terms *terms, int G,
                              int K, int T) {
    if (T < IL_MIN_T || !il_gemm(y, ldy, w, xq, terms, G * RLXC_PACK_ROWS, K, T, pack_q4_0x16, 8))
        rlxc_matmul_x16_by_token(rlxc_matvec_q4_0x16_avx2, RLXC_Q4_0, y, ldy, w, xq, G, K, T);
}

/* ---- the 256-blocks but IQ4_XS (Q2_K .. Q6_K) x Q8_K ----
 * The rows in kq_form.h's common form, 8 interleaved per register as for Q4_0 above. Per
 * sub-block of 16 and token: 4 vpmaddubsw on broadcast activation dwords, added two by two in
 * int16 (2 * 2 * 63 * 127 fits: Q6_K's quants are the largest), widened by vpmaddwd, then
 * scaled in float by d * sc[j] for 8 rows at once; the mins meet Q8_K's bsums in vpmaddwd.
 * IQ4_XS (levels + 128, up to 241) would overflow the int16 pairs: it keeps the register tiles. */

#define KQ_ROWS 16
#define KQ_C 2
#define KQ_C2 1

KQ_DEFINE_BLOCK(__m256i, __m256)

/* Lane r of w[g] = dword g of row r's quants. */
RLXC_INLINE void kq_interleave(kq_half *o, const kq_row rows[8]) {
    uint8_t *wq = (uint8_t *)o->w;
    for (int g = 0; g < RLXC_QK_K / 4; g++)
        for (int r = 0; r < 8; r++) memcpy(wq + 32 * g + 4 * r, rows[r].q + 4 * g, 4);
}
KQ_DEFINE_PACK(8)

/* 8 rows' dot with 16 activation bytes (one sub-block): int32 per row. */
RLXC_INLINE __m256i kq_dot16(const __m256i *w, const unaligned_i32 *q) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], _mm256_set1_epi32(q[0])),
                                         _mm256_maddubs_epi16(w[1], _mm256_set1_epi32(q[1])));
    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], _mm256_set1_epi32(q[2])),
                                         _mm256_maddubs_epi16(w[3], _mm256_set1_epi32(q[3])));
    return _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
}

/* 16 rows x C tokens: y[t * ldy + r] for r < nr; as the AVX-512 tile, per super-block a float
 * sum per half and token, less the mins, times the token's Q8_K scale. */
RLXC_INLINE void kq_tile(float *y, int ldy, const kq_block *wp, const block_q8_k *x, int nb, int nr, const int C) {
    __m256 acc[2][KQ_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const kq_block *kb = wp + b;
        __m256 sum[2][KQ_C];
        RLXC_UNROLL for (int t = 0; t < C; t++) sum[0][t] = sum[1][t] = _mm256_setzero_ps();
        for (int j = 0; j < RLXC_QK_K / 16; j++)
            RLXC_UNROLL for (int t = 0; t < C; t++) {
                const unaligned_i32 *q = (const unaligned_i32 *)(x[(size_t)t * nb + b].qs + 16 * j);
                RLXC_UNROLL for (int h = 0; h < 2; h++)
                    sum[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(kq_dot16(kb->h[h].w + 4 * j, q)), kb->h[h].sc[j], sum[h][t]);
            }
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const block_q8_k *xb = x + (size_t)t * nb + b;
            const unaligned_i32 *bs = (const unaligned_i32 *)xb->bsums;
            RLXC_UNROLL for (int h = 0; h < 2; h++) {
                __m256i mi = _mm256_setzero_si256();
                RLXC_UNROLL for (int k = 0; k < 8; k++)
                    mi = _mm256_add_epi32(mi, _mm256_madd_epi16(kb->h[h].m[k], _mm256_set1_epi32(bs[k])));
                acc[h][t] = _mm256_fmadd_ps(_mm256_fnmadd_ps(_mm256_cvtepi32_ps(mi), kb->h[h].dmin, sum[h][t]),
                                            _mm256_set1_ps(xb->d), acc[h][t]);
            }
        }
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i keep0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
    const __m256i keep1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane);
    RLXC_UNROLL for (int t = 0; t < C; t++) {
        _mm256_maskstore_ps(y + (size_t)t * ldy, keep0, acc[0][t]);
        _mm256_maskstore_ps(y + (size_t)t * ldy + 8, keep1, acc[1][t]);
    }
}

KQ_DEFINE_GEMM
KQ_DEFINE_MATMUL(q2_k, avx2)
KQ_DEFINE_MATMUL(q3_k, avx2)
KQ_DEFINE_MATMUL(q4_k, avx2)
KQ_DEFINE_MATMUL(q5_k, avx2)
KQ_DEFINE_MATMUL(q6_k, avx2)
