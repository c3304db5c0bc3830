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

float rlxc_fp16_to_f32(rlxc_fp16 h);
rlxc_fp16 rlxc_f32_to_fp16(float f); /* round to nearest even, like numpy's astype(float16) */

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

/* Scalar reference kernels: always present, the oracle for every other ISA. */
extern const rlxc_kernels rlxc_kernels_scalar;

/* Reference quantizers, bit-exact with the gguf package (and ggml's *_ref). */
void rlxc_quantize_row_q4_0(block_q4_0 *y, const float *x, int K);
void rlxc_quantize_row_q8_0(block_q8_0 *y, const float *x, int K);
void rlxc_dequantize_row_q4_0(float *y, const block_q4_0 *x, int K);
void rlxc_dequantize_row_q8_0(float *y, const block_q8_0 *x, int K);

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
