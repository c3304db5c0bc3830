/* AVX-512 kernels (F, BW, VL, DQ, VNNI). The table starts from the AVX2 one, so this
 * directory only holds the kernels where 512-bit registers measurably win. */
#ifndef RLXC_KERNELS_AVX512_H
#define RLXC_KERNELS_AVX512_H

#include "../kernels_avx2/avx2.h"

/* f32 GEMM on transposed 48-row panels (f32.c); decode forwards to the AVX2 matvec. */
void rlxc_matvec_f32_avx512(float *y, const float *w, const float *x, int N, int K);
void rlxc_matmul_f32_avx512(float *y, int ldy, const float *w, const float *x, int N, int K, int T);
void rlxc_matvec_q4_0_avx512(float *y, const block_q4_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q4_0_avx512(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q8_0_avx512(float *y, const block_q8_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q8_0_avx512(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);
/* One row per register: decode and small T (quant.c); the GEMMs above use them below 8 tokens. */
void rlxc_matmul_q4_0_pairs_avx512(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matmul_q8_0_pairs_avx512(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);
/* Q5_0 in 4-row tiles (wtypes.c): decode, and the Q5_0 GEMM below 8 tokens. */
void rlxc_matmul_q5_0_rows_avx512(float *y, int ldy, const block_q5_0 *w, const block_q8_0 *xq, int N, int K, int T);

/* The other GGUF weight types (wtypes.c; the Q5_0 GEMM in gemm.c); F16 / BF16 stay AVX2
 * (memory-bound already). */
void rlxc_matvec_q5_0_avx512(float *y, const block_q5_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q5_0_avx512(float *y, int ldy, const block_q5_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q4_k_avx512(float *y, const block_q4_k *w, const block_q8_k *xq, int N, int K);
void rlxc_matmul_q4_k_avx512(float *y, int ldy, const block_q4_k *w, const block_q8_k *xq, int N, int K, int T);
void rlxc_matvec_q6_k_avx512(float *y, const block_q6_k *w, const block_q8_k *xq, int N, int K);
void rlxc_matmul_q6_k_avx512(float *y, int ldy, const block_q6_k *w, const block_q8_k *xq, int N, int K, int T);

/* Block types x float activations, fused: quants widened to float in registers (wtypes.c). */
void rlxc_matvec_fx_q4_0_avx512(float *y, const block_q4_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q8_0_avx512(float *y, const block_q8_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q5_0_avx512(float *y, const block_q5_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q4_k_avx512(float *y, const block_q4_k *w, const float *x, int N, int K);
void rlxc_matvec_fx_q6_k_avx512(float *y, const block_q6_k *w, const float *x, int N, int K);

#endif
