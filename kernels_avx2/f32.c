/* AVX2 f32 matvec and GEMM: dot products of weight rows with activation rows, both
 * contiguous in K. */
#include "avx2.h"

/* R x C register tile: every weight vector loaded serves C tokens, every activation vector
 * R rows. The K % 8 tail goes through a scalar loop after the horizontal sums. */
RLXC_INLINE void f32_tile(float *y, int ldy, const float *w, const float *x, int K, const int R, const int C) {
    __m256 acc[TILE_MAX][TILE_MAX];
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[TILE_MAX];
        RLXC_UNROLL for (int t = 0; t < C; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * K + k);
        RLXC_UNROLL for (int r = 0; r < R; r++) {
            const __m256 wv = _mm256_loadu_ps(w + (size_t)r * K + k);
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            float s = rlxc_hsum256(acc[r][t]);
            for (int j = k; j < K; j++) s += w[(size_t)r * K + j] * x[(size_t)t * K + j];
            y[(size_t)t * ldy + r] = s;
        }
}

#define MV_R 4
#define GM_R 4
#define GM_C 3

void rlxc_matmul_f32_avx2(float *y, int ldy, const void *vw, const void *vx, int N, int K, int T) {
    const float *w = vw, *x = vx;
    int t = 0;
    for (; t + GM_C <= T; t += GM_C) {
        int n = 0;
        for (; n + GM_R <= N; n += GM_R) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, x + (size_t)t * K, K, GM_R, GM_C);
        for (; n < N; n++) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, x + (size_t)t * K, K, 1, GM_C);
    }
    for (; t < T; t++) {
        int n = 0;
        for (; n + MV_R <= N; n += MV_R) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, x + (size_t)t * K, K, MV_R, 1);
        for (; n < N; n++) f32_tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * K, x + (size_t)t * K, K, 1, 1);
    }
}

RLXC_DEFINE_MATVEC(rlxc_matvec_f32_avx2, rlxc_matmul_f32_avx2)
