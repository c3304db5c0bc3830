/* The common form of one row's super-block of a 256-block type (Q2_K .. Q6_K, IQ4_XS), which the
 * interleaved K-quant GEMMs (kernels_avx2/gemm.c, kernels_avx512/gemm.c) pack: 256 unsigned
 * quants q, 16 sub-block scales sc[j] and mins m[j], and d, dmin, with weight
 *   w = d * sc[j] * q - dmin * m[j]   (element in sub-block j of 16).
 * Q4_K / Q5_K / IQ4_XS repeat each scale of their sub-blocks of 32; the types with signed quants
 * take an offset (Q3_K + 4, Q6_K + 32, IQ4_XS levels + 128) and return it as m[j] = offset *
 * sc[j] at dmin = d. */
#ifndef RLXC_KERNELS_AVX2_KQ_FORM_H
#define RLXC_KERNELS_AVX2_KQ_FORM_H

#include "iq4.h"
#include "kquants.h"

#define KQ_MIN_T 16 /* fewer tokens do not pay for the packing: the register tiles */

typedef struct {
    uint8_t q[RLXC_QK_K];
    int16_t sc[16], m[16];
    float d, dmin;
} kq_row;

/* Scales of sub-blocks of 32 (s8[0..8), m8: mins, or NULL and offset * scale). */
RLXC_INLINE void kq_scales32(kq_row *o, const int *s8, const int *m8, int offset) {
    for (int j = 0; j < 16; j++) o->sc[j] = (int16_t)s8[j / 2], o->m[j] = (int16_t)(m8 ? m8[j / 2] : offset * s8[j / 2]);
}

#define KQ_UNPACK_K_MIN(type)                                                        \
    static inline void kq_unpack_##type(kq_row *o, const void *vb) {                 \
        const block_##type *b = vb;                                                  \
        uint8_t sm[16];                                                              \
        int s8[8], m8[8];                                                            \
        for (int i = 0; i < 4; i++) {                                                \
            __m256i lo, hi;                                                          \
            type##_quants64(b, i, &lo, &hi);                                         \
            _mm256_storeu_si256((__m256i *)(o->q + 64 * i), lo);                     \
            _mm256_storeu_si256((__m256i *)(o->q + 64 * i + 32), hi);                \
        }                                                                            \
        rlxc_q4_k_scales(sm, b->scales);                                             \
        for (int j = 0; j < 8; j++) s8[j] = sm[j], m8[j] = sm[8 + j];                \
        kq_scales32(o, s8, m8, 0);                                                   \
        o->d = rlxc_h2f(b->d), o->dmin = rlxc_h2f(b->dmin);                          \
    }
KQ_UNPACK_K_MIN(q4_k)
KQ_UNPACK_K_MIN(q5_k)

static inline void kq_unpack_iq4_xs(kq_row *o, const void *vb) {
    const block_iq4_xs *b = vb;
    int s8[8];
    for (int j = 0; j < 8; j++) {
        _mm256_storeu_si256((__m256i *)(o->q + 32 * j), iq4_levels_biased(b->qs + 16 * j));
        s8[j] = rlxc_iq4_xs_scale(b, j);
    }
    kq_scales32(o, s8, NULL, 128);
    o->d = o->dmin = rlxc_h2f(b->d);
}

/* The sub-blocks of 16 types: 32 quants per call of type_quants(b, v) */
RLXC_INLINE void kq_store32(kq_row *o, const int v, __m256i q) { _mm256_storeu_si256((__m256i *)(o->q + 32 * v), q); }

static inline void kq_unpack_q2_k(kq_row *o, const void *vb) {
    const block_q2_k *b = vb;
    for (int v = 0; v < 8; v++) kq_store32(o, v, q2_k_quants(b, v));
    for (int j = 0; j < 16; j++) o->sc[j] = b->scales[j] & 0x0F, o->m[j] = b->scales[j] >> 4;
    o->d = rlxc_h2f(b->d), o->dmin = rlxc_h2f(b->dmin);
}

static inline void kq_unpack_q3_k(kq_row *o, const void *vb) {
    const block_q3_k *b = vb;
    int8_t sc[16];
    for (int v = 0; v < 8; v++) kq_store32(o, v, q3_k_quants(b, v));
    rlxc_q3_k_scales(sc, b->scales);
    for (int j = 0; j < 16; j++) o->sc[j] = sc[j], o->m[j] = (int16_t)(4 * sc[j]);
    o->d = o->dmin = rlxc_h2f(b->d);
}

static inline void kq_unpack_q6_k(kq_row *o, const void *vb) {
    const block_q6_k *b = vb;
    for (int v = 0; v < 8; v++) kq_store32(o, v, q6_k_quants(b, v));
    for (int j = 0; j < 16; j++) o->sc[j] = b->scales[j], o->m[j] = (int16_t)(32 * b->scales[j]);
    o->d = o->dmin = rlxc_h2f(b->d);
}

/* The per-row terms of L interleaved rows, lane r = row r, in the memory layout of L-lane vectors:
 * sc[16][L] = d * sc[j] (float), m[8][L] = (m[2k], m[2k + 1]) as int16 pairs, dmin[L]. */
RLXC_INLINE void kq_lane_terms(float *sc, int32_t *m, float *dmin, const kq_row *rows, const int L) {
    for (int r = 0; r < L; r++) {
        for (int j = 0; j < 16; j++) sc[j * L + r] = rows[r].d * (float)rows[r].sc[j];
        for (int k = 0; k < 8; k++)
            m[k * L + r] = (int32_t)((uint32_t)(uint16_t)rows[r].m[2 * k] | (uint32_t)(uint16_t)rows[r].m[2 * k + 1] << 16);
        dmin[r] = rows[r].dmin;
    }
}

/* An ISA's tile of two halves of L interleaved rows (L-lane vectors ivec / fvec): per super-block,
 * w[g] lane r = row r's quants 4g .. 4g + 3; sc[j] = d * sc[j], m[k] = (m[2k], m[2k + 1]) as int16
 * pairs, dmin per row. */
#define KQ_DEFINE_BLOCK(ivec, fvec) \
    typedef struct {                \
        ivec w[64];                 \
        fvec sc[16];                \
        ivec m[8];                  \
        fvec dmin;                  \
    } kq_half;                      \
    typedef struct {                \
        kq_half h[2];               \
    } kq_block;

/* kq_pack(dst, w, block_bytes, unpack, row0, nb, nr): tile rows row0 .. row0 + nr (nr <= 2L; the
 * rest zero) of nb super-blocks of block_bytes each into dst[nb], through the includer's
 * kq_interleave(kq_half *o, const kq_row rows[L]), which fills o->w. */
#define KQ_DEFINE_PACK(L)                                                                                          \
    static void kq_pack(kq_block *dst, const void *w, size_t block_bytes, void (*unpack)(kq_row *, const void *),  \
                        int row0, int nb, int nr) {                                                                \
        kq_row rows[L];                                                                                            \
        for (int h = 0; h < 2; h++) {                                                                              \
            const int n = nr - (L) * h < 0 ? 0 : nr - (L) * h < (L) ? nr - (L) * h : (L);                          \
            memset(rows, 0, sizeof rows);                                                                          \
            for (int b = 0; b < nb; b++) {                                                                         \
                kq_half *o = &dst[b].h[h];                                                                         \
                for (int r = 0; r < n; r++)                                                                        \
                    unpack(&rows[r], (const uint8_t *)w + ((size_t)(row0 + (L) * h + r) * nb + b) * block_bytes);  \
                kq_interleave(o, rows);                                                                            \
                kq_lane_terms((float *)o->sc, (int32_t *)o->m, (float *)&o->dmin, rows, (L));                      \
            }                                                                                                      \
        }                                                                                                          \
    }

/* kq_gemm: il_gemm's panels and token chunks (il_gemm.h) around an ISA's interleaved K-quant
 * tile, from the includer's KQ_ROWS (rows per tile), KQ_C / KQ_C2 (tokens per register tile),
 * kq_block (one super-block of a tile), kq_pack(dst, w, block_bytes, unpack, row0, nb, nr) and
 * kq_tile(y, ldy, tile, x, nb, nr, C). Returns 0 if out of memory. */
#define KQ_DEFINE_GEMM                                                                                               \
    static int kq_gemm(float *y, int ldy, const void *w, const block_q8_k *x, int N, int K, int T, size_t block_bytes, \
                       void (*unpack)(kq_row *, const void *)) {                                                     \
        const int nb = K / RLXC_QK_K, n_tiles = (N + KQ_ROWS - 1) / KQ_ROWS;                                          \
        const size_t tile_bytes = (size_t)nb * sizeof(kq_block);                                                     \
        int panel = (int)(IL_PANEL_BYTES / tile_bytes);                                                              \
        panel = panel < 1 ? 1 : panel > n_tiles ? n_tiles : panel;                                                   \
        kq_block *wp = rlxc_thread_scratch(panel * tile_bytes);                                                      \
        if (!wp) return 0;                                                                                           \
        for (int p0 = 0; p0 < n_tiles; p0 += panel) {                                                                \
            const int p1 = p0 + panel < n_tiles ? p0 + panel : n_tiles;                                              \
            for (int p = p0; p < p1; p++)                                                                            \
                kq_pack(wp + (size_t)(p - p0) * nb, w, block_bytes, unpack, KQ_ROWS * p, nb,                         \
                        N - KQ_ROWS * p < KQ_ROWS ? N - KQ_ROWS * p : KQ_ROWS);                                      \
            for (int t0 = 0; t0 < T; t0 += IL_TCHUNK) {                                                              \
                const int t1 = T - t0 < IL_TCHUNK ? T : t0 + IL_TCHUNK;                                              \
                for (int p = p0; p < p1; p++) {                                                                      \
                    const kq_block *tile = wp + (size_t)(p - p0) * nb;                                               \
                    const int n = KQ_ROWS * p, nr = N - n < KQ_ROWS ? N - n : KQ_ROWS;                               \
                    int t = t0;                                                                                      \
                    for (; t + KQ_C <= t1; t += KQ_C)                                                                \
                        kq_tile(y + (size_t)t * ldy + n, ldy, tile, x + (size_t)t * nb, nb, nr, KQ_C);               \
                    for (; t + KQ_C2 <= t1; t += KQ_C2)                                                              \
                        kq_tile(y + (size_t)t * ldy + n, ldy, tile, x + (size_t)t * nb, nb, nr, KQ_C2);              \
                    for (; t < t1; t++) kq_tile(y + (size_t)t * ldy + n, ldy, tile, x + (size_t)t * nb, nb, nr, 1);  \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
        return 1;                                                                                                    \
    }

/* The matmul of a type: the interleaved GEMM from KQ_MIN_T tokens, else (or out of memory) the
 * register tiles. */
#define KQ_DEFINE_MATMUL(type, sfx)                                                                           \
    void rlxc_matmul_##type##_##sfx(float *y, int ldy, const void *w, const void *xq, int N, int K, int T) { \
        if (T < KQ_MIN_T || !kq_gemm(y, ldy, w, xq, N, K, T, sizeof(block_##type), kq_unpack_##type))       \
            rlxc_matmul_##type##_tiles_##sfx(y, ldy, w, xq, N, K, T);                                        \
    }

#endif
