/* The quants of the 256-blocks as unsigned bytes in element order, 32 per register: shared by
 * the register tiles (wtypes.c) and the common form of the interleaved K-quant GEMMs
 * (kq_form.h). */
#ifndef RLXC_KERNELS_AVX2_KQUANTS_H
#define RLXC_KERNELS_AVX2_KQUANTS_H

#include "avx2.h"

/* Sub-blocks 2i and 2i + 1 of a block: 32 quants each, in element order: the low and high
 * nibbles of qs[32i .. 32i+32); Q5_K sets 0x10 where qh[l] has bit 2i / 2i + 1. */
RLXC_INLINE void k_nibbles64(const uint8_t *qs, __m256i *lo, __m256i *hi) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs), m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(q, m4), *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}
RLXC_INLINE void q4_k_quants64(const block_q4_k *b, const int i, __m256i *lo, __m256i *hi) {
    k_nibbles64(b->qs + 32 * i, lo, hi);
}
RLXC_INLINE __m256i q5_k_fifth(__m256i qh, const int j) {
    const __m256i bit = _mm256_set1_epi8((char)(1 << j));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
}
RLXC_INLINE void q5_k_quants64(const block_q5_k *b, const int i, __m256i *lo, __m256i *hi) {
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    k_nibbles64(b->qs + 32 * i, lo, hi);
    *lo = _mm256_or_si256(*lo, q5_k_fifth(qh, 2 * i)), *hi = _mm256_or_si256(*hi, q5_k_fifth(qh, 2 * i + 1));
}

/* Quants 32v .. 32v+32 of a block, unsigned (Q3_K's -4 and Q6_K's -32 come back through
 * bsums). Q2_K / Q3_K (v = 4h + k): bits 2k, 2k+1 of qs[32h ..], Q3_K's third bit (4) from bit
 * v of hmask[l]; Q6_K: the low 4 bits from ql, the top 2 from bits 2k, 2k+1 of qh (layouts in
 * kernels.h). */
RLXC_INLINE __m256i k_2bit(const uint8_t *qs, const int v) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (v / 4)));
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (v % 4)), _mm256_set1_epi8(3));
}
RLXC_INLINE __m256i q2_k_quants(const block_q2_k *b, const int v) { return k_2bit(b->qs, v); }
RLXC_INLINE __m256i q3_k_quants(const block_q3_k *b, const int v) {
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask), bit = _mm256_set1_epi8((char)(1 << v));
    return _mm256_or_si256(k_2bit(b->qs, v), _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit),
                                                            _mm256_set1_epi8(4)));
}
RLXC_INLINE __m256i q6_k_quants(const block_q6_k *b, const int v) {
    const int h = v / 4, k = v % 4;
    __m256i lo = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (k & 1)));
    if (k >= 2) lo = _mm256_srli_epi16(lo, 4);
    __m256i hi = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    hi = 2 * k <= 4 ? _mm256_slli_epi16(hi, 4 - 2 * k) : _mm256_srli_epi16(hi, 2 * k - 4); /* to bits 4, 5 */
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0F)), _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
}

#endif
