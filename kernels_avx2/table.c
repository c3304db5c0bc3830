/* The AVX2 kernel table: every kernel has an AVX2 implementation. */
#include "avx2.h"

static const rlxc_kernels table = RLXC_KERNEL_TABLE("avx2", avx2, avx2, avx2, avx2, avx2, avx2, avx2, avx2,
                                                        avx2, avx2, avx2);

const rlxc_kernels *rlxc_kernels_avx2(void) { return &table; }
