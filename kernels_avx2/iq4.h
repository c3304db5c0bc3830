/* IQ4_NL / IQ4_XS products (256-bit; kernels_avx2/wtypes.c and kernels_avx512/wtypes.c both
 * instantiate them): 4-bit indices into rlxc_iq4_values, looked up with one byte shuffle, and
 * signed-by-signed byte dots as ggml does (maddubs of |v| with x carrying v's sign: the int16
 * pair sums stay within 2 * 127 * 127). */
#ifndef RLXC_IQ4_H
#define RLXC_IQ4_H

#include "avx2.h"

/* The 32 levels of 16 index bytes in Q4_0's layout (low nibbles first), as signed bytes. */
RLXC_INLINE __m256i iq4_levels(const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rlxc_iq4_values));
    return _mm256_shuffle_epi8(table, rlxc_q4_nibbles256(qs));
}

/* The same levels + 128 as unsigned bytes (exact): AVX-512's vpdpbusd and the dequantizers'
 * unsigned widening take them. */
RLXC_INLINE __m256i iq4_levels_biased(const uint8_t *qs) {
    return _mm256_xor_si256(iq4_levels(qs), _mm256_set1_epi8((char)0x80));
}

/* 16 int16 pair sums of the signed products v * xq. */
RLXC_INLINE __m256i iq4_pairs(__m256i v, __m256i xq) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xq, v));
}

RLXC_INLINE __m256i iq4_nl_quants(const block_iq4_nl *b) { return iq4_levels(b->qs); }
RLXC_INLINE __m256i iq4_no_xterm(__m256i xq) {
    (void)xq;
    return _mm256_setzero_si256();
}
RLXC_INLINE __m256i iq4_nl_dot(__m256i v, __m256i xq, __m256i unused) {
    (void)unused;
    return _mm256_madd_epi16(iq4_pairs(v, xq), _mm256_set1_epi16(1));
}

/* The 8 sub-block scales of an IQ4_XS block, ls - 32, as int16 in both 128-bit lanes: nibble j
 * of the scales_l word and bits 2j, 2j + 1 of scales_h, one variable shift each per lane. */
RLXC_INLINE __m256i iq4_xs_scales16(const block_iq4_xs *b) {
    uint32_t sl;
    memcpy(&sl, b->scales_l, sizeof sl);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i s = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
}

/* Per super-block: sum_j ls[j] * (v . x over sub-block j), exact in int32 (|sum| <= 256 * 127
 * * 127 * 32), then times d * dx. */
RLXC_INLINE void iq4_xs_tile(float *y, int ldy, const block_iq4_xs *w, const block_q8_k *x, int nb, const int R,
                             const int C) {
    __m256 acc[TILE_MAX][TILE_MAX];
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(block_iq4_xs));
        __m256i sc[TILE_MAX], sumi[TILE_MAX][TILE_MAX];
        RLXC_UNROLL for (int r = 0; r < R; r++) {
            sc[r] = iq4_xs_scales16(&w[(size_t)r * nb + b]);
            RLXC_UNROLL for (int t = 0; t < C; t++) sumi[r][t] = _mm256_setzero_si256();
        }
        RLXC_UNROLL for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++)
            RLXC_UNROLL for (int r = 0; r < R; r++) {
                const __m256i v = iq4_levels(w[(size_t)r * nb + b].qs + 16 * j);
                const __m256i s = _mm256_shuffle_epi8(sc[r], _mm256_set1_epi16(RLXC_PICK_WORD(j)));
                RLXC_UNROLL for (int t = 0; t < C; t++) {
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(x[(size_t)t * nb + b].qs + 32 * j));
                    sumi[r][t] = _mm256_add_epi32(sumi[r][t], _mm256_madd_epi16(s, iq4_pairs(v, xq)));
                }
            }
        RLXC_UNROLL for (int t = 0; t < C; t++)
            RLXC_UNROLL for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r][t]),
                                            _mm256_set1_ps(rlxc_h2f(w[(size_t)r * nb + b].d) * x[(size_t)t * nb + b].d),
                                            acc[r][t]);
    }
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);
}

#endif
