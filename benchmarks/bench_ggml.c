/* rlxc's Q5_0 / Q4_K / Q6_K matvec against llama.cpp's own dot products (ggml_vec_dot_*,
 * one row per call as ggml's mul_mat does for a single token), on the same weights and the
 * same quantized activations: GB/s of weights, one thread, for a cache-resident matrix (4 MiB)
 * and one beyond any cache (256 MiB), plus the largest difference between the two results.
 *
 *   bench_ggml LIBGGML_CPU_SO [-s seconds] [isa ...]
 *
 * Built and run by benchmarks/vs_ggml.py (libggml-cpu.so from the llama_cpp_python wheel). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../csrc/kernels.h"
#include "bench_util.h"

typedef void (*ggml_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);

static double min_seconds = 0.5;

/* Best seconds per call over repeated calls lasting min_seconds in all. */
static double best_time(void (*fn)(void *), void *arg) {
    fn(arg);
    double best = 1e30, spent = 0;
    while (spent < min_seconds) {
        const double t0 = now();
        fn(arg);
        const double dt = now() - t0;
        spent += dt;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    int kind; /* 0 q5_0, 1 q4_k, 2 q6_k */
    const rlxc_kernels *k;
    ggml_dot_fn dot;
    const uint8_t *w;
    const void *xq;
    size_t row_bytes;
    float *y;
    int N, K;
} case_arg;

static void run_rlxc(void *a_) {
    case_arg *a = a_;
    if (a->kind == 0) a->k->matvec_q5_0(a->y, (const block_q5_0 *)a->w, a->xq, a->N, a->K);
    else if (a->kind == 1) a->k->matvec_q4_k(a->y, (const block_q4_k *)a->w, a->xq, a->N, a->K);
    else a->k->matvec_q6_k(a->y, (const block_q6_k *)a->w, a->xq, a->N, a->K);
}

static void run_ggml(void *a_) {
    case_arg *a = a_;
    for (int n = 0; n < a->N; n++) a->dot(a->K, a->y + n, 0, a->w + (size_t)n * a->row_bytes, 0, a->xq, 0, 1);
}

/* Random blocks with fp16 scales in [1e-3, 1e-2] at the given byte offsets. */
static uint8_t *random_rows(size_t n_blocks, size_t block_bytes, const int *scale_at, int n_scales) {
    uint8_t *p = malloc(n_blocks * block_bytes);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n_blocks * block_bytes; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (uint8_t)s;
    }
    for (size_t i = 0; i < n_blocks; i++)
        for (int j = 0; j < n_scales; j++) {
            const rlxc_fp16 d = rlxc_f32_to_fp16(1e-3f + (float)(i % 97) * 1e-4f);
            memcpy(p + i * block_bytes + scale_at[j], &d, sizeof d);
        }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_ggml LIBGGML_CPU_SO [-s seconds] [isa ...]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    void (*cpu_init)(void) = (void (*)(void))dlsym(lib, "ggml_cpu_init");
    if (cpu_init) cpu_init(); /* fills ggml's fp16 table */
    const char *names[3] = {"q5_0", "q4_k", "q6_k"};
    const char *syms[3] = {"ggml_vec_dot_q5_0_q8_0", "ggml_vec_dot_q4_K_q8_K", "ggml_vec_dot_q6_K_q8_K"};
    const int qk[3] = {RLXC_QK, RLXC_QK_K, RLXC_QK_K};
    const size_t bytes[3] = {sizeof(block_q5_0), sizeof(block_q4_k), sizeof(block_q6_k)};
    const int scales[3][2] = {{0, 0}, {0, 2}, {208, 0}}, n_scales[3] = {1, 2, 1};
    const char *isas[8];
    int n_isas = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) min_seconds = atof(argv[++i]);
        else if (n_isas < 8) isas[n_isas++] = argv[i];
    }
    if (!n_isas) isas[n_isas++] = "avx2", isas[n_isas++] = "avx512";

    const int K = 4096;
    float *x = malloc(K * sizeof(float));
    for (int i = 0; i < K; i++) x[i] = sinf(0.37f * i) * (1.0f + (i % 64 == 0) * 20.0f);
    block_q8_0 *x8 = malloc(K / RLXC_QK * sizeof(block_q8_0));
    block_q8_k *xk = malloc(K / RLXC_QK_K * sizeof(block_q8_k));
    rlxc_quantize_row_q8_0(x8, x, K);
    rlxc_quantize_row_q8_k(xk, x, K);
    const size_t sizes[2] = {4u << 20, 256u << 20}; /* in L2/L3; beyond any cache */

    printf("one thread, K = %d; GB/s of weights (best of repeated calls)\n", K);
    printf("%-6s %9s %-8s %12s %12s %8s  %s\n", "type", "MiB", "isa", "rlxc GB/s", "ggml GB/s", "ratio", "max |diff| / max |y|");
    for (int kind = 0; kind < 3; kind++) {
        ggml_dot_fn dot = (ggml_dot_fn)dlsym(lib, syms[kind]);
        if (!dot) { printf("%s: %s not found\n", names[kind], syms[kind]); continue; }
        const size_t rb = (size_t)(K / qk[kind]) * bytes[kind];
        for (int s = 0; s < 2; s++) {
            const int N = (int)(sizes[s] / rb);
            uint8_t *w = random_rows((size_t)N * (K / qk[kind]), bytes[kind], scales[kind], n_scales[kind]);
            float *yr = malloc(N * sizeof(float)), *yg = malloc(N * sizeof(float));
            case_arg g = {kind, NULL, dot, w, kind ? (const void *)xk : (const void *)x8, rb, yg, N, K};
            const double tg = best_time(run_ggml, &g);
            for (int i = 0; i < n_isas; i++) {
                char err[256];
                if (rlxc_kernels_select(isas[i], err, sizeof err)) { printf("%s: %s\n", isas[i], err); continue; }
                case_arg r = g;
                r.k = rlxc_kernels_active();
                r.y = yr;
                const double tr = best_time(run_rlxc, &r);
                double diff = 0, ymax = 0;
                for (int n = 0; n < N; n++) {
                    diff = fmax(diff, fabs((double)yr[n] - yg[n]));
                    ymax = fmax(ymax, fabs((double)yg[n]));
                }
                const double gb = (double)N * rb * 1e-9;
                printf("%-6s %9zu %-8s %12.1f %12.1f %8.2f  %.1e\n", names[kind], sizes[s] >> 20, isas[i], gb / tr,
                       gb / tg, tg / tr, diff / ymax);
            }
            free(w), free(yr), free(yg);
        }
    }
    free(x), free(x8), free(xk);
    return 0;
}
