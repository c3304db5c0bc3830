/* AVX2 attention over one block of keys (kernels.h: attn_block): scores in 4 x 2 tiles of
 * queries x keys, a softmax per query, then values in tiles of 4 queries x 16 dims. One body
 * serves f32, f16 and bf16 rows: LOAD8 / LOAD1 turn 8 / 1 elements of a row into floats.
 *
 * A query's bits must not depend on the queries or keys it shares a call with: every dot
 * product is one FMA chain over the row, whatever tile computes it; the softmax goes over
 * aligned 8-lane chunks (element j in lane j % 8) from the chunk of lo; keys a query does not
 * see add exp(-inf) = 0 to its sum and 0 * v to its output, which changes no bit.
 *
 * A long cache streams from memory and the hardware prefetcher stops at every 4 KiB page: the
 * loops prefetch the rows one block further on (the next block of a full cache; a harmless
 * guess for a ring, and a prefetch never faults). */
#include <sleef.h>
#include <string.h>

#include "avx2.h"

#define LOAD8_F32(p) _mm256_loadu_ps(p)
#define LOAD1_F32(x) (x)
#define LOAD8_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define LOAD1_F16(x) rlxc_h2f(x)
#define LOAD8_BF16(p)                                                                                                  \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define LOAD1_BF16(x) rlxc_bf16_to_f32(x)

/* Value rows per pass of the dims: 16 rows of hd = 256 f32 are 16 KiB, which stay in L1. */
#define ATTN_VALUE_KEYS 16

/* [p, p + n) towards L2 (not L1, which holds the block being read). */
RLXC_INLINE void prefetch_l2(const void *p, const size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T1);
}

/* Lanes of the chunk at j that fall in [lo, hi). */
RLXC_INLINE __m256i lanes_in(int j, int lo, int hi) {
    const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx));
}

/* s[lo, hi) = exp(softcap(s) - max) in place (s holds scale * q.k); *m = the max, returns the sum. */
static float softmax_row(float *s, int lo, int hi, float softcap, float *m) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), cap = _mm256_set1_ps(softcap);
    __m256 mx = ninf;
    for (int j = lo & ~7; j < hi; j += 8) {
        const __m256i ok = lanes_in(j, lo, hi);
        __m256 x = _mm256_maskload_ps(s + j, ok);
        if (softcap > 0.0f) {
            x = _mm256_mul_ps(cap, Sleef_tanhf8_u10avx2(_mm256_div_ps(x, cap)));
            _mm256_maskstore_ps(s + j, ok, x);
        }
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(ok)));
    }
    *m = rlxc_hmax256(mx);
    const __m256 mv = _mm256_set1_ps(*m);
    __m256 sum = _mm256_setzero_ps();
    for (int j = lo & ~7; j < hi; j += 8) {
        const __m256i ok = lanes_in(j, lo, hi);
        const __m256 x = _mm256_blendv_ps(ninf, _mm256_maskload_ps(s + j, ok), _mm256_castsi256_ps(ok));
        const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(x, mv));
        _mm256_maskstore_ps(s + j, ok, e);
        sum = _mm256_add_ps(sum, e);
    }
    return rlxc_hsum256(sum);
}

#define DEFINE_ATTN_BLOCK_AVX2(type, T, LOAD8, LOAD1)                                                                  \
    /* s[r][c] = q_r . k_c for R <= 4 queries x C <= 2 keys (8 accumulators: with the loads they                       \
     * fit AVX2's 16 registers, a 4 x 4 tile spilled): one chain per pair. */                                          \
    RLXC_INLINE void type##_dots(float *s, int lds, const float *q, const T *k, int hd, const int R, const int C) {    \
        __m256 acc[4][2];                                                                                              \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps(); \
        int i = 0;                                                                                                     \
        for (; i + 8 <= hd; i += 8) {                                                                                  \
            __m256 kv[2];                                                                                              \
            RLXC_UNROLL for (int c = 0; c < C; c++) kv[c] = LOAD8(k + (size_t)c * hd + i);                             \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                  \
                const __m256 qv = _mm256_loadu_ps(q + (size_t)r * hd + i);                                             \
                RLXC_UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);             \
            }                                                                                                          \
        }                                                                                                              \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int c = 0; c < C; c++) {                              \
            float x = rlxc_hsum256(acc[r][c]);                                                                         \
            for (int d = i; d < hd; d++) x += q[(size_t)r * hd + d] * LOAD1(k[(size_t)c * hd + d]);                    \
            s[(size_t)r * lds + c] = x;                                                                                \
        }                                                                                                              \
    }                                                                                                                  \
    /* o[r][i .. i + 8 W) += sum over keys [a, b) of p[r][j] v_j for R <= 4 queries (set, not added, if                \
     * first): the R x W sums stay in registers over the keys, one FMA chain each in key order. Each                   \
     * key prefetches the same dims of the row n keys on (the next block's), one line per key. */                      \
    RLXC_INLINE void type##_values_tile(float *o, const float *p, int ldp, const T *v, int n, int hd, int a, int b,    \
                                        int i, int first, const int R, const int W) {                                  \
        __m256 acc[4][2];                                                                                              \
        RLXC_UNROLL for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps(); /* all: R may vary */     \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int w = 0; w < W; w++)                                \
            if (!first) acc[r][w] = _mm256_loadu_ps(o + (size_t)r * hd + i + 8 * w);                                   \
        for (int j = a; j < b; j++) {                                                                                  \
            prefetch_l2(v + (size_t)(j + n) * hd + i, 8 * W * sizeof(T)); /* the next block's row, these dims */       \
            __m256 vv[2];                                                                                              \
            RLXC_UNROLL for (int w = 0; w < W; w++) vv[w] = LOAD8(v + (size_t)j * hd + i + 8 * w);                     \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                  \
                const __m256 pr = _mm256_broadcast_ss(p + (size_t)r * ldp + j);                                        \
                RLXC_UNROLL for (int w = 0; w < W; w++) acc[r][w] = _mm256_fmadd_ps(pr, vv[w], acc[r][w]);             \
            }                                                                                                          \
        }                                                                                                              \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int w = 0; w < W; w++)                                \
            _mm256_storeu_ps(o + (size_t)r * hd + i + 8 * w, acc[r][w]);                                               \
    }                                                                                                                  \
    /* o[r][0..hd) = sum over keys [a, b) of p[r][j] v_j for R <= 4 queries: ATTN_VALUE_KEYS rows at a time            \
     * (in L1) pass every 16 dims of all R queries, each value chunk converted once for all R. */                      \
    RLXC_INLINE void type##_values(float *o, const float *p, int ldp, const T *v, int n, int hd, int a, int b,         \
                                   const int R) {                                                                      \
        const int h8 = hd & ~7;                                                                                        \
        for (int r = 0; a >= b && r < R; r++) memset(o + (size_t)r * hd, 0, (size_t)h8 * sizeof(float)); /* no key */  \
        for (int j0 = a; j0 < b; j0 += ATTN_VALUE_KEYS) {                                                              \
            const int j1 = b - j0 < ATTN_VALUE_KEYS ? b : j0 + ATTN_VALUE_KEYS;                                        \
            int i = 0;                                                                                                 \
            for (; i + 16 <= h8; i += 16) type##_values_tile(o, p, ldp, v, n, hd, j0, j1, i, j0 == a, R, 2);           \
            if (i < h8) type##_values_tile(o, p, ldp, v, n, hd, j0, j1, i, j0 == a, R, 1);                             \
        }                                                                                                              \
        for (int r = 0; r < R; r++) /* dims past the last chunk of 8 */                                                \
            for (int d = h8; d < hd; d++) {                                                                            \
                float x = 0.0f;                                                                                        \
                for (int jj = a; jj < b; jj++) x += p[(size_t)r * ldp + jj] * LOAD1(v[(size_t)jj * hd + d]);           \
                o[(size_t)r * hd + d] = x;                                                                             \
            }                                                                                                          \
    }                                                                                                                  \
    void rlxc_attn_block_##type##_avx2(float *o, float *m, float *l, const float *q, int nq, const void *kp,           \
                                       const void *vp, int n, int hd, const int *lo, const int *hi, float scale,       \
                                       float softcap, float *s) {                                                      \
        const T *k = kp, *v = vp;                                                                                      \
        for (int r0 = 0; r0 < nq; r0 += 4) {                                                                           \
            const int R = nq - r0 < 4 ? nq - r0 : 4;                                                                   \
            int a = n, b = 0; /* the keys any of these queries sees */                                                 \
            for (int r = r0; r < r0 + R; r++) {                                                                        \
                a = lo[r] < a ? lo[r] : a;                                                                             \
                b = hi[r] > b ? hi[r] : b;                                                                             \
            }                                                                                                          \
            const float *qr = q + (size_t)r0 * hd;                                                                     \
            float *sr = s + (size_t)r0 * n;                                                                            \
            int j = a;                                                                                                 \
            if (R == 4)                                                                                                \
                for (; j + 2 <= b; j += 2) {                                                                           \
                    prefetch_l2(k + (size_t)(j + n) * hd, 2 * hd * sizeof(T)); /* the next block's rows */             \
                    type##_dots(sr + j, n, qr, k + (size_t)j * hd, hd, 4, 2);                                          \
                }                                                                                                      \
            for (; j < b; j++)                                                                                         \
                for (int r = 0; r < R; r++) type##_dots(sr + (size_t)r * n + j, n, qr + (size_t)r * hd, k + (size_t)j * hd, hd, 1, 1); \
            for (int r = r0; r < r0 + R; r++) {                                                                        \
                float *sq = s + (size_t)r * n;                                                                         \
                for (int x = lo[r]; x < hi[r]; x++) sq[x] *= scale;                                                    \
                l[r] = lo[r] < hi[r] ? softmax_row(sq, lo[r], hi[r], softcap, &m[r]) : 0.0f;                           \
                if (lo[r] >= hi[r]) m[r] = -INFINITY;                                                                  \
                for (int x = a; x < lo[r]; x++) sq[x] = 0.0f; /* keys it does not see weigh 0 */                       \
                for (int x = hi[r] > a ? hi[r] : a; x < b; x++) sq[x] = 0.0f;                                          \
            }                                                                                                          \
            if (R == 4) /* a constant R unrolls the value tiles */                                                     \
                type##_values(o + (size_t)r0 * hd, sr, n, v, n, hd, a, b, 4);                                          \
            else type##_values(o + (size_t)r0 * hd, sr, n, v, n, hd, a, b, R);                                         \
        }                                                                                                              \
    }

DEFINE_ATTN_BLOCK_AVX2(f32, float, LOAD8_F32, LOAD1_F32)
DEFINE_ATTN_BLOCK_AVX2(f16, rlxc_fp16, LOAD8_F16, LOAD1_F16)
DEFINE_ATTN_BLOCK_AVX2(bf16, rlxc_bf16, LOAD8_BF16, LOAD1_BF16)
