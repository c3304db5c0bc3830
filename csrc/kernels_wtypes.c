/* Scalar reference kernels of the GGUF weight types beyond Q4_0/Q8_0: F16, BF16, Q5_0, Q4_1,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, and ggml's Q8_K activation blocks. Compiled like kernels_ref.c (-ffp-contract=off), so
 * the dequantizers round exactly like gguf.quants.dequantize (NumPy float32, one rounding per
 * operation). Each block type is first unpacked to its integer quants; the dequantizers scale
 * those, and the dot products multiply them with the activations' quants exactly in integers,
 * then scale per block (Q5_0) or super-block (Q4_K, Q6_K) as ggml does. */
#include <math.h>
#include <string.h>
#include "kernels_ref.h"
#include "kernels_simd.h"

/* ---- unpacking to integer quants ---- */

/* 0..15 (Q4_0's layout, no offset) */
static void unpack_4bit(uint8_t q[RLXC_QK], const uint8_t qs[RLXC_QK / 2]) {
    for (int j = 0; j < RLXC_QK / 2; j++) {
        q[j] = qs[j] & 0x0f;
        q[j + RLXC_QK / 2] = qs[j] >> 4;
    }
}

/* 0..31 (Q5_0's layout, no offset) */
static void unpack_5bit(uint8_t q[RLXC_QK], const uint8_t qh[4], const uint8_t qs[RLXC_QK / 2]) {
    const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    unpack_4bit(q, qs);
    for (int j = 0; j < RLXC_QK; j++) q[j] |= (uint8_t)(((h >> j) & 1) << 4);
}

static void unpack_q5_0(int8_t q[RLXC_QK], const block_q5_0 *b) {
    uint8_t u[RLXC_QK];
    unpack_5bit(u, b->qh, b->qs);
    for (int j = 0; j < RLXC_QK; j++) q[j] = (int8_t)(u[j] - 16);
}

/* 0..3, in element order (layout in kernels.h) */
static void unpack_q2_k(uint8_t q[RLXC_QK_K], const block_q2_k *b) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * k + l] = (b->qs[32 * h + l] >> (2 * k)) & 3;
}

/* -4..3, in element order: Q2_K's two bits, less 4 where the hmask bit is clear */
static void unpack_q3_k(int8_t q[RLXC_QK_K], const block_q3_k *b) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->qs[32 * h + l] >> (2 * k)) & 3, hi = (b->hmask[l] >> (4 * h + k)) & 1;
                q[128 * h + 32 * k + l] = (int8_t)(lo - 4 + 4 * hi);
            }
}

/* 0..15, in element order */
static void unpack_q4_k(uint8_t q[RLXC_QK_K], const block_q4_k *b) {
    for (int i = 0; i < RLXC_QK_K / 64; i++)
        for (int l = 0; l < 32; l++) {
            q[64 * i + l] = b->qs[32 * i + l] & 0x0f;
            q[64 * i + 32 + l] = b->qs[32 * i + l] >> 4;
        }
}

/* 0..31, in element order: Q4_K's nibbles and bit j of qh[l] for element l of sub-block j */
static void unpack_q5_k(uint8_t q[RLXC_QK_K], const block_q5_k *b) {
    for (int i = 0; i < RLXC_QK_K / 64; i++)
        for (int l = 0; l < 32; l++) {
            q[64 * i + l] = (uint8_t)((b->qs[32 * i + l] & 0x0f) | ((b->qh[l] >> (2 * i)) & 1) << 4);
            q[64 * i + 32 + l] = (uint8_t)((b->qs[32 * i + l] >> 4) | ((b->qh[l] >> (2 * i + 1)) & 1) << 4);
        }
}

/* IQ4 levels of 32 indices in Q4_0's layout (IQ4_NL blocks, IQ4_XS sub-blocks) */
static void unpack_iq4(int8_t q[RLXC_QK], const uint8_t qs[RLXC_QK / 2]) {
    for (int j = 0; j < RLXC_QK / 2; j++) {
        q[j] = rlxc_iq4_values[qs[j] & 0x0f];
        q[j + RLXC_QK / 2] = rlxc_iq4_values[qs[j] >> 4];
    }
}

/* -32..31, in element order (layout in kernels.h) */
static void unpack_q6_k(int8_t q[RLXC_QK_K], const block_q6_k *b) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0f;
                const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
                q[128 * h + 32 * k + l] = (int8_t)((lo | hi << 4) - 32);
            }
}

/* ---- dequantization (bit-exact with the gguf package) ---- */

void rlxc_dequantize_row_q5_0_scalar(float *y, const void *vx, int K) {
    const block_q5_0 *x = vx;
    int8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        unpack_q5_0(q, &x[b]);
        for (int j = 0; j < RLXC_QK; j++) y[j] = d * (float)q[j];
    }
}

/* Q4_1 / Q5_1: d * q + m, the product rounded first (as gguf's NumPy code) */
void rlxc_dequantize_row_q4_1_scalar(float *y, const void *vx, int K) {
    const block_q4_1 *x = vx;
    uint8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d), m = rlxc_fp16_to_f32(x[b].m);
        unpack_4bit(q, x[b].qs);
        for (int j = 0; j < RLXC_QK; j++) y[j] = d * (float)q[j] + m;
    }
}

void rlxc_dequantize_row_q5_1_scalar(float *y, const void *vx, int K) {
    const block_q5_1 *x = vx;
    uint8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d), m = rlxc_fp16_to_f32(x[b].m);
        unpack_5bit(q, x[b].qh, x[b].qs);
        for (int j = 0; j < RLXC_QK; j++) y[j] = d * (float)q[j] + m;
    }
}

/* Sub-block j of 16: d * sc[j] first, then times q, less dmin * m[j] (gguf's order) */
void rlxc_dequantize_row_q2_k_scalar(float *y, const void *vx, int K) {
    const block_q2_k *x = vx;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_fp16_to_f32(x[b].d), dmin = rlxc_fp16_to_f32(x[b].dmin);
        unpack_q2_k(q, &x[b]);
        for (int j = 0; j < 16; j++) {
            const float dj = d * (float)(x[b].scales[j] & 0x0f), mj = dmin * (float)(x[b].scales[j] >> 4);
            for (int l = 0; l < 16; l++, y++) *y = dj * (float)q[16 * j + l] - mj;
        }
    }
}

void rlxc_dequantize_row_q3_k_scalar(float *y, const void *vx, int K) {
    const block_q3_k *x = vx;
    int8_t q[RLXC_QK_K], sc[16];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        unpack_q3_k(q, &x[b]);
        rlxc_q3_k_scales(sc, x[b].scales);
        for (int j = 0; j < 16; j++) {
            const float dj = d * (float)sc[j];
            for (int l = 0; l < 16; l++, y++) *y = dj * (float)q[16 * j + l];
        }
    }
}

/* Q4_K / Q5_K: sub-block j of 32 quants at d * sc[j] and dmin * m[j] */
static void dequantize_k_min(float *y, const uint8_t q[RLXC_QK_K], rlxc_fp16 d16, rlxc_fp16 dmin16,
                             const uint8_t scales[12]) {
    uint8_t sm[16];
    const float d = rlxc_fp16_to_f32(d16), dmin = rlxc_fp16_to_f32(dmin16);
    rlxc_q4_k_scales(sm, scales);
    for (int j = 0; j < 8; j++) {
        const float dj = d * (float)sm[j], mj = dmin * (float)sm[8 + j]; /* gguf's order */
        for (int l = 0; l < 32; l++, y++) *y = dj * (float)q[32 * j + l] - mj;
    }
}

void rlxc_dequantize_row_q4_k_scalar(float *y, const void *vx, int K) {
    const block_q4_k *x = vx;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++, y += RLXC_QK_K) {
        unpack_q4_k(q, &x[b]);
        dequantize_k_min(y, q, x[b].d, x[b].dmin, x[b].scales);
    }
}

void rlxc_dequantize_row_q5_k_scalar(float *y, const void *vx, int K) {
    const block_q5_k *x = vx;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++, y += RLXC_QK_K) {
        unpack_q5_k(q, &x[b]);
        dequantize_k_min(y, q, x[b].d, x[b].dmin, x[b].scales);
    }
}

void rlxc_dequantize_row_q6_k_scalar(float *y, const void *vx, int K) {
    const block_q6_k *x = vx;
    int8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        unpack_q6_k(q, &x[b]);
        for (int j = 0; j < 16; j++) {
            const float dj = d * (float)x[b].scales[j];
            for (int l = 0; l < 16; l++, y++) *y = dj * (float)q[16 * j + l];
        }
    }
}

void rlxc_dequantize_row_iq4_nl_scalar(float *y, const void *vx, int K) {
    const block_iq4_nl *x = vx;
    int8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        unpack_iq4(q, x[b].qs);
        for (int j = 0; j < RLXC_QK; j++) y[j] = d * (float)q[j];
    }
}

/* d * ls first, then times the level (gguf's order) */
void rlxc_dequantize_row_iq4_xs_scalar(float *y, const void *vx, int K) {
    const block_iq4_xs *x = vx;
    int8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK_K; b++) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++, y += RLXC_QK) {
            const float dl = d * (float)rlxc_iq4_xs_scale(&x[b], j);
            unpack_iq4(q, x[b].qs + 16 * j);
            for (int l = 0; l < RLXC_QK; l++) y[l] = dl * (float)q[l];
        }
    }
}

void rlxc_dequantize_row_f16(float *y, const rlxc_fp16 *x, int K) {
    for (int k = 0; k < K; k++) y[k] = rlxc_fp16_to_f32(x[k]);
}

void rlxc_dequantize_row_bf16(float *y, const rlxc_bf16 *x, int K) {
    for (int k = 0; k < K; k++) y[k] = rlxc_bf16_to_f32(x[k]);
}

/* ---- Q4_1 / Q5_1 from floats (bit-exact with gguf.quants.quantize) ---- */

/* One block over [min, max] in `levels` steps: q = trunc((x - min) / d + 0.5) with the float
 * reciprocal of d = (max - min) / levels, d and m = min stored as fp16. */
static void quantize_min_block(uint8_t q[RLXC_QK], rlxc_fp16 *d16, rlxc_fp16 *m16, const float *x, int levels) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < RLXC_QK; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    const float d = (mx - mn) / (float)levels;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < RLXC_QK; j++) {
        const float v = truncf((x[j] - mn) * id + 0.5f);
        q[j] = (uint8_t)(v < 0.0f ? 0 : v > (float)levels ? levels : (int)v);
    }
    *d16 = rlxc_f32_to_fp16(d), *m16 = rlxc_f32_to_fp16(mn);
}

static void pack_4bit(uint8_t qs[RLXC_QK / 2], const uint8_t q[RLXC_QK]) {
    for (int j = 0; j < RLXC_QK / 2; j++) qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + RLXC_QK / 2] & 0x0f) << 4);
}

void rlxc_quantize_row_q4_1(block_q4_1 *y, const float *x, int K) {
    uint8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        quantize_min_block(q, &y[b].d, &y[b].m, x, 15);
        pack_4bit(y[b].qs, q);
    }
}

void rlxc_quantize_row_q5_1(block_q5_1 *y, const float *x, int K) {
    uint8_t q[RLXC_QK];
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        quantize_min_block(q, &y[b].d, &y[b].m, x, 31);
        pack_4bit(y[b].qs, q);
        uint32_t h = 0;
        for (int j = 0; j < RLXC_QK; j++) h |= (uint32_t)(q[j] >> 4) << j;
        for (int i = 0; i < 4; i++) y[b].qh[i] = (uint8_t)(h >> (8 * i));
    }
}

/* ---- Q8_K activations (ggml's quantize_row_q8_K_ref) ---- */

/* Round to nearest, ties to even: the float addition of 1.5 * 2^23 rounds away the fraction,
 * and the integer is read from the mantissa (|f| < 2^22). */
static int nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void rlxc_quantize_row_q8_k_scalar(void *vy, const float *x, int K) {
    block_q8_k *y = vy;
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        /* the signed value of largest magnitude (first one on ties) maps to -127 */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RLXC_QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        memset(&y[b], 0, sizeof y[b]);
        if (amax == 0.0f) continue;
        const float iscale = -127.0f / max;
        for (int j = 0; j < RLXC_QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        y[b].d = 1.0f / iscale;
        rlxc_q8_k_bsums(&y[b]);
    }
}

void rlxc_q8_k_bsums(block_q8_k *b) {
    for (int j = 0; j < RLXC_QK_K / 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += b->qs[16 * j + l];
        b->bsums[j] = (int16_t)s;
    }
}

/* ---- Q4_K / Q5_K from floats ----
 * Each sub-block of 32 gets the scale and offset that minimize the weighted squared error of
 * its codes (weights |x| + the sub-block's rms, so large values count more): a least-squares fit
 * of scale and offset to the codes of candidate ranges nmax + rmin + 0.1 s (s = 0..nstep),
 * keeping the best. The 8 scales and 8
 * offsets are then coded in 6 bits against the super-block's largest, and the codes recomputed
 * against the coded values. The search and its constants are those of llama.cpp's reference
 * quantizer (make_qkx2_quants), so the results compare with llama-quantize's files. */

/* round(v) clamped to 0..nmax (v may be anything, NaN included: 0) */
static int code_of(float v, int nmax) {
    if (!(v > 0.0f)) return 0;
    return v >= (float)nmax ? nmax : nearest_int(v);
}

/* x[0..32) ~ scale * L + min, L in 0..nmax, min <= 0: returns scale and -min in *neg_min. */
static float fit_scale_min(const float *x, const float *w, int nmax, float rmin, int nstep, uint8_t L[32],
                           float *neg_min) {
    float lo = x[0], hi = x[0], sw = 0.0f, swx = 0.0f;
    for (int i = 0; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
        sw += w[i], swx += w[i] * x[i];
    }
    lo = lo > 0.0f ? 0.0f : lo;
    memset(L, 0, 32);
    *neg_min = -lo;
    if (!(hi > lo)) return 0.0f; /* constant (or NaN) */
    const float is0 = (float)nmax / (hi - lo);
    float scale = 1.0f / is0, min = lo, best = 0.0f;
    for (int i = 0; i < 32; i++) {
        L[i] = (uint8_t)code_of(is0 * (x[i] - lo), nmax);
        const float e = scale * L[i] + lo - x[i];
        best += w[i] * e * e;
    }
    for (int s = 0; s <= nstep; s++) {
        const float is = ((float)nmax + rmin + 0.1f * (float)s) / (hi - lo);
        uint8_t c[32];
        float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
        for (int i = 0; i < 32; i++) {
            c[i] = (uint8_t)code_of(is * (x[i] - lo), nmax);
            sl += w[i] * c[i], sl2 += w[i] * c[i] * c[i], sxl += w[i] * c[i] * x[i];
        }
        const float D = sw * sl2 - sl * sl;
        if (!(D > 0.0f)) continue;
        float sc = (sw * sxl - swx * sl) / D, mn = (sl2 * swx - sl * sxl) / D;
        if (mn > 0.0f) mn = 0.0f, sc = sxl / sl2;
        float err = 0.0f;
        for (int i = 0; i < 32; i++) {
            const float e = sc * c[i] + mn - x[i];
            err += w[i] * e * e;
        }
        if (err < best) best = err, scale = sc, min = mn, memcpy(L, c, 32);
    }
    *neg_min = -min;
    return scale;
}

/* One super-block: codes q[256] (0..nmax), the 12 scale bytes, d and dmin. */
static void quantize_k_min(uint8_t q[RLXC_QK_K], uint8_t s[12], rlxc_fp16 *d16, rlxc_fp16 *dmin16, const float *x,
                           int nmax, float rmin, int nstep) {
    float sc[8], mn[8], w[32], max_sc = 0.0f, max_mn = 0.0f;
    uint8_t L[32];
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float ss = 0.0f;
        for (int l = 0; l < 32; l++) ss += xj[l] * xj[l];
        const float rms = sqrtf(ss / 32.0f);
        for (int l = 0; l < 32; l++) w[l] = rms + fabsf(xj[l]);
        sc[j] = fit_scale_min(xj, w, nmax, rmin, nstep, L, &mn[j]);
        max_sc = sc[j] > max_sc ? sc[j] : max_sc, max_mn = mn[j] > max_mn ? mn[j] : max_mn;
    }
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)code_of(max_sc > 0.0f ? sc[j] * (63.0f / max_sc) : 0.0f, 63);
        lm[j] = (uint8_t)code_of(max_mn > 0.0f ? mn[j] * (63.0f / max_mn) : 0.0f, 63);
    }
    rlxc_q4_k_pack_scales(s, ls, lm);
    *d16 = rlxc_f32_to_fp16(max_sc / 63.0f), *dmin16 = rlxc_f32_to_fp16(max_mn / 63.0f);
    const float d = rlxc_fp16_to_f32(*d16), dmin = rlxc_fp16_to_f32(*dmin16);
    for (int j = 0; j < 8; j++) {
        const float dl = d * ls[j], ml = dmin * lm[j];
        for (int l = 0; l < 32; l++) q[32 * j + l] = (uint8_t)(dl != 0.0f ? code_of((x[32 * j + l] + ml) / dl, nmax) : 0);
    }
}

void rlxc_quantize_row_q4_k(block_q4_k *y, const float *x, int K) {
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        quantize_k_min(q, y[b].scales, &y[b].d, &y[b].dmin, x, 15, -1.0f, 20);
        for (int i = 0; i < 4; i++)
            for (int l = 0; l < 32; l++) y[b].qs[32 * i + l] = (uint8_t)(q[64 * i + l] | q[64 * i + 32 + l] << 4);
    }
}

void rlxc_quantize_row_q5_k(block_q5_k *y, const float *x, int K) {
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < K / RLXC_QK_K; b++, x += RLXC_QK_K) {
        quantize_k_min(q, y[b].scales, &y[b].d, &y[b].dmin, x, 31, -0.5f, 15);
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int i = 0; i < 4; i++)
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * i + l], hi = q[64 * i + 32 + l];
                y[b].qs[32 * i + l] = (uint8_t)((lo & 0x0f) | (hi & 0x0f) << 4);
                y[b].qh[l] |= (uint8_t)((lo >> 4) << (2 * i) | (hi >> 4) << (2 * i + 1));
            }
    }
}

/* ---- dot products ---- */

static float dot_q5_0(const block_q5_0 *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    int8_t q[RLXC_QK];
    for (int b = 0; b < nb; b++) {
        unpack_q5_0(q, &w[b]);
        int sumi = 0;
        for (int j = 0; j < RLXC_QK; j++) sumi += q[j] * x[b].qs[j];
        s += (float)sumi * rlxc_fp16_to_f32(w[b].d) * rlxc_fp16_to_f32(x[b].d);
    }
    return s;
}

/* Blocks with a minimum: d * dx * (q . x) + m * dx * sum(x), both integer sums exact. */
static float dot_with_min(const uint8_t q[RLXC_QK], float d, float m, const block_q8_0 *x) {
    int sumi = 0, sumx = 0;
    for (int j = 0; j < RLXC_QK; j++) sumi += q[j] * x->qs[j], sumx += x->qs[j];
    const float dx = rlxc_fp16_to_f32(x->d);
    return d * dx * (float)sumi + m * dx * (float)sumx;
}

static float dot_q4_1(const block_q4_1 *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    uint8_t q[RLXC_QK];
    for (int b = 0; b < nb; b++) {
        unpack_4bit(q, w[b].qs);
        s += dot_with_min(q, rlxc_fp16_to_f32(w[b].d), rlxc_fp16_to_f32(w[b].m), &x[b]);
    }
    return s;
}

static float dot_q5_1(const block_q5_1 *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    uint8_t q[RLXC_QK];
    for (int b = 0; b < nb; b++) {
        unpack_5bit(q, w[b].qh, w[b].qs);
        s += dot_with_min(q, rlxc_fp16_to_f32(w[b].d), rlxc_fp16_to_f32(w[b].m), &x[b]);
    }
    return s;
}

/* Per super-block: sum_j sc[j] * (q . x over sub-block j) and sum_j m[j] * (sum of x over
 * sub-block j), both exact integers; the second from the Q8_K sums of 16. */
static float dot_k_min(const uint8_t q[RLXC_QK_K], rlxc_fp16 d, rlxc_fp16 dmin, const uint8_t scales[12],
                       const block_q8_k *x) {
    uint8_t sm[16];
    rlxc_q4_k_scales(sm, scales);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int dot = 0;
        for (int l = 0; l < 32; l++) dot += q[32 * j + l] * x->qs[32 * j + l];
        sumi += sm[j] * dot;
        summ += sm[8 + j] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    }
    return rlxc_fp16_to_f32(d) * x->d * (float)sumi - rlxc_fp16_to_f32(dmin) * x->d * (float)summ;
}

/* Per super-block: sum_j sc[j] * (q . x over sub-block j of 16) and sum_j m[j] * bsums[j],
 * both exact integers, scaled as dot_k_min. */
static float dot_q2_k(const block_q2_k *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < nb; b++) {
        unpack_q2_k(q, &w[b]);
        int sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * j + l] * x[b].qs[16 * j + l];
            sumi += (w[b].scales[j] & 0x0f) * dot;
            summ += (w[b].scales[j] >> 4) * x[b].bsums[j];
        }
        s += rlxc_fp16_to_f32(w[b].d) * x[b].d * (float)sumi - rlxc_fp16_to_f32(w[b].dmin) * x[b].d * (float)summ;
    }
    return s;
}

/* Per super-block: sum_j sc[j] * (q . x over sub-block j of 16), exact in int32, as Q6_K. */
static float dot_q3_k(const block_q3_k *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    int8_t q[RLXC_QK_K], sc[16];
    for (int b = 0; b < nb; b++) {
        unpack_q3_k(q, &w[b]);
        rlxc_q3_k_scales(sc, w[b].scales);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * j + l] * x[b].qs[16 * j + l];
            sumi += sc[j] * dot;
        }
        s += rlxc_fp16_to_f32(w[b].d) * x[b].d * (float)sumi;
    }
    return s;
}

static float dot_q4_k(const block_q4_k *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < nb; b++) {
        unpack_q4_k(q, &w[b]);
        s += dot_k_min(q, w[b].d, w[b].dmin, w[b].scales, &x[b]);
    }
    return s;
}

static float dot_q5_k(const block_q5_k *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    uint8_t q[RLXC_QK_K];
    for (int b = 0; b < nb; b++) {
        unpack_q5_k(q, &w[b]);
        s += dot_k_min(q, w[b].d, w[b].dmin, w[b].scales, &x[b]);
    }
    return s;
}

static float dot_q6_k(const block_q6_k *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    int8_t q[RLXC_QK_K];
    for (int b = 0; b < nb; b++) {
        unpack_q6_k(q, &w[b]);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * j + l] * x[b].qs[16 * j + l];
            sumi += w[b].scales[j] * dot;
        }
        s += rlxc_fp16_to_f32(w[b].d) * x[b].d * (float)sumi;
    }
    return s;
}

static float dot_iq4_nl(const block_iq4_nl *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    int8_t q[RLXC_QK];
    for (int b = 0; b < nb; b++) {
        unpack_iq4(q, w[b].qs);
        int sumi = 0;
        for (int j = 0; j < RLXC_QK; j++) sumi += q[j] * x[b].qs[j];
        s += (float)sumi * rlxc_fp16_to_f32(w[b].d) * rlxc_fp16_to_f32(x[b].d);
    }
    return s;
}

/* Per super-block: sum_j ls[j] * (v . x over sub-block j), exact in int32. */
static float dot_iq4_xs(const block_iq4_xs *w, const block_q8_k *x, int nb) {
    float s = 0.0f;
    int8_t q[RLXC_QK];
    for (int b = 0; b < nb; b++) {
        int sumi = 0;
        for (int j = 0; j < RLXC_QK_K / RLXC_QK; j++) {
            unpack_iq4(q, w[b].qs + 16 * j);
            int dot = 0;
            for (int l = 0; l < RLXC_QK; l++) dot += q[l] * x[b].qs[32 * j + l];
            sumi += rlxc_iq4_xs_scale(&w[b], j) * dot;
        }
        s += rlxc_fp16_to_f32(w[b].d) * x[b].d * (float)sumi;
    }
    return s;
}

/* F16 / BF16: each weight widened to float (exact), dot in float in index order. */
static float dot_f16(const rlxc_fp16 *w, const float *x, int K) {
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += rlxc_fp16_to_f32(w[k]) * x[k];
    return s;
}

static float dot_bf16(const rlxc_bf16 *w, const float *x, int K) {
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += rlxc_bf16_to_f32(w[k]) * x[k];
    return s;
}

RLXC_DEFINE_SCALAR_MAT(q5_0, block_q5_0, block_q8_0, RLXC_QK)
RLXC_DEFINE_SCALAR_MAT(q4_1, block_q4_1, block_q8_0, RLXC_QK)
RLXC_DEFINE_SCALAR_MAT(q5_1, block_q5_1, block_q8_0, RLXC_QK)
RLXC_DEFINE_SCALAR_MAT(q2_k, block_q2_k, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(q3_k, block_q3_k, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(q4_k, block_q4_k, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(q5_k, block_q5_k, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(q6_k, block_q6_k, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(iq4_nl, block_iq4_nl, block_q8_0, RLXC_QK)
RLXC_DEFINE_SCALAR_MAT(iq4_xs, block_iq4_xs, block_q8_k, RLXC_QK_K)
RLXC_DEFINE_SCALAR_MAT(f16, rlxc_fp16, float, 1)
RLXC_DEFINE_SCALAR_MAT(bf16, rlxc_bf16, float, 1)

RLXC_DEFINE_MATVECS_FX(scalar, scalar, scalar)
