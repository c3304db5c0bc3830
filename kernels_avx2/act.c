/* AVX2 element-wise kernels. exp and tanh come from SLEEF (1-ulp), so the activations track
 * libm's expf/tanhf used by the scalar reference. */
#include <sleef.h>

#include "avx2.h"

#define MAP8(n, body_v_to_v, y, x) RLXC_MAP_PADDED(8, _mm256_loadu_ps, _mm256_storeu_ps, n, body_v_to_v, y, x)

RLXC_INLINE __m256 silu8(__m256 x) {
    const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

RLXC_INLINE __m256 gelu_tanh8(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 t = Sleef_tanhf8_u10avx2(u);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
}

void rlxc_silu_avx2(float *y, const float *x, int n) { MAP8(n, silu8, y, x); }

void rlxc_gelu_tanh_avx2(float *y, const float *x, int n) { MAP8(n, gelu_tanh8, y, x); }

void rlxc_softcap_avx2(float *y, float cap, int n) {
    const __m256 c = _mm256_set1_ps(cap);
#define SOFTCAP8(v) _mm256_mul_ps(c, Sleef_tanhf8_u10avx2(_mm256_div_ps((v), c)))
    MAP8(n, SOFTCAP8, y, y);
#undef SOFTCAP8
}

void rlxc_mul_avx2(float *y, const float *a, const float *b, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] * b[i];
}

void rlxc_add_avx2(float *y, const float *a, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(a + i)));
    for (; i < n; i++) y[i] += a[i];
}

void rlxc_scale_avx2(float *y, float s, int n) {
    const __m256 sv = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
    for (; i < n; i++) y[i] *= s;
}
