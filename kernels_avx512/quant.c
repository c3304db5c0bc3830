/* AVX-512 VNNI quantized matvec (and GEMM for few tokens): Q4_0 and Q8_0 weights times Q8_0
 * activations, one row and two blocks per 512-bit register. vpdpbusd multiplies unsigned
 * bytes by signed bytes, so the weights are made unsigned (Q4_0: the raw nibbles; Q8_0:
 * w + 128 by flipping the sign bit) and the offset this adds, offset * sum(x) per 4-byte
 * group, is removed by starting each dot's accumulator at -offset * sum(x): computed once
 * per token and block pair and shared by all R rows of a tile. The kernel is ALU-bound in
 * cache (~10 vector ops per row and block pair), so every op saved counts. */
#include "avx512.h"

/* The two blocks b, b + 1 of a pair; with n == 1 (odd K / 32 tail) the second block reads
 * as zero and contributes exactly nothing. Lane order matches the activations: block b in
 * the low 256 bits, elements in order. */

/* A 32-bit pattern per 128-bit lane: lo in the lanes of Q4_0 low nibbles, hi in the others. */
#define Q4_LANES(lo, hi) _mm512_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi, lo, lo, lo, lo, hi, hi, hi, hi)

RLXC_INLINE __m512i q4_0_pair(const block_q4_0 *w, const int n) {
    /* 128-bit lanes [qs_b, qs_b, qs_b+1, qs_b+1], masked to low, high, low, high nibbles; the
     * high nibbles stay in place, 16 times their value, which act_pair's scales undo */
    __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)w[0].qs));
    q = n == 2 ? _mm512_mask_broadcast_i32x4(q, 0xFF00, _mm_loadu_si128((const __m128i *)w[1].qs))
               : _mm512_maskz_mov_epi32(0x00FF, q);
    return _mm512_and_si512(q, Q4_LANES(0x0F0F0F0F, (int)0xF0F0F0F0));
}

RLXC_INLINE __m512i q8_0_pair(const block_q8_0 *w, const int n) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)w[0].qs);
    const __m512i q = n == 2 ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)w[1].qs), 1)
                             : _mm512_zextsi256_si512(lo);
    return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

/* Block scales as 8 x d_b, 8 x d_b+1: one masked load of the words up to d_b+1 (masked, so
 * the row's last pair never reads past the array), one word permute, one conversion. */
RLXC_INLINE __m512 pair_scales(const void *blocks, const int stride_words, const int n) {
    const __m512i d = _mm512_maskz_loadu_epi16(n == 2 ? (1u << (stride_words + 1)) - 1 : 1u, blocks);
    const short s = (short)stride_words;
    const __m512i idx = _mm512_zextsi256_si512(_mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, s, s, s, s, s, s, s, s));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, d)));
}

/* Activation side of one block pair for one token. */
typedef struct {
    __m512i q;     /* 64 signed bytes */
    __m512i bias;  /* -(weight offset) * (sum of each 4-byte group) */
    __m512 d;      /* 8 x d_b, 8 x d_b+1, times the weights' per-lane correction */
} act_pair;

/* wbias: per byte, the weights' offset (8 or 16 * 8 for Q4_0's low / in-place high nibbles,
 * 128 for Q8_0); dscale: per lane, what the scales must undo (1 / 16 on high nibbles). */
RLXC_INLINE act_pair load_act_pair(const block_q8_0 *x, __m512i wbias, __m512 dscale, const int n) {
    act_pair a;
    const __m256i lo = _mm256_loadu_si256((const __m256i *)x[0].qs);
    a.q = n == 2 ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)x[1].qs), 1)
                 : _mm512_zextsi256_si512(lo);
    a.bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), wbias, a.q));
    a.d = _mm512_mul_ps(pair_scales(x, sizeof(block_q8_0) / 2, n), dscale);
    return a;
}

/* One R x C register tile over nb blocks: y[t * ldy + r]. Matvec tiles (C == 1) prefetch
 * the next R rows while they compute (see rlxc_prefetch). */
#define DEFINE_TILE(name, wtype, wpair, wbias, dscale)                                                           \
    RLXC_INLINE void name##_step(__m512 acc[TILE_MAX][TILE_MAX], const wtype *w, const block_q8_0 *x,          \
                                 int nb, int b, const int n, const int R, const int C) {                       \
        __m512i q[TILE_MAX];                                                                                   \
        __m512 dw[TILE_MAX];                                                                                   \
        RLXC_UNROLL for (int r = 0; r < R; r++) {                                                              \
            q[r] = wpair(w + (size_t)r * nb + b, n);                                                           \
            dw[r] = pair_scales(w + (size_t)r * nb + b, sizeof(wtype) / 2, n);                                 \
        }                                                                                                      \
        RLXC_UNROLL for (int t = 0; t < C; t++) {                                                              \
            const act_pair a = load_act_pair(x + (size_t)t * nb + b, wbias, dscale, n);                        \
            RLXC_UNROLL for (int r = 0; r < R; r++) {                                                          \
                const __m512i dot = _mm512_dpbusd_epi32(a.bias, q[r], a.q);                                    \
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], a.d), acc[r][t]);    \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    RLXC_INLINE void name(float *y, int ldy, const wtype *w, const block_q8_0 *x, int nb, const int R,         \
                          const int C) {                                                                       \
        __m512 acc[TILE_MAX][TILE_MAX];                                                                        \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                \
            RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();                           \
        int b = 0;                                                                                             \
        for (; b + 2 <= nb; b += 2) {                                                                          \
            if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), 2 * R * sizeof(wtype));                        \
            name##_step(acc, w, x, nb, b, 2, R, C);                                                            \
        }                                                                                                      \
        if (b < nb) name##_step(acc, w, x, nb, b, 1, R, C);                                                    \
        RLXC_UNROLL for (int r = 0; r < R; r++)                                                                \
            RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);  \
    }

DEFINE_TILE(q4_0_tile, block_q4_0, q4_0_pair, Q4_LANES(0x08080808, (int)0x80808080),
            _mm512_castsi512_ps(Q4_LANES(0x3f800000 /* 1.0f */, 0x3d800000 /* 1 / 16.0f */)))
DEFINE_TILE(q8_0_tile, block_q8_0, q8_0_pair, _mm512_set1_epi8((char)0x80), _mm512_set1_ps(1.0f))

/* Matvec (8 rows per tile: measured ~5% over 4 in cache), and GEMMs with too few tokens to
 * pay for gemm.c's interleaved copy (4 rows x 4 tokens). */
RLXC_DEFINE_QMATMUL(rlxc_matmul_q4_0_pairs_avx512, block_q4_0, q4_0_tile, 8, 4, 4)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q8_0_pairs_avx512, block_q8_0, q8_0_tile, 8, 4, 4)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_0_avx512, rlxc_matmul_q4_0_pairs_avx512)
RLXC_DEFINE_MATVEC(rlxc_matvec_q8_0_avx512, rlxc_matmul_q8_0_pairs_avx512)

/* Decode on 16-row groups (rlxc_pack_x16), one row per 32-bit lane. Q4_0: per block 4 loads, 8
 * vpdpbusd (low nibbles with activation group g, high nibbles with group 4 + g, two chains) and
 * one scale FMA for all 16 rows: ~30 ops where the one-row kernel above needs ~80. Returns the
 * block's 16 int32 sums. */
RLXC_INLINE __m512i x16_dot_q4_0(const uint8_t *qs, const unaligned_i32 *q, int32_t bias) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i lo = _mm512_set1_epi32(bias), hi = _mm512_setzero_si512();
    RLXC_UNROLL for (int j = 0; j < 4; j++) {
        const __m512i z = _mm512_loadu_si512(qs + 64 * j);
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(z, m4), _mm512_set1_epi32(q[j]));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4), _mm512_set1_epi32(q[4 + j]));
    }
    return _mm512_add_epi32(lo, hi);
}

/* Q8_0: quants made unsigned by flipping the sign bit (w + 128), 8 vpdpbusd per block. */
RLXC_INLINE __m512i x16_dot_q8_0(const uint8_t *qs, const unaligned_i32 *q, int32_t bias) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i lo = _mm512_set1_epi32(bias), hi = _mm512_setzero_si512();
    RLXC_UNROLL for (int j = 0; j < 4; j++) {
        lo = _mm512_dpbusd_epi32(lo, _mm512_xor_si512(_mm512_loadu_si512(qs + 128 * j), flip), _mm512_set1_epi32(q[2 * j]));
        hi = _mm512_dpbusd_epi32(hi, _mm512_xor_si512(_mm512_loadu_si512(qs + 128 * j + 64), flip),
                                 _mm512_set1_epi32(q[2 * j + 1]));
    }
    return _mm512_add_epi32(lo, hi);
}

/* Blocks ahead whose bytes a decode group prefetches (pf, 0: none), chosen per CPU by
 * rlxc_x16_intel_tuned. On the 16-core Xeon VM (2 MiB L2 per core) the hardware prefetcher alone
 * left 1-4-thread decode no faster than llama.cpp's; prefetching 4 blocks (1.1 KB of Q4_0 per
 * group) ahead took 1/2/4-thread decode of the random Llama from 17.9/33.8/60.1 to 21.2/38.2/73.3
 * tok/s (medians of 3; 8 and 16 blocks did about as well); neutral on a 2-core Xeon VM. On a
 * 2-core AMD EPYC VM (Zen, AVX-512) it costs a quarter: one thread's Q4_0 x16 matvec out of cache
 * (64-128 MiB) 24.6-24.8 GB/s without, 18.6-18.9 with 4 blocks, 17.5-19.0 with 8 or 16. */
#define X16_PREFETCH_BLOCKS 4
/* Not also into L2 from about 4 KiB ahead: read_prefetch.c had one core of the Xeon stream 6-10 %
 * more that way, but end to end (device_ab.sh, random Llama tg64, alternating trees, one host)
 * decode ran 2-6 % slower at 1 and 2 threads in 9 pairs of 9 and even at 4 and 16. */

/* S groups (RLXC_DEFINE_MATVEC_X16) of qsb quant bytes per block and row: per block, dot's 16
 * int32 sums, one scale FMA. Where pf > 0, a block's half of its record (2 blocks' quants, then
 * their scales) is prefetched pf blocks ahead into L1, which reaches every line of the records. */
#define X16_HALF_BYTES(qsb) (rlxc_x16_record_bytes(qsb) / 2)
#define X16_HALF_LINES(qsb) ((X16_HALF_BYTES(qsb) + 63) / 64)
#define X16_GROUP(name, qsb, dot, pf)                                                                               \
    RLXC_INLINE void name(float *y, const uint8_t *grp, size_t gb, const int S, int b0, const block_q8_0 *x,        \
                          const int32_t *bias, const float *dx, int n, int first) {                                 \
        __m512 acc[RLXC_X16_STREAMS];                                                                               \
        RLXC_UNROLL for (int s = 0; s < S; s++) acc[s] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + 16 * s); \
        for (int b = 0; b < n; b++) {                                                                               \
            const unaligned_i32 *q = (const unaligned_i32 *)x[b].qs;                                                \
            const __m512 xd = _mm512_set1_ps(dx[b]);                                                                \
            RLXC_UNROLL for (int s = 0; s < S; s++) {                                                               \
                const char *ahead = (const char *)rlxc_x16_quants(grp + s * gb, qsb, b0 + b + pf);                  \
                RLXC_UNROLL for (size_t l = 0; pf && l < X16_HALF_LINES(qsb); l++) {                                \
                    _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);                                                      \
                }                                                                                                   \
                const rlxc_fp16 *d = rlxc_x16_scales(grp + s * gb, qsb, b0 + b);                                    \
                const __m512i sum = dot(rlxc_x16_quants(grp + s * gb, qsb, b0 + b), q, bias[b]);                    \
                const __m512 sc = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d)), xd);       \
                acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, acc[s]);                                      \
            }                                                                                                       \
        }                                                                                                           \
        RLXC_UNROLL for (int s = 0; s < S; s++) _mm512_storeu_ps(y + 16 * s, acc[s]);                               \
    }
X16_GROUP(x16_group_q4_0, 16, x16_dot_q4_0, 0)
X16_GROUP(x16_group_q8_0, 32, x16_dot_q8_0, 0)
X16_GROUP(x16_group_q4_0_pf, 16, x16_dot_q4_0, X16_PREFETCH_BLOCKS)
X16_GROUP(x16_group_q8_0_pf, 32, x16_dot_q8_0, X16_PREFETCH_BLOCKS)

/* Elsewhere one group at a time and no prefetch: on the AMD EPYC VM, one core, Q8_0 out of cache
 * (64-128 MiB, K = 640 as Gemma 3's lm_head, or 4096) read 24.7-26.2 GB/s with one stream against
 * 14.7-18.0 with four (Q4_0: 20-22 GB/s either way). */
static RLXC_DEFINE_MATVEC_X16(matvec_q4_0x16, x16_group_q4_0, 16, 8, 1)
static RLXC_DEFINE_MATVEC_X16(matvec_q8_0x16, x16_group_q8_0, 32, 128, 1)
static RLXC_DEFINE_MATVEC_X16(matvec_q4_0x16_pf, x16_group_q4_0_pf, 16, 8, RLXC_X16_STREAMS)
static RLXC_DEFINE_MATVEC_X16(matvec_q8_0x16_pf, x16_group_q8_0_pf, 32, 128, RLXC_X16_STREAMS)

RLXC_DEFINE_X16_BY_VENDOR(rlxc_matvec_q4_0x16_avx512, matvec_q4_0x16_pf, matvec_q4_0x16)
RLXC_DEFINE_X16_BY_VENDOR(rlxc_matvec_q8_0x16_avx512, matvec_q8_0x16_pf, matvec_q8_0x16)
