/* The register tile of the Q5_0, Q4_1 and Q5_1 products of kernels_avx2/wtypes.c and
 * kernels_avx512/wtypes.c (256-bit, Q8_0 activations), which differ only in three steps, each a function of its
 * arguments:
 *   unpack(wb)      the 32 quants of weight block wb as bytes in element order;
 *   xterm(xq)       the part of the dot products that depends on the activations xq alone (the
 *                   weights' offset times the activation sums), once per token and block and
 *                   shared by the R rows of the tile;
 *   dot(q, xq, xt)  8 int32 partial dot products of quants q with xq, xt = xterm(xq).
 * An R x C tile: y[t * ldy + r], the float sums in 8 lanes added up at the end; one-token
 * tiles prefetch the next tile's rows as quant.c explains. quant.c's Q4_0 tile has the same
 * shape but keeps its own copy: through this template gcc allocated the registers of that
 * hottest kernel differently (block addresses here are w + (size_t)r * nb + b, there
 * &w[(size_t)r * nb + b]). */
#ifndef RLXC_Q8_0_TILE_H
#define RLXC_Q8_0_TILE_H

#include "avx2.h"

/* has_min: the weight blocks also carry a minimum m (Q4_1, Q5_1: w = d * q + m), added as
 * m * dx * sum(xq) with xterm(xq) the activation sums in 8 lanes; min_of(block) reads it. */
#define RLXC_DEFINE_Q8_0_TILE_(name, wtype, unpack, xterm, dot, has_min, min_of)                            \
    RLXC_INLINE void name(float *y, int ldy, const wtype *w, const block_q8_0 *x, int nb, const int R,       \
                          const int C) {                                                                     \
        __m256 acc[TILE_MAX][TILE_MAX];                                                                      \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                              \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();                         \
        for (int b = 0; b < nb; b++) {                                                                       \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(wtype));                           \
            __m256i q[TILE_MAX];                                                                             \
            __m256 dw[TILE_MAX], mw[TILE_MAX];                                                               \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                        \
                q[r] = unpack(w + (size_t)r * nb + b);                                                       \
                dw[r] = _mm256_set1_ps(rlxc_h2f((w + (size_t)r * nb + b)->d));                               \
                if (has_min) mw[r] = _mm256_set1_ps(rlxc_h2f(min_of(w + (size_t)r * nb + b)));               \
            }                                                                                                \
            RLXC_UNROLL for (int t = 0; t < C; t++) {                                                        \
                const block_q8_0 *xb = x + (size_t)t * nb + b;                                               \
                const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->qs);                              \
                const __m256i xt = xterm(xq);                                                                \
                const __m256 dx = _mm256_set1_ps(rlxc_h2f(xb->d));                                           \
                const __m256 xs = has_min ? _mm256_cvtepi32_ps(xt) : _mm256_setzero_ps();                    \
                RLXC_UNROLL for (int r = 0; r < R; r++) {                                                    \
                    const __m256i d = dot(q[r], xq, xt);                                                     \
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dw[r], dx), acc[r][t]); \
                    if (has_min) acc[r][t] = _mm256_fmadd_ps(xs, _mm256_mul_ps(mw[r], dx), acc[r][t]);       \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                              \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);        \
    }
#define RLXC_NO_MIN(block) 0
#define RLXC_BLOCK_MIN(block) ((block)->m)
#define RLXC_DEFINE_Q8_0_TILE(name, wtype, unpack, xterm, dot) \
    RLXC_DEFINE_Q8_0_TILE_(name, wtype, unpack, xterm, dot, 0, RLXC_NO_MIN)
#define RLXC_DEFINE_Q8_0_MIN_TILE(name, wtype, unpack, xsum, dot) \
    RLXC_DEFINE_Q8_0_TILE_(name, wtype, unpack, xsum, dot, 1, RLXC_BLOCK_MIN)

#endif
