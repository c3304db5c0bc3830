/* NEON kernels: declarations and the small helpers several files share.
 *
 * Everything here is plain ARMv8.0 Advanced SIMD (mandatory on AArch64), so the directory
 * compiles for -march=armv8-a and runs on every aarch64 CPU. The only newer instruction used
 * is SDOT (ARMv8.2 dotprod), confined to the functions of quant_dotprod.c, which carry their
 * own target attribute; rlxc_kernels_neon() picks that table only when HWCAP_ASIMDDP says the
 * CPU has it. */
#ifndef RLXC_KERNELS_NEON_H
#define RLXC_KERNELS_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../csrc/kernels.h"

#define RLXC_INLINE static inline __attribute__((always_inline))

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

/* Runs a 4-wide body over n floats; the n % 4 tail goes through the same body on a padded
 * copy, so tails and bulk share one formula (and one rounding). */
#define RLXC_NEON_MAP4(n, body_v_to_v, y, x)                                   \
    do {                                                                       \
        int i_ = 0;                                                            \
        for (; i_ + 4 <= (n); i_ += 4) vst1q_f32((y) + i_, body_v_to_v(vld1q_f32((x) + i_))); \
        if (i_ < (n)) {                                                        \
            float buf_[4] = {0};                                               \
            for (int j_ = i_; j_ < (n); j_++) buf_[j_ - i_] = (x)[j_];         \
            vst1q_f32(buf_, body_v_to_v(vld1q_f32(buf_)));                     \
            for (int j_ = i_; j_ < (n); j_++) (y)[j_] = buf_[j_ - i_];         \
        }                                                                      \
    } while (0)

/* Row/token driver of a quantized GEMM (and its T == 1 matvec) around a register tile
 * tile(y, ldy, w, xq, nb, R, C). Decode uses MV_R x 1 tiles; the GEMM GM_R x GM_C tiles, so
 * every weight block loaded serves GM_C tokens, over chunks of RLXC_NEON_TCHUNK tokens so a
 * chunk's activations stay in L2 while every row streams past them. Leftover rows and tokens
 * take 1-row / 1-token tiles. `attr` is the target attribute of the generated function. */
#define RLXC_NEON_TCHUNK 64
#define RLXC_NEON_DEFINE_QMATMUL(attr, name, wtype, tile, MV_R, GM_R, GM_C)                          \
    attr void name(float *y, int ldy, const wtype *w, const block_q8_0 *xq, int N, int K, int T) {    \
        const int nb = K / RLXC_QK;                                                                   \
        for (int t0 = 0; t0 < T; t0 += RLXC_NEON_TCHUNK) {                                            \
            const int t1 = t0 + RLXC_NEON_TCHUNK < T ? t0 + RLXC_NEON_TCHUNK : T;                     \
            int n = 0;                                                                                \
            for (; t1 - t0 >= (GM_C) && n + (GM_R) <= N; n += (GM_R)) {                               \
                int t = t0;                                                                           \
                for (; t + (GM_C) <= t1; t += (GM_C))                                                 \
                    tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * nb, xq + (size_t)t * nb, nb, GM_R, GM_C); \
                for (; t < t1; t++)                                                                   \
                    tile(y + (size_t)t * ldy + n, ldy, w + (size_t)n * nb, xq + (size_t)t * nb, nb, GM_R, 1); \
            }                                                                                         \
            for (int t = t0; t < t1; t++) {                                                           \
                int m = n;                                                                            \
                for (; m + (MV_R) <= N; m += (MV_R))                                                  \
                    tile(y + (size_t)t * ldy + m, ldy, w + (size_t)m * nb, xq + (size_t)t * nb, nb, MV_R, 1); \
                for (; m < N; m++)                                                                    \
                    tile(y + (size_t)t * ldy + m, ldy, w + (size_t)m * nb, xq + (size_t)t * nb, nb, 1, 1); \
            }                                                                                         \
        }                                                                                             \
    }

/* Kernels shared by both tables (plain ARMv8.0 NEON). */
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
