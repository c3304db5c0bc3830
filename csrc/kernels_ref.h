/* The scalar reference kernels by name, so SIMD tables can fall back to them and
 * SIMD files can reuse them for tails. */
#ifndef RLXC_KERNELS_REF_H
#define RLXC_KERNELS_REF_H

#include "kernels.h"

RLXC_DECLARE_KERNELS(scalar)
RLXC_DECLARE_X16(scalar)
RLXC_DECLARE_KX16(scalar)

/* Fills a Q8_K block's sums of 16 from its quants. */
void rlxc_q8_k_bsums(block_q8_k *b);

/* The scalar matvec of a weight type, one dot_<kind>(w_row, x, blocks) per row, and its matmul,
 * one matvec per token; a row holds K / qk blocks. */
#define RLXC_DEFINE_SCALAR_MAT(kind, wtype, xtype, qk)                                               \
    void rlxc_matvec_##kind##_scalar(float *y, const void *vw, const void *vx, int N, int K) {       \
        const wtype *w = vw;                                                                         \
        const int nb = K / (qk);                                                                     \
        for (int n = 0; n < N; n++) y[n] = dot_##kind(w + (size_t)n * nb, vx, nb);                   \
    }                                                                                                \
    void rlxc_matmul_##kind##_scalar(float *y, int ldy, const void *w, const void *vx, int N, int K, \
                                      int T) {                                                       \
        const xtype *x = vx;                                                                         \
        for (int t = 0; t < T; t++)                                                                  \
            rlxc_matvec_##kind##_scalar(y + (size_t)t * ldy, w, x + (size_t)t * (K / (qk)), N, K);   \
    }

#endif
