/* The body of the x86 attention over one block of keys (kernels.h: attn_block), written once for
 * kernels_avx2/attention.c (8-lane __m256) and kernels_avx512/attention.c (16-lane __m512): scores
 * in tiles of 4 queries x DOT_KEYS keys, a softmax per query, then values in tiles of 4 queries x
 * VALUE_VECS vectors of dims. The including file defines, before including this:
 *   VEC, VL (floats per vector), V_ZERO(), V_LOAD(p), V_STORE(p, v), V_FMA(a, b, c) (a * b + c),
 *   V_BCAST(p) (*p in every lane), V_HSUM(v) (the lanes' sum), V_HSUM_TILE(a) (lane t =
 *   V_HSUM(a[t]) for VL vectors: a whole score tile's sums)
 *   DOT_KEYS (keys per score tile, VL / 4: 4 x DOT_KEYS accumulators plus loads fit the register file)
 *   VALUE_VECS (vectors of dims per value tile)
 *   softmax_row(s, lo, hi, softcap, &m) (s[lo, hi) = exp(softcap(s) - max) in place, *m = the
 *   max, returns the sum)
 * and per K/V row type, LOADV(p) (VL elements as floats) and LOAD1(x) (one).
 *
 * A query's bits must not depend on the queries or keys it shares a call with: every dot
 * product is one FMA chain over the row (VL lanes, summed, then the dims past the last vector
 * one by one), whatever tile computes it; each output dim sums its keys in key order, one FMA
 * each; keys a query does not see weigh exactly 0, which adds 0 * v and changes no bit.
 *
 * A long cache streams from memory and the hardware prefetcher stops at every 4 KiB page: the
 * loops prefetch the rows one block further on (the next block of a full cache; a harmless
 * guess for a ring, and a prefetch never faults). */

_Static_assert(4 * DOT_KEYS == VL, "a score tile's sums fill one vector");

/* Value rows per pass of the dims: 16 rows of hd = 256 f32 are 16 KiB, which stay in L1. */
#define ATTN_VALUE_KEYS 16

/* [p, p + n) towards L2 (not L1, which holds the block being read). */
RLXC_INLINE void prefetch_l2(const void *p, const size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T1);
}

#define DEFINE_ATTN_BLOCK(isa, type, T, LOADV, LOAD1)                                                                  \
    /* s[r][c] = q_r . k_c for R <= 4 queries x C <= DOT_KEYS keys: one chain per pair. */                             \
    RLXC_INLINE void type##_dots(float *s, int lds, const float *q, const T *k, int hd, const int R, const int C) {    \
        VEC acc[4][DOT_KEYS];                                                                                          \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int c = 0; c < C; c++) acc[r][c] = V_ZERO();          \
        int i = 0;                                                                                                     \
        for (; i + VL <= hd; i += VL) {                                                                                \
            VEC kv[DOT_KEYS];                                                                                          \
            RLXC_UNROLL for (int c = 0; c < C; c++) kv[c] = LOADV(k + (size_t)c * hd + i);                             \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                  \
                const VEC qv = V_LOAD(q + (size_t)r * hd + i);                                                         \
                RLXC_UNROLL for (int c = 0; c < C; c++) acc[r][c] = V_FMA(qv, kv[c], acc[r][c]);                       \
            }                                                                                                          \
        }                                                                                                              \
        float sum[4][DOT_KEYS];                                                                                        \
        if (R == 4 && C == DOT_KEYS) /* the same bits as V_HSUM, fewer shuffles */                                     \
            V_STORE(&sum[0][0], V_HSUM_TILE((const VEC *)acc));                                                        \
        else RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int c = 0; c < C; c++)                           \
            sum[r][c] = V_HSUM(acc[r][c]);                                                                             \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int c = 0; c < C; c++) {                              \
            float x = sum[r][c];                                                                                       \
            for (int d = i; d < hd; d++) x += q[(size_t)r * hd + d] * LOAD1(k[(size_t)c * hd + d]);                    \
            s[(size_t)r * lds + c] = x;                                                                                \
        }                                                                                                              \
    }                                                                                                                  \
    /* o[r][i .. i + VL W) += sum over keys [a, b) of p[r][j] v_j for R <= 4 queries (set, not added, if               \
     * first): the R x W sums stay in registers over the keys, one FMA chain each in key order. Each                   \
     * key prefetches the same dims of the row n keys on (the next block's): VL W elements. */                         \
    RLXC_INLINE void type##_values_tile(float *o, const float *p, int ldp, const T *v, int n, int hd, int a, int b,    \
                                        int i, int first, const int R, const int W) {                                  \
        VEC acc[4][VALUE_VECS];                                                                                        \
        RLXC_UNROLL for (int r = 0; r < 4; r++) RLXC_UNROLL for (int w = 0; w < VALUE_VECS; w++)                       \
            acc[r][w] = V_ZERO(); /* all: R may vary */                                                                \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int w = 0; w < W; w++)                                \
            if (!first) acc[r][w] = V_LOAD(o + (size_t)r * hd + i + VL * w);                                           \
        for (int j = a; j < b; j++) {                                                                                  \
            prefetch_l2(v + (size_t)(j + n) * hd + i, VL * W * sizeof(T)); /* the next block's row, these dims */      \
            VEC vv[VALUE_VECS];                                                                                        \
            RLXC_UNROLL for (int w = 0; w < W; w++) vv[w] = LOADV(v + (size_t)j * hd + i + VL * w);                    \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                                  \
                const VEC pr = V_BCAST(p + (size_t)r * ldp + j);                                                       \
                RLXC_UNROLL for (int w = 0; w < W; w++) acc[r][w] = V_FMA(pr, vv[w], acc[r][w]);                       \
            }                                                                                                          \
        }                                                                                                              \
        RLXC_UNROLL for (int r = 0; r < R; r++) RLXC_UNROLL for (int w = 0; w < W; w++)                                \
            V_STORE(o + (size_t)r * hd + i + VL * w, acc[r][w]);                                                       \
    }                                                                                                                  \
    /* o[r][0..hd) = sum over keys [a, b) of p[r][j] v_j for R <= 4 queries: ATTN_VALUE_KEYS rows at a time            \
     * (in L1) pass every VALUE_VECS vectors of dims of all R queries, each value vector converted once                \
     * for all R; dims past the last whole tile one vector at a time, then one by one. */                              \
    RLXC_INLINE void type##_values(float *o, const float *p, int ldp, const T *v, int n, int hd, int a, int b,         \
                                   const int R) {                                                                      \
        const int hv = hd / VL * VL;                                                                                   \
        for (int r = 0; a >= b && r < R; r++) memset(o + (size_t)r * hd, 0, (size_t)hv * sizeof(float)); /* no key */  \
        for (int j0 = a; j0 < b; j0 += ATTN_VALUE_KEYS) {                                                              \
            const int j1 = b - j0 < ATTN_VALUE_KEYS ? b : j0 + ATTN_VALUE_KEYS;                                        \
            int i = 0;                                                                                                 \
            for (; i + VL * VALUE_VECS <= hv; i += VL * VALUE_VECS)                                                    \
                type##_values_tile(o, p, ldp, v, n, hd, j0, j1, i, j0 == a, R, VALUE_VECS);                            \
            for (; i < hv; i += VL) type##_values_tile(o, p, ldp, v, n, hd, j0, j1, i, j0 == a, R, 1);                 \
        }                                                                                                              \
        for (int r = 0; r < R; r++) /* dims past the last vector */                                                    \
            for (int d = hv; d < hd; d++) {                                                                            \
                float x = 0.0f;                                                                                        \
                for (int jj = a; jj < b; jj++) x += p[(size_t)r * ldp + jj] * LOAD1(v[(size_t)jj * hd + d]);           \
                o[(size_t)r * hd + d] = x;                                                                             \
            }                                                                                                          \
    }                                                                                                                  \
    void rlxc_attn_block_##type##_##isa(float *o, float *m, float *l, const float *q, int nq, const void *kp,           \
                                        const void *vp, int n, int hd, const int *lo, const int *hi, float scale,      \
                                        float softcap, float *s) {                                                     \
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
                for (; j + DOT_KEYS <= b; j += DOT_KEYS) {                                                             \
                    prefetch_l2(k + (size_t)(j + n) * hd, DOT_KEYS * hd * sizeof(T)); /* the next block's rows */      \
                    type##_dots(sr + j, n, qr, k + (size_t)j * hd, hd, 4, DOT_KEYS);                                   \
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
