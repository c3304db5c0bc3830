/* AVX-512 VNNI GEMM for many tokens: 16 weight rows are interleaved so that one int32 lane
 * holds one row. Then a block's whole dot product for 16 rows takes 8 vpdpbusd, each with
 * one 4-byte activation group broadcast, and the block scales are applied once per block and
 * token for all 16 rows; the pair kernels of quant.c (one row per register) need a
 * conversion, a multiply and an FMA per row, token and block pair instead. A tile holds two
 * such halves (32 rows), so that every broadcast serves two vpdpbusd.
 *
 * Q4_0, Q5_0 and Q8_0 weights share the tile: each pack makes its quants unsigned bytes
 * (w + 8, w + 16, w + 128), and the offset times the activations' block sum is subtracted.
 * The interleaved copy of a tile is built once per call and reused by every token
 * (kernels_avx2/il_gemm.h); fewer tokens than IL_MIN_T do not pay for it and take the one-row
 * kernels. */
#include <string.h>

#include "avx512.h"
#include "../kernels_avx2/kq_form.h"

#define IL_ROWS 32 /* two halves of 16, */
#define IL_C 6 /* tokens per register tile (16 weight + 12 accumulator registers), */
#define IL_C2 2 /* then per leftover tile */
#define IL_MIN_T 8

/* One block of 16 interleaved rows: lane r of w[g] holds the 4 weight bytes of row r that
 * multiply activation bytes 4g .. 4g + 3, made unsigned; d[r] is row r's block scale. */
typedef struct {
    __m512i w[8];
    __m512 d;
} il_half;

/* One block of 32 rows. With 16 (one vpdpbusd per broadcast) the broadcasts kept the load
 * ports as busy as the dot products; two halves made the GEMM 1.3-1.5x faster at T >= 32. */
typedef struct {
    il_half h[2];
} il_block;

/* 4 x 4 transposes of dwords within each 128-bit lane: lane l of z[k] holding row 4l + k
 * gives lane l of z[g] holding dword g of rows 4l .. 4l + 3, i.e. z[g] = dword g of rows 0..15. */
RLXC_INLINE void transpose4x4_epi32(__m512i z[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    z[0] = _mm512_unpacklo_epi64(t0, t2);
    z[1] = _mm512_unpackhi_epi64(t0, t2);
    z[2] = _mm512_unpacklo_epi64(t1, t3);
    z[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 bytes at p + r * stride for rows r = k, 4 + k, 8 + k, 12 + k in the four 128-bit lanes;
 * rows >= nr read as zero. */
RLXC_INLINE __m512i load_rows16(const void *rows, size_t stride, int k, int nr) {
    const uint8_t *p = rows;
    __m512i z = _mm512_setzero_si512();
    for (int l = 0; l < 4; l++)
        if (4 * l + k < nr)
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + (4 * l + k) * stride)), l);
    return z;
}

/* The dwords at p + r * stride of 16 rows (stride in bytes), rows >= nr as zero. The offsets are
 * 32-bit lanes: 15 * stride < 2^31 (DEFINE_IL_MATMUL sends longer rows elsewhere). */
RLXC_INLINE __m512i gather_rows16(const void *p, size_t stride, int nr) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)stride));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)((1u << nr) - 1), idx, p, 1);
}

/* Block scales of 16 rows, rows >= nr as zero. */
RLXC_INLINE __m512 gather_scales(const void *d, size_t stride, int nr) {
    /* the dwords at d read 2 bytes past the scale, still inside the block */
    const __m512i g = gather_rows16(d, stride, nr);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Row bytes some blocks ahead of a pack: 16 rows read side by side are more streams than the
 * hardware prefetcher keeps up with (+5-25% at T <= 32, where packing weighs most). Past the
 * last row this only prefetches, which never faults. */
RLXC_INLINE void prefetch_rows(const void *ahead, size_t stride, int nr) {
    for (int r = 0; r < nr; r++) _mm_prefetch((const char *)ahead + r * stride, _MM_HINT_T0);
}

/* The packs below fill half `half` of nb blocks from nr <= 16 rows (rows >= nr as zeros) and are
 * instantiated for full halves (nr = 16: the row loads and masks compile without tests) and
 * for the partial ones of a last tile. */
#define DEFINE_PACK(name, body, wtype)                                               \
    static void name(il_block *dst, const void *rows, int row0, int nb, int nr) {    \
        for (int h = 0; h < 2; h++) {                                                \
            const int n = nr - 16 * h < 0 ? 0 : nr - 16 * h < 16 ? nr - 16 * h : 16; \
            const wtype *w = (const wtype *)rows + ((size_t)row0 + 16 * h) * nb;     \
            if (n == 16) body(dst, h, w, nb, 16);                                    \
            else body(dst, h, w, nb, n);                                             \
        }                                                                            \
    }

/* z[g] = dword g of the 16 bytes at p + r * stride, row r in lane r (rows >= nr zero). */
RLXC_INLINE void load_transposed(__m512i z[4], const void *p, size_t stride, int nr) {
    for (int k = 0; k < 4; k++) z[k] = load_rows16(p, stride, k, nr);
    transpose4x4_epi32(z);
}

/* The 16 packed nibble bytes at qs of 16 rows (Q4_0, Q5_0): raw qs dword g holds elements
 * 4g..4g+3 in its low nibbles, 16+4g.. in its high ones, so w[g] takes the low and w[4 + g]
 * the high nibbles of the transposed dwords. */
RLXC_INLINE void pack_nibbles(il_half *dst, const uint8_t *qs, size_t stride, int nr) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i z[4];
    load_transposed(z, qs, stride, nr);
    for (int g = 0; g < 4; g++) {
        dst->w[g] = _mm512_and_si512(z[g], m4);
        dst->w[4 + g] = _mm512_and_si512(_mm512_srli_epi32(z[g], 4), m4);
    }
}

RLXC_INLINE void pack_q4_0_rows(il_block *blocks, int half, const block_q4_0 *w, int nb, int nr) {
    const size_t stride = (size_t)nb * sizeof(block_q4_0);
    for (int b = 0; b < nb; b++) {
        il_half *dst = &blocks[b].h[half];
        prefetch_rows(&w[b + 8], stride, nr);
        pack_nibbles(dst, w[b].qs, stride, nr);
        dst->d = gather_scales(&w[b].d, stride, nr);
    }
}
DEFINE_PACK(pack_q4_0, pack_q4_0_rows, block_q4_0)

/* Q8_0: bytes made unsigned by flipping the sign bit (w + 128). */
RLXC_INLINE void pack_q8_0_rows(il_block *blocks, int half, const block_q8_0 *w, int nb, int nr) {
    const size_t stride = (size_t)nb * sizeof(block_q8_0);
    for (int b = 0; b < nb; b++) {
        il_half *dst = &blocks[b].h[half];
        prefetch_rows(&w[b + 4], stride, nr);
        for (int h = 0; h < 2; h++) {
            __m512i z[4];
            load_transposed(z, w[b].qs + 16 * h, stride, nr);
            for (int g = 0; g < 4; g++) dst->w[4 * h + g] = _mm512_xor_si512(z[g], _mm512_set1_epi8((char)0x80));
        }
        dst->d = gather_scales(&w[b].d, stride, nr);
    }
}
DEFINE_PACK(pack_q8_0, pack_q8_0_rows, block_q8_0)

/* Q5_0: the Q4_0 nibbles plus 16 where bit e of qh is set (element e), 0..31 (w + 16). Lane r
 * of the gathered qh holds row r's; byte i of w[4h + j] is element 16h + 4j + i, i.e. bit
 * 4 (j % 2) + i of qh byte 2h + j / 2, which a byte shuffle copies into all four bytes of the
 * lane for a test against bit i of that nibble. */
RLXC_INLINE void pack_q5_0_rows(il_block *blocks, int half, const block_q5_0 *w, int nb, int nr) {
    const size_t stride = (size_t)nb * sizeof(block_q5_0);
    const __m512i sixteen = _mm512_set1_epi8(16);
    const __m512i dword_base = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C));
    for (int b = 0; b < nb; b++) {
        il_half *dst = &blocks[b].h[half];
        prefetch_rows(&w[b + 8], stride, nr);
        pack_nibbles(dst, w[b].qs, stride, nr);
        const __m512i qh = gather_rows16(w[b].qh, stride, nr);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++) {
                const __m512i q = dst->w[4 * h + j];
                const __m512i bytes = _mm512_shuffle_epi8(qh, _mm512_add_epi8(dword_base, _mm512_set1_epi8((char)(2 * h + j / 2))));
                const __mmask64 fifth = _mm512_test_epi8_mask(bytes, _mm512_set1_epi32((int)(0x08040201u << (4 * (j % 2)))));
                dst->w[4 * h + j] = _mm512_mask_add_epi8(q, fifth, q, sixteen);
            }
        dst->d = gather_scales(&w[b].d, stride, nr);
    }
}
DEFINE_PACK(pack_q5_0, pack_q5_0_rows, block_q5_0)

/* From repacked rows (rlxc_pack_x16), whose 16-row groups are the halves as they are: quants made
 * unsigned like the packs above, scales converted, nothing gathered; nr is 16 or 32. Q4_0's
 * 64-byte runs hold both nibble groups, Q8_0's one byte group each. */
RLXC_INLINE void pack_x16(il_block *dst, const void *rows, int row0, int nb, int nr, const int qs) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
    const size_t group_bytes = rlxc_x16_group_bytes(qs, nb * RLXC_QK);
    for (int h = 0; h < 2; h++) {
        const uint8_t *grp = (const uint8_t *)rows + (size_t)(row0 / RLXC_PACK_ROWS + h) * group_bytes;
        for (int b = 0; b < nb; b++) {
            il_half *o = &dst[b].h[h];
            if (16 * h >= nr) {
                *o = (il_half){0};
                continue;
            }
            const uint8_t *q = rlxc_x16_quants(grp, qs, b);
            for (int g = 0; g < 4; g++) {
                if (qs == 16) {
                    const __m512i z = _mm512_loadu_si512(q + 64 * g);
                    o->w[g] = _mm512_and_si512(z, m4);
                    o->w[4 + g] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
                } else {
                    o->w[2 * g] = _mm512_xor_si512(_mm512_loadu_si512(q + 128 * g), flip);
                    o->w[2 * g + 1] = _mm512_xor_si512(_mm512_loadu_si512(q + 128 * g + 64), flip);
                }
            }
            o->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)rlxc_x16_scales(grp, qs, b)));
        }
    }
}
static void pack_q4_0x16(il_block *dst, const void *rows, int row0, int nb, int nr) { pack_x16(dst, rows, row0, nb, nr, 16); }
static void pack_q8_0x16(il_block *dst, const void *rows, int row0, int nb, int nr) { pack_x16(dst, rows, row0, nb, nr, 32); }

/* 32 rows x C tokens: y[t * ldy + r] for r < nr. bias[(size_t)t * nb + b] = -weight_offset * sum of
 * token t's block b, dx its scale. */
RLXC_INLINE void il_tile(float *y, int ldy, const il_block *wp, const block_q8_0 *x, const int32_t *bias,
                         const float *dx, int nb, int nr, const int C) {
    __m512 acc[2][IL_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i w[2][8];
        RLXC_UNROLL for (int g = 0; g < 8; g++) {
            w[0][g] = _mm512_load_si512(&wp[b].h[0].w[g]);
            w[1][g] = _mm512_load_si512(&wp[b].h[1].w[g]);
        }
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const unaligned_i32 *q = (const unaligned_i32 *)x[(size_t)t * nb + b].qs;
            __m512i s0 = _mm512_set1_epi32(bias[(size_t)t * nb + b]), s1 = s0;
            RLXC_UNROLL for (int g = 0; g < 8; g++) {
                const __m512i xg = _mm512_set1_epi32(q[g]);
                s0 = _mm512_dpbusd_epi32(s0, w[0][g], xg);
                s1 = _mm512_dpbusd_epi32(s1, w[1][g], xg);
            }
            const __m512 d = _mm512_set1_ps(dx[(size_t)t * nb + b]);
            acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(wp[b].h[0].d, d), acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(wp[b].h[1].d, d), acc[1][t]);
        }
    }
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    RLXC_UNROLL for (int t = 0; t < C; t++) {
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, m0, acc[0][t]);
        _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16, m1, acc[1][t]);
    }
}

/* ---- AMX: a block of 16 tokens x 16 rows in one tile product ----
 * TDPBSSD multiplies a tile of 16 tokens' 32 activation bytes of one block (a row per token) by
 * a half above as it lies (8 rows of 64 bytes, lane r of row g holding row r's bytes 4g .. 4g + 3:
 * AMX's layout for B), giving the block's 16 x 16 int32 dots in one instruction where il_tile
 * takes 128 vpdpbusd. The scales are then applied as il_tile applies them, in the same order, so
 * the outputs are bit-identical. TDPBSSD's operands are both signed: il_amx_signed takes the
 * offset back out of the packed quants once per panel, and no bias is added. il_gemm.h runs every
 * token through il_amx_tile where il_amx_begin returns 1. */
#define IL_AMX_T 16
#define AMX_UNROLL _Pragma("GCC unroll 16") /* the 16 accumulators stay in registers */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* tail: how many tokens the last group has (T % IL_AMX_T), 0 if none. */
static int il_amx_begin(int tail) {
    if (!rlxc_amx_usable()) return 0;
    /* tiles 0, 1: 16 tokens x 32 bytes (two blocks); 2, 3: 8 x 64 weight bytes; 4, 5: 16 x 16
     * int32; 6, 7: the last group's activations and dots, `tail` rows */
    amx_config c = {.palette = 1};
    for (int i = 0; i < 2; i++) {
        c.rows[i] = 16, c.colsb[i] = 32;
        c.rows[2 + i] = 8, c.colsb[2 + i] = 64;
        c.rows[4 + i] = 16, c.colsb[4 + i] = 64;
    }
    if (tail) c.rows[6] = c.rows[7] = (uint8_t)tail, c.colsb[6] = 32, c.colsb[7] = 64;
    /* the intrinsic tells the compiler that ldtilecfg reads 8 of the 64 bytes */
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&c);
    return 1;
}

static void il_amx_end(void) { _tile_release(); }

static void il_amx_signed(il_block *blocks, size_t n, int weight_offset) {
    const __m512i off = _mm512_set1_epi8((char)weight_offset);
    for (size_t i = 0; i < n; i++)
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 8; g++) blocks[i].h[h].w[g] = _mm512_sub_epi8(blocks[i].h[h].w[g], off);
}

/* Tile tc = the dots of the activation rows at x (stride xs) loaded into ta and the weights at w
 * loaded into tb. */
#define AMX_PRODUCT(ta, tb, tc, x, xs, w) \
    do {                                  \
        _tile_loadd(ta, x, xs);           \
        _tile_loadd(tb, w, 64);           \
        _tile_zero(tc);                   \
        _tile_dpbssd(tc, ta, tb);         \
    } while (0)

/* acc[t] += dots[t] * (dw * dx[t * nb]) for the first n tokens, dots[t] = 16 rows' int32 dots */
RLXC_INLINE void amx_scale_block(__m512 acc[16], const int32_t *dots, __m512 dw, const float *dx, int nb, int n) {
    AMX_UNROLL for (int t = 0; t < 16; t++) if (t < n) {
        const __m512 d = _mm512_set1_ps(dx[(size_t)t * nb]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(dots + 16 * t)), _mm512_mul_ps(dw, d), acc[t]);
    }
}

/* 32 rows x `count` tokens (IL_AMX_T, or the last group's tail as il_amx_begin was told):
 * y[t * ldy + r] for r < nr; x and dx as il_tile's. Full groups take two blocks at a time, so
 * that out-of-order execution can overlap one pair's tile products with the last pair's scaling. */
static void il_amx_tile(float *y, int ldy, const il_block *wp, const block_q8_0 *x, const float *dx, int nb, int nr,
                        int count) {
    const size_t xs = (size_t)nb * sizeof(block_q8_0);
    int32_t dots[2][256] __attribute__((aligned(64)));
    __asm__ volatile("" ::: "memory"); /* the tile loads below read the packed panel and x */
    for (int h = 0; h < 2 && 16 * h < nr; h++) {
        __m512 acc[16];
        AMX_UNROLL for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
        int b = 0;
        if (count == IL_AMX_T)
            for (; b + 2 <= nb; b += 2) {
                AMX_PRODUCT(0, 2, 4, x[b].qs, xs, wp[b].h[h].w);
                AMX_PRODUCT(1, 3, 5, x[b + 1].qs, xs, wp[b + 1].h[h].w);
                _tile_stored(4, dots[0], 64);
                _tile_stored(5, dots[1], 64);
                amx_scale_block(acc, dots[0], wp[b].h[h].d, dx + b, nb, IL_AMX_T);
                amx_scale_block(acc, dots[1], wp[b + 1].h[h].d, dx + b + 1, nb, IL_AMX_T);
            }
        for (; b < nb; b++) { /* a full group's odd last block, or every block of the tail group */
            if (count == IL_AMX_T) {
                AMX_PRODUCT(0, 2, 4, x[b].qs, xs, wp[b].h[h].w);
                _tile_stored(4, dots[0], 64);
            } else {
                AMX_PRODUCT(6, 2, 7, x[b].qs, xs, wp[b].h[h].w);
                _tile_stored(7, dots[0], 64);
            }
            amx_scale_block(acc, dots[0], wp[b].h[h].d, dx + b, nb, count);
        }
        const int n = nr - 16 * h;
        const __mmask16 m = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
        AMX_UNROLL for (int t = 0; t < 16; t++) if (t < count) _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16 * h, m, acc[t]);
    }
}

#include "../kernels_avx2/il_gemm.h"

/* The interleaved GEMM of a type for T >= IL_MIN_T, else (or out of memory) the one-row
 * kernels. The packs gather 16 rows at 32-bit byte offsets r * row_bytes (gather_rows16):
 * rows too long for those take the one-row kernels too. */
#define DEFINE_IL_MATMUL(kind, wtype, offset, fallback)                                                       \
    void rlxc_matmul_##kind##_avx512(float *y, int ldy, const void *w, const void *xq, int N, int K, int T) { \
        const size_t row_bytes = (size_t)K / RLXC_QK * sizeof(wtype);                                         \
        if (T < IL_MIN_T || 15 * row_bytes > INT32_MAX ||                                                     \
            !il_gemm(y, ldy, w, xq, NULL, N, K, T, pack_##kind, offset))                                      \
            fallback(y, ldy, w, xq, N, K, T);                                                                 \
    }

DEFINE_IL_MATMUL(q4_0, block_q4_0, 8, rlxc_matmul_q4_0_pairs_avx512)
DEFINE_IL_MATMUL(q5_0, block_q5_0, 16, rlxc_matmul_q5_0_rows_avx512)
DEFINE_IL_MATMUL(q8_0, block_q8_0, 128, rlxc_matmul_q8_0_pairs_avx512)

/* Repacked rows: no copy to gather, and per token the same operations as the decode kernels. */
#define DEFINE_X16_MATMUL(kind, type, offset)                                                                    \
    void rlxc_matmul_##kind##x16_avx512(float *y, int ldy, const void *w, const void *xq, const rlxc_q8_terms *terms, \
                                        int G, int K, int T) {                                                   \
        if (T < IL_MIN_T || !il_gemm(y, ldy, w, xq, terms, G * RLXC_PACK_ROWS, K, T, pack_##kind##x16, offset)) \
            rlxc_matmul_x16_by_token(rlxc_matvec_##kind##x16_avx512, type, y, ldy, w, xq, G, K, T);             \
    }
DEFINE_X16_MATMUL(q4_0, RLXC_Q4_0, 8)
DEFINE_X16_MATMUL(q8_0, RLXC_Q8_0, 128)

/* ---- the 256-blocks (Q2_K .. Q6_K, IQ4_XS) x Q8_K ----
 * Each row's super-block in the common form of kernels_avx2/kq_form.h (unsigned quants, 16
 * sub-block scales and mins, d, dmin), 16 rows interleaved as in the Q8_0 tile above (lane r:
 * row r), so vpdpbusd multiplies 16 rows by one broadcast activation dword, each sub-block's
 * int32 dot is scaled in float by d * sc[j] for all 16 rows at once, and the mins meet Q8_K's
 * bsums in vpdpwssd. What the register tiles of wtypes.c pay per row and token (unpacking, scale
 * shuffles, one float reduction per row) is paid here once per 16 rows. */

#define KQ_ROWS 32
#define KQ_C 4 /* tokens per register tile (2 x 4 float accumulators, 2 x 4 sub-block sums, 8 weights) */
#define KQ_C2 2

KQ_DEFINE_BLOCK(__m512i, __m512)

/* Lane r of w[g] = dword g of row r's quants, 16 bytes of every row at a time (the transposes
 * above). */
RLXC_INLINE void kq_interleave(kq_half *o, const kq_row rows[16]) {
    for (int k = 0; k < RLXC_QK_K / 16; k++) {
        __m512i z[4];
        load_transposed(z, rows[0].q + 16 * k, sizeof(kq_row), 16);
        for (int g = 0; g < 4; g++) _mm512_store_si512(&o->w[4 * k + g], z[g]);
    }
}
KQ_DEFINE_PACK(16)

/* 32 rows x C tokens: y[t * ldy + r] for r < nr. Per super-block and token, each half's sub-block
 * dots (4 vpdpbusd each) are scaled into a float sum, the mins subtracted from it, and the sum
 * scaled by the token's Q8_K scale into the accumulator. */
RLXC_INLINE void kq_tile(float *y, int ldy, const kq_block *wp, const block_q8_k *x, int nb, int nr, const int C) {
    __m512 acc[2][KQ_C];
    RLXC_UNROLL for (int t = 0; t < C; t++) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const kq_block *kb = wp + b;
        __m512 sum[2][KQ_C];
        RLXC_UNROLL for (int t = 0; t < C; t++) sum[0][t] = sum[1][t] = _mm512_setzero_ps();
        for (int j = 0; j < RLXC_QK_K / 16; j++) {
            __m512i w0[4], w1[4];
            RLXC_UNROLL for (int g = 0; g < 4; g++) {
                w0[g] = _mm512_load_si512(&kb->h[0].w[4 * j + g]);
                w1[g] = _mm512_load_si512(&kb->h[1].w[4 * j + g]);
            }
            RLXC_UNROLL for (int t = 0; t < C; t++) {
                const unaligned_i32 *q = (const unaligned_i32 *)(x[(size_t)t * nb + b].qs + 16 * j);
                __m512i s0 = _mm512_setzero_si512(), s1 = s0;
                RLXC_UNROLL for (int g = 0; g < 4; g++) {
                    const __m512i xg = _mm512_set1_epi32(q[g]);
                    s0 = _mm512_dpbusd_epi32(s0, w0[g], xg);
                    s1 = _mm512_dpbusd_epi32(s1, w1[g], xg);
                }
                sum[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), kb->h[0].sc[j], sum[0][t]);
                sum[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), kb->h[1].sc[j], sum[1][t]);
            }
        }
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const block_q8_k *xb = x + (size_t)t * nb + b;
            const unaligned_i32 *bs = (const unaligned_i32 *)xb->bsums;
            __m512i m0 = _mm512_setzero_si512(), m1 = m0;
            RLXC_UNROLL for (int k = 0; k < 8; k++) {
                const __m512i bk = _mm512_set1_epi32(bs[k]);
                m0 = _mm512_dpwssd_epi32(m0, kb->h[0].m[k], bk);
                m1 = _mm512_dpwssd_epi32(m1, kb->h[1].m[k], bk);
            }
            const __m512 d = _mm512_set1_ps(xb->d);
            acc[0][t] = _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m0), kb->h[0].dmin, sum[0][t]), d, acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(_mm512_fnmadd_ps(_mm512_cvtepi32_ps(m1), kb->h[1].dmin, sum[1][t]), d, acc[1][t]);
        }
    }
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    RLXC_UNROLL for (int t = 0; t < C; t++) {
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, m0, acc[0][t]);
        _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16, m1, acc[1][t]);
    }
}

KQ_DEFINE_GEMM
KQ_DEFINE_MATMUL(q2_k, avx512)
KQ_DEFINE_MATMUL(q3_k, avx512)
KQ_DEFINE_MATMUL(q4_k, avx512)
KQ_DEFINE_MATMUL(q5_k, avx512)
KQ_DEFINE_MATMUL(q6_k, avx512)
KQ_DEFINE_MATMUL(iq4_xs, avx512)
