/* NEON single-head attention with an online softmax: one pass over the keys and values, four
 * keys at a time. Each block of 4 scores raises the running max m if needed (rescaling the
 * partial output and sum by exp(m_old - m_new)), then adds exp(s - m) * v for its keys.
 * K and V are each read once, whatever n_keys; scratch is not used. q is read until the last
 * block while out accumulates: one reason why out must not overlap q (kernels.h). One body
 * serves the f32 and the f16 KV cache: LOAD4 / LOAD1 turn 4 / 1 elements of a row into floats. */
#include <sleef.h>

#include "neon.h"

#define LOAD4_F32(p) vld1q_f32(p)
#define LOAD1_F32(x) (x)
#define LOAD4_F16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define LOAD1_F16(x) rlxc_fp16_to_f32(x)

/* Lanes of s past the first nk become -inf (after the softcap, which would map -inf to
 * -softcap): they raise no max and their exp is 0. */
RLXC_INLINE float32x4_t scores4(float32x4_t s, const int nk, float scale, float softcap) {
    s = vmulq_n_f32(s, scale);
    if (softcap > 0.0f) {
        const float32x4_t c = vdupq_n_f32(softcap);
        s = vmulq_f32(c, Sleef_tanhf4_u10advsimd(vdivq_f32(s, c)));
    }
    static const uint32_t lane[4] = {0, 1, 2, 3};
    return vbslq_f32(vcltq_u32(vld1q_u32(lane), vdupq_n_u32((uint32_t)nk)), s, vdupq_n_f32(-INFINITY));
}

/* Raises the running max to the block's (rescaling out and sum); returns exp(s - m) in p. */
RLXC_INLINE void rescale(float *out, float *m, float *sum, float32x4_t s, int hd, float p[4]) {
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
    vst1q_f32(p, e);
}

#define DEFINE_ATTN_HEAD_NEON(name, T, LOAD4, LOAD1)                                                             \
    /* Raw scores q . k_i for the nk <= 4 keys at k (rows of hd), in lanes 0..nk-1 (others 0). */                \
    RLXC_INLINE float32x4_t name##_dots4(const float *q, const T *k, int hd, const int nk) {                     \
        float32x4_t acc[4];                                                                                      \
        for (int i = 0; i < nk; i++) acc[i] = vdupq_n_f32(0.0f);                                                 \
        int d = 0;                                                                                               \
        for (; d + 4 <= hd; d += 4) {                                                                            \
            const float32x4_t qv = vld1q_f32(q + d);                                                             \
            for (int i = 0; i < nk; i++) acc[i] = vfmaq_f32(acc[i], qv, LOAD4(k + (size_t)i * hd + d));          \
        }                                                                                                        \
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                   \
        for (int i = 0; i < nk; i++) {                                                                           \
            s[i] = vaddvq_f32(acc[i]);                                                                           \
            for (int j = d; j < hd; j++) s[i] += q[j] * LOAD1(k[(size_t)i * hd + j]);                            \
        }                                                                                                        \
        return vld1q_f32(s);                                                                                     \
    }                                                                                                            \
    /* out[0..hd) += sum_i p[i] * v_i over the nk <= 4 value rows at v. */                                       \
    RLXC_INLINE void name##_axpy4(float *out, const float p[4], const T *v, int hd, const int nk) {              \
        int d = 0;                                                                                               \
        for (; d + 4 <= hd; d += 4) {                                                                            \
            float32x4_t o = vld1q_f32(out + d);                                                                  \
            for (int i = 0; i < nk; i++) o = vfmaq_n_f32(o, LOAD4(v + (size_t)i * hd + d), p[i]);                \
            vst1q_f32(out + d, o);                                                                               \
        }                                                                                                        \
        for (; d < hd; d++)                                                                                      \
            for (int i = 0; i < nk; i++) out[d] += p[i] * LOAD1(v[(size_t)i * hd + d]);                          \
    }                                                                                                            \
    /* Folds the nk <= 4 keys at k, v into the running (m, sum, out). */                                       \
    RLXC_INLINE void name##_absorb(float *out, float *m, float *sum, const float *q, const T *k, const T *v,     \
                                   int hd, const int nk, float scale, float softcap) {                           \
        float p[4];                                                                                              \
        rescale(out, m, sum, scores4(name##_dots4(q, k, hd, nk), nk, scale, softcap), hd, p);                    \
        name##_axpy4(out, p, v, hd, nk);                                                                         \
    }                                                                                                            \
    void name(float *out, const float *q, const T *k, const T *v, int head_dim, int n_keys, float scale,         \
              float softcap, float *scratch) {                                                                   \
        (void)scratch;                                                                                           \
        float m = -INFINITY, sum = 0.0f;                                                                         \
        for (int d = 0; d < head_dim; d++) out[d] = 0.0f;                                                        \
        int j = 0;                                                                                               \
        for (; j + 4 <= n_keys; j += 4) {                                                                        \
            const size_t o = (size_t)j * head_dim;                                                               \
            name##_absorb(out, &m, &sum, q, k + o, v + o, head_dim, 4, scale, softcap);                          \
        }                                                                                                        \
        if (j < n_keys) {                                                                                        \
            const size_t o = (size_t)j * head_dim;                                                               \
            name##_absorb(out, &m, &sum, q, k + o, v + o, head_dim, n_keys - j, scale, softcap);                 \
        }                                                                                                        \
        rlxc_scale_neon(out, 1.0f / sum, head_dim);                                                              \
    }

DEFINE_ATTN_HEAD_NEON(rlxc_attn_head_neon, float, LOAD4_F32, LOAD1_F32)
DEFINE_ATTN_HEAD_NEON(rlxc_attn_head_f16_neon, rlxc_fp16, LOAD4_F16, LOAD1_F16)
/* No group kernel of its own yet: one pass per query head of the group. */
RLXC_DEFINE_ATTN_GROUP_BY_HEAD(neon, float, rlxc_attn_head_neon)
RLXC_DEFINE_ATTN_GROUP_BY_HEAD(f16_neon, rlxc_fp16, rlxc_attn_head_f16_neon)
