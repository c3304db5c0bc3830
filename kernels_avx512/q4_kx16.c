/* Q4_K on repacked 16-row groups (rlxc_q4_kx16, kernels.h), one row per 32-bit lane: the tile of
 * kernels_avx2/q4_kx16.h's decode and prefill GEMM.
 *
 * Per super-block, 16 rows and token: 32 aligned loads, each split into its low nibbles and its
 * high nibbles times 16 (two ANDs, no shift: vpdpbusd takes the unsigned 0..240 and the sum is
 * shifted once per sub-block), 64 vpdpbusd with the token's 4-byte activation groups broadcast,
 * each sub-block's int32 dot times its integer scale (vpmulld), and the mins against the 32-sums
 * of the activations in 4 vpdpwssd: the whole super-block is one exact integer per row, scaled
 * twice in float. The GGUF-layout tile (wtypes.c) pays a scale unpack, 8 scale shuffles and a
 * float reduction per row and super-block on top: on one Zen 4 core this reads 64-69 GB/s in
 * cache where that tile reads 21, and DRAM's 24-26 GB/s where it reads 17 (decode at 1-2
 * threads was compute-bound there), and the GEMM matches the interleaved one from T = 128 and
 * is 2-3x faster below (benchmarks/kernels.py --type q4_k). */
#include "avx512.h"

#define KX_C 4 /* tokens per GEMM tile: 4 x (lo, hi, isum, acc) + the split quants in 32 registers */

/* 16 rows x C tokens over blocks b0 .. b0 + n: y[t * ldy + r] (+= unless first). */
RLXC_INLINE void q4_kx16_tile(float *y, int ldy, const rlxc_q4_kx16 *w, const block_q8_k *x, const __m128i *xs, int nb,
                              int b0, int n, int first, const int C) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
    __m512 acc[KX_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) acc[t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)t * ldy);
    for (int b = 0; b < n; b++) {
        const rlxc_q4_kx16 *r = w + b0 + b;
        __m512i isum[KX_C], msum[KX_C];
        RLXC_UNROLL for (int t = 0; t < C; t++) isum[t] = msum[t] = _mm512_setzero_si512();
        RLXC_UNROLL for (int i = 0; i < RLXC_QK_K / 64; i++) {
            __m512i lo[KX_C], hi[KX_C];
            RLXC_UNROLL for (int t = 0; t < C; t++) lo[t] = hi[t] = _mm512_setzero_si512();
            RLXC_UNROLL for (int g = 0; g < 8; g++) {
                const __m512i z = _mm512_load_si512(r->qs[8 * i + g]);
                const __m512i zl = _mm512_and_si512(z, lo4), zh = _mm512_and_si512(z, hi4);
                RLXC_UNROLL for (int t = 0; t < C; t++) {
                    const unaligned_i32 *q = (const unaligned_i32 *)(x[(size_t)t * nb + b0 + b].qs + 64 * i);
                    lo[t] = _mm512_dpbusd_epi32(lo[t], zl, _mm512_set1_epi32(q[g]));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], zh, _mm512_set1_epi32(q[8 + g]));
                }
            }
            const __m512i s0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)r->sc[2 * i]));
            const __m512i s1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)r->sc[2 * i + 1]));
            RLXC_UNROLL for (int t = 0; t < C; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], s0),
                                                                     _mm512_mullo_epi32(_mm512_srai_epi32(hi[t], 4), s1)));
        }
        RLXC_UNROLL for (int p = 0; p < 4; p++) {
            const __m512i m = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)r->m[p]));
            RLXC_UNROLL for (int t = 0; t < C; t++) {
                const unaligned_i32 *s = (const unaligned_i32 *)&xs[(size_t)t * n + b];
                msum[t] = _mm512_dpwssd_epi32(msum[t], m, _mm512_set1_epi32(s[p]));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)r->d));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)r->dmin));
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const __m512 dx = _mm512_set1_ps(x[(size_t)t * nb + b0 + b].d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmin, dx), acc[t]);
        }
    }
    RLXC_UNROLL for (int t = 0; t < C; t++) _mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}

#include "../kernels_avx2/q4_kx16.h"

RLXC_DEFINE_Q4_KX16(avx512)
