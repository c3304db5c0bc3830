/* AVX2 kernels: declarations and the small helpers several files share. Included by
 * kernels_avx512/ too, whose table reuses every AVX2 kernel it does not override. */
#ifndef RLXC_KERNELS_AVX2_H
#define RLXC_KERNELS_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../csrc/kernels_simd.h"

/* Register tiles are R x C arrays with R, C <= TILE_MAX, compile-time constants after
 * inlining. They stay in registers only if they are fixed-size (not VLAs) and every loop over
 * R and C is fully unrolled, which gcc's size heuristics refuse for big loop bodies. */
#define TILE_MAX 8
#define RLXC_UNROLL _Pragma("GCC unroll 8")

/* gcc contracts a*b followed by +/- into one FMA even across intrinsics (-ffp-contract=fast
 * is its default); this barrier pins a rounded product where bit-exactness depends on it. */
#define RLXC_NO_CONTRACT(v) __asm__("" : "+x"(v))

RLXC_INLINE float rlxc_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane t of the result = rlxc_hsum256(a[t]), bit for bit: the same pairs added level by level
 * (lanes i and i + 4, then i and i + 2, then i and i + 1), 8 sums in 21 instructions instead
 * of 48. The tree puts input 2j + k's sum in lane 4k + j, hence the order a[m], a[m + 4]. */
RLXC_INLINE __m256 rlxc_hsum8x256(const __m256 a[8]) {
    __m256 p[4], q[2];
    for (int m = 0; m < 4; m++) /* a[m], a[m + 4] -> the halves of p[m] */
        p[m] = _mm256_add_ps(_mm256_permute2f128_ps(a[m], a[m + 4], 0x20), _mm256_permute2f128_ps(a[m], a[m + 4], 0x31));
    for (int m = 0; m < 2; m++)
        q[m] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * m], p[2 * m + 1], 0x44), _mm256_shuffle_ps(p[2 * m], p[2 * m + 1], 0xee));
    return _mm256_add_ps(_mm256_shuffle_ps(q[0], q[1], 0x88), _mm256_shuffle_ps(q[0], q[1], 0xdd));
}

RLXC_INLINE float rlxc_hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Prefetch [p, p + n) into L1. The quantized kernels stream several rows at once; these
 * short interleaved streams defeat the hardware prefetcher (on Zen 5 a 4-row Q4_0 matvec
 * fell from 20 GB/s in cache to 7 GB/s from DRAM), so each tile prefetches the next one. */
RLXC_INLINE void rlxc_prefetch(const void *p, const size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* A 4-byte group of activation quants, read in place. */
typedef int32_t unaligned_i32 __attribute__((aligned(1), may_alias));

/* fp16 -> f32 through F16C: one instruction instead of the scalar bit juggling. */
RLXC_INLINE float rlxc_h2f(rlxc_fp16 h) { return _cvtsh_ss(h); }

/* 16 packed Q4_0 bytes -> 32 unsigned nibbles in element order: the low nibbles fill the
 * low 128-bit lane, the high nibbles the high lane (one load, one variable shift, one and). */
RLXC_INLINE __m256i rlxc_q4_nibbles256(const uint8_t *qs) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

/* 8 int32 sums of 4 products of unsigned bytes q with signed bytes xq: maddubs into int16
 * pairs (the caller keeps them from saturating), madd widens them. */
RLXC_INLINE __m256i rlxc_dot_u8s8(__m256i q, __m256i xq) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), _mm256_set1_epi16(1));
}

/* 32 int32 (q[0] .. q[3], in element order) -> 32 int8 in order, saturating. The packs work
 * per 128-bit lane, leaving dwords in the order 0,2,4,6,1,3,5,7; the permute undoes it. */
RLXC_INLINE __m256i rlxc_pack_i8x32(const __m256i q[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* pshufb control (as a 16-bit element) that copies 16-bit word w of each 128-bit lane into
 * every word of that lane: bytes 2w, 2w + 1. */
#define RLXC_PICK_WORD(w) ((short)(0x0100 + 0x0202 * (w)))

/* The 12 packed scale bytes of a Q4_K block -> sc[0..8) in bytes 0-7, m[0..8) in bytes 8-15:
 * the four 32-bit words of rlxc_q4_k_scales (kernels.h) in one register. Reads 16 bytes: the
 * last 4 are the block's first quants and drop out. */
RLXC_INLINE __m128i rlxc_q4_k_scales128(const uint8_t *s) {
    const __m128i v = _mm_loadu_si128((const __m128i *)s); /* words w0 w1 w2 - */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                     _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* rlxc_q4_k_scales128 widened: sc[0..8) as int16, and m[0..8) in *m. */
RLXC_INLINE __m128i rlxc_q4_k_scales16(const uint8_t *s, __m128i *m) {
    const __m128i sm = rlxc_q4_k_scales128(s), sc = _mm_cvtepu8_epi16(sm);
    *m = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    return sc;
}

/* A Q8_K block's sums over its 8 sub-blocks of 32, from bsums (int16: each within 32 * 127),
 * which the Q4_K mins multiply. */
RLXC_INLINE __m128i rlxc_q8_k_sums32(const block_q8_k *x) {
    return _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)x->bsums), _mm_loadu_si128((const __m128i *)(x->bsums + 8)));
}

/* The 16 scales of a block with sub-blocks of 16 (Q2_K, Q3_K, Q6_K), as int8. */
RLXC_INLINE __m128i rlxc_q6_k_scales8(const block_q6_k *b) { return _mm_loadu_si128((const __m128i *)b->scales); }
/* rlxc_q3_k_scales (kernels.h) on one register: sc[j] - 32 */
RLXC_INLINE __m128i rlxc_q3_k_scales8(const block_q3_k *b) {
    uint32_t w[3];
    memcpy(w, b->scales, sizeof w);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_setr_epi32((int)w[0], (int)w[1], (int)w[0], (int)w[1]),
                                                    _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)w[2]), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi8(32));
}
RLXC_INLINE __m128i rlxc_q2_k_scales8(const block_q2_k *b) {
    return _mm_and_si128(_mm_loadu_si128((const __m128i *)b->scales), _mm_set1_epi8(0x0F));
}
RLXC_INLINE __m128i rlxc_q2_k_mins8(const block_q2_k *b) {
    return _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)b->scales), 4), _mm_set1_epi8(0x0F));
}

/* The unsigned offset 2^shift of quants with sub-blocks of 16 (Q3_K: 4, Q6_K: 32) against a
 * Q8_K block: 2^shift * sum_j sc[j] * bsums[j] as 8 int32 partial sums, from the int8 scales
 * (2^shift * sc still fits int16). */
RLXC_INLINE __m256i rlxc_k16_offset_sums(__m128i sc8, const block_q8_k *x, const int shift) {
    return _mm256_madd_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), shift), _mm256_loadu_si256((const __m256i *)x->bsums));
}

/* The Q2_K mins against a Q8_K block: sum_j m[j] * bsums[j] as 8 int32 partial sums. */
RLXC_INLINE __m256i rlxc_q2_k_min_sums(const block_q2_k *b, const block_q8_k *x) {
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(rlxc_q2_k_mins8(b)), _mm256_loadu_si256((const __m256i *)x->bsums));
}

RLXC_DECLARE_KERNELS(avx2)
RLXC_DECLARE_X16(avx2)
RLXC_DECLARE_KX16(avx2)
/* What the repacked decode kernels add per activation block outside the integer dots: the
 * weights' offset (what made them unsigned bytes; 0: none) times minus the block's quant sum,
 * and its scale. They take blocks RLXC_X16_CHUNK at a time so these fit on the stack for any K
 * (partial sums go through y). Each chunk is a pass over every group, so K up to 32768 takes one:
 * with 256 (two passes at K = 14336) one AMD EPYC core read 17.5-18.2 GB/s out of cache on the
 * AVX-512 matvec and 10.3-10.5 on the AVX2 one, against 22.3-23.8 and 16.8-17.4 in one pass. */
#define RLXC_X16_CHUNK 1024
void rlxc_x16_block_terms(int32_t *bias, float *dx, const block_q8_0 *x, int nb, int offset);

/* A matvec_x16 of rows of qs quant bytes per block and weight offset `offset`, around
 * group(y, grp, gb, S, b0, x, bias, dx, n, first): S groups gb bytes apart (y 16 floats apart)
 * over blocks b0 .. b0 + n (x, bias, dx from block b0), accumulating into y unless first. The
 * `streams` groups (at most RLXC_X16_STREAMS) go block by block together: that many address
 * streams, each followed by the hardware prefetcher, where one stream left a Xeon core reading 9
 * GB/s of the 12 that the 8-row GGUF tiles (8 streams) read. */
#define RLXC_X16_STREAMS 4
#define RLXC_DEFINE_MATVEC_X16(name, group, qs, offset, streams)                                          \
    void name(float *y, const void *vw, const void *vx, int G, int K) {                                   \
        const block_q8_0 *x = vx;                                                                         \
        const int nb = K / RLXC_QK;                                                                       \
        const size_t group_bytes = rlxc_x16_group_bytes(qs, K);                                           \
        int32_t bias[RLXC_X16_CHUNK];                                                                     \
        float dx[RLXC_X16_CHUNK];                                                                         \
        for (int b0 = 0; b0 < nb; b0 += RLXC_X16_CHUNK) {                                                 \
            const int n = nb - b0 < RLXC_X16_CHUNK ? nb - b0 : RLXC_X16_CHUNK;                            \
            rlxc_x16_block_terms(bias, dx, x + b0, n, offset);                                            \
            int g = 0;                                                                                    \
            for (; g + (streams) <= G; g += (streams))                                                    \
                group(y + 16 * (size_t)g, (const uint8_t *)vw + (size_t)g * group_bytes, group_bytes,     \
                      (streams), b0, x + b0, bias, dx, n, !b0);                                           \
            for (; g < G; g++)                                                                            \
                group(y + 16 * (size_t)g, (const uint8_t *)vw + (size_t)g * group_bytes, group_bytes, 1,  \
                      b0, x + b0, bias, dx, n, !b0);                                                      \
        }                                                                                                 \
    }
/* Whether the x16 decode kernels take their Intel-tuned variants (four streams, and on AVX-512
 * software prefetch; elsewhere one stream, none): as RLXC_X16_INTEL says ("0" or "1"), else on
 * Intel CPUs. */
int rlxc_x16_intel_tuned(void);
/* The matvec_x16 `name` that runs `intel` or `other` (RLXC_DEFINE_MATVEC_X16s) as that says. */
#define RLXC_DEFINE_X16_BY_VENDOR(name, intel, other)                                    \
    void name(float *y, const void *w, const void *x, int G, int K) {                   \
        (rlxc_x16_intel_tuned() ? intel : other)(y, w, x, G, K);                       \
    }
/* The 256-blocks in register tiles over the GGUF rows (wtypes.c): decode, and the interleaved
 * GEMMs' (gemm.c) fallback below KQ_MIN_T tokens. */
#define RLXC_DECLARE_KQ_TILES(type, sfx) \
    void rlxc_matmul_##type##_tiles_##sfx(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
RLXC_DECLARE_KQ_TILES(q2_k, avx2)
RLXC_DECLARE_KQ_TILES(q3_k, avx2)
RLXC_DECLARE_KQ_TILES(q4_k, avx2)
RLXC_DECLARE_KQ_TILES(q5_k, avx2)
RLXC_DECLARE_KQ_TILES(q6_k, avx2)
/* Q4_0 one row per register: decode and small T (quant.c); rlxc_matmul_q4_0_avx2 (gemm.c) uses it
 * below 4 tokens. */
void rlxc_matmul_q4_0_rows_avx2(float *y, int ldy, const void *w, const void *x, int N, int K, int T);

#endif
