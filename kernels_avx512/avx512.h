/* AVX-512 kernels (F, BW, VL, DQ, VNNI). The table starts from the AVX2 one, so this
 * directory only holds the kernels where 512-bit registers measurably win. */
#ifndef RLXC_KERNELS_AVX512_H
#define RLXC_KERNELS_AVX512_H

#include "../kernels_avx2/avx2.h"

/* The lanes' sum in a fixed order: lanes i and i + 8, then rlxc_hsum256's tree (gcc's
 * _mm512_reduce_add_ps adds the same pairs; another compiler's need not). */
RLXC_INLINE float rlxc_hsum512(__m512 v) {
    return rlxc_hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* Lane t of the result = rlxc_hsum512(a[t]), bit for bit, in 45 instructions instead of 128 (as
 * rlxc_hsum8x256). The tree puts input 4j + k's sum in lane 4k + j, hence the input order. */
RLXC_INLINE __m512 rlxc_hsum16x512(const __m512 a[16]) {
    __m512 p[8], q[4], r[2];
    for (int m = 0; m < 8; m++) { /* a[i], a[i + 4] -> the halves of p[m], i = 0, 8, 1, 9, ... 3, 11 */
        const __m512 *x = a + 8 * (m % 2) + m / 2;
        p[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[4], 0x44), _mm512_shuffle_f32x4(x[0], x[4], 0xee));
    }
    for (int m = 0; m < 4; m++)
        q[m] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(p[2 * m], p[2 * m + 1], 0xdd));
    for (int m = 0; m < 2; m++)
        r[m] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * m], q[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(q[2 * m], q[2 * m + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x88), _mm512_shuffle_ps(r[0], r[1], 0xdd));
}

/* The groups of RLXC_KERNEL_TABLE this directory defines: the f32 GEMM on transposed 48-row
 * panels (f32.c; decode forwards to the AVX2 matvec), the Q4_0 / Q8_0 (quant.c, gemm.c) and
 * Q5_0 / Q4_K / Q6_K (wtypes.c, the Q5_0 GEMM in gemm.c) products, and the block types' fused
 * matvecs with float activations (wtypes.c), and the attention blocks (attention.c). F16 /
 * BF16, the quantizers and the dequantizers stay AVX2 (memory-bound already). */
RLXC_DECLARE_F32(avx512)
RLXC_DECLARE_Q(avx512)
RLXC_DECLARE_WQ(avx512)
RLXC_DECLARE_FX(avx512)
RLXC_DECLARE_X16(avx512)
RLXC_DECLARE_KX16(avx512)
RLXC_DECLARE_ATTN(avx512)
/* One row per register: decode and small T (quant.c); the GEMMs above use them below 8 tokens. */
void rlxc_matmul_q4_0_pairs_avx512(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
void rlxc_matmul_q8_0_pairs_avx512(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
/* Q5_0 in 4-row tiles (wtypes.c): decode, and the Q5_0 GEMM below 8 tokens. */
void rlxc_matmul_q5_0_rows_avx512(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
/* The 256-blocks in register tiles (wtypes.c; avx2.h says what for). */
RLXC_DECLARE_KQ_TILES(q2_k, avx512)
RLXC_DECLARE_KQ_TILES(q3_k, avx512)
RLXC_DECLARE_KQ_TILES(q4_k, avx512)
RLXC_DECLARE_KQ_TILES(q5_k, avx512)
RLXC_DECLARE_KQ_TILES(q6_k, avx512)
RLXC_DECLARE_KQ_TILES(iq4_xs, avx512)

#endif
