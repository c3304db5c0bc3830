/* AVX2 attention over one block of keys (kernels.h: attn_block), on attn_tiles.h's body: scores
 * in 4 x 2 tiles of queries x keys (8 accumulators: with the loads they fit AVX2's 16 registers,
 * a 4 x 4 tile spilled), values in tiles of 4 queries x 16 dims. One body serves f32, f16 and
 * bf16 rows: LOAD8 / LOAD1 turn 8 / 1 elements of a row into floats. The softmax goes over
 * aligned 8-lane chunks (element j in lane j % 8) from the chunk of lo, so that a query's bits
 * do not depend on the keys it shares a call with; keys it does not see add exp(-inf) = 0. */
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

#define VEC __m256
#define VL 8
#define V_ZERO() _mm256_setzero_ps()
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_HSUM(v) rlxc_hsum256(v)
#define V_HSUM_TILE(a) rlxc_hsum8x256(a)
#define DOT_KEYS 2
#define VALUE_VECS 2

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

#include "attn_tiles.h"

DEFINE_ATTN_BLOCK(avx2, f32, float, LOAD8_F32, LOAD1_F32)
DEFINE_ATTN_BLOCK(avx2, f16, rlxc_fp16, LOAD8_F16, LOAD1_F16)
DEFINE_ATTN_BLOCK(avx2, bf16, rlxc_bf16, LOAD8_BF16, LOAD1_BF16)
