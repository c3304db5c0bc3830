/* rlxc's Q4_0 GEMM against ggml's own GGML_OP_MUL_MAT on the same bytes: a Q4_0 weight of
 * N x K = 4096 x 4096 times T f32 activations, at the same thread count, through ggml's CPU
 * backend twice: with the weight in the CPU_REPACK buffer type (ggml repacks Q4_0 into its
 * 8-row interleaved layout when the bytes are set, and mul_mat takes its AVX-512 GEMM, what
 * llama.cpp does with the weights of a model it loads) and in the plain CPU buffer (tinyBLAS
 * or ggml's vec_dot loop). Both sides include quantizing the activations to Q8_0: rlxc on
 * one thread before the row-split GEMM, as csrc/linear.c does; ggml in its own op.
 *
 *   bench_ggml_gemm [-t threads] [-r reps] [-s seconds] [-i isa] [T ...]   (default T: 32 128 512)
 *
 * Each repetition times the three in turn (interleaved, so load from other jobs hits them
 * alike), each for at least -s seconds; medians over the repetitions are printed, with
 * GFLOP/s = 2 N K T / time and the largest difference of the outputs relative to max |y|.
 * Built and run by benchmarks/vs_ggml.py --gemm (headers and libs of llama_cpp_python). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include "../csrc/kernels.h"
#include "bench_util.h"

enum { N = 4096, K = 4096, NB = K / RLXC_QK, MAX_REPS = 64 };

static int n_threads = 1, reps = 7;
static double min_seconds = 0.2;

typedef struct {
    const rlxc_kernels *k;
    const block_q4_0 *w;
    const float *x;
    block_q8_0 *xq;
    float *y;
    int T;
    ggml_backend_t backend;
    struct ggml_cgraph *graph;
} run_arg;

/* What rlxc_linear does for a Q4_0 weight: quantize on the calling thread, then each thread
 * takes a contiguous range of rows, a multiple of 16. */
static void run_rlxc(run_arg *a) {
    for (int t = 0; t < a->T; t++) a->k->quantize_row_q8_0(a->xq + (size_t)t * NB, a->x + (size_t)t * K, K);
#pragma omp parallel num_threads(n_threads)
    {
        const int ith = omp_get_thread_num(), nt = omp_get_num_threads();
        const int chunk = ((N + nt - 1) / nt + 15) / 16 * 16;
        const int n0 = ith * chunk < N ? ith * chunk : N, n1 = n0 + chunk < N ? n0 + chunk : N;
        if (n1 > n0) a->k->matmul_q4_0(a->y + n0, N, a->w + (size_t)n0 * NB, a->xq, n1 - n0, K, a->T);
    }
}

static void run_ggml(run_arg *a) { ggml_backend_graph_compute(a->backend, a->graph); }

/* Seconds per call: calls repeated for at least min_seconds. */
static double per_call(void (*fn)(run_arg *), run_arg *a) {
    int calls = 0;
    const double t0 = now();
    double dt;
    do {
        fn(a);
        calls++;
    } while ((dt = now() - t0) < min_seconds);
    return dt / calls;
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* The CPU device's extra buffer type of that name (CPU_REPACK), or NULL. */
static ggml_backend_buffer_type_t extra_buft(ggml_backend_t backend, const char *name) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_dev_get_extra_bufts_t get =
        (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev),
                                                                               "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t *b = get ? get(dev) : NULL; b && *b; b++)
        if (!strcmp(ggml_backend_buft_name(*b), name)) return *b;
    return NULL;
}

/* A Q4_0 weight tensor in a buffer of type buft, holding the bytes w. */
static struct ggml_tensor *weight_in(ggml_backend_buffer_type_t buft, const void *w, struct ggml_context **ctx,
                                     ggml_backend_buffer_t *buf) {
    struct ggml_init_params p = {ggml_tensor_overhead(), NULL, true};
    *ctx = ggml_init(p);
    struct ggml_tensor *t = ggml_new_tensor_2d(*ctx, GGML_TYPE_Q4_0, K, N);
    *buf = ggml_backend_alloc_ctx_tensors_from_buft(*ctx, buft);
    ggml_backend_tensor_set(t, w, 0, ggml_nbytes(t)); /* CPU_REPACK repacks here */
    return t;
}

int main(int argc, char **argv) {
    const char *isa = "avx512";
    int Ts[16], n_T = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) min_seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) isa = argv[++i];
        else if (n_T < 16) Ts[n_T++] = atoi(argv[i]);
    }
    if (!n_T) Ts[0] = 32, Ts[1] = 128, Ts[2] = 512, n_T = 3;
    if (reps < 1 || reps > MAX_REPS) reps = 7;
    char err[256];
    if (rlxc_kernels_select(isa, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }

    /* the same Q4_0 bytes for both; sane fp16 scales (random bytes could be inf/NaN) */
    block_q4_0 *w = random_bytes((size_t)N * NB * sizeof(block_q4_0), 88172645463325252ull);
    for (size_t i = 0; i < (size_t)N * NB; i++) w[i].d = rlxc_f32_to_fp16(0.01f + (float)(i % 97) * 1e-4f);

    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, n_threads);
    ggml_backend_buffer_type_t repack = extra_buft(backend, "CPU_REPACK");
    struct ggml_context *wctx[2] = {0};
    ggml_backend_buffer_t wbuf[2] = {0};
    struct ggml_tensor *wt[2] = {weight_in(ggml_backend_cpu_buffer_type(), w, &wctx[0], &wbuf[0]),
                                 repack ? weight_in(repack, w, &wctx[1], &wbuf[1]) : NULL};
    if (!repack) printf("ggml has no CPU_REPACK buffer type: repacked column left out\n");

    printf("Q4_0 GEMM N = K = %d, %d thread(s), rlxc %s; medians of %d interleaved repetitions\n", K, n_threads,
           rlxc_kernels_active()->isa, reps);
    printf("%5s %10s %12s %12s %10s %10s  %s\n", "T", "rlxc", "ggml repack", "ggml plain", "vs repack", "vs plain",
           "max |diff| / max |y| (repack, plain)");
    for (int i = 0; i < n_T; i++) {
        const int T = Ts[i];
        float *x = random_bytes((size_t)T * K * sizeof(float), 1); /* filled below */
        for (size_t j = 0; j < (size_t)T * K; j++) x[j] = sinf(0.37f * (float)j) * (1.0f + (j % 61 == 0) * 10.0f);
        struct ggml_init_params p = {8 * ggml_tensor_overhead() + 2 * ggml_graph_overhead(), NULL, true};
        struct ggml_context *ctx = ggml_init(p);
        struct ggml_tensor *xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, T);
        struct ggml_tensor *yt[2] = {0};
        struct ggml_cgraph *g[2] = {0};
        for (int v = 0; v < 2; v++)
            if (wt[v]) {
                yt[v] = ggml_mul_mat(ctx, wt[v], xt);
                g[v] = ggml_new_graph(ctx);
                ggml_build_forward_expand(g[v], yt[v]);
            }
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
        ggml_backend_tensor_set(xt, x, 0, ggml_nbytes(xt));

        run_arg a = {rlxc_kernels_active(), w, x, malloc((size_t)T * NB * sizeof(block_q8_0)),
                     malloc((size_t)T * N * sizeof(float)), T, backend, NULL};
        double times[3][MAX_REPS];
        for (int r = 0; r < reps; r++) {
            times[0][r] = per_call(run_rlxc, &a);
            for (int v = 0; v < 2; v++) {
                a.graph = g[v];
                times[2 - v][r] = g[v] ? per_call(run_ggml, &a) : NAN;
            }
        }
        const double flop = 2.0 * N * K * T;
        double gf[3], diff[2] = {NAN, NAN};
        for (int v = 0; v < 3; v++) gf[v] = flop / median(times[v], reps) * 1e-9;
        float *yg = malloc((size_t)T * N * sizeof(float));
        for (int v = 0; v < 2; v++)
            if (yt[v]) {
                ggml_backend_tensor_get(yt[v], yg, 0, ggml_nbytes(yt[v])); /* [T][N], like rlxc's y */
                diff[1 - v] = rel_diff(a.y, yg, (size_t)T * N);
            }
        printf("%5d %10.1f %12.1f %12.1f %9.2fx %9.2fx  %.1e, %.1e\n", T, gf[0], gf[1], gf[2], gf[0] / gf[1],
               gf[0] / gf[2], diff[0], diff[1]);
        fflush(stdout);
        free(yg), free(a.xq), free(a.y), free(x);
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }
    for (int v = 0; v < 2; v++)
        if (wt[v]) ggml_backend_buffer_free(wbuf[v]), ggml_free(wctx[v]);
    ggml_backend_free(backend);
    free(w);
    return 0;
}
