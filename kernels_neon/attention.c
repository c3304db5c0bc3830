/* NEON attention over one block of keys (kernels.h: attn_block), one query at a time: dot
 * products as one 4-lane FMA chain per key, a softmax over aligned 4-lane chunks (element j in
 * lane j % 4, lanes outside [lo, hi) padded with -inf), values summed over all keys 16 dims at
 * a time. One body serves f32, f16 and bf16 rows: LOAD4 / LOAD1 turn 4 / 1 elements of a row
 * into floats. */
#include <sleef.h>

#include "neon.h"

#define LOAD4_F32(p) vld1q_f32(p)
#define LOAD1_F32(x) (x)
#define LOAD4_F16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define LOAD1_F16(x) rlxc_neon_h2f(x)
#define LOAD4_BF16(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))
#define LOAD1_BF16(x) rlxc_bf16_to_f32(x)

/* The chunk of s at j with lanes outside [lo, hi) set to -inf. */
RLXC_INLINE float32x4_t chunk_in(const float *s, int j, int lo, int hi) {
    float b[4];
    for (int x = 0; x < 4; x++) b[x] = j + x >= lo && j + x < hi ? s[j + x] : -INFINITY;
    return vld1q_f32(b);
}

RLXC_INLINE void chunk_store(float *s, int j, int lo, int hi, float32x4_t v) {
    float b[4];
    vst1q_f32(b, v);
    for (int x = 0; x < 4; x++)
        if (j + x >= lo && j + x < hi) s[j + x] = b[x];
}

/* s[lo, hi) = exp(softcap(s) - max) in place; *m = the max, returns the sum. */
static float softmax_row(float *s, int lo, int hi, float softcap, float *m) {
    const float32x4_t cap = vdupq_n_f32(softcap);
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    for (int j = lo & ~3; j < hi; j += 4) {
        float32x4_t x = chunk_in(s, j, lo, hi);
        if (softcap > 0.0f) {
            x = vmulq_f32(cap, Sleef_tanhf4_u10advsimd(vdivq_f32(x, cap)));
            chunk_store(s, j, lo, hi, x);
        }
        mx = vmaxq_f32(mx, x);
    }
    *m = vmaxvq_f32(mx);
    const float32x4_t mv = vdupq_n_f32(*m);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (int j = lo & ~3; j < hi; j += 4) {
        const float32x4_t e = Sleef_expf4_u10advsimd(vsubq_f32(chunk_in(s, j, lo, hi), mv));
        chunk_store(s, j, lo, hi, e);
        sum = vaddq_f32(sum, e);
    }
    return vaddvq_f32(sum);
}

#define DEFINE_ATTN_BLOCK_NEON(type, T, LOAD4, LOAD1)                                                             \
    RLXC_INLINE float type##_dot(const float *q, const T *k, int hd) {                                            \
        float32x4_t acc = vdupq_n_f32(0.0f);                                                                      \
        int d = 0;                                                                                                \
        for (; d + 4 <= hd; d += 4) acc = vfmaq_f32(acc, vld1q_f32(q + d), LOAD4(k + d));                         \
        float x = vaddvq_f32(acc);                                                                                \
        for (; d < hd; d++) x += q[d] * LOAD1(k[d]);                                                              \
        return x;                                                                                                 \
    }                                                                                                             \
    /* o[0, hd) = sum over keys j in [a, b) of s[j] v_j. 16 dims at a time stay in registers over every key    \
     * (one load of o per tile, not one per key); each dim still sums its keys in order with one FMA each. */   \
    RLXC_INLINE void type##_values(float *o, const T *v, const float *s, int a, int b, int hd) {                  \
        int d = 0;                                                                                                \
        for (; d + 16 <= hd; d += 16) {                                                                           \
            float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;                                        \
            for (int j = a; j < b; j++) {                                                                         \
                const T *vj = v + (size_t)j * hd + d;                                                             \
                a0 = vfmaq_n_f32(a0, LOAD4(vj), s[j]);                                                            \
                a1 = vfmaq_n_f32(a1, LOAD4(vj + 4), s[j]);                                                        \
                a2 = vfmaq_n_f32(a2, LOAD4(vj + 8), s[j]);                                                        \
                a3 = vfmaq_n_f32(a3, LOAD4(vj + 12), s[j]);                                                       \
            }                                                                                                     \
            vst1q_f32(o + d, a0), vst1q_f32(o + d + 4, a1), vst1q_f32(o + d + 8, a2), vst1q_f32(o + d + 12, a3);  \
        }                                                                                                         \
        for (; d + 4 <= hd; d += 4) {                                                                             \
            float32x4_t acc = vdupq_n_f32(0.0f);                                                                  \
            for (int j = a; j < b; j++) acc = vfmaq_n_f32(acc, LOAD4(v + (size_t)j * hd + d), s[j]);              \
            vst1q_f32(o + d, acc);                                                                                \
        }                                                                                                         \
        for (; d < hd; d++)                                                                                       \
            for (int j = a; j < b; j++) o[d] += s[j] * LOAD1(v[(size_t)j * hd + d]);                              \
    }                                                                                                             \
    void rlxc_attn_block_##type##_neon(float *o, float *m, float *l, const float *q, int nq, const void *kp,      \
                                       const void *vp, int n, int hd, const int *lo, const int *hi, float scale,  \
                                       float softcap, float *s) {                                                 \
        const T *k = kp, *v = vp;                                                                                 \
        (void)n;                                                                                                  \
        for (int r = 0; r < nq; r++) {                                                                            \
            const float *qr = q + (size_t)r * hd;                                                                 \
            float *orow = o + (size_t)r * hd;                                                                     \
            for (int d = 0; d < hd; d++) orow[d] = 0.0f;                                                          \
            m[r] = -INFINITY;                                                                                     \
            l[r] = 0.0f;                                                                                          \
            if (lo[r] >= hi[r]) continue;                                                                         \
            for (int j = lo[r]; j < hi[r]; j++) s[j] = scale * type##_dot(qr, k + (size_t)j * hd, hd);            \
            l[r] = softmax_row(s, lo[r], hi[r], softcap, &m[r]);                                                  \
            type##_values(orow, v, s, lo[r], hi[r], hd);                                                          \
        }                                                                                                         \
    }

DEFINE_ATTN_BLOCK_NEON(f32, float, LOAD4_F32, LOAD1_F32)
DEFINE_ATTN_BLOCK_NEON(f16, rlxc_fp16, LOAD4_F16, LOAD1_F16)
DEFINE_ATTN_BLOCK_NEON(bf16, rlxc_bf16, LOAD4_BF16, LOAD1_BF16)
