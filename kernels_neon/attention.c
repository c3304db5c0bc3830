/* NEON single-head attention with an online softmax: one pass over the keys and values, four
 * keys at a time. Each block of 4 scores raises the running max m if needed (rescaling the
 * partial output and sum by exp(m_old - m_new)), then adds exp(s - m) * v for its keys.
 * K and V are each read once, whatever n_keys; scratch is not used. q is read until the last
 * block while out accumulates: one reason why out must not overlap q (kernels.h). */
#include <sleef.h>

#include "neon.h"

/* Raw scores q . k_i for the nk <= 4 keys at k (rows of hd floats), in lanes 0..nk-1
 * (lanes beyond nk are 0). The hd % 4 tail is added after the lane sums. */
RLXC_INLINE float32x4_t dots4(const float *q, const float *k, int hd, const int nk) {
    float32x4_t acc[4];
    for (int i = 0; i < nk; i++) acc[i] = vdupq_n_f32(0.0f);
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        const float32x4_t qv = vld1q_f32(q + d);
        for (int i = 0; i < nk; i++) acc[i] = vfmaq_f32(acc[i], qv, vld1q_f32(k + (size_t)i * hd + d));
    }
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < nk; i++) {
        s[i] = vaddvq_f32(acc[i]);
        for (int j = d; j < hd; j++) s[i] += q[j] * k[(size_t)i * hd + j];
    }
    return vld1q_f32(s);
}

/* out[0..hd) += sum_i p[i] * v_i over the nk <= 4 value rows at v. */
RLXC_INLINE void axpy4(float *out, const float p[4], const float *v, int hd, const int nk) {
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        float32x4_t o = vld1q_f32(out + d);
        for (int i = 0; i < nk; i++) o = vfmaq_n_f32(o, vld1q_f32(v + (size_t)i * hd + d), p[i]);
        vst1q_f32(out + d, o);
    }
    for (; d < hd; d++)
        for (int i = 0; i < nk; i++) out[d] += p[i] * v[(size_t)i * hd + d];
}

/* Folds keys [j, j + nk) into the running (m, sum, out). */
RLXC_INLINE void absorb(float *out, float *m, float *sum, const float *q, const float *k, const float *v, int hd,
                        const int nk, float scale, float softcap) {
    float32x4_t s = vmulq_n_f32(dots4(q, k, hd, nk), scale);
    if (softcap > 0.0f) {
        const float32x4_t c = vdupq_n_f32(softcap);
        s = vmulq_f32(c, Sleef_tanhf4_u10advsimd(vdivq_f32(s, c)));
    }
    /* lanes past the last key become -inf (after the softcap, which would map -inf to
     * -softcap): they raise no max and their exp is 0 */
    static const uint32_t lane[4] = {0, 1, 2, 3};
    s = vbslq_f32(vcltq_u32(vld1q_u32(lane), vdupq_n_u32((uint32_t)nk)), s, vdupq_n_f32(-INFINITY));

    const float bmax = vmaxvq_f32(s);
    if (bmax > *m) {
        if (*m != -INFINITY) { /* nothing accumulated yet otherwise */
            const float c = expf(*m - bmax);
            *sum *= c;
            rlxc_scale_neon(out, c, hd);
        }
        *m = bmax;
    }
    const float32x4_t e = Sleef_expf4_u10advsimd(vsubq_f32(s, vdupq_n_f32(*m)));
    *sum += vaddvq_f32(e);
    float p[4];
    vst1q_f32(p, e);
    axpy4(out, p, v, hd, nk);
}

void rlxc_attn_head_neon(float *out, const float *q, const float *k, const float *v, int head_dim,
                         int n_keys, float scale, float softcap, float *scratch) {
    (void)scratch;
    float m = -INFINITY, sum = 0.0f;
    for (int d = 0; d < head_dim; d++) out[d] = 0.0f;
    int j = 0;
    for (; j + 4 <= n_keys; j += 4) {
        const size_t o = (size_t)j * head_dim;
        absorb(out, &m, &sum, q, k + o, v + o, head_dim, 4, scale, softcap);
    }
    if (j < n_keys) {
        const size_t o = (size_t)j * head_dim;
        absorb(out, &m, &sum, q, k + o, v + o, head_dim, n_keys - j, scale, softcap);
    }
    rlxc_scale_neon(out, 1.0f / sum, head_dim);
}
