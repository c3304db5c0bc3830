/* AVX2 single-head attention in three passes over the scratch row: scores, exp and sum,
 * then the weighted sum of values. Exact softmax (no running rescale). One body serves the f32
 * and the f16 KV cache: ATTN_LOAD8 / ATTN_LOAD1 turn 8 / 1 elements of a row into floats. */
#include <sleef.h>

#include "avx2.h"

#define LOAD8_F32(p) _mm256_loadu_ps(p)
#define LOAD1_F32(x) (x)
#define LOAD8_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define LOAD1_F16(x) rlxc_fp16_to_f32(x)

#define DEFINE_ATTN_HEAD_AVX2(name, T, LOAD8, LOAD1)                                                               \
    RLXC_INLINE float name##_dot(const float *a, const T *b, int n) {                                              \
        __m256 acc = _mm256_setzero_ps();                                                                          \
        int i = 0;                                                                                                 \
        for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LOAD8(b + i), acc);               \
        float s = rlxc_hsum256(acc);                                                                               \
        for (; i < n; i++) s += a[i] * LOAD1(b[i]);                                                                \
        return s;                                                                                                  \
    }                                                                                                              \
    /* s[0..4) = q . k_i for the 4 rows at k: four independent FMA chains, q loaded once per step. */             \
    RLXC_INLINE void name##_dots4(float *s, const float *q, const T *k, int n) {                                   \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};     \
        int i = 0;                                                                                                 \
        for (; i + 8 <= n; i += 8) {                                                                               \
            const __m256 qv = _mm256_loadu_ps(q + i);                                                              \
            RLXC_UNROLL for (int r = 0; r < 4; r++)                                                                \
                acc[r] = _mm256_fmadd_ps(qv, LOAD8(k + (size_t)r * n + i), acc[r]);                               \
        }                                                                                                          \
        for (int r = 0; r < 4; r++) {                                                                              \
            s[r] = rlxc_hsum256(acc[r]);                                                                           \
            for (int d = i; d < n; d++) s[r] += q[d] * LOAD1(k[(size_t)r * n + d]);                                \
        }                                                                                                          \
    }                                                                                                              \
    /* out[0..n) += p[0] * v[0][..] + ... + p[3] * v[3][..]: four keys per pass over out. */                      \
    RLXC_INLINE void name##_axpy4(float *out, const float *p, const T *v, int n) {                                 \
        const __m256 p0 = _mm256_set1_ps(p[0]), p1 = _mm256_set1_ps(p[1]);                                        \
        const __m256 p2 = _mm256_set1_ps(p[2]), p3 = _mm256_set1_ps(p[3]);                                        \
        int i = 0;                                                                                                 \
        for (; i + 8 <= n; i += 8) {                                                                               \
            __m256 o = _mm256_loadu_ps(out + i);                                                                   \
            o = _mm256_fmadd_ps(p0, LOAD8(v + i), o);                                                              \
            o = _mm256_fmadd_ps(p1, LOAD8(v + n + i), o);                                                          \
            o = _mm256_fmadd_ps(p2, LOAD8(v + 2 * (size_t)n + i), o);                                              \
            o = _mm256_fmadd_ps(p3, LOAD8(v + 3 * (size_t)n + i), o);                                              \
            _mm256_storeu_ps(out + i, o);                                                                          \
        }                                                                                                          \
        for (; i < n; i++)                                                                                         \
            out[i] += p[0] * LOAD1(v[i]) + p[1] * LOAD1(v[n + i]) + p[2] * LOAD1(v[2 * (size_t)n + i]) +            \
                      p[3] * LOAD1(v[3 * (size_t)n + i]);                                                          \
    }                                                                                                              \
    void name(float *out, const float *q, const T *k, const T *v, int head_dim, int n_keys, float scale,           \
              float softcap, float *s) {                                                                           \
        int j = 0;                                                                                                 \
        for (; j + 4 <= n_keys; j += 4) {                                                                          \
            name##_dots4(s + j, q, k + (size_t)j * head_dim, head_dim);                                            \
            RLXC_UNROLL for (int r = 0; r < 4; r++) s[j + r] *= scale;                                             \
        }                                                                                                          \
        for (; j < n_keys; j++) s[j] = scale * name##_dot(q, k + (size_t)j * head_dim, head_dim);                  \
        if (softcap > 0.0f) rlxc_softcap_avx2(s, softcap, n_keys);                                                 \
        const float inv = 1.0f / softmax_unnormalized(s, n_keys);                                                  \
        for (int i = 0; i < head_dim; i++) out[i] = 0.0f;                                                          \
        for (j = 0; j + 4 <= n_keys; j += 4) name##_axpy4(out, s + j, v + (size_t)j * head_dim, head_dim);             \
        for (; j < n_keys; j++) {                                                                                  \
            const T *vj = v + (size_t)j * head_dim;                                                                \
            for (int i = 0; i < head_dim; i++) out[i] += s[j] * LOAD1(vj[i]);                                      \
        }                                                                                                          \
        rlxc_scale_avx2(out, inv, head_dim);                                                                       \
    }

/* s[j] = exp(s[j] - max s); returns their sum. */
static float softmax_unnormalized(float *s, int n_keys) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n_keys; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
    float m = rlxc_hmax256(mv);
    for (; j < n_keys; j++) m = s[j] > m ? s[j] : m;

    mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n_keys; j += 8) {
        const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < n_keys) { /* tail padded with -inf, whose exp adds nothing to the sum */
        float buf[8];
        for (int i = 0; i < 8; i++) buf[i] = j + i < n_keys ? s[j + i] : -INFINITY;
        const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(buf), mv));
        _mm256_storeu_ps(buf, e);
        sum = _mm256_add_ps(sum, e);
        for (int i = 0; j + i < n_keys; i++) s[j + i] = buf[i];
    }
    return rlxc_hsum256(sum);
}

/* A GQA group: the scores of up to 4 heads per pass over K (each chunk of a key row converted
 * once, four FMA chains), a softmax per head, then V read once: each chunk of four value rows
 * converted once and added into every head's output. */
#define DEFINE_ATTN_GROUP_AVX2(name, head, T, LOAD8, LOAD1)                                                        \
    void name(float *out, const float *q, const T *k, const T *v, int G, int hd, int n, float scale, float softcap, \
              float *s) {                                                                                          \
        if (hd % 8) { /* rows not in whole chunks: head by head */                                                 \
            for (int g = 0; g < G; g++) head(out + (size_t)g * hd, q + (size_t)g * hd, k, v, hd, n, scale, softcap, s); \
            return;                                                                                                \
        }                                                                                                          \
        for (int g0 = 0; g0 < G; g0 += 4) {                                                                        \
            const int gn = G - g0 < 4 ? G - g0 : 4;                                                                \
            const float *qg = q + (size_t)g0 * hd;                                                                 \
            for (int j = 0; j < n; j++) {                                                                          \
                __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
                const T *kj = k + (size_t)j * hd;                                                                  \
                for (int i = 0; i < hd; i += 8) {                                                                  \
                    const __m256 kv = LOAD8(kj + i);                                                               \
                    for (int r = 0; r < gn; r++) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + (size_t)r * hd + i), kv, acc[r]); \
                }                                                                                                  \
                for (int r = 0; r < gn; r++) s[(size_t)(g0 + r) * n + j] = scale * rlxc_hsum256(acc[r]);           \
            }                                                                                                      \
        }                                                                                                          \
        float inv[G];                                                                                              \
        for (int g = 0; g < G; g++) {                                                                              \
            if (softcap > 0.0f) rlxc_softcap_avx2(s + (size_t)g * n, softcap, n);                                  \
            inv[g] = 1.0f / softmax_unnormalized(s + (size_t)g * n, n);                                            \
        }                                                                                                          \
        for (size_t i = 0; i < (size_t)G * hd; i++) out[i] = 0.0f;                                                 \
        int j = 0;                                                                                                 \
        for (; j + 4 <= n; j += 4) { /* four value rows converted once per chunk, for every head */                \
            const T *vj = v + (size_t)j * hd;                                                                      \
            for (int i = 0; i < hd; i += 8) {                                                                      \
                __m256 vv[4];                                                                                      \
                RLXC_UNROLL for (int x = 0; x < 4; x++) vv[x] = LOAD8(vj + (size_t)x * hd + i);                    \
                for (int g = 0; g < G; g++) {                                                                      \
                    const float *pg = s + (size_t)g * n + j;                                                       \
                    float *o = out + (size_t)g * hd + i;                                                           \
                    __m256 acc = _mm256_loadu_ps(o);                                                               \
                    RLXC_UNROLL for (int x = 0; x < 4; x++) acc = _mm256_fmadd_ps(_mm256_set1_ps(pg[x]), vv[x], acc); \
                    _mm256_storeu_ps(o, acc);                                                                      \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        for (; j < n; j++) {                                                                                       \
            const T *vj = v + (size_t)j * hd;                                                                      \
            for (int i = 0; i < hd; i += 8) {                                                                      \
                const __m256 vv = LOAD8(vj + i);                                                                   \
                for (int g = 0; g < G; g++) {                                                                      \
                    float *o = out + (size_t)g * hd + i;                                                           \
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(s[(size_t)g * n + j]), vv, _mm256_loadu_ps(o))); \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        for (int g = 0; g < G; g++) rlxc_scale_avx2(out + (size_t)g * hd, inv[g], hd);                             \
    }

DEFINE_ATTN_HEAD_AVX2(rlxc_attn_head_avx2, float, LOAD8_F32, LOAD1_F32)
DEFINE_ATTN_HEAD_AVX2(rlxc_attn_head_f16_avx2, rlxc_fp16, LOAD8_F16, LOAD1_F16)
DEFINE_ATTN_GROUP_AVX2(rlxc_attn_group_avx2, rlxc_attn_head_avx2, float, LOAD8_F32, LOAD1_F32)
DEFINE_ATTN_GROUP_AVX2(rlxc_attn_group_f16_avx2, rlxc_attn_head_f16_avx2, rlxc_fp16, LOAD8_F16, LOAD1_F16)
