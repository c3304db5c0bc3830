/* NEON f32 matvec and GEMM: dot products of weight rows with activation rows, both
 * contiguous in K. */
#include "neon.h"

/* The weights are already floats: (float) is their widening. */
RLXC_NEON_DEFINE_FLOAT_TILE(f32_tile, float, vld1q_f32, (float))

/* Decode streams 4 rows at a time; the GEMM keeps 4 rows x 4 tokens of accumulators. */
#define MV_R 4
#define GM_R 4
#define GM_C 4

void rlxc_matmul_f32_neon(float *y, int ldy, const void *vw, const void *vx, int N, int K, int T) {
    const float *w = vw, *x = vx;
    int t = 0;
    for (; t + GM_C <= T; t += GM_C) {
        const float *xt = x + (size_t)t * K;
        int n = 0;
        for (; n + GM_R <= N; n += GM_R) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, xt, K, GM_R, GM_C);
        for (; n < N; n++) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, xt, K, 1, GM_C);
    }
    for (; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        int n = 0;
        for (; n + MV_R <= N; n += MV_R) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, xt, K, MV_R, 1);
        for (; n < N; n++) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, xt, K, 1, 1);
    }
}

RLXC_DEFINE_MATVEC(rlxc_matvec_f32_neon, rlxc_matmul_f32_neon)

RLXC_DEFINE_MATVECS_FX(neon, neon, neon)
