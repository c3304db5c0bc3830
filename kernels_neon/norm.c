/* NEON RMSNorm and LayerNorm: reduction passes in 4 lanes, then one scaling pass. */
#include "neon.h"

void rlxc_rmsnorm_neon(float *y, const float *x, const float *w, float w_offset, float eps, int n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        acc = vfmaq_f32(acc, v, v);
    }
    float ss = vaddvq_f32(acc);
    for (int j = i; j < n; j++) ss += x[j] * x[j];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    const float32x4_t off = vdupq_n_f32(w_offset);
    i = 0;
    if (w) {
        for (; i + 4 <= n; i += 4)
            vst1q_f32(y + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), r), vaddq_f32(off, vld1q_f32(w + i))));
        for (; i < n; i++) y[i] = x[i] * r * (w_offset + w[i]);
    } else {
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(x + i), r));
        for (; i < n; i++) y[i] = x[i] * r;
    }
}

void rlxc_layernorm_neon(float *y, const float *x, const float *w, const float *b, float eps, int n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) acc = vaddq_f32(acc, vld1q_f32(x + i));
    float sum = vaddvq_f32(acc);
    for (int j = i; j < n; j++) sum += x[j];
    const float mean = sum / (float)n;
    const float32x4_t mv = vdupq_n_f32(mean);
    acc = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t d = vsubq_f32(vld1q_f32(x + i), mv);
        acc = vfmaq_f32(acc, d, d);
    }
    float var = vaddvq_f32(acc);
    for (int j = i; j < n; j++) var += (x[j] - mean) * (x[j] - mean);
    const float r = 1.0f / sqrtf(var / (float)n + eps);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t d = vmulq_n_f32(vsubq_f32(vld1q_f32(x + i), mv), r);
        const float32x4_t bv = b ? vld1q_f32(b + i) : vdupq_n_f32(0.0f);
        vst1q_f32(y + i, vfmaq_f32(bv, d, vld1q_f32(w + i)));
    }
    for (; i < n; i++) y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0f);
}
