/* NEON rotate-half RoPE: both halves of a pair block are read before either is written, and
 * k + 4 <= n_pairs <= half keeps the two 4-wide windows disjoint. */
#include "neon.h"

void rlxc_rope_neon(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half) {
    for (int h = 0; h < n_heads; h++) {
        float *a = x + (size_t)h * head_dim, *b = a + half;
        int k = 0;
        for (; k + 4 <= n_pairs; k += 4) {
            const float32x4_t x1 = vld1q_f32(a + k), x2 = vld1q_f32(b + k);
            const float32x4_t c = vld1q_f32(cos + k), s = vld1q_f32(sin + k);
            vst1q_f32(a + k, vfmsq_f32(vmulq_f32(x1, c), x2, s)); /* x1 c - x2 s */
            vst1q_f32(b + k, vfmaq_f32(vmulq_f32(x2, c), x1, s)); /* x2 c + x1 s */
        }
        for (; k < n_pairs; k++) {
            const float x1 = a[k], x2 = b[k];
            a[k] = x1 * cos[k] - x2 * sin[k];
            b[k] = x2 * cos[k] + x1 * sin[k];
        }
    }
}
