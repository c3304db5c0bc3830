/* The one matrix product of the engine: any weight type, any T, rows of W split
 * across OpenMP threads in contiguous ranges. */
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kernels.h"
#include "rlxc.h"

/* Rows [n0, n1) of y = x W^T; x already quantized to xq for quantized weights. */
static void linear_rows(float *y, const rlxc_weight *w, const float *x, const block_q8_0 *xq, int T, int n0,
                        int n1) {
    const rlxc_kernels *kn = rlxc_kernels_active();
    const int N = w->rows, K = w->cols, n = n1 - n0;
    if (n <= 0) return;
    float *yo = y + n0;
    const void *wo = (const char *)w->data + (size_t)n0 * rlxc_wtype_row_bytes(w->type, K);
    switch (w->type) {
    case RLXC_F32:
        if (T == 1) kn->matvec_f32(yo, wo, x, n, K);
        else kn->matmul_f32(yo, N, wo, x, n, K, T);
        break;
    case RLXC_Q4_0:
        if (T == 1) kn->matvec_q4_0(yo, wo, xq, n, K);
        else kn->matmul_q4_0(yo, N, wo, xq, n, K, T);
        break;
    case RLXC_Q8_0:
        if (T == 1) kn->matvec_q8_0(yo, wo, xq, n, K);
        else kn->matmul_q8_0(yo, N, wo, xq, n, K, T);
        break;
    }
}

void rlxc_linear(float *y, const rlxc_weight *w, const float *x, int T, int n_threads, void *xq_scratch) {
    block_q8_0 *xq = xq_scratch;
    const rlxc_kernels *kn = rlxc_kernels_active();
    const int N = w->rows, K = w->cols, nb = K / RLXC_QK;
    if (w->type != RLXC_F32)
        for (int t = 0; t < T; t++) kn->quantize_row_q8_0(xq + (size_t)t * nb, x + (size_t)t * K, K);
    const int nth = rlxc_threads_usable(n_threads < N ? n_threads : 1);
    if (nth == 1) {
        linear_rows(y, w, x, xq, T, 0, N);
        return;
    }
#pragma omp parallel num_threads(nth)
    {
#ifdef _OPENMP
        const int ith = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int ith = 0, nt = 1;
#endif
        /* contiguous row ranges, multiples of 16 so SIMD row tiles stay whole */
        const int chunk = ((N + nt - 1) / nt + 15) / 16 * 16;
        const int n0 = ith * chunk < N ? ith * chunk : N;
        const int n1 = n0 + chunk < N ? n0 + chunk : N;
        linear_rows(y, w, x, xq, T, n0, n1);
    }
}

