/* NEON kernels: declarations and the small helpers several files share.
 *
 * Everything here is plain ARMv8.0 Advanced SIMD (mandatory on AArch64), so the directory
 * compiles for -march=armv8-a and runs on every aarch64 CPU. The only newer instruction used
 * is SDOT (ARMv8.2 dotprod), confined to the functions of quant_dotprod.c, which that file
 * alone compiles for the dotprod target; rlxc_kernels_neon() picks that table only when
 * HWCAP_ASIMDDP says the CPU has it. */
#ifndef RLXC_KERNELS_NEON_H
#define RLXC_KERNELS_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../csrc/kernels_simd.h"

/* Register tiles are R x C with R, C <= TILE_MAX, compile-time constants after inlining;
 * fixed-size arrays (not VLAs) let gcc keep them in the 32 vector registers. */
#define TILE_MAX 4

/* fp16 <-> f32 through the base-ARMv8 FCVT (no +fp16 needed: that extension is fp16
 * arithmetic). FCVT rounds to nearest even under the default FPCR, like rlxc_f32_to_fp16,
 * and overflows to inf / keeps subnormals exactly as it does. */
RLXC_INLINE float rlxc_neon_h2f(rlxc_fp16 h) {
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

RLXC_INLINE rlxc_fp16 rlxc_neon_f2h(float x) {
    const __fp16 f = (__fp16)x;
    rlxc_fp16 h;
    memcpy(&h, &f, sizeof h);
    return h;
}

/* Prefetch [p, p + n) into L1: a decode tile streams R rows at once, short interleaved
 * streams the hardware prefetcher follows poorly, so each tile asks for the next one. */
RLXC_INLINE void rlxc_neon_prefetch(const void *p, const size_t n) {
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* Kernels shared by both tables (plain ARMv8.0 NEON). */
/* Block types x float activations: scalar dequantizers, NEON f32 dots (f32.c). */
void rlxc_matvec_fx_q4_0_neon(float *y, const block_q4_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q8_0_neon(float *y, const block_q8_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q5_0_neon(float *y, const block_q5_0 *w, const float *x, int N, int K);
void rlxc_matvec_fx_q4_k_neon(float *y, const block_q4_k *w, const float *x, int N, int K);
void rlxc_matvec_fx_q6_k_neon(float *y, const block_q6_k *w, const float *x, int N, int K);
void rlxc_matvec_f32_neon(float *y, const float *w, const float *x, int N, int K);
void rlxc_matmul_f32_neon(float *y, int ldy, const float *w, const float *x, int N, int K, int T);
void rlxc_quantize_row_q8_0_neon(block_q8_0 *y, const float *x, int K);
void rlxc_rmsnorm_neon(float *y, const float *x, const float *w, float w_offset, float eps, int n);
void rlxc_layernorm_neon(float *y, const float *x, const float *w, const float *b, float eps, int n);
void rlxc_rope_neon(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half);
void rlxc_attn_head_neon(float *out, const float *q, const float *k, const float *v, int head_dim,
                         int n_keys, float scale, float softcap, float *scratch);
void rlxc_silu_neon(float *y, const float *x, int n);
void rlxc_gelu_tanh_neon(float *y, const float *x, int n);
void rlxc_mul_neon(float *y, const float *a, const float *b, int n);
void rlxc_add_neon(float *y, const float *a, int n);
void rlxc_scale_neon(float *y, float s, int n);
void rlxc_softcap_neon(float *y, float cap, int n);

/* Quantized products: the plain table's integer dots use SMULL + SADALP (quant.c), the dotprod
 * table's SDOT (quant_dotprod.c); both come from the template qmat.h. */
void rlxc_matvec_q4_0_neon(float *y, const block_q4_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q4_0_neon(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q8_0_neon(float *y, const block_q8_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q8_0_neon(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q4_0_neon_dotprod(float *y, const block_q4_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q4_0_neon_dotprod(float *y, int ldy, const block_q4_0 *w, const block_q8_0 *xq, int N, int K, int T);
void rlxc_matvec_q8_0_neon_dotprod(float *y, const block_q8_0 *w, const block_q8_0 *xq, int N, int K);
void rlxc_matmul_q8_0_neon_dotprod(float *y, int ldy, const block_q8_0 *w, const block_q8_0 *xq, int N, int K, int T);

#endif
