/* The quants of the 256-blocks as unsigned bytes, 64 per register in element order (u = 0..3
 * for elements 64u .. 64u+64): shared by the register tiles (wtypes.c) and the interleaved
 * K-quant GEMM (gemm.c). */
#ifndef RLXC_KERNELS_AVX512_KQUANTS_H
#define RLXC_KERNELS_AVX512_KQUANTS_H

#include "avx512.h"

/* Quants 64i .. 64i+64: sub-block 2i (low nibbles of qs[32i ..]) in the low 256 bits, 2i + 1
 * (the high nibbles) in the high 256 bits, matching one contiguous load of the activations.
 * Q5_K adds 16 where qh[l] has bit 2i (low half) or 2i + 1 (high half). */
RLXC_INLINE __m512i k_nibbles(const uint8_t *qs) {
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
    return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
}
RLXC_INLINE __m512i q4_k_quants(const block_q4_k *b, const int i) { return k_nibbles(b->qs + 32 * i); }
RLXC_INLINE __m512i q5_k_quants(const block_q5_k *b, const int i) {
    const __m512i q = k_nibbles(b->qs + 32 * i);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
    const __m512i bit = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8((char)(1 << (2 * i))),
                                                _mm512_set1_epi8((char)(1 << (2 * i + 1))));
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
}

/* Quants 64u .. 64u+64, unsigned. Q2_K / Q3_K: sub-blocks v = 2u (low 256 bits) and 2u + 1 (high)
 * are bit pairs 2k, 2k + 2 (k = 2(u % 2)) of qs[32h ..] (h = u / 2); Q3_K adds 4 where hmask[l] has
 * bit v. Q6_K (u = 2h + n): the low (n = 0) or high (n = 1) nibbles of ql[64h .. 64h+64], and from
 * qh[32h .. 32h+32] bit pairs 2n (low 256 bits: elements k = 2n) and 2n + 1 (high: k = 2n + 1),
 * moved to bits 4, 5 (layouts in kernels.h). */
RLXC_INLINE __m512i k_2bit(const uint8_t *qs, const int u) {
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (u / 2))));
    const __m512i shift = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16((short)(4 * (u % 2))),
                                                  _mm512_set1_epi16((short)(4 * (u % 2) + 2)));
    return _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
}
RLXC_INLINE __m512i q2_k_quants(const block_q2_k *b, const int u) { return k_2bit(b->qs, u); }
RLXC_INLINE __m512i q3_k_quants(const block_q3_k *b, const int u) {
    const __m512i q = k_2bit(b->qs, u);
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
    const __m512i bit = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8((char)(1 << (2 * u))),
                                                _mm512_set1_epi8((char)(1 << (2 * u + 1))));
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hm, bit), q, _mm512_set1_epi8(4));
}
RLXC_INLINE __m512i q6_k_quants(const block_q6_k *b, const int u) {
    const int h = u / 2, n = u % 2;
    __m512i lo = _mm512_loadu_si512(b->ql + 64 * h);
    if (n) lo = _mm512_srli_epi16(lo, 4);
    lo = _mm512_and_si512(lo, _mm512_set1_epi8(0x0F));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
    const __m512i hi = n ? _mm512_srlv_epi16(qh, _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(0), _mm512_set1_epi16(2)))
                         : _mm512_sllv_epi16(qh, _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(4), _mm512_set1_epi16(2)));
    return _mm512_ternarylogic_epi32(hi, _mm512_set1_epi8(0x30), lo, 0xEA); /* (hi & 0x30) | lo */
}

#endif
