/* NEON activation quantization to Q8_0, and the quantized products of the plain table
 * (ARMv8.0: no dotprod), from the templates qmat.h and kqmat.h. */
#include "neon.h"

/* Bit-identical with rlxc_quantize_row_q8_0: FMAXNM is fmaxf, d and id are the reference's
 * own scalar expressions, FCVTAS rounds half away from zero like roundf, and FCVT rounds d
 * to fp16 to nearest even. The product x * id is rounded on its own: nothing follows it for
 * gcc to contract it into (and the build passes -ffp-contract=off anyway). */
void rlxc_quantize_row_q8_0_neon(void *vy, const float *x, int K) {
    block_q8_0 *y = vy;
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        float32x4_t v[8];
        float32x4_t amax = vdupq_n_f32(0.0f);
        for (int i = 0; i < 8; i++) {
            v[i] = vld1q_f32(x + 4 * i);
            amax = vmaxnmq_f32(amax, vabsq_f32(v[i]));
        }
        const float d = vmaxnmvq_f32(amax) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int8x8_t q[4];
        for (int i = 0; i < 4; i++) {
            const int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i], id));
            const int32x4_t c = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
            q[i] = vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(c)));
        }
        vst1q_s8(y[b].qs, vcombine_s8(q[0], q[1]));
        vst1q_s8(y[b].qs + 16, vcombine_s8(q[2], q[3]));
        y[b].d = rlxc_neon_f2h(d);
    }
}

/* The 16-term int8 dot in plain ARMv8.0: SMULL/SMULL2 widen 8 products to int16 (each at
 * most 128 * 128, no overflow), SADALP adds adjacent pairs into the int32 lanes. */
RLXC_INLINE int32x4_t dot16_smull(int32x4_t acc, int8x16_t w, int8x16_t x) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    return vpadalq_s16(acc, vmull_high_s8(w, x));
}

#define QMAT_NAME(f) f##_neon
#define QMAT_DOT16 dot16_smull
#include "qmat.h"
#include "kqmat.h"
