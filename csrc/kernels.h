/* Kernel interface: every ISA (scalar reference, AVX2, AVX-512, NEON) fills one
 * rlxc_kernels table with functions of exactly these signatures. The engine calls
 * kernels only through the active table, so tests can pin any ISA and compare it
 * with the scalar twin. */
#ifndef RLXC_KERNELS_H
#define RLXC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

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

/* GGUF Q4_K: 8 sub-blocks of 32, x = d * sc[j] * q - dmin * m[j] with q = 4 bits and 6-bit
 * sc[j], m[j] packed into `scales` (rlxc_q4_k_scales). Sub-blocks 2i and 2i+1 are the low and
 * high nibbles of qs[32i .. 32i+32). */
typedef struct {
    rlxc_fp16 d, dmin;
    uint8_t scales[12];
    uint8_t qs[RLXC_QK_K / 2];
} block_q4_k;

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
_Static_assert(sizeof(block_q4_k) == 144, "block_q4_k must match the GGUF layout");
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

typedef struct rlxc_kernels {
    const char *isa;

    /* Row-major weights W[N][K]; y[t*ldy + n] = dot(W[n], x[t]) for t < T.
     * Q4_0/Q8_0 weights take activations already quantized to Q8_0 rows of K/32 blocks. */
    void (*matvec_f32)(float *y, const float *w, const float *x, int N, int K);
    void (*matmul_f32)(float *y, int ldy, const float *w, const float *x, int N, int K, int T);
    void (*matvec_q4_0)(float *y, const block_q4_0 *w, const block_q8_0 *xq, int N, int K);
    void (*matmul_q4_0)(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
    void (*matvec_q8_0)(float *y, const block_q8_0 *w, const block_q8_0 *xq, int N, int K);
    void (*matmul_q8_0)(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);
    void (*quantize_row_q8_0)(block_q8_0 *y, const float *x, int K); /* K % 32 == 0 */
    /* GGUF weight types beyond Q4_0/Q8_0: Q5_0 takes Q8_0 activations, Q4_K and Q6_K take
     * Q8_K rows of K/256 blocks, F16 and BF16 take the float activations. */
    void (*matvec_q5_0)(float *y, const block_q5_0 *w, const block_q8_0 *xq, int N, int K);
    void (*matmul_q5_0)(float *y, int ldy, const block_q5_0 *w, const block_q8_0 *xq, int N, int K, int T);
    void (*matvec_q4_k)(float *y, const block_q4_k *w, const block_q8_k *xq, int N, int K);
    void (*matmul_q4_k)(float *y, int ldy, const block_q4_k *w, const block_q8_k *xq, int N, int K, int T);
    void (*matvec_q6_k)(float *y, const block_q6_k *w, const block_q8_k *xq, int N, int K);
    void (*matmul_q6_k)(float *y, int ldy, const block_q6_k *w, const block_q8_k *xq, int N, int K, int T);
    void (*matvec_f16)(float *y, const rlxc_fp16 *w, const float *x, int N, int K);
    void (*matmul_f16)(float *y, int ldy, const rlxc_fp16 *w, const float *x, int N, int K, int T);
    void (*matvec_bf16)(float *y, const rlxc_bf16 *w, const float *x, int N, int K);
    void (*matmul_bf16)(float *y, int ldy, const rlxc_bf16 *w, const float *x, int N, int K, int T);
    void (*quantize_row_q8_k)(block_q8_k *y, const float *x, int K); /* K % 256 == 0 */
    /* One row -> K floats, bit-exact with the scalar twins (and gguf.quants.dequantize): the
     * f32-activation path of rlxc_linear multiplies these rows instead of quantizing x. */
    void (*dequantize_q4_0)(float *y, const block_q4_0 *x, int K);
    void (*dequantize_q8_0)(float *y, const block_q8_0 *x, int K);
    void (*dequantize_q5_0)(float *y, const block_q5_0 *x, int K);
    void (*dequantize_q4_k)(float *y, const block_q4_k *x, int K);
    void (*dequantize_q6_k)(float *y, const block_q6_k *x, int K);
    /* Decode of the f32-activation path: y[n] = dot(dequantized W[n], x), x float. */
    void (*matvec_fx_q4_0)(float *y, const block_q4_0 *w, const float *x, int N, int K);
    void (*matvec_fx_q8_0)(float *y, const block_q8_0 *w, const float *x, int N, int K);
    void (*matvec_fx_q5_0)(float *y, const block_q5_0 *w, const float *x, int N, int K);
    void (*matvec_fx_q4_k)(float *y, const block_q4_k *w, const float *x, int N, int K);
    void (*matvec_fx_q6_k)(float *y, const block_q6_k *w, const float *x, int N, int K);

    /* y = x / rms(x) * (w_offset + w); w == NULL means no weight (v-norm). */
    void (*rmsnorm)(float *y, const float *x, const float *w, float w_offset, float eps, int n);
    /* y = (x - mean) / std * w + b; b may be NULL. */
    void (*layernorm)(float *y, const float *x, const float *w, const float *b, float eps, int n);

    /* Rotate-half RoPE on n_heads heads of head_dim: pair (k, k + half) for k < n_pairs,
     * using precomputed cos[k], sin[k]. Prefix RoPE: half = n_pairs = rotary_dim / 2;
     * proportional (Gemma 4): half = head_dim / 2. */
    void (*rope)(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half);

    /* One query head against n_keys contiguous keys/values [n_keys][head_dim]:
     * out = softmax(softcap(scale * q.k)) @ v. scratch holds n_keys floats (or is unused). */
    void (*attn_head)(float *out, const float *q, const float *k, const float *v, int head_dim,
                      int n_keys, float scale, float softcap, float *scratch);

    void (*silu)(float *y, const float *x, int n);
    void (*gelu_tanh)(float *y, const float *x, int n);
    void (*mul)(float *y, const float *a, const float *b, int n);   /* y = a * b */
    void (*add)(float *y, const float *a, int n);                   /* y += a */
    void (*scale)(float *y, float s, int n);                        /* y *= s */
    void (*softcap)(float *y, float cap, int n);                    /* y = cap * tanh(y / cap) */
} rlxc_kernels;

/* The table of an ISA whose kernels are named rlxc_<kernel>_<suffix>, with a suffix per group
 * so that a table can take a group from another ISA: f32 the f32 products, q the Q4_0 / Q8_0
 * products, wq the Q5_0 / Q4_K / Q6_K products, half the F16 / BF16 products, dq the
 * dequantizers of the block types (rlxc_dequantize_row_<type>_<dq>), fx their matvecs with
 * float activations, ops the norms,
 * RoPE, attention and element-wise kernels. The activation quantizers are named in full (the
 * reference's have no suffix). Every table is spelled out here once, so a kernel added to the
 * struct above and here reaches every ISA, and one an ISA lacks fails its build. */
#define RLXC_KERNEL_TABLE(name, f32, q, quantize_q8_0, wq, half, quantize_q8_k, dq, fx, ops)                    \
    {                                                                                                           \
        .isa = name, .matvec_f32 = rlxc_matvec_f32_##f32, .matmul_f32 = rlxc_matmul_f32_##f32,                  \
        .matvec_q4_0 = rlxc_matvec_q4_0_##q, .matmul_q4_0 = rlxc_matmul_q4_0_##q,                               \
        .matvec_q8_0 = rlxc_matvec_q8_0_##q, .matmul_q8_0 = rlxc_matmul_q8_0_##q,                               \
        .quantize_row_q8_0 = quantize_q8_0,                                                                     \
        .matvec_q5_0 = rlxc_matvec_q5_0_##wq, .matmul_q5_0 = rlxc_matmul_q5_0_##wq,                             \
        .matvec_q4_k = rlxc_matvec_q4_k_##wq, .matmul_q4_k = rlxc_matmul_q4_k_##wq,                             \
        .matvec_q6_k = rlxc_matvec_q6_k_##wq, .matmul_q6_k = rlxc_matmul_q6_k_##wq,                             \
        .matvec_f16 = rlxc_matvec_f16_##half, .matmul_f16 = rlxc_matmul_f16_##half,                             \
        .matvec_bf16 = rlxc_matvec_bf16_##half, .matmul_bf16 = rlxc_matmul_bf16_##half,                         \
        .quantize_row_q8_k = quantize_q8_k,                                                                     \
        .dequantize_q4_0 = rlxc_dequantize_row_q4_0_##dq, .dequantize_q8_0 = rlxc_dequantize_row_q8_0_##dq,     \
        .dequantize_q5_0 = rlxc_dequantize_row_q5_0_##dq, .dequantize_q4_k = rlxc_dequantize_row_q4_k_##dq,     \
        .dequantize_q6_k = rlxc_dequantize_row_q6_k_##dq,                                                       \
        .matvec_fx_q4_0 = rlxc_matvec_fx_q4_0_##fx, .matvec_fx_q8_0 = rlxc_matvec_fx_q8_0_##fx,                 \
        .matvec_fx_q5_0 = rlxc_matvec_fx_q5_0_##fx, .matvec_fx_q4_k = rlxc_matvec_fx_q4_k_##fx,                 \
        .matvec_fx_q6_k = rlxc_matvec_fx_q6_k_##fx,                                                             \
        .rmsnorm = rlxc_rmsnorm_##ops, .layernorm = rlxc_layernorm_##ops, .rope = rlxc_rope_##ops,              \
        .attn_head = rlxc_attn_head_##ops, .silu = rlxc_silu_##ops, .gelu_tanh = rlxc_gelu_tanh_##ops,          \
        .mul = rlxc_mul_##ops, .add = rlxc_add_##ops, .scale = rlxc_scale_##ops, .softcap = rlxc_softcap_##ops, \
    }

/* Scalar reference kernels: always present, the oracle for every other ISA. */
extern const rlxc_kernels rlxc_kernels_scalar;

/* Reference quantizers and dequantizers, bit-exact with the gguf package (and ggml's *_ref). */
void rlxc_quantize_row_q4_0(block_q4_0 *y, const float *x, int K);
void rlxc_quantize_row_q8_0(block_q8_0 *y, const float *x, int K);
void rlxc_dequantize_row_q4_0_scalar(float *y, const block_q4_0 *x, int K);
void rlxc_dequantize_row_q8_0_scalar(float *y, const block_q8_0 *x, int K);
/* The other GGUF types (kernels_wtypes.c): dequantizers bit-exact with gguf.quants.dequantize,
 * and ggml's reference Q8_K activation quantizer (quantize_row_q8_K_ref). */
void rlxc_dequantize_row_q5_0_scalar(float *y, const block_q5_0 *x, int K);
void rlxc_dequantize_row_q4_k_scalar(float *y, const block_q4_k *x, int K);
void rlxc_dequantize_row_q6_k_scalar(float *y, const block_q6_k *x, int K);
void rlxc_dequantize_row_f16(float *y, const rlxc_fp16 *x, int K);
void rlxc_dequantize_row_bf16(float *y, const rlxc_bf16 *x, int K);
void rlxc_quantize_row_q8_k(block_q8_k *y, const float *x, int K);

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
