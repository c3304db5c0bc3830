/* The AVX-512 kernel table: the AVX2 kernels, with those that measurably win on 512-bit
 * registers (the f32 GEMM, the VNNI products of the integer-dot weight types, the attention
 * blocks) replaced; F16 / BF16 and the dequantizers stay AVX2 (memory-bound already). */
#include "avx512.h"

static const rlxc_kernels table = RLXC_KERNEL_TABLE("avx512", avx512, avx512, avx512, avx2, avx2, avx2, avx512, avx2,
                                                        avx512, avx512, avx512);

const rlxc_kernels *rlxc_kernels_avx512(void) { return &table; }
