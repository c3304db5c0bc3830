/* Kernel interface: every ISA (scalar reference, AVX2, AVX-512, NEON) fills one
 * rlxc_kernels table with functions of exactly these signatures. The engine calls
 * kernels only through the active table, so tests can pin any ISA and compare it
 * with the scalar twin. */
#ifndef RLXC_KERNELS_H
#define RLXC_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "rlxc.h"

#define RLXC_QK 32 /* weights per quantization block (GGUF Q4_0 / Q8_0) */

typedef uint16_t rlxc_fp16;

/* GGUF Q4_0: x = d * (q - 8); element j in the low nibble of qs[j], j+16 in the high nibble. */
typedef struct {
    rlxc_fp16 d;
    uint8_t qs[RLXC_QK / 2];
} block_q4_0;

/* GGUF Q8_0: x = d * q. Also the format activations are quantized to for integer dots. */
typedef struct {
    rlxc_fp16 d;
    int8_t qs[RLXC_QK];
} block_q8_0;

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must match the GGUF layout");

/* Q4_0 and Q8_0 repacked for the engine's products (rlxc_pack_x16), in groups of 16 consecutive
 * rows. A group of nb blocks is a run of records of two blocks: the quants of blocks 2i and
 * 2i + 1, each block 16 * QS bytes in runs of 64 (run g holds 4-byte group g of the 16 rows' GGUF
 * quants, row r at bytes 4r .. 4r + 3), then the 16 rows' fp16 scales of the two blocks (64
 * bytes); an odd last block's record keeps the room of a second, zeroed. QS is a row's quant
 * bytes per block: 16 for Q4_0 (group g's low nibbles are elements 4g .. 4g + 3, its high ones
 * 16 + 4g ..), 32 for Q8_0. So one aligned 64-byte load gives a 4-byte group of 16 rows, one per
 * 32-bit lane: a block's dot for 16 rows is 8 lane-wise integer dot instructions with one
 * broadcast activation group and its scales one conversion, instead of a reduction per row; and
 * a thread's rows are one sequential stream of whole cache lines. (The scales once followed all
 * the quants of a group: two streams, which with 640-wide rows read 11 GB/s from DRAM where one
 * reads 26.) */
#define RLXC_PACK_ROWS 16

/* Quant bytes of one row's block in the packed types (0: the type is not packed). */
static inline int rlxc_x16_qs_bytes(rlxc_wtype t) { return t == RLXC_Q4_0 ? 16 : t == RLXC_Q8_0 ? 32 : 0; }
static inline size_t rlxc_x16_record_bytes(int qs_bytes) { return 2 * RLXC_PACK_ROWS * ((size_t)qs_bytes + 2); }
static inline size_t rlxc_x16_group_bytes(int qs_bytes, int K) {
    return (size_t)((K / RLXC_QK + 1) / 2) * rlxc_x16_record_bytes(qs_bytes);
}
/* Block b's quants and scales in a group. */
static inline const uint8_t *rlxc_x16_quants(const void *group, int qs_bytes, int b) {
    return (const uint8_t *)group + (size_t)(b / 2) * rlxc_x16_record_bytes(qs_bytes) + (size_t)(b % 2) * RLXC_PACK_ROWS * qs_bytes;
}
static inline const rlxc_fp16 *rlxc_x16_scales(const void *group, int qs_bytes, int b) {
    return (const rlxc_fp16 *)((const uint8_t *)group + (size_t)(b / 2) * rlxc_x16_record_bytes(qs_bytes) +
                               2 * RLXC_PACK_ROWS * (size_t)qs_bytes) + (b % 2) * RLXC_PACK_ROWS;
}
/* Where byte j of row r's quants (r < 16) lies in a packed block's quants. */
static inline size_t rlxc_x16_byte(int r, int j) { return (size_t)j / 4 * 64 + 4 * (size_t)r + (size_t)j % 4; }
/* Rows [0, N / 16 * 16) of a Q4_0, Q8_0 or Q4_K w[N][K] into N / 16 groups (dst: rlxc_x16_bytes). */
size_t rlxc_x16_bytes(rlxc_wtype t, int N, int K);
/* What an integer GEMM on Q8_0 activations needs of each block besides its quants: the sum of
 * the quants (times minus the weights' offset, it corrects for quants made unsigned) and the
 * scale as float; n blocks, token-major. The engine computes them once per stage for the whole
 * team (rlxc_xin_prepare): computed in each GEMM call, one thread's 64-row chunk of a down
 * projection (K 14336, T 256) spent 17 % of its time on them, 32 rows 29 %. */
typedef struct {
    const int32_t *sum;
    const float *d;
} rlxc_q8_terms;
void rlxc_q8_terms_compute(int32_t *sum, float *d, const block_q8_0 *x, size_t n);

/* A 64-byte aligned buffer of at least `bytes` that belongs to the calling thread and is kept
 * for its next call (the interleaved GEMMs' packed tiles and per-token terms): allocated per
 * call, those mapped and unmapped fresh pages every time, page faults and TLB shootdowns on every
 * thread of a prefill. Freed when the thread exits; NULL when out of memory. One user at a time. */
void *rlxc_thread_scratch(size_t bytes);
void rlxc_pack_x16(rlxc_wtype t, void *dst, const void *w, int N, int K);
/* Row r (< 16) of a packed group as the type's GGUF blocks b0 .. b0 + n (the inverse of
 * rlxc_pack_x16). */
void rlxc_x16_row_blocks(rlxc_wtype t, void *dst, const void *group, int r, int b0, int n);
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must match the GGUF layout");

#define RLXC_QK_K 256 /* weights per K-quant super-block (GGUF Q4_K / Q6_K, ggml's Q8_K) */

typedef uint16_t rlxc_bf16; /* bfloat16: the top half of an IEEE float */

/* GGUF Q5_0: x = d * (q - 16), q = 5 bits: the low 4 as in Q4_0 (element j in the low nibble
 * of qs[j], j+16 in the high nibble), the fifth is bit j of the little-endian word qh. */
typedef struct {
    rlxc_fp16 d;
    uint8_t qh[4];
    uint8_t qs[RLXC_QK / 2];
} block_q5_0;

/* GGUF Q4_1: x = d * q + m, q = 4 bits as in Q4_0 (element j in the low nibble of qs[j], j+16
 * in the high nibble), m the block's minimum. */
typedef struct {
    rlxc_fp16 d, m;
    uint8_t qs[RLXC_QK / 2];
} block_q4_1;

/* GGUF Q5_1: x = d * q + m, q = 5 bits laid out as in Q5_0. */
typedef struct {
    rlxc_fp16 d, m;
    uint8_t qh[4];
    uint8_t qs[RLXC_QK / 2];
} block_q5_1;

/* GGUF IQ4_NL: x = d * v[q], 4-bit indices (Q4_0's layout) into 16 non-uniform levels. */
typedef struct {
    rlxc_fp16 d;
    uint8_t qs[RLXC_QK / 2];
} block_iq4_nl;
static const int8_t rlxc_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* GGUF IQ4_XS: 8 sub-blocks of 32 (IQ4_NL's layout each, qs[16j ..] for sub-block j) at
 * d * (ls[j] - 32), ls[j] 6 bits: the nibble j of scales_l, the top 2 bits at bit 2j of scales_h. */
typedef struct {
    rlxc_fp16 d;
    uint16_t scales_h;
    uint8_t scales_l[RLXC_QK_K / 64];
    uint8_t qs[RLXC_QK_K / 2];
} block_iq4_xs;

/* Sub-block j's signed 6-bit scale of an IQ4_XS block, -32..31. */
static inline int rlxc_iq4_xs_scale(const block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

/* GGUF Q2_K: 16 sub-blocks of 16, x = d * sc[j] * q - dmin * m[j] with q = 2 bits and
 * scales[j] = sc[j] | m[j] << 4. Element 128h + 32k + l (h < 2, k < 4, l < 32) is bits 2k,
 * 2k + 1 of qs[32h + l]. */
typedef struct {
    uint8_t scales[RLXC_QK_K / 16];
    uint8_t qs[RLXC_QK_K / 4];
    rlxc_fp16 d, dmin;
} block_q2_k;

/* GGUF Q3_K: 16 sub-blocks of 16, x = d * (sc[j] - 32) * (q - 4) with q = 3 bits: the low 2 as
 * in Q2_K, the third is bit 4h + k of hmask[l] for element 128h + 32k + l; sc[j] 6 bits packed
 * into `scales` (rlxc_q3_k_scales). */
typedef struct {
    uint8_t hmask[RLXC_QK_K / 8];
    uint8_t qs[RLXC_QK_K / 4];
    uint8_t scales[12];
    rlxc_fp16 d;
} block_q3_k;

/* GGUF Q4_K: 8 sub-blocks of 32, x = d * sc[j] * q - dmin * m[j] with q = 4 bits and 6-bit
 * sc[j], m[j] packed into `scales` (rlxc_q4_k_scales). Sub-blocks 2i and 2i+1 are the low and
 * high nibbles of qs[32i .. 32i+32). */
typedef struct {
    rlxc_fp16 d, dmin;
    uint8_t scales[12];
    uint8_t qs[RLXC_QK_K / 2];
} block_q4_k;

/* GGUF Q5_K: Q4_K's scales and nibbles, and a fifth bit: element l of sub-block j has bit j
 * of qh[l] (x = d * sc[j] * q - dmin * m[j], q = 0..31). */
typedef struct {
    rlxc_fp16 d, dmin;
    uint8_t scales[12];
    uint8_t qh[RLXC_QK_K / 8];
    uint8_t qs[RLXC_QK_K / 2];
} block_q5_k;

/* GGUF Q6_K: 16 sub-blocks of 16, x = d * scales[j] * (q - 32) with q = 6 bits: element
 * 128h + 32k + l (h < 2, k < 4, l < 32) has its low 4 bits in ql[64h + 32(k&1) + l] (low
 * nibble for k < 2, high for k >= 2) and its top 2 bits at bit 2k of qh[32h + l]. */
typedef struct {
    uint8_t ql[RLXC_QK_K / 2];
    uint8_t qh[RLXC_QK_K / 4];
    int8_t scales[RLXC_QK_K / 16];
    rlxc_fp16 d;
} block_q6_k;

/* ggml's Q8_K, the activations of the K-quant dots: x = d * q, and bsums[j] is the sum of
 * q[16j .. 16j+16), which turns the per-sub-block offsets of Q4_K / Q6_K into one product. */
typedef struct {
    float d;
    int8_t qs[RLXC_QK_K];
    int16_t bsums[RLXC_QK_K / 16];
} block_q8_k;

_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 must match the GGUF layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must match the GGUF layout");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 must match the GGUF layout");
_Static_assert(sizeof(block_q2_k) == 84, "block_q2_k must match the GGUF layout");
_Static_assert(sizeof(block_q3_k) == 110, "block_q3_k must match the GGUF layout");
_Static_assert(sizeof(block_q4_k) == 144, "block_q4_k must match the GGUF layout");
_Static_assert(sizeof(block_q5_k) == 176, "block_q5_k must match the GGUF layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl must match the GGUF layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs must match the GGUF layout");
_Static_assert(sizeof(block_q6_k) == 210, "block_q6_k must match the GGUF layout");
_Static_assert(sizeof(block_q8_k) == 292, "block_q8_k must match ggml's layout");

/* The 12 packed scale bytes of a Q4_K block -> out[0..8) = sc[j], out[8..16) = m[j]. Bytes 0-3
 * hold sc[0..4) in their low 6 bits, bytes 4-7 m[0..4); for j >= 4 the low 4 bits of sc[j] and
 * m[j] are the nibbles of byte 8 + j - 4 and their top 2 bits the top bits of bytes j - 4 (sc)
 * and j (m). Done on 32-bit words: every mask keeps each byte's bits inside that byte. */
static inline void rlxc_q4_k_scales(uint8_t out[16], const uint8_t s[12]) {
    uint32_t w[3], o[4];
    for (int i = 0; i < 3; i++) w[i] = (uint32_t)s[4 * i] | (uint32_t)s[4 * i + 1] << 8 |
                                       (uint32_t)s[4 * i + 2] << 16 | (uint32_t)s[4 * i + 3] << 24;
    o[0] = w[0] & 0x3f3f3f3fu;
    o[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    o[2] = w[1] & 0x3f3f3f3fu;
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
    for (int i = 0; i < 16; i++) out[i] = (uint8_t)(o[i / 4] >> (8 * (i % 4)));
}

/* The inverse of rlxc_q4_k_scales: sc[0..8), m[0..8) (6 bits each) into the 12 bytes. */
static inline void rlxc_q4_k_pack_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t m[8]) {
    for (int j = 0; j < 4; j++) s[j] = sc[j], s[j + 4] = m[j];
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 0x0f) | (m[j] & 0x0f) << 4);
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6), s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

/* Q4_K repacked (rlxc_pack_x16): a group of 16 rows is one record per super-block, the 16 rows'
 * block b in record b. qs[8i + g] holds 4-byte group g of the rows' qs[32i .. 32i + 32), row r at
 * bytes 4r .. 4r + 3: its low nibbles are elements 64i + 4g .. of sub-block 2i, its high ones
 * 64i + 32 + 4g .. of sub-block 2i + 1. The scales and mins are decoded from their 6-bit packing:
 * sc[j][r] = sc[j] of row r, m[p][2r + h] = m[2p + h] (int16 pairs once widened, the pairs the
 * activations' 32-sums meet in vpdpwssd), then d and dmin per row. So a 64-byte load gives 4
 * quants of 16 rows, one row per 32-bit lane, as for Q4_0; the scales cost 2.8 % over the
 * GGUF blocks. */
typedef struct {
    uint8_t qs[32][64];
    uint8_t sc[8][16];
    uint8_t m[4][32];
    rlxc_fp16 d[16], dmin[16];
} rlxc_q4_kx16;
_Static_assert(sizeof(rlxc_q4_kx16) == 37 * 64, "a Q4_K record is whole cache lines");

/* Whether rlxc_pack_x16 packs type t, and the bytes of one packed group of rows of K. */
static inline int rlxc_x16_packs(rlxc_wtype t) { return rlxc_x16_qs_bytes(t) || t == RLXC_Q4_K; }
static inline size_t rlxc_x16_type_group_bytes(rlxc_wtype t, int K) {
    return t == RLXC_Q4_K ? (size_t)(K / RLXC_QK_K) * sizeof(rlxc_q4_kx16) : rlxc_x16_group_bytes(rlxc_x16_qs_bytes(t), K);
}
/* The bytes of one token's activations the products on packed type t take (Q8_K or Q8_0). */
static inline size_t rlxc_x16_x_bytes(rlxc_wtype t, int K) {
    return t == RLXC_Q4_K ? (size_t)(K / RLXC_QK_K) * sizeof(block_q8_k) : (size_t)(K / RLXC_QK) * sizeof(block_q8_0);
}

/* The 12 packed scale bytes of a Q3_K block -> out[j] = sc[j] - 32, -32..31. The low 4 bits of
 * sc[j] are the low (j < 8) or high (j >= 8) nibble of byte j % 8, the top 2 are bits 2(j / 4),
 * 2(j / 4) + 1 of byte 8 + j % 4. On 32-bit words, as rlxc_q4_k_scales. */
static inline void rlxc_q3_k_scales(int8_t out[16], const uint8_t s[12]) {
    uint32_t w[3], o[4];
    for (int i = 0; i < 3; i++) w[i] = (uint32_t)s[4 * i] | (uint32_t)s[4 * i + 1] << 8 |
                                       (uint32_t)s[4 * i + 2] << 16 | (uint32_t)s[4 * i + 3] << 24;
    for (int i = 0; i < 4; i++)
        o[i] = ((w[i % 2] >> (4 * (i / 2))) & 0x0f0f0f0fu) | (((w[2] >> (2 * i)) & 0x03030303u) << 4);
    for (int i = 0; i < 16; i++) out[i] = (int8_t)((int)(uint8_t)(o[i / 4] >> (8 * (i % 4))) - 32);
}

float rlxc_fp16_to_f32(rlxc_fp16 h);
rlxc_fp16 rlxc_f32_to_fp16(float f); /* round to nearest even, like numpy's astype(float16) */
float rlxc_bf16_to_f32(rlxc_bf16 h);
rlxc_bf16 rlxc_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet (as ggml and gguf) */

/* Sizes. Every count a kernel takes (rows N, row length K, tokens T, ldy, vector lengths n) is
 * an int of at most RLXC_MAX_COUNT, which leaves room for a loop's last step (i + W <= n, k0 +=
 * RLXC_FX_CHUNK, ...) to stay within int. Offsets into the operands are products of counts
 * (row * K, token * ldy, token * blocks per row): those pass 2^31 long before the operands stop
 * fitting in memory, so every one is computed in size_t. The engine (pipeline.c) and the
 * binding (ops.c) check sizes against RLXC_MAX_COUNT before calling kernels. */
#define RLXC_MAX_COUNT (INT32_MAX - 4096)

/* The kernels of one weight type. Weights are row-major W[N][K] in the type's GGUF layout (rows of
 * K / block blocks), passed as void pointers as ggml does, so that every type's kernels have one
 * signature and a table indexed by type holds them; each kernel reads its own type.
 * matvec: y[n] = dot(W[n], x); matmul: y[t*ldy + n] = dot(W[n], x[t]) for t < T. */
typedef struct {
    /* The activations the products take. NULL: float rows (f32, f16, bf16 weights). Else blocks
     * of x_block values, x_block_bytes each, that quantize_x makes from a float row of K (a
     * multiple of x_block): Q8_0 for q4_0 / q4_1 / q5_0 / q5_1 / q8_0, Q8_K for q2_k ... q6_k, bit-identical
     * across ISAs. This is how RLXC_ACT_Q8 multiplies the block types. */
    void (*quantize_x)(void *y, const float *x, int K);
    int x_block;
    size_t x_block_bytes;
    void (*matvec)(float *y, const void *w, const void *x, int N, int K);
    void (*matmul)(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
    /* Block types only (NULL for the float types), for RLXC_ACT_F32: one row -> K floats,
     * bit-exact with the scalar twins (and gguf.quants.dequantize), and the decode product of
     * the dequantized rows with float activations, y[n] = dot(W[n], x). */
    void (*dequantize)(float *y, const void *w, int K);
    void (*matvec_fx)(float *y, const void *w, const float *x, int N, int K);
    /* Q4_0, Q8_0 and Q4_K, NULL where an ISA has none: the products on G groups of 16 rows
     * repacked by rlxc_pack_x16 (rlxc_weight.packed; the engine takes them when it is set),
     * y[16 G] and y[t * ldy + n]. Each token's outputs are bit-identical between the two and
     * whatever T. terms: x's rlxc_q8_terms (Q8_0 activations) or NULL, then computed if needed. */
    void (*matvec_x16)(float *y, const void *w, const void *x, int G, int K);
    void (*matmul_x16)(float *y, int ldy, const void *w, const void *x, const rlxc_q8_terms *terms, int G, int K,
                       int T);
} rlxc_wtype_kernels;

/* Entries of rlxc_kernels.wt: indexed by rlxc_wtype, ggml's type ids (so GGUF types index it
 * directly); ids that are no rlxc type hold NULLs. */
#define RLXC_WTYPE_IDS (RLXC_BF16 + 1)

typedef void (*rlxc_attn_block_fn)(float *o, float *m, float *l, const float *q, int nq, const void *k,
                                   const void *v, int n, int hd, const int *lo, const int *hi, float scale,
                                   float softcap, float *scratch);

typedef struct rlxc_kernels {
    const char *isa;
    rlxc_wtype_kernels wt[RLXC_WTYPE_IDS]; /* a weight w's kernels: wt[w->type] */

    /* y = x / rms(x) * (w_offset + w); w == NULL means no weight (v-norm). */
    void (*rmsnorm)(float *y, const float *x, const float *w, float w_offset, float eps, int n);
    /* y = (x - mean) / std * w + b; b may be NULL. */
    void (*layernorm)(float *y, const float *x, const float *w, const float *b, float eps, int n);

    /* Rotate-half RoPE on n_heads heads of head_dim: pair (k, k + half) for k < n_pairs,
     * using precomputed cos[k], sin[k]. Prefix RoPE: half = n_pairs = rotary_dim / 2;
     * proportional (Gemma 4): half = head_dim / 2. */
    void (*rope)(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half);

    /* Attention over one block of keys, the unit csrc/attention.c builds a layer's attention
     * from: nq queries q[nq][hd] against n keys and values k, v [n][hd] of the element type of
     * the entry (attn_block_f32 / _f16 / _bf16); query r sees keys [lo[r], hi[r]). For each
     * query: m[r] = the max of its scores s = softcap(scale * q.k) (-inf when it sees none),
     * l[r] = sum exp(s - m[r]), o[r][hd] = sum exp(s - m[r]) v (not normalized). A query's
     * results depend on its own q, lo, hi and rows only, never on nq, n or the other queries:
     * a token gets the same bits in a prefill as decoded alone, whatever the tiling.
     * scratch: nq * n floats. */
    rlxc_attn_block_fn attn_block_f32, attn_block_f16, attn_block_bf16;

    void (*silu)(float *y, const float *x, int n);
    void (*gelu_tanh)(float *y, const float *x, int n);
    void (*mul)(float *y, const float *a, const float *b, int n);   /* y = a * b */
    void (*add)(float *y, const float *a, int n);                   /* y += a */
    void (*scale)(float *y, float s, int n);                        /* y *= s */
    void (*softcap)(float *y, float cap, int n);                    /* y = cap * tanh(y / cap) */
} rlxc_kernels;

/* Kernel names: rlxc_<kernel>_<suffix>, with a suffix per group so that a table can take a
 * group from another ISA: f32 the f32 products, q the Q4_0 / Q8_0 products, wq the Q5_0 /
 * Q4_K / Q6_K products, half the F16 / BF16 products, xq the activation quantizers
 * (rlxc_quantize_row_q8_0_<xq>, ..._q8_k_<xq>), dq the dequantizers of the block types
 * (rlxc_dequantize_row_<type>_<dq>), fx their matvecs with float activations, ops the norms,
 * RoPE and element-wise kernels, attn the attention blocks. The tables and the prototypes are
 * both spelled out by the macros below, once, so a kernel added to the struct and here reaches
 * every ISA, and one an ISA lacks fails its build. */

#define RLXC_FLOAT_WTYPE(type, sfx) \
    {.matvec = rlxc_matvec_##type##_##sfx, .matmul = rlxc_matmul_##type##_##sfx}
#define RLXC_BLOCK_WTYPE_FIELDS(type, sfx, x_type, x_block_size, xq, dq, fx)               \
    .quantize_x = rlxc_quantize_row_##x_type##_##xq, .x_block = x_block_size,               \
    .x_block_bytes = sizeof(block_##x_type), .matvec = rlxc_matvec_##type##_##sfx,          \
    .matmul = rlxc_matmul_##type##_##sfx, .dequantize = rlxc_dequantize_row_##type##_##dq,  \
    .matvec_fx = rlxc_matvec_fx_##type##_##fx
#define RLXC_BLOCK_WTYPE(type, sfx, x_type, x_block_size, xq, dq, fx) \
    {RLXC_BLOCK_WTYPE_FIELDS(type, sfx, x_type, x_block_size, xq, dq, fx)}

/* x16: the suffix of the ISA's rlxc_wtype_kernels.matvec_x16 / matmul_x16 of Q4_0 and Q8_0, kx16
 * of Q4_K's, or none. */
#define rlxc_matvec_q4_0x16_none NULL
#define rlxc_matmul_q4_0x16_none NULL
#define rlxc_matvec_q8_0x16_none NULL
#define rlxc_matmul_q8_0x16_none NULL
#define rlxc_matvec_q4_kx16_none NULL
#define rlxc_matmul_q4_kx16_none NULL
#define RLXC_KERNEL_TABLE(name, sf32, sq, swq, shalf, sxq, sdq, sfx, sops, sattn, x16, kx16)              \
    {                                                                                                     \
        .isa = name,                                                                                      \
        .wt = {[RLXC_F32] = RLXC_FLOAT_WTYPE(f32, sf32), [RLXC_F16] = RLXC_FLOAT_WTYPE(f16, shalf),       \
               [RLXC_BF16] = RLXC_FLOAT_WTYPE(bf16, shalf),                                               \
               [RLXC_Q4_0] = {RLXC_BLOCK_WTYPE_FIELDS(q4_0, sq, q8_0, RLXC_QK, sxq, sdq, sfx),                \
                             .matvec_x16 = rlxc_matvec_q4_0x16_##x16, .matmul_x16 = rlxc_matmul_q4_0x16_##x16}, \
               [RLXC_Q8_0] = {RLXC_BLOCK_WTYPE_FIELDS(q8_0, sq, q8_0, RLXC_QK, sxq, sdq, sfx),                \
                             .matvec_x16 = rlxc_matvec_q8_0x16_##x16, .matmul_x16 = rlxc_matmul_q8_0x16_##x16}, \
               [RLXC_Q5_0] = RLXC_BLOCK_WTYPE(q5_0, swq, q8_0, RLXC_QK, sxq, sdq, sfx),                   \
               [RLXC_Q4_1] = RLXC_BLOCK_WTYPE(q4_1, swq, q8_0, RLXC_QK, sxq, sdq, sfx),                   \
               [RLXC_Q5_1] = RLXC_BLOCK_WTYPE(q5_1, swq, q8_0, RLXC_QK, sxq, sdq, sfx),                   \
               [RLXC_Q2_K] = RLXC_BLOCK_WTYPE(q2_k, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx),                 \
               [RLXC_Q3_K] = RLXC_BLOCK_WTYPE(q3_k, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx),                 \
               [RLXC_Q4_K] = {RLXC_BLOCK_WTYPE_FIELDS(q4_k, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx),            \
                             .matvec_x16 = rlxc_matvec_q4_kx16_##kx16, .matmul_x16 = rlxc_matmul_q4_kx16_##kx16}, \
               [RLXC_Q5_K] = RLXC_BLOCK_WTYPE(q5_k, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx),                 \
               [RLXC_Q6_K] = RLXC_BLOCK_WTYPE(q6_k, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx),                 \
               [RLXC_IQ4_NL] = RLXC_BLOCK_WTYPE(iq4_nl, swq, q8_0, RLXC_QK, sxq, sdq, sfx),               \
               [RLXC_IQ4_XS] = RLXC_BLOCK_WTYPE(iq4_xs, swq, q8_k, RLXC_QK_K, sxq, sdq, sfx)},            \
        .rmsnorm = rlxc_rmsnorm_##sops, .layernorm = rlxc_layernorm_##sops, .rope = rlxc_rope_##sops,     \
        .attn_block_f32 = rlxc_attn_block_f32_##sattn, .attn_block_f16 = rlxc_attn_block_f16_##sattn,     \
        .attn_block_bf16 = rlxc_attn_block_bf16_##sattn,                                                  \
        .silu = rlxc_silu_##sops, .gelu_tanh = rlxc_gelu_tanh_##sops, \
        .mul = rlxc_mul_##sops, .add = rlxc_add_##sops, .scale = rlxc_scale_##sops,                       \
        .softcap = rlxc_softcap_##sops,                                                                   \
    }

/* Prototypes of one group of kernels with suffix sfx (the groups of RLXC_KERNEL_TABLE); an ISA's
 * header declares the groups its directory defines. */
#define RLXC_DECLARE_MAT(type, sfx)                                                        \
    void rlxc_matvec_##type##_##sfx(float *y, const void *w, const void *x, int N, int K); \
    void rlxc_matmul_##type##_##sfx(float *y, int ldy, const void *w, const void *x, int N, int K, int T);
#define RLXC_DECLARE_F32(sfx) RLXC_DECLARE_MAT(f32, sfx)
#define RLXC_DECLARE_Q(sfx) RLXC_DECLARE_MAT(q4_0, sfx) RLXC_DECLARE_MAT(q8_0, sfx)
#define RLXC_DECLARE_WQ(sfx)                                                                                      \
    RLXC_DECLARE_MAT(q5_0, sfx) RLXC_DECLARE_MAT(q4_1, sfx) RLXC_DECLARE_MAT(q5_1, sfx) RLXC_DECLARE_MAT(q2_k, sfx) \
    RLXC_DECLARE_MAT(q3_k, sfx) RLXC_DECLARE_MAT(q4_k, sfx) RLXC_DECLARE_MAT(q5_k, sfx) RLXC_DECLARE_MAT(q6_k, sfx) RLXC_DECLARE_MAT(iq4_nl, sfx) RLXC_DECLARE_MAT(iq4_xs, sfx)
#define RLXC_DECLARE_HALF(sfx) RLXC_DECLARE_MAT(f16, sfx) RLXC_DECLARE_MAT(bf16, sfx)
#define RLXC_DECLARE_XQ(sfx)                                           \
    void rlxc_quantize_row_q8_0_##sfx(void *y, const float *x, int K); \
    void rlxc_quantize_row_q8_k_##sfx(void *y, const float *x, int K);
/* M(type, sfx) for each block type */
#define RLXC_FOR_BLOCK_TYPES(M, sfx) \
    M(q4_0, sfx) M(q8_0, sfx) M(q5_0, sfx) M(q4_1, sfx) M(q5_1, sfx) M(q2_k, sfx) M(q3_k, sfx) M(q4_k, sfx) M(q5_k, sfx) M(q6_k, sfx) \
    M(iq4_nl, sfx) M(iq4_xs, sfx)
#define RLXC_DECLARE_DQ_1(type, sfx) void rlxc_dequantize_row_##type##_##sfx(float *y, const void *w, int K);
#define RLXC_DECLARE_FX_1(type, sfx) \
    void rlxc_matvec_fx_##type##_##sfx(float *y, const void *w, const float *x, int N, int K);
#define RLXC_DECLARE_DQ(sfx) RLXC_FOR_BLOCK_TYPES(RLXC_DECLARE_DQ_1, sfx)
#define RLXC_DECLARE_FX(sfx) RLXC_FOR_BLOCK_TYPES(RLXC_DECLARE_FX_1, sfx)
#define RLXC_DECLARE_ATTN_BLOCK(type, sfx)                                                                     \
    void rlxc_attn_block_##type##_##sfx(float *o, float *m, float *l, const float *q, int nq, const void *k,       \
                                        const void *v, int n, int hd, const int *lo, const int *hi, float scale,   \
                                        float softcap, float *scratch);
#define RLXC_DECLARE_ATTN(sfx) \
    RLXC_DECLARE_ATTN_BLOCK(f32, sfx) RLXC_DECLARE_ATTN_BLOCK(f16, sfx) RLXC_DECLARE_ATTN_BLOCK(bf16, sfx)
#define RLXC_DECLARE_OPS(sfx)                                                                                  \
    void rlxc_rmsnorm_##sfx(float *y, const float *x, const float *w, float w_offset, float eps, int n);       \
    void rlxc_layernorm_##sfx(float *y, const float *x, const float *w, const float *b, float eps, int n);     \
    void rlxc_rope_##sfx(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, \
                         int half);                                                                            \
    RLXC_DECLARE_ATTN(sfx)                                                                                     \
    void rlxc_silu_##sfx(float *y, const float *x, int n);                                                     \
    void rlxc_gelu_tanh_##sfx(float *y, const float *x, int n);                                                \
    void rlxc_mul_##sfx(float *y, const float *a, const float *b, int n);                                      \
    void rlxc_add_##sfx(float *y, const float *a, int n);                                                      \
    void rlxc_scale_##sfx(float *y, float s, int n);                                                           \
    void rlxc_softcap_##sfx(float *y, float cap, int n);
/* An on/off switch from the environment: 1 or 0 where the variable is exactly "1" or "0", else dflt. */
static inline int rlxc_env_switch(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && (e[0] == '0' || e[0] == '1') && !e[1] ? e[0] == '1' : dflt;
}
/* x86: make the x16 decode kernels take their Intel-tuned variants (1) or the others (0) whatever
 * the CPU, or (-1) choose again from the CPU and RLXC_X16_INTEL (kernels_avx2/avx2.h): the kernel
 * test covers both on any host. */
void rlxc_x16_set_intel_tuned(int on);
/* x86: whether the AVX-512 Q4_0 / Q5_0 / Q8_0 GEMMs use AMX tiles: the CPU has AMX-INT8, the OS
 * granted the process its state, and RLXC_AMX is not 0 (kernels_avx512/amx.c). set_enabled makes
 * them use the tiles where the CPU and OS allow (1), not (0), or (-1) as RLXC_AMX says, and returns
 * whether they will. */
int rlxc_amx_usable(void);
int rlxc_amx_set_enabled(int on);
/* The products on repacked rows (rlxc_wtype_kernels.matvec_x16 / matmul_x16), where an ISA has them. */
#define RLXC_DECLARE_X16_1(type, sfx)                                                            \
    void rlxc_matvec_##type##x16_##sfx(float *y, const void *w, const void *x, int G, int K); \
    void rlxc_matmul_##type##x16_##sfx(float *y, int ldy, const void *w, const void *x, const rlxc_q8_terms *terms, \
                                       int G, int K, int T);
#define RLXC_DECLARE_X16(sfx) RLXC_DECLARE_X16_1(q4_0, sfx) RLXC_DECLARE_X16_1(q8_0, sfx)
#define RLXC_DECLARE_KX16(sfx) RLXC_DECLARE_X16_1(q4_k, sfx)
/* Every group: an ISA that defines all its kernels itself. */
#define RLXC_DECLARE_KERNELS(sfx)                                                         \
    RLXC_DECLARE_F32(sfx) RLXC_DECLARE_Q(sfx) RLXC_DECLARE_WQ(sfx) RLXC_DECLARE_HALF(sfx) \
    RLXC_DECLARE_XQ(sfx) RLXC_DECLARE_DQ(sfx) RLXC_DECLARE_FX(sfx) RLXC_DECLARE_OPS(sfx)

/* Scalar reference kernels: always present, the oracle for every other ISA (kernels_ref.h
 * names them). */
extern const rlxc_kernels rlxc_kernels_scalar;

/* Reference weight quantizer and dequantizers of the float types, bit-exact with the gguf
 * package (and ggml's *_ref). */
void rlxc_quantize_row_q4_0(block_q4_0 *y, const float *x, int K);
void rlxc_quantize_row_q4_1(block_q4_1 *y, const float *x, int K);
void rlxc_quantize_row_q5_1(block_q5_1 *y, const float *x, int K);
/* Q4_K / Q5_K from floats: llama.cpp's reference search (not bit-exact with it: float order) */
void rlxc_quantize_row_q4_k(block_q4_k *y, const float *x, int K);
void rlxc_quantize_row_q5_k(block_q5_k *y, const float *x, int K);
void rlxc_dequantize_row_f16(float *y, const rlxc_fp16 *x, int K);
void rlxc_dequantize_row_bf16(float *y, const rlxc_bf16 *x, int K);

/* ISA tables, present only where the build compiled them (NULL otherwise). */
const rlxc_kernels *rlxc_kernels_avx2(void);
const rlxc_kernels *rlxc_kernels_avx512(void);
const rlxc_kernels *rlxc_kernels_neon(void);

/* Run-time dispatch: the active table, chosen once from CPU features or RLXC_ISA. */
const rlxc_kernels *rlxc_kernels_active(void);
/* Force an ISA by name ("scalar", "avx2", "avx512", "neon"); returns 0 or -1 with err set. */
int rlxc_kernels_select(const char *isa, char *err, size_t errlen);
/* Whether this build and this CPU can run an ISA. */
int rlxc_kernels_available(const char *isa);
/* Select from the RLXC_ISA environment variable, else the best the CPU runs; -1 with err set
 * if RLXC_ISA names an ISA this build or CPU lacks. */
int rlxc_kernels_init(char *err, size_t errlen);
/* Comma-separated CPU features relevant to rlxc, e.g. "avx2,fma,avx512f,avx512bw,avx512vnni". */
const char *rlxc_cpu_features(void);

#endif
