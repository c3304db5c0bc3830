/* AVX2 quantized kernels: activation quantization to Q8_0 and Q4_0/Q8_0 weights times
 * Q8_0 activations (matvec and blocked GEMM). */

#include "avx2.h"

/* roundf semantics (half away from zero) on floats of magnitude < 2^23: trunc, then step
 * away from zero when the exact remainder is at least one half. */
RLXC_INLINE __m256i round_half_away_epi32(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 away = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), away);
    return _mm256_cvttps_epi32(_mm256_add_ps(t, step));
}

void rlxc_quantize_row_q8_0_avx2(void *vy, const float *x, int K) {
    block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
        }
        /* Same scalar expressions as the reference, so d and id are bit-identical. */
        const float d = rlxc_hmax256(amax) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            __m256 s = _mm256_mul_ps(v[i], id);
            RLXC_NO_CONTRACT(s);
            q[i] = round_half_away_epi32(s);
        }
        _mm256_storeu_si256((__m256i *)y[b].qs, rlxc_pack_i8x32(q));
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
}

/* One-token (matvec) tiles prefetch the next R rows, the next tile, linearly: R blocks per
 * block step, so they arrive from DRAM while this tile computes. GEMM tiles reuse weights
 * from L2 across the token tiles of a chunk and skip it. */

/* Q4_0: unsigned nibbles times signed activations with maddubs, minus 8 * sum(q8) per block
 * (computed once per token and block, shared by the R rows of the tile). The int16 pair sums
 * stay below 2 * 15 * 127, so maddubs never saturates. */
RLXC_INLINE void q4_0_tile(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *x, int nb,
                           const int R, const int C) {
    __m256 acc[TILE_MAX][TILE_MAX];
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(block_q4_0));
        __m256i nib[TILE_MAX];
        __m256 dw[TILE_MAX];
        RLXC_UNROLL for (int r = 0; r < R; r++) {
            nib[r] = rlxc_q4_nibbles256(w[(size_t)r * nb + b].qs);
            dw[r] = _mm256_set1_ps(rlxc_h2f(w[(size_t)r * nb + b].d));
        }
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const block_q8_0 *xb = x + (size_t)t * nb + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->qs);
            const __m256i x8 = rlxc_dot_u8s8(_mm256_set1_epi8(8), xq);
            const __m256 dx = _mm256_set1_ps(rlxc_h2f(xb->d));
            RLXC_UNROLL for (int r = 0; r < R; r++) {
                const __m256i dot = _mm256_sub_epi32(rlxc_dot_u8s8(nib[r], xq), x8);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw[r], dx), acc[r][t]);
            }
        }
    }
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);
}

/* Q8_0: the sign trick (|w| unsigned times x carrying w's sign) keeps maddubs signed x signed;
 * the pair sums stay within 2 * 128 * 127. */
RLXC_INLINE void q8_0_tile(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *x, int nb,
                           const int R, const int C) {
    __m256 acc[TILE_MAX][TILE_MAX];
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        if (C == 1) rlxc_prefetch(w + (size_t)R * (nb + b), R * sizeof(block_q8_0));
        __m256i wq[TILE_MAX], wabs[TILE_MAX];
        __m256 dw[TILE_MAX];
        RLXC_UNROLL for (int r = 0; r < R; r++) {
            wq[r] = _mm256_loadu_si256((const __m256i *)w[(size_t)r * nb + b].qs);
            wabs[r] = _mm256_sign_epi8(wq[r], wq[r]);
            dw[r] = _mm256_set1_ps(rlxc_h2f(w[(size_t)r * nb + b].d));
        }
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const block_q8_0 *xb = x + (size_t)t * nb + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->qs);
            const __m256 dx = _mm256_set1_ps(rlxc_h2f(xb->d));
            RLXC_UNROLL for (int r = 0; r < R; r++) {
                const __m256i dot = rlxc_dot_u8s8(wabs[r], _mm256_sign_epi8(xq, wq[r]));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw[r], dx), acc[r][t]);
            }
        }
    }
    RLXC_UNROLL for (int r = 0; r < R; r++)
        RLXC_UNROLL for (int t = 0; t < C; t++) y[(size_t)t * ldy + r] = rlxc_hsum256(acc[r][t]);
}

/* Decode streams 4 rows per tile; the GEMM keeps 2 rows x 3 tokens of accumulators (16 ymm
 * registers: 2 x 4 spills). For Q4_0 with many tokens gemm.c's interleaved GEMM takes over. */
RLXC_DEFINE_QMATMUL(rlxc_matmul_q4_0_rows_avx2, block_q4_0, q4_0_tile, 4, 2, 3)
RLXC_DEFINE_QMATMUL(rlxc_matmul_q8_0_avx2, block_q8_0, q8_0_tile, 4, 2, 3)
RLXC_DEFINE_MATVEC(rlxc_matvec_q4_0_avx2, rlxc_matmul_q4_0_rows_avx2)
RLXC_DEFINE_MATVEC(rlxc_matvec_q8_0_avx2, rlxc_matmul_q8_0_avx2)

void rlxc_x16_block_terms(int32_t *bias, float *dx, const block_q8_0 *x, int nb, int offset) {
    for (int b = 0; b < nb; b++) {
        const __m256i s = rlxc_dot_u8s8(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)x[b].qs));
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
        bias[b] = -offset * _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1))));
        dx[b] = rlxc_h2f(x[b].d);
    }
}

/* Decode on 16-row groups, rows 0-7 and 8-15 (the low and high 32 bytes of each 64-byte run) in
 * two registers. Q4_0: per half and block 8 maddubs summed in int16 (8 * 2 * 15 * 127 < 2^15, no
 * saturation), one widening madd and one scale FMA for 8 rows. Returns half h's 8 int32 sums. */
RLXC_INLINE __m256i x16_dot_q4_0(const uint8_t *qs, const unaligned_i32 *q, int32_t bias, int h) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i p = _mm256_setzero_si256();
    RLXC_UNROLL for (int j = 0; j < 4; j++) {
        const __m256i z = _mm256_loadu_si256((const __m256i *)(qs + 64 * j + 32 * h));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(z, m4), _mm256_set1_epi32(q[j])));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(z, 4), m4),
                                                     _mm256_set1_epi32(q[4 + j])));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_set1_epi32(bias));
}

/* Q8_0: the sign trick of q8_0_tile (|w| times x carrying w's sign); pair sums up to 2 * 128 * 127
 * leave no room to add two maddubs in int16, so each is widened. */
RLXC_INLINE __m256i x16_dot_q8_0(const uint8_t *qs, const unaligned_i32 *q, int32_t bias, int h) {
    (void)bias; /* signed weights: no offset */
    __m256i sum = _mm256_setzero_si256();
    RLXC_UNROLL for (int j = 0; j < 8; j++) {
        const __m256i z = _mm256_loadu_si256((const __m256i *)(qs + 64 * j + 32 * h));
        sum = _mm256_add_epi32(sum, rlxc_dot_u8s8(_mm256_sign_epi8(z, z), _mm256_sign_epi8(_mm256_set1_epi32(q[j]), z)));
    }
    return sum;
}

/* S groups (RLXC_DEFINE_MATVEC_X16) of qsb quant bytes per block and row: per block and half,
 * dot's 8 int32 sums, one scale FMA. */
#define X16_GROUP(name, qsb, dot)                                                                                  \
    RLXC_INLINE void name(float *y, const uint8_t *grp, size_t gb, const int S, int b0, const block_q8_0 *x,       \
                          const int32_t *bias, const float *dx, int n, int first) {                                \
        __m256 acc[RLXC_X16_STREAMS][2];                                                                           \
        RLXC_UNROLL for (int s = 0; s < S; s++) for (int h = 0; h < 2; h++)                                        \
            acc[s][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 16 * s + 8 * h);                         \
        for (int b = 0; b < n; b++) {                                                                              \
            const unaligned_i32 *q = (const unaligned_i32 *)x[b].qs;                                               \
            const __m256 dxb = _mm256_set1_ps(dx[b]);                                                              \
            RLXC_UNROLL for (int s = 0; s < S; s++) {                                                              \
                const uint8_t *qs = rlxc_x16_quants(grp + s * gb, qsb, b0 + b);                                    \
                const rlxc_fp16 *d = rlxc_x16_scales(grp + s * gb, qsb, b0 + b);                                   \
                RLXC_UNROLL for (int h = 0; h < 2; h++) {                                                          \
                    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(d + 8 * h)));              \
                    acc[s][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(qs, q, bias[b], h)), _mm256_mul_ps(dw, dxb),\
                                                acc[s][h]);                                                        \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        RLXC_UNROLL for (int s = 0; s < S; s++) for (int h = 0; h < 2; h++)                                        \
            _mm256_storeu_ps(y + 16 * s + 8 * h, acc[s][h]);                                                       \
    }
X16_GROUP(x16_group_q4_0, 16, x16_dot_q4_0)
X16_GROUP(x16_group_q8_0, 32, x16_dot_q8_0)

static int x16_intel = -1; /* threads may ask at once: same answer, atomic reads */

int rlxc_x16_intel_tuned(void) {
    int v = __atomic_load_n(&x16_intel, __ATOMIC_RELAXED);
    if (v < 0) {
        v = rlxc_env_switch("RLXC_X16_INTEL", __builtin_cpu_is("intel"));
        __atomic_store_n(&x16_intel, v, __ATOMIC_RELAXED);
    }
    return v;
}

void rlxc_x16_set_intel_tuned(int on) { __atomic_store_n(&x16_intel, on < 0 ? -1 : !!on, __ATOMIC_RELAXED); }

/* Four groups at a time on Intel (see RLXC_DEFINE_MATVEC_X16); one elsewhere: on a 2-core AMD
 * EPYC VM (Zen, AVX2 kernels forced) two or more streams collapsed one core's matvec out of
 * cache (64-128 MiB, K = 4096, 4160 or 14336) to 7-9 GB/s, where one stream read 17-19 GB/s at K
 * = 4096 and the AVX-512 kernels 20-22 with 1, 2 or 4. */
static RLXC_DEFINE_MATVEC_X16(matvec_q4_0x16_s4, x16_group_q4_0, 16, 8, RLXC_X16_STREAMS)
static RLXC_DEFINE_MATVEC_X16(matvec_q8_0x16_s4, x16_group_q8_0, 32, 0, RLXC_X16_STREAMS)
static RLXC_DEFINE_MATVEC_X16(matvec_q4_0x16_s1, x16_group_q4_0, 16, 8, 1)
static RLXC_DEFINE_MATVEC_X16(matvec_q8_0x16_s1, x16_group_q8_0, 32, 0, 1)
RLXC_DEFINE_X16_BY_VENDOR(rlxc_matvec_q4_0x16_avx2, matvec_q4_0x16_s4, matvec_q4_0x16_s1)
RLXC_DEFINE_X16_BY_VENDOR(rlxc_matvec_q8_0x16_avx2, matvec_q8_0x16_s4, matvec_q8_0x16_s1)

/* AVX2 has no interleaved GEMM for Q8_0 (its unsigned bytes overflow the int16 sums). */
void rlxc_matmul_q8_0x16_avx2(float *y, int ldy, const void *w, const void *xq, const rlxc_q8_terms *terms, int G,
                              int K, int T) {
    (void)terms; /* the per-token decode kernel sums its blocks itself */
    rlxc_matmul_x16_by_token(rlxc_matvec_q8_0x16_avx2, RLXC_Q8_0, y, ldy, w, xq, G, K, T);
}
