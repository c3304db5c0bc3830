/* NEON element-wise kernels. exp and tanh come from SLEEF's AdvSIMD functions (1-ulp), so
 * the activations track libm's expf/tanhf used by the scalar reference. */
#include <sleef.h>

#include "neon.h"

#define MAP4(n, body_v_to_v, y, x) RLXC_MAP_PADDED(4, vld1q_f32, vst1q_f32, n, body_v_to_v, y, x)

RLXC_INLINE float32x4_t silu4(float32x4_t x) {
    const float32x4_t e = Sleef_expf4_u10advsimd(vnegq_f32(x));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
}

RLXC_INLINE float32x4_t gelu_tanh4(float32x4_t x) {
    const float32x4_t x3 = vmulq_f32(vmulq_f32(x, x), x);
    const float32x4_t u = vmulq_n_f32(vfmaq_n_f32(x, x3, 0.044715f), 0.7978845608028654f); /* sqrt(2/pi) */
    const float32x4_t t = Sleef_tanhf4_u10advsimd(u);
    return vmulq_f32(vmulq_n_f32(x, 0.5f), vaddq_f32(vdupq_n_f32(1.0f), t));
}

void rlxc_silu_neon(float *y, const float *x, int n) { MAP4(n, silu4, y, x); }

void rlxc_gelu_tanh_neon(float *y, const float *x, int n) { MAP4(n, gelu_tanh4, y, x); }

void rlxc_softcap_neon(float *y, float cap, int n) {
    const float32x4_t c = vdupq_n_f32(cap);
#define SOFTCAP4(v) vmulq_f32(c, Sleef_tanhf4_u10advsimd(vdivq_f32((v), c)))
    MAP4(n, SOFTCAP4, y, y);
#undef SOFTCAP4
}

void rlxc_mul_neon(float *y, const float *a, const float *b, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++) y[i] = a[i] * b[i];
}

void rlxc_add_neon(float *y, const float *a, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vld1q_f32(a + i)));
    for (; i < n; i++) y[i] += a[i];
}

void rlxc_scale_neon(float *y, float s, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), s));
    for (; i < n; i++) y[i] *= s;
}
