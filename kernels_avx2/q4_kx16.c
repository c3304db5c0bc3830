/* Q4_K on repacked 16-row groups (rlxc_q4_kx16, kernels.h): the tile of q4_kx16.h's decode and
 * prefill GEMM, rows 0-7 and 8-15 (the low and high 32 bytes of each 64-byte run) in two
 * registers. Per sub-block and 8 rows: 8 maddubs of the split nibbles with the broadcast
 * activation groups, summed in int16 (8 * 2 * 15 * 128 < 2^15: no saturation), and one madd
 * with the sub-block's scale in both halves of each lane, which widens and scales at once; the
 * mins meet the activations' 32-sums in 4 madds per super-block. One exact integer per row and
 * super-block, scaled twice in float. */
#include "avx2.h"

#define KX_C 4 /* tokens per GEMM tile: 4 x (acc, isum, int16 sum) + quants, mask in 16 registers */

/* Bytes 8h .. 8h + 7 of v (scales of one half's rows) as int32 lanes, each (s, s) as int16. */
RLXC_INLINE __m256i scale_pairs(const uint8_t *v) {
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)v));
    return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

/* Block b of one half's 8 rows (h) for C tokens into acc[C]: each sub-block's nibbles split
 * afresh for it (the 4 tokens' int16 sums then fit the registers). */
RLXC_INLINE void half_block(__m256 *acc, const rlxc_q4_kx16 *r, const block_q8_k *x, const __m128i *xs, int nb, int b,
                            int n, int h, const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i isum[KX_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) { /* sub-block j: the low (even j) or high nibbles of runs 8 (j / 2) .. */
        __m256i p[KX_C];
        RLXC_UNROLL for (int t = 0; t < C; t++) p[t] = _mm256_setzero_si256();
        RLXC_UNROLL for (int g = 0; g < 8; g++) {
            const __m256i z = _mm256_load_si256((const __m256i *)(r->qs[8 * (j / 2) + g] + 32 * h));
            const __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(z, 4) : z, m4);
            RLXC_UNROLL for (int t = 0; t < C; t++) {
                const unaligned_i32 *xq = (const unaligned_i32 *)(x[(size_t)t * nb + b].qs + 32 * j);
                p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(q, _mm256_set1_epi32(xq[g])));
            }
        }
        const __m256i s = scale_pairs(r->sc[j] + 8 * h);
        RLXC_UNROLL for (int t = 0; t < C; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], s));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(r->d + 8 * h)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(r->dmin + 8 * h)));
    RLXC_UNROLL for (int t = 0; t < C; t++) {
        const unaligned_i32 *sums = (const unaligned_i32 *)&xs[(size_t)t * n];
        __m256i msum = _mm256_setzero_si256();
        RLXC_UNROLL for (int k = 0; k < 4; k++) {
            const __m256i m = _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(r->m[k] + 16 * h)));
            msum = _mm256_add_epi32(msum, _mm256_madd_epi16(m, _mm256_set1_epi32(sums[k])));
        }
        const __m256 dx = _mm256_set1_ps(x[(size_t)t * nb + b].d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, dx), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, dx), acc[t]);
    }
}

/* Decode takes each record's two halves back to back (the record stays in L1; a half over all
 * records first streams every line twice); the GEMM keeps one half over all records, 4 tokens'
 * accumulators in registers. The same operations per token and row either way. */
RLXC_INLINE void q4_kx16_tile(float *y, int ldy, const rlxc_q4_kx16 *w, const block_q8_k *x, const __m128i *xs, int nb,
                              int b0, int n, int first, const int C) {
    if (C == 1) {
        __m256 acc[2];
        for (int h = 0; h < 2; h++) acc[h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8 * h);
        for (int b = 0; b < n; b++)
            RLXC_UNROLL for (int h = 0; h < 2; h++) half_block(&acc[h], w + b0 + b, x, xs + b, nb, b0 + b, n, h, 1);
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + 8 * h, acc[h]);
        return;
    }
    RLXC_UNROLL for (int h = 0; h < 2; h++) {
        __m256 acc[KX_C];
        RLXC_UNROLL for (int t = 0; t < C; t++)
            acc[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (size_t)t * ldy + 8 * h);
        for (int b = 0; b < n; b++) half_block(acc, w + b0 + b, x, xs + b, nb, b0 + b, n, h, C);
        RLXC_UNROLL for (int t = 0; t < C; t++) _mm256_storeu_ps(y + (size_t)t * ldy + 8 * h, acc[t]);
    }
}

#include "q4_kx16.h"

RLXC_DEFINE_Q4_KX16(avx2)
