/* AVX-512 kernels (F, BW, VL, DQ, VNNI). The table starts from the AVX2 one, so this
 * directory only holds the kernels where 512-bit registers measurably win. */
#ifndef RLXC_KERNELS_AVX512_H
#define RLXC_KERNELS_AVX512_H

#include "../kernels_avx2/avx2.h"

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
