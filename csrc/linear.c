/* The one matrix product of the engine: any weight type, any T, rows of W split
 * across OpenMP threads in contiguous ranges. */
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels.h"
#include "rlxc.h"

/* Rows the f32-activation path dequantizes at a time: one AVX-512 f32 panel, and a multiple
 * of what every f32 kernel tiles rows by. */
#define DQ_ROWS 48

/* The activation format a weight type's products take. */
typedef enum { ACT_FLOAT, ACT_Q8_0, ACT_Q8_K } act_format;

static act_format act_format_of(rlxc_wtype t, rlxc_act act) {
    if (act == RLXC_ACT_F32) return ACT_FLOAT;
    switch (t) {
    case RLXC_Q4_0: case RLXC_Q5_0: case RLXC_Q8_0: return ACT_Q8_0;
    case RLXC_Q4_K: case RLXC_Q6_K: return ACT_Q8_K;
    default: return ACT_FLOAT;
    }
}

/* Bytes of one token's quantized activations. */
static size_t act_row_bytes(act_format f, int K) {
    switch (f) {
    case ACT_Q8_0: return (size_t)(K / RLXC_QK) * sizeof(block_q8_0);
    case ACT_Q8_K: return (size_t)(K / RLXC_QK_K) * sizeof(block_q8_k);
    default: return 0;
    }
}

size_t rlxc_linear_scratch_bytes(int cols, int T, int n_threads, rlxc_act act) {
    const size_t a = act_row_bytes(ACT_Q8_0, cols), b = act_row_bytes(ACT_Q8_K, cols);
    if (act == RLXC_ACT_Q8) return (size_t)T * (a > b ? a : b);
    /* decode takes the fused matvecs, which need no scratch */
    return T > 1 ? (size_t)(n_threads > 1 ? n_threads : 1) * DQ_ROWS * (size_t)cols * sizeof(float) : 0;
}

/* Rows [n0, n0 + n) of a block-quantized W as floats, n <= DQ_ROWS. */
static void dequantize_rows(float *out, const rlxc_weight *w, int n0, int n) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const int K = w->cols;
    const size_t rb = rlxc_wtype_row_bytes(w->type, K);
    for (int i = 0; i < n; i++) {
        const void *row = (const char *)w->data + (size_t)(n0 + i) * rb;
        float *o = out + (size_t)i * K;
        switch (w->type) {
        case RLXC_Q4_0: kn->dequantize_q4_0(o, row, K); break;
        case RLXC_Q5_0: kn->dequantize_q5_0(o, row, K); break;
        case RLXC_Q8_0: kn->dequantize_q8_0(o, row, K); break;
        case RLXC_Q4_K: kn->dequantize_q4_k(o, row, K); break;
        case RLXC_Q6_K: kn->dequantize_q6_k(o, row, K); break;
        default: break; /* float types never come here */
        }
    }
}

/* Rows [n0, n1) of y = x W^T; xa is x itself for float activations, else x quantized. With
 * dequantize (block-quantized rows meeting float activations) decode takes the fused matvecs,
 * more tokens the f32 GEMM on rows dequantized DQ_ROWS at a time into dq. */
static void linear_rows(float *y, const rlxc_weight *w, const void *xa, int T, int n0, int n1, int dequantize,
                        float *dq) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const int N = w->rows, K = w->cols, n = n1 - n0;
    if (n <= 0) return;
    const void *wo = (const char *)w->data + (size_t)n0 * rlxc_wtype_row_bytes(w->type, K);
    if (dequantize && T == 1) {
        switch (w->type) {
        case RLXC_Q4_0: kn->matvec_fx_q4_0(y + n0, wo, xa, n, K); break;
        case RLXC_Q5_0: kn->matvec_fx_q5_0(y + n0, wo, xa, n, K); break;
        case RLXC_Q8_0: kn->matvec_fx_q8_0(y + n0, wo, xa, n, K); break;
        case RLXC_Q4_K: kn->matvec_fx_q4_k(y + n0, wo, xa, n, K); break;
        case RLXC_Q6_K: kn->matvec_fx_q6_k(y + n0, wo, xa, n, K); break;
        default: break;
        }
        return;
    }
    if (dequantize) {
        for (int r0 = n0; r0 < n1; r0 += DQ_ROWS) {
            const int r = n1 - r0 < DQ_ROWS ? n1 - r0 : DQ_ROWS;
            dequantize_rows(dq, w, r0, r);
            kn->matmul_f32(y + r0, N, dq, xa, r, K, T);
        }
        return;
    }
    float *yo = y + n0;
#define MAT(kind)                                            \
    if (T == 1) kn->matvec_##kind(yo, wo, xa, n, K);         \
    else kn->matmul_##kind(yo, N, wo, xa, n, K, T);          \
    break
    switch (w->type) {
    case RLXC_F32: MAT(f32);
    case RLXC_F16: MAT(f16);
    case RLXC_BF16: MAT(bf16);
    case RLXC_Q4_0: MAT(q4_0);
    case RLXC_Q5_0: MAT(q5_0);
    case RLXC_Q8_0: MAT(q8_0);
    case RLXC_Q4_K: MAT(q4_k);
    case RLXC_Q6_K: MAT(q6_k);
    }
#undef MAT
}

void rlxc_linear(float *y, const rlxc_weight *w, const float *x, int T, int n_threads, void *scratch, rlxc_act act) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const int N = w->rows, K = w->cols;
    const act_format f = act_format_of(w->type, act);
    const int dequantize = f == ACT_FLOAT && act_format_of(w->type, RLXC_ACT_Q8) != ACT_FLOAT;
    const size_t xrow = act_row_bytes(f, K);
    for (int t = 0; t < T && f != ACT_FLOAT; t++) {
        void *xq = (char *)scratch + (size_t)t * xrow;
        if (f == ACT_Q8_0) kn->quantize_row_q8_0(xq, x + (size_t)t * K, K);
        else kn->quantize_row_q8_k(xq, x + (size_t)t * K, K);
    }
    const void *xa = f == ACT_FLOAT ? (const void *)x : scratch;
    const int nth = rlxc_threads_usable(n_threads < N ? n_threads : N);
    if (nth == 1) {
        linear_rows(y, w, xa, T, 0, N, dequantize, scratch);
        return;
    }
#pragma omp parallel num_threads(nth)
    {
#ifdef _OPENMP
        const int ith = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int ith = 0, nt = 1;
#endif
        /* contiguous row ranges, multiples of 16 so that the 16-row SIMD tiles stay whole (the
         * AVX-512 GEMMs' 32- and 48-row tiles may end in a partial one per thread) */
        const size_t chunk = ((size_t)(N + nt - 1) / nt + 15) / 16 * 16, first = ith * chunk;
        const int n0 = first < (size_t)N ? (int)first : N;
        const int n1 = (size_t)(N - n0) > chunk ? n0 + (int)chunk : N;
        float *dq = dequantize && T > 1 ? (float *)scratch + (size_t)ith * DQ_ROWS * K : NULL;
        linear_rows(y, w, xa, T, n0, n1, dequantize, dq);
    }
}
