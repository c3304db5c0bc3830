/* The quantized products of the dotprod table: the same templates as quant.c with SDOT
 * (ARMv8.2 dotprod, 16 products per instruction) for the int8 dot. Only the functions of
 * this file carry the dotprod target, so the rest of the build stays plain ARMv8.0, and
 * rlxc_kernels_neon() hands this table out only when HWCAP_ASIMDDP is set. */
#include "neon.h"

/* Every function defined from here on, the templates' included, targets dotprod. */
#pragma GCC target("arch=armv8.2-a+dotprod")

#define QMAT_NAME(f) f##_neon_dotprod
#define QMAT_DOT16 vdotq_s32
#include "qmat.h"
#include "kqmat.h"

/* Decode on 16-row groups (block_q4_0x16): 16 bytes of a 64-byte dword group are 4 rows, and
 * SDOT by lane multiplies them with one 4-byte activation group; per block and 16 rows, 16 loads,
 * 32 SDOT and 4 scale FMAs, no reduction across lanes. Nibbles 0..15 are valid signed bytes, so
 * the -8 offset is the activations' block sum times -8, added once. */
void rlxc_matvec_q4_0x16_neon_dotprod(float *y, const void *vw, const void *vx, int G, int K) {
    const block_q4_0x16 *w = vw;
    const block_q8_0 *x = vx;
    const int nb = K / RLXC_QK;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int g = 0; g < G; g++) {
        const block_q4_0x16 *wb = w + (size_t)g * nb;
        float32x4_t acc[4];
        for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
        for (int b = 0; b < nb; b++) {
            const int8x16_t xa = vld1q_s8(x[b].qs), xb = vld1q_s8(x[b].qs + 16);
            const int32_t bias = -8 * (vaddlvq_s8(xa) + vaddlvq_s8(xb));
            int32x4_t lo[4], hi[4];
            for (int q = 0; q < 4; q++) lo[q] = vdupq_n_s32(bias), hi[q] = vdupq_n_s32(0);
#define X16_GROUP(j)                                                                       \
    for (int q = 0; q < 4; q++) {                                                          \
        const uint8x16_t z = vld1q_u8(wb[b].qs[j][4 * q]);                                 \
        lo[q] = vdotq_laneq_s32(lo[q], vreinterpretq_s8_u8(vandq_u8(z, m4)), xa, j);       \
        hi[q] = vdotq_laneq_s32(hi[q], vreinterpretq_s8_u8(vshrq_n_u8(z, 4)), xb, j);      \
    }
            X16_GROUP(0) X16_GROUP(1) X16_GROUP(2) X16_GROUP(3)
#undef X16_GROUP
            const float dx = rlxc_neon_h2f(x[b].d);
            for (int q = 0; q < 4; q++) {
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(&wb[b].d[4 * q])));
                acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(vaddq_s32(lo[q], hi[q])), vmulq_n_f32(dw, dx));
            }
        }
        for (int q = 0; q < 4; q++) vst1q_f32(y + 16 * (size_t)g + 4 * q, acc[q]);
    }
}
