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

/* Decode on 16-row groups (rlxc_pack_x16): 16 bytes of a 64-byte run are 4 rows' 4-byte groups,
 * and SDOT by lane multiplies them with one 4-byte activation group: per block and 16 rows 16
 * (Q4_0) or 32 (Q8_0) SDOT and 4 scale FMAs, no reduction across lanes. Q4_0's nibbles 0..15 are
 * valid signed bytes, so its -8 offset is the activations' block sum times -8, added once. */
RLXC_INLINE void matvec_x16(float *y, const void *w, const block_q8_0 *x, int G, int K, const int qs) {
    const int nb = K / RLXC_QK;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int g = 0; g < G; g++) {
        const uint8_t *grp = (const uint8_t *)w + (size_t)g * rlxc_x16_group_bytes(qs, K);
        float32x4_t acc[4];
        for (int r = 0; r < 4; r++) acc[r] = vdupq_n_f32(0.0f);
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = rlxc_x16_quants(grp, qs, b);
            const rlxc_fp16 *d = rlxc_x16_scales(grp, qs, b);
            const int8x16_t xa = vld1q_s8(x[b].qs), xb = vld1q_s8(x[b].qs + 16);
            int32x4_t lo[4], hi[4];
            const int32_t bias = qs == 16 ? -8 * (vaddlvq_s8(xa) + vaddlvq_s8(xb)) : 0;
            for (int r = 0; r < 4; r++) lo[r] = vdupq_n_s32(bias), hi[r] = vdupq_n_s32(0);
            /* 4-byte group j of the activations: lane j % 4 of xa (j < 4) or xb */
#define X16_Q4(j)                                                                          \
    for (int r = 0; r < 4; r++) {                                                          \
        const uint8x16_t z = vld1q_u8(q + 64 * (j) + 16 * r);                              \
        lo[r] = vdotq_laneq_s32(lo[r], vreinterpretq_s8_u8(vandq_u8(z, m4)), xa, j);       \
        hi[r] = vdotq_laneq_s32(hi[r], vreinterpretq_s8_u8(vshrq_n_u8(z, 4)), xb, j);      \
    }
#define X16_Q8(j, xv, lane, acc)                                                           \
    for (int r = 0; r < 4; r++) acc[r] = vdotq_laneq_s32(acc[r], vld1q_s8((const int8_t *)q + 64 * (j) + 16 * r), xv, lane);
            if (qs == 16) {
                X16_Q4(0) X16_Q4(1) X16_Q4(2) X16_Q4(3)
            } else {
                X16_Q8(0, xa, 0, lo) X16_Q8(1, xa, 1, hi) X16_Q8(2, xa, 2, lo) X16_Q8(3, xa, 3, hi)
                X16_Q8(4, xb, 0, lo) X16_Q8(5, xb, 1, hi) X16_Q8(6, xb, 2, lo) X16_Q8(7, xb, 3, hi)
            }
#undef X16_Q4
#undef X16_Q8
            const float dx = rlxc_neon_h2f(x[b].d);
            for (int r = 0; r < 4; r++) {
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(d + 4 * r)));
                acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(vaddq_s32(lo[r], hi[r])), vmulq_n_f32(dw, dx));
            }
        }
        for (int r = 0; r < 4; r++) vst1q_f32(y + 16 * (size_t)g + 4 * r, acc[r]);
    }
}

void rlxc_matvec_q4_0x16_neon_dotprod(float *y, const void *w, const void *x, int G, int K) {
    matvec_x16(y, w, x, G, K, 16);
}
void rlxc_matvec_q8_0x16_neon_dotprod(float *y, const void *w, const void *x, int G, int K) {
    matvec_x16(y, w, x, G, K, 32);
}
