/* AVX-512 attention over one block of keys (kernels.h: attn_block), on attn_tiles.h's body with
 * 16-lane vectors: scores in 4 x 4 tiles of queries x keys (16 accumulators, 4 key vectors and a
 * query vector of the 32 registers), values in tiles of 4 queries x 64 dims. The kernel is bound
 * by its FMAs: where a core has two 512-bit FMA ports (the 16-core Xeon), prefill of 4096 tokens
 * ran 13-49 % faster than on the AVX2 tiles; on Zen 4, which splits 512-bit FMAs in two, it is
 * neutral (benchmarks/README.md). The softmax goes over aligned 16-lane chunks (element j in
 * lane j % 16) from the chunk of lo, under a mask of the lanes in [lo, hi). */
#include <sleef.h>
#include <string.h>

#include "avx512.h"

#define LOAD16_F32(p) _mm512_loadu_ps(p)
#define LOAD1_F32(x) (x)
#define LOAD16_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define LOAD1_F16(x) rlxc_h2f(x)
#define LOAD16_BF16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define LOAD1_BF16(x) rlxc_bf16_to_f32(x)

#define VEC __m512
#define VL 16
#define V_ZERO() _mm512_setzero_ps()
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_BCAST(p) _mm512_set1_ps(*(p))
#define V_HSUM(v) rlxc_hsum512(v)
#define V_HSUM_TILE(a) rlxc_hsum16x512(a)
#define DOT_KEYS 4
#define VALUE_VECS 4

/* Lanes of the chunk at j that fall in [lo, hi). */
RLXC_INLINE __mmask16 lanes_in(int j, int lo, int hi) {
    const int a = lo > j ? lo - j : 0, b = hi - j < 16 ? hi - j : 16;
    return (__mmask16)(((1u << b) - 1) & ~((1u << a) - 1));
}

/* s[lo, hi) = exp(softcap(s) - max) in place (s holds scale * q.k); *m = the max, returns the sum. */
static float softmax_row(float *s, int lo, int hi, float softcap, float *m) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), cap = _mm512_set1_ps(softcap);
    __m512 mx = ninf;
    for (int j = lo & ~15; j < hi; j += 16) {
        const __mmask16 ok = lanes_in(j, lo, hi);
        __m512 x = _mm512_mask_loadu_ps(ninf, ok, s + j);
        if (softcap > 0.0f) {
            x = _mm512_mul_ps(cap, Sleef_tanhf16_u10avx512f(_mm512_div_ps(x, cap)));
            _mm512_mask_storeu_ps(s + j, ok, x);
        }
        mx = _mm512_mask_max_ps(mx, ok, mx, x);
    }
    *m = _mm512_reduce_max_ps(mx);
    const __m512 mv = _mm512_set1_ps(*m);
    __m512 sum = _mm512_setzero_ps();
    for (int j = lo & ~15; j < hi; j += 16) {
        const __mmask16 ok = lanes_in(j, lo, hi);
        const __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, ok, s + j), mv));
        _mm512_mask_storeu_ps(s + j, ok, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

#include "../kernels_avx2/attn_tiles.h"

DEFINE_ATTN_BLOCK(avx512, f32, float, LOAD16_F32, LOAD1_F32)
DEFINE_ATTN_BLOCK(avx512, f16, rlxc_fp16, LOAD16_F16, LOAD1_F16)
DEFINE_ATTN_BLOCK(avx512, bf16, rlxc_bf16, LOAD16_BF16, LOAD1_BF16)
