/* AVX2 rotate-half RoPE: both halves of a pair block are read before either is written, and
 * k + 8 <= n_pairs <= half keeps the two 8-wide windows disjoint. */
#include "avx2.h"

void rlxc_rope_avx2(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half) {
    for (int h = 0; h < n_heads; h++) {
        float *a = x + (size_t)h * head_dim, *b = a + half;
        int k = 0;
        for (; k + 8 <= n_pairs; k += 8) {
            const __m256 x1 = _mm256_loadu_ps(a + k), x2 = _mm256_loadu_ps(b + k);
            const __m256 c = _mm256_loadu_ps(cos + k), s = _mm256_loadu_ps(sin + k);
            _mm256_storeu_ps(a + k, _mm256_fmsub_ps(x1, c, _mm256_mul_ps(x2, s)));
            _mm256_storeu_ps(b + k, _mm256_fmadd_ps(x2, c, _mm256_mul_ps(x1, s)));
        }
        for (; k < n_pairs; k++) {
            const float x1 = a[k], x2 = b[k];
            a[k] = x1 * cos[k] - x2 * sin[k];
            b[k] = x2 * cos[k] + x1 * sin[k];
        }
    }
}
