/* AVX2 RMSNorm and LayerNorm: reductions, then one scaling pass. The reductions keep 32
 * partial sums (four registers): that hides the add latency, and keeps the rounding error
 * on long rows well below a single running sum's. */
#include "avx2.h"

RLXC_INLINE __m256 reduce_step(const float *x, __m256 c, __m256 acc, const int squared) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x), c);
    return squared ? _mm256_fmadd_ps(d, d, acc) : _mm256_add_ps(acc, d);
}

/* sum of x[i] - c (squared = 0) or of (x[i] - c)^2 (squared = 1) */
RLXC_INLINE float reduce(const float *x, int n, float c, const int squared) {
    const __m256 cv = _mm256_set1_ps(c);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++) acc[j] = reduce_step(x + i + 8 * j, cv, acc[j], squared);
    for (; i + 8 <= n; i += 8) acc[0] = reduce_step(x + i, cv, acc[0], squared);
    float s = rlxc_hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += squared ? (x[i] - c) * (x[i] - c) : x[i] - c;
    return s;
}

void rlxc_rmsnorm_avx2(float *y, const float *x, const float *w, float w_offset, float eps, int n) {
    const float r = 1.0f / sqrtf(reduce(x, n, 0.0f, 1) / (float)n + eps);
    const __m256 rv = _mm256_set1_ps(r), off = _mm256_set1_ps(w_offset);
    int i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv),
                                                  _mm256_add_ps(off, _mm256_loadu_ps(w + i))));
        for (; i < n; i++) y[i] = x[i] * r * (w_offset + w[i]);
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), rv));
        for (; i < n; i++) y[i] = x[i] * r;
    }
}

void rlxc_layernorm_avx2(float *y, const float *x, const float *w, const float *b, float eps, int n) {
    const float mean = reduce(x, n, 0.0f, 0) / (float)n;
    const float r = 1.0f / sqrtf(reduce(x, n, mean, 1) / (float)n + eps);
    const __m256 mv = _mm256_set1_ps(mean), rv = _mm256_set1_ps(r);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), rv);
        const __m256 bv = b ? _mm256_loadu_ps(b + i) : _mm256_setzero_ps();
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(w + i), bv));
    }
    for (; i < n; i++) y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0f);
}
