/* NEON f32 matvec and GEMM: dot products of weight rows with activation rows, both
 * contiguous in K. */
#include "neon.h"
#include "../csrc/kernels_ref.h"

/* R x C register tile: every weight vector loaded serves C tokens, every activation vector
 * R rows. The K % 4 tail goes through a scalar loop after the lane sums. */
RLXC_INLINE void f32_tile(float *y, int ldy, const float *w, const float *x, int K, const int R, const int C) {
    float32x4_t acc[TILE_MAX][TILE_MAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) acc[r][t] = vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        float32x4_t xv[TILE_MAX];
        for (int t = 0; t < C; t++) xv[t] = vld1q_f32(x + (size_t)t * K + k);
        for (int r = 0; r < R; r++) {
            const float32x4_t wv = vld1q_f32(w + (size_t)r * K + k);
            for (int t = 0; t < C; t++) acc[r][t] = vfmaq_f32(acc[r][t], wv, xv[t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) {
            float s = vaddvq_f32(acc[r][t]);
            for (int j = k; j < K; j++) s += w[(size_t)r * K + j] * x[(size_t)t * K + j];
            y[(size_t)t * ldy + r] = s;
        }
}

/* Decode streams 4 rows at a time; the GEMM keeps 4 rows x 4 tokens of accumulators. */
#define MV_R 4
#define GM_R 4
#define GM_C 4

void rlxc_matmul_f32_neon(float *y, int ldy, const float *w, const float *x, int N, int K, int T) {
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

RLXC_DEFINE_MATVEC(rlxc_matvec_f32_neon, rlxc_matmul_f32_neon, float, float)

RLXC_DEFINE_MATVECS_FX(neon, scalar, neon)
