/* AVX2 RMSNorm and LayerNorm: one reduction pass, one scaling pass. */
#include "avx2.h"

void rlxc_rmsnorm_avx2(float *y, const float *x, const float *w, float w_offset, float eps, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = rlxc_hsum256(acc);
    for (int j = i; j < n; j++) ss += x[j] * x[j];
    const float r = 1.0f / sqrtf(ss / n + eps);
    const __m256 rv = _mm256_set1_ps(r), off = _mm256_set1_ps(w_offset);
    i = 0;
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
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float sum = rlxc_hsum256(acc);
    for (int j = i; j < n; j++) sum += x[j];
    const float mean = sum / n;
    const __m256 mv = _mm256_set1_ps(mean);
    acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), mv);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    float var = rlxc_hsum256(acc);
    for (int j = i; j < n; j++) var += (x[j] - mean) * (x[j] - mean);
    const float r = 1.0f / sqrtf(var / n + eps);
    const __m256 rv = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), rv);
        const __m256 bv = b ? _mm256_loadu_ps(b + i) : _mm256_setzero_ps();
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(w + i), bv));
    }
    for (; i < n; i++) y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0f);
}
