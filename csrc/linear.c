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

/* The kernels of a weight type in the active table. */
static const rlxc_wtype_kernels *kernels_of(rlxc_wtype t) { return &rlxc_kernels_active()->wt[t]; }

int rlxc_wtype_runs(rlxc_wtype t) {
    if ((unsigned)t >= RLXC_WTYPE_IDS) return 0;
    const rlxc_wtype_kernels *k = kernels_of(t);
    return k->matvec && k->matmul;
}

/* Bytes of one token's activations as k's products take them (0: the float row itself). */
static size_t x_row_bytes(const rlxc_wtype_kernels *k, int K) {
    return k->quantize_x ? (size_t)(K / k->x_block) * k->x_block_bytes : 0;
}

size_t rlxc_linear_scratch_bytes(int cols, int T, int n_threads, rlxc_act act) {
    if (act == RLXC_ACT_Q8) { /* the widest activation blocks of any weight type */
        size_t most = 0;
        for (int t = 0; t < RLXC_WTYPE_IDS; t++) {
            const size_t b = x_row_bytes(kernels_of((rlxc_wtype)t), cols);
            most = b > most ? b : most;
        }
        return (size_t)T * most;
    }
    /* decode takes the fused matvecs, which need no scratch */
    return T > 1 ? (size_t)(n_threads > 1 ? n_threads : 1) * DQ_ROWS * (size_t)cols * sizeof(float) : 0;
}

/* Rows [n0, n1) of y = x W^T; xa is x itself for float activations, else x quantized. With
 * dequantize (block-quantized rows meeting float activations) decode takes the fused matvecs,
 * more tokens the f32 GEMM on rows dequantized DQ_ROWS at a time into dq. */
static void linear_rows(float *y, const rlxc_weight *w, const void *xa, int T, int n0, int n1, int dequantize,
                        float *dq) {
    const rlxc_wtype_kernels *k = kernels_of(w->type);
    const int N = w->rows, K = w->cols, n = n1 - n0;
    if (n <= 0) return;
    const size_t rb = rlxc_wtype_row_bytes(w->type, K);
    const void *wo = (const char *)w->data + (size_t)n0 * rb;
    if (dequantize && T == 1) {
        k->matvec_fx(y + n0, wo, xa, n, K);
    } else if (dequantize) {
        for (int r0 = n0; r0 < n1; r0 += DQ_ROWS) {
            const int r = n1 - r0 < DQ_ROWS ? n1 - r0 : DQ_ROWS;
            for (int i = 0; i < r; i++)
                k->dequantize(dq + (size_t)i * K, (const char *)w->data + (size_t)(r0 + i) * rb, K);
            kernels_of(RLXC_F32)->matmul(y + r0, N, dq, xa, r, K, T);
        }
    } else if (T == 1) {
        k->matvec(y + n0, wo, xa, n, K);
    } else {
        k->matmul(y + n0, N, wo, xa, n, K, T);
    }
}

void rlxc_linear(float *y, const rlxc_weight *w, const float *x, int T, int n_threads, void *scratch, rlxc_act act) {
    const rlxc_wtype_kernels *k = kernels_of(w->type);
    const int N = w->rows, K = w->cols;
    /* RLXC_ACT_Q8 quantizes x for the block types; RLXC_ACT_F32 dequantizes their rows instead */
    const int quantize = act == RLXC_ACT_Q8 && k->quantize_x, dequantize = act == RLXC_ACT_F32 && k->dequantize;
    const size_t xrow = x_row_bytes(k, K);
    for (int t = 0; t < T && quantize; t++) k->quantize_x((char *)scratch + (size_t)t * xrow, x + (size_t)t * K, K);
    const void *xa = quantize ? scratch : (const void *)x;
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
