/* Scalar reference kernels: the oracle every SIMD kernel is tested against.
 * Written for clarity; compiled with -ffp-contract=off so results do not depend on
 * whether the target has FMA. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_ref.h"
#include "kernels_simd.h"

/* ---- quantization (bit-exact with the gguf package and ggml's *_ref) ---- */

void rlxc_quantize_row_q4_0(block_q4_0 *y, const float *x, int K) {
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        /* the signed value of largest magnitude (first one on ties) maps to -8 */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RLXC_QK; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = rlxc_f32_to_fp16(d);
        for (int j = 0; j < RLXC_QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[j + RLXC_QK / 2] * id;
            int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void rlxc_quantize_row_q8_0_scalar(void *vy, const float *x, int K) {
    block_q8_0 *y = vy;
    for (int b = 0; b < K / RLXC_QK; b++, x += RLXC_QK) {
        float amax = 0.0f;
        for (int j = 0; j < RLXC_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = rlxc_f32_to_fp16(d);
        for (int j = 0; j < RLXC_QK; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

size_t rlxc_x16_bytes(rlxc_wtype t, int N, int K) {
    return (size_t)(N / RLXC_PACK_ROWS) * rlxc_x16_type_group_bytes(t, K);
}

/* Row r's Q4_K block into its group's record (the layout of rlxc_q4_kx16), and back. */
static void q4_k_to_record(rlxc_q4_kx16 *o, const block_q4_k *b, int r) {
    uint8_t sm[16];
    rlxc_q4_k_scales(sm, b->scales);
    for (int i = 0; i < RLXC_QK_K / 64; i++)
        for (int g = 0; g < 8; g++) memcpy(&o->qs[8 * i + g][4 * r], b->qs + 32 * i + 4 * g, 4);
    for (int j = 0; j < 8; j++) o->sc[j][r] = sm[j], o->m[j / 2][2 * r + j % 2] = sm[8 + j];
    o->d[r] = b->d, o->dmin[r] = b->dmin;
}
static void q4_k_from_record(block_q4_k *b, const rlxc_q4_kx16 *o, int r) {
    uint8_t sc[8], m[8];
    for (int i = 0; i < RLXC_QK_K / 64; i++)
        for (int g = 0; g < 8; g++) memcpy(b->qs + 32 * i + 4 * g, &o->qs[8 * i + g][4 * r], 4);
    for (int j = 0; j < 8; j++) sc[j] = o->sc[j][r], m[j] = o->m[j / 2][2 * r + j % 2];
    rlxc_q4_k_pack_scales(b->scales, sc, m);
    b->d = o->d[r], b->dmin = o->dmin[r];
}

void rlxc_x16_row_blocks(rlxc_wtype t, void *dst, const void *group, int r, int b0, int n) {
    if (t == RLXC_Q4_K) {
        for (int b = 0; b < n; b++) q4_k_from_record((block_q4_k *)dst + b, (const rlxc_q4_kx16 *)group + b0 + b, r);
        return;
    }
    const int qs = rlxc_x16_qs_bytes(t);
    for (int b = 0; b < n; b++) {
        uint8_t *out = (uint8_t *)dst + (size_t)b * (2 + qs);
        const uint8_t *q = rlxc_x16_quants(group, qs, b0 + b);
        memcpy(out, &rlxc_x16_scales(group, qs, b0 + b)[r], 2);
        for (int j = 0; j < qs; j++) out[2 + j] = q[rlxc_x16_byte(r, j)];
    }
}

void rlxc_pack_x16(rlxc_wtype t, void *dst, const void *w, int N, int K) {
    if (t == RLXC_Q4_K) {
        const int nb = K / RLXC_QK_K;
        rlxc_q4_kx16 *o = dst;
        for (int n = 0; n < N / RLXC_PACK_ROWS * RLXC_PACK_ROWS; n++)
            for (int b = 0; b < nb; b++)
                q4_k_to_record(o + (size_t)(n / RLXC_PACK_ROWS) * nb + b, (const block_q4_k *)w + (size_t)n * nb + b,
                               n % RLXC_PACK_ROWS);
        return;
    }
    const int qs = rlxc_x16_qs_bytes(t), nb = K / RLXC_QK;
    const size_t gbytes = rlxc_x16_group_bytes(qs, K), row_bytes = (size_t)nb * (2 + (size_t)qs);
    for (int g = 0; g < N / RLXC_PACK_ROWS; g++) {
        uint8_t *group = (uint8_t *)dst + (size_t)g * gbytes;
        memset(group, 0, gbytes);
        for (int b = 0; b < nb; b++) {
            uint8_t *q = (uint8_t *)rlxc_x16_quants(group, qs, b);
            rlxc_fp16 *d = (rlxc_fp16 *)rlxc_x16_scales(group, qs, b);
            for (int r = 0; r < RLXC_PACK_ROWS; r++) {
                /* both block types: the fp16 scale, then the quants */
                const uint8_t *src = (const uint8_t *)w + ((size_t)g * RLXC_PACK_ROWS + r) * row_bytes + (size_t)b * (2 + qs);
                memcpy(&d[r], src, sizeof d[r]);
                for (int j = 0; j < qs; j++) q[rlxc_x16_byte(r, j)] = src[2 + j];
            }
        }
    }
}

void rlxc_dequantize_row_q4_0_scalar(float *y, const void *vx, int K) {
    const block_q4_0 *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        for (int j = 0; j < RLXC_QK / 2; j++) {
            y[j] = d * (float)((x[b].qs[j] & 0x0f) - 8);
            y[j + RLXC_QK / 2] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

void rlxc_dequantize_row_q8_0_scalar(float *y, const void *vx, int K) {
    const block_q8_0 *x = vx;
    for (int b = 0; b < K / RLXC_QK; b++, y += RLXC_QK) {
        const float d = rlxc_fp16_to_f32(x[b].d);
        for (int j = 0; j < RLXC_QK; j++) y[j] = d * (float)x[b].qs[j];
    }
}

/* ---- matrix products ---- */

static float dot_f32(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Per block: exact integer dot, then scaled by both block scales (ggml's order). */
static float dot_q4_0(const block_q4_0 *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    for (int b = 0; b < nb; b++) {
        int sumi = 0;
        for (int j = 0; j < RLXC_QK / 2; j++) {
            sumi += ((w[b].qs[j] & 0x0f) - 8) * x[b].qs[j];
            sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + RLXC_QK / 2];
        }
        s += (float)sumi * rlxc_fp16_to_f32(w[b].d) * rlxc_fp16_to_f32(x[b].d);
    }
    return s;
}

static float dot_q8_0(const block_q8_0 *w, const block_q8_0 *x, int nb) {
    float s = 0.0f;
    for (int b = 0; b < nb; b++) {
        int sumi = 0;
        for (int j = 0; j < RLXC_QK; j++) sumi += w[b].qs[j] * x[b].qs[j];
        s += (float)sumi * rlxc_fp16_to_f32(w[b].d) * rlxc_fp16_to_f32(x[b].d);
    }
    return s;
}

/* The rows of rlxc_matvec_q4_0_scalar / _q8_0_scalar from the repacked layout, summed in the same
 * order (so the two agree bit for bit and the packing is tested through them). */
static void matvec_x16_scalar(float *y, const void *w, const block_q8_0 *x, int G, int K, int qs) {
    const int nb = K / RLXC_QK;
    for (int n = 0; n < G * RLXC_PACK_ROWS; n++) {
        const void *group = (const uint8_t *)w + (size_t)(n / RLXC_PACK_ROWS) * rlxc_x16_group_bytes(qs, K);
        const int r = n % RLXC_PACK_ROWS;
        float s = 0.0f;
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = rlxc_x16_quants(group, qs, b);
            int sumi = 0;
            if (qs == 16)
                for (int j = 0; j < RLXC_QK / 2; j++) {
                    sumi += ((q[rlxc_x16_byte(r, j)] & 0x0f) - 8) * x[b].qs[j];
                    sumi += ((q[rlxc_x16_byte(r, j)] >> 4) - 8) * x[b].qs[j + RLXC_QK / 2];
                }
            else
                for (int j = 0; j < RLXC_QK; j++) sumi += (int8_t)q[rlxc_x16_byte(r, j)] * x[b].qs[j];
            s += (float)sumi * rlxc_fp16_to_f32(rlxc_x16_scales(group, qs, b)[r]) * rlxc_fp16_to_f32(x[b].d);
        }
        y[n] = s;
    }
}

void rlxc_matvec_q4_0x16_scalar(float *y, const void *w, const void *x, int G, int K) {
    matvec_x16_scalar(y, w, x, G, K, 16);
}
void rlxc_matvec_q8_0x16_scalar(float *y, const void *w, const void *x, int G, int K) {
    matvec_x16_scalar(y, w, x, G, K, 32);
}
void rlxc_matmul_q4_0x16_scalar(float *y, int ldy, const void *w, const void *x, const rlxc_q8_terms *terms, int G, int K,
                                int T) {
    (void)terms;
    rlxc_matmul_x16_by_token(rlxc_matvec_q4_0x16_scalar, RLXC_Q4_0, y, ldy, w, x, G, K, T);
}
void rlxc_matmul_q8_0x16_scalar(float *y, int ldy, const void *w, const void *x, const rlxc_q8_terms *terms, int G, int K,
                                int T) {
    (void)terms;
    rlxc_matmul_x16_by_token(rlxc_matvec_q8_0x16_scalar, RLXC_Q8_0, y, ldy, w, x, G, K, T);
}

/* rlxc_matvec_q4_k_scalar's sums, in its order, from the Q4_K records. */
void rlxc_matvec_q4_kx16_scalar(float *y, const void *w, const void *vx, int G, int K) {
    const block_q8_k *x = vx;
    const int nb = K / RLXC_QK_K;
    for (int n = 0; n < G * RLXC_PACK_ROWS; n++) {
        const rlxc_q4_kx16 *rec = (const rlxc_q4_kx16 *)w + (size_t)(n / RLXC_PACK_ROWS) * nb;
        const int r = n % RLXC_PACK_ROWS;
        float s = 0.0f;
        for (int b = 0; b < nb; b++) {
            int sumi = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                int dot = 0;
                for (int l = 0; l < 32; l++) {
                    const uint8_t q = rec[b].qs[8 * (j / 2) + l / 4][4 * r + l % 4];
                    dot += (j % 2 ? q >> 4 : q & 0x0f) * x[b].qs[32 * j + l];
                }
                sumi += rec[b].sc[j][r] * dot;
                summ += rec[b].m[j / 2][2 * r + j % 2] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
            }
            s += rlxc_fp16_to_f32(rec[b].d[r]) * x[b].d * (float)sumi -
                 rlxc_fp16_to_f32(rec[b].dmin[r]) * x[b].d * (float)summ;
        }
        y[n] = s;
    }
}
void rlxc_matmul_q4_kx16_scalar(float *y, int ldy, const void *w, const void *x, const rlxc_q8_terms *terms, int G, int K,
                                int T) {
    (void)terms;
    rlxc_matmul_x16_by_token(rlxc_matvec_q4_kx16_scalar, RLXC_Q4_K, y, ldy, w, x, G, K, T);
}

RLXC_DEFINE_SCALAR_MAT(f32, float, float, 1)
RLXC_DEFINE_SCALAR_MAT(q4_0, block_q4_0, block_q8_0, RLXC_QK)
RLXC_DEFINE_SCALAR_MAT(q8_0, block_q8_0, block_q8_0, RLXC_QK)

/* ---- norms ---- */

void rlxc_rmsnorm_scalar(float *y, const float *x, const float *w, float w_offset, float eps, int n) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = w ? x[i] * r * (w_offset + w[i]) : x[i] * r;
}

void rlxc_layernorm_scalar(float *y, const float *x, const float *w, const float *b, float eps, int n) {
    float mean = 0.0f, var = 0.0f;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= (float)n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const float r = 1.0f / sqrtf(var / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0f);
}

/* ---- RoPE, attention ---- */

void rlxc_rope_scalar(float *x, int n_heads, int head_dim, const float *cos, const float *sin, int n_pairs, int half) {
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        for (int k = 0; k < n_pairs; k++) {
            const float x1 = xh[k], x2 = xh[k + half];
            xh[k] = x1 * cos[k] - x2 * sin[k];
            xh[k + half] = x2 * cos[k] + x1 * sin[k];
        }
    }
}

/* attn_block over K/V rows of element type T, LOAD(x) turning one element into a float: one
 * query at a time, keys in order. */
#define DEFINE_ATTN_BLOCK_SCALAR(type, T, LOAD)                                                                  \
    void rlxc_attn_block_##type##_scalar(float *o, float *m, float *l, const float *q, int nq, const void *kp,   \
                                         const void *vp, int n, int hd, const int *lo, const int *hi, float scale, \
                                         float softcap, float *s) {                                              \
        const T *k = kp, *v = vp;                                                                                \
        for (int r = 0; r < nq; r++) {                                                                           \
            const float *qr = q + (size_t)r * hd;                                                                \
            float *or = o + (size_t)r * hd, max = -INFINITY, sum = 0.0f;                                          \
            for (int j = lo[r]; j < hi[r]; j++) {                                                                \
                float dot = 0.0f;                                                                                \
                for (int d = 0; d < hd; d++) dot += qr[d] * LOAD(k[(size_t)j * hd + d]);                          \
                s[j] = scale * dot;                                                                              \
                if (softcap > 0.0f) s[j] = softcap * tanhf(s[j] / softcap);                                      \
                max = s[j] > max ? s[j] : max;                                                                   \
            }                                                                                                    \
            for (int d = 0; d < hd; d++) or[d] = 0.0f;                                                           \
            for (int j = lo[r]; j < hi[r]; j++) {                                                                \
                const float p = expf(s[j] - max);                                                                \
                sum += p;                                                                                        \
                for (int d = 0; d < hd; d++) or[d] += p * LOAD(v[(size_t)j * hd + d]);                            \
            }                                                                                                    \
            m[r] = max;                                                                                          \
            l[r] = sum;                                                                                          \
        }                                                                                                        \
    }
#define LOAD_F32(x) (x)
DEFINE_ATTN_BLOCK_SCALAR(f32, float, LOAD_F32)
DEFINE_ATTN_BLOCK_SCALAR(f16, rlxc_fp16, rlxc_fp16_to_f32)
DEFINE_ATTN_BLOCK_SCALAR(bf16, rlxc_bf16, rlxc_bf16_to_f32)

/* ---- elementwise ---- */

void rlxc_silu_scalar(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

void rlxc_gelu_tanh_scalar(float *y, const float *x, int n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + tanhf(c * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}

void rlxc_mul_scalar(float *y, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] = a[i] * b[i];
}

void rlxc_add_scalar(float *y, const float *a, int n) {
    for (int i = 0; i < n; i++) y[i] += a[i];
}

void rlxc_scale_scalar(float *y, float s, int n) {
    for (int i = 0; i < n; i++) y[i] *= s;
}

void rlxc_softcap_scalar(float *y, float cap, int n) {
    for (int i = 0; i < n; i++) y[i] = cap * tanhf(y[i] / cap);
}

const rlxc_kernels rlxc_kernels_scalar =
    RLXC_KERNEL_TABLE("scalar", scalar, scalar, scalar, scalar, scalar, scalar, scalar, scalar,
                      scalar, scalar, scalar);

/* ---- per-thread scratch (kernels.h) ---- */

typedef struct {
    void *p;
    size_t cap;
} thread_scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
    thread_scratch *s = v;
    free(s->p);
    free(s);
}

static void scratch_key_create(void) { pthread_key_create(&scratch_key, scratch_free); }

void rlxc_q8_terms_compute(int32_t *sum, float *d, const block_q8_0 *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int s = 0;
        for (int j = 0; j < RLXC_QK; j++) s += x[i].qs[j];
        sum[i] = s;
        d[i] = rlxc_fp16_to_f32(x[i].d);
    }
}

void *rlxc_thread_scratch(size_t bytes) {
    pthread_once(&scratch_once, scratch_key_create);
    thread_scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->cap < bytes) {
        const size_t cap = (bytes + bytes / 4 + 63) / 64 * 64; /* some room: sizes vary by matrix */
        void *p = aligned_alloc(64, cap);
        if (!p) return NULL;
        free(s->p);
        s->p = p, s->cap = cap;
    }
    return s->p;
}
