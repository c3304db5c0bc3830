/* Kernel throughput: Q4_0 (or -w: Q8_0, Q4_K) matvec GB/s of weights from in-cache sizes to 4x
 * the last-level cache, on the GGUF layout and on the repacked 16-row groups decode uses where
 * the ISA has a kernel for them (matvec_x16), next to the read bandwidth of a plain streaming
 * sum over the same bytes, and GEMM GFLOP/s at N = K = 4096 (GGUF layout, and repacked).
 *
 *   bench_kernels [-w q4_0|q8_0|q4_k] [-k row length] [-t threads] [-s seconds] [-r rounds] [isa ...]
 *   (default: every ISA the CPU runs)
 *
 * With -t > 1 (OpenMP) the rows are split the way the engine splits them: each thread calls
 * the kernel on one contiguous row range, with w and y offset. Portable C; the ISA code is
 * reached only through the kernel tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../csrc/kernels.h"
#include "bench_util.h"

static int n_threads = 1, rounds = 5;
static rlxc_wtype wtype = RLXC_Q4_0;
static int row_len = 4096;
static double min_seconds = 0.3;

static size_t llc_bytes(void) {
    for (int idx = 4; idx >= 0; idx--) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t v = 0;
        char unit = 0;
        if (fgets(buf, sizeof buf, f) && sscanf(buf, "%zu%c", &v, &unit) >= 1) {
            fclose(f);
            return v * (unit == 'K' ? 1024 : unit == 'M' ? 1 << 20 : 1);
        }
        fclose(f);
    }
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? (size_t)v : 32u << 20;
}

/* Seconds per call of fn(arg), the best of a few batches lasting min_seconds in all. */
static double time_per_call(void (*fn)(void *), void *arg) {
    fn(arg); /* warm up: page faults, caches */
    double best = 1e30, spent = 0;
    int reps = 1;
    while (spent < min_seconds) {
        const double t0 = now();
        for (int i = 0; i < reps; i++) fn(arg);
        const double dt = now() - t0;
        spent += dt;
        if (dt / reps < best) best = dt / reps;
        if (dt < min_seconds / 8) reps *= 2;
    }
    return best;
}

/* ---- streaming read: the bandwidth roofline the matvec is compared with ---- */

typedef struct {
    const uint64_t *p;
    size_t n;
    volatile uint64_t sink;
} stream_arg;

static void stream_sum(void *a_) {
    stream_arg *a = a_;
    uint64_t total = 0;
#pragma omp parallel for num_threads(n_threads) reduction(+ : total)
    for (int th = 0; th < n_threads; th++) {
        const size_t lo = a->n * th / n_threads, hi = a->n * (th + 1) / n_threads;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = lo; i + 4 <= hi; i += 4) s0 += a->p[i], s1 += a->p[i + 1], s2 += a->p[i + 2], s3 += a->p[i + 3];
        total += s0 + s1 + s2 + s3;
    }
    a->sink = total;
}

/* ---- matvec / GEMM of wtype ---- */

typedef struct {
    const rlxc_kernels *k;
    const uint8_t *w;
    const uint8_t *wp; /* the same rows repacked (rlxc_pack_x16), or NULL */
    const void *xq;
    float *y;
    int N, K, T;
} mat_arg;

/* Rows split like the engine: thread i takes rows [N*i/n, N*(i+1)/n). */
static void w_matvec(void *a_) {
    mat_arg *a = a_;
    const size_t row_bytes = rlxc_wtype_row_bytes(wtype, a->K);
#pragma omp parallel for num_threads(n_threads)
    for (int th = 0; th < n_threads; th++) {
        const int lo = (int)((long)a->N * th / n_threads), hi = (int)((long)a->N * (th + 1) / n_threads);
        a->k->wt[wtype].matvec(a->y + lo, a->w + (size_t)lo * row_bytes, a->xq, hi - lo, a->K);
    }
}

/* The same on the repacked rows (matvec_x16 for T = 1, else matmul_x16), whole 16-row groups per
 * thread (N is a multiple of 16). */
static void w_x16(void *a_) {
    mat_arg *a = a_;
    const int G = a->N / RLXC_PACK_ROWS;
    const size_t group_bytes = rlxc_x16_type_group_bytes(wtype, a->K);
    const rlxc_wtype_kernels *kw = &a->k->wt[wtype];
#pragma omp parallel for num_threads(n_threads)
    for (int th = 0; th < n_threads; th++) {
        const int lo = (int)((long)G * th / n_threads), hi = (int)((long)G * (th + 1) / n_threads);
        float *y = a->y + lo * RLXC_PACK_ROWS;
        const uint8_t *w = a->wp + (size_t)lo * group_bytes;
        if (a->T == 1) kw->matvec_x16(y, w, a->xq, hi - lo, a->K);
        else kw->matmul_x16(y, a->N, w, a->xq, NULL, hi - lo, a->K, a->T);
    }
}

static void w_matmul(void *a_) {
    mat_arg *a = a_;
    const size_t row_bytes = rlxc_wtype_row_bytes(wtype, a->K);
#pragma omp parallel for num_threads(n_threads)
    for (int th = 0; th < n_threads; th++) {
        const int lo = (int)((long)a->N * th / n_threads), hi = (int)((long)a->N * (th + 1) / n_threads);
        a->k->wt[wtype].matmul(a->y + lo, a->N, a->w + (size_t)lo * row_bytes, a->xq, hi - lo, a->K, a->T);
    }
}

/* Random blocks of wtype with sane fp16 scales (random bytes there could be inf/NaN): Q4_0's d,
 * Q4_K's d and dmin. */
static uint8_t *random_blocks(size_t n_blocks) {
    const size_t block_size = rlxc_wtype_row_bytes(wtype, rlxc_wtype_block_size(wtype));
    uint8_t *p = random_bytes(n_blocks * block_size, 88172645463325252ull);
    for (size_t i = 0; i < n_blocks; i++) {
        const rlxc_fp16 d = rlxc_f32_to_fp16(0.01f + (float)(i % 97) * 1e-4f);
        memcpy(p + i * block_size, &d, sizeof d);
        if (wtype == RLXC_Q4_K) memcpy(p + i * block_size + 2, &d, sizeof d);
    }
    return p;
}

/* T activation rows of K in the format wtype's products take. */
static void *random_activations(const rlxc_kernels *k, int K, int T) {
    float *x = malloc((size_t)K * T * sizeof(float));
    uint8_t *r = random_bytes((size_t)K * T, 7);
    for (size_t i = 0; i < (size_t)K * T; i++) x[i] = (float)r[i] / 128.0f - 1.0f;
    void *q = malloc((size_t)T * (K / k->wt[wtype].x_block) * k->wt[wtype].x_block_bytes);
    k->wt[wtype].quantize_x(q, x, K * T);
    free(x), free(r);
    return q;
}

static void bench_isa(const char *isa) {
    char err[256];
    if (rlxc_kernels_select(isa, err, sizeof err)) {
        printf("%s: skipped (%s)\n", isa, err);
        return;
    }
    const rlxc_kernels *k = rlxc_kernels_active();
    const size_t llc = llc_bytes();
    const int K = row_len, nb = K / rlxc_wtype_block_size(wtype);
    const size_t row_bytes = rlxc_wtype_row_bytes(wtype, K);
    const rlxc_wtype_kernels *kw = &k->wt[wtype];
    printf("\n[%s] %s, K = %d, %d thread(s), LLC %zu MiB\n", k->isa,
           wtype == RLXC_Q4_K ? "Q4_K" : wtype == RLXC_Q8_0 ? "Q8_0" : "Q4_0", K, n_threads, llc >> 20);
    printf("%-10s %8s %12s %12s %12s %7s %7s\n", "weights", "N x K", "matvec GB/s", "x16 GB/s", "stream GB/s",
           "ratio", "x16");

    void *xq = random_activations(k, K, 512);
    const size_t sizes_mib[] = {1, 4, 16, llc >> 20, 2 * (llc >> 20), 4 * (llc >> 20)};
    for (size_t s = 0; s < sizeof sizes_mib / sizeof *sizes_mib; s++) {
        const int N = (int)((sizes_mib[s] << 20) / row_bytes) / RLXC_PACK_ROWS * RLXC_PACK_ROWS;
        const size_t bytes = (size_t)N * row_bytes;
        mat_arg m = {k, random_blocks((size_t)N * nb), NULL, xq, malloc((size_t)N * sizeof(float)), N, K, 1};
        uint8_t *wp = kw->matvec_x16 ? aligned_alloc(64, rlxc_x16_bytes(wtype, N, K)) : NULL;
        if (wp) rlxc_pack_x16(wtype, wp, m.w, N, K);
        m.wp = wp;
        stream_arg st = {(const uint64_t *)m.w, bytes / 8, 0};
        /* the kernels and the stream take turns, so that the host's bandwidth, which varies by 2x
         * within minutes on a shared VM, is the same for all: medians of the rounds, and of the ratios */
        double mv[64], px[64], sr[64], ratio[64], ratio_x[64];
        for (int r = 0; r < rounds; r++) {
            const double t_mv = time_per_call(w_matvec, &m), t_st = time_per_call(stream_sum, &st);
            const double t_px = wp ? time_per_call(w_x16, &m) : 0.0;
            mv[r] = bytes / t_mv * 1e-9, sr[r] = bytes / t_st * 1e-9, ratio[r] = t_st / t_mv;
            px[r] = wp ? bytes / t_px * 1e-9 : 0.0, ratio_x[r] = wp ? t_st / t_px : 0.0;
        }
        printf("%6zu MiB %8d x %d %12.1f %12.1f %12.1f %7.2f %7.2f\n", sizes_mib[s], N, K, median(mv, rounds),
               median(px, rounds), median(sr, rounds), median(ratio, rounds), median(ratio_x, rounds));
        free((void *)m.w);
        free(wp);
        free(m.y);
    }

    const int N = 4096;
    mat_arg m = {k, random_blocks((size_t)N * nb), NULL, xq, malloc((size_t)N * 512 * sizeof(float)), N, K, 1};
    uint8_t *wp = kw->matmul_x16 ? aligned_alloc(64, rlxc_x16_bytes(wtype, N, K)) : NULL;
    if (wp) rlxc_pack_x16(wtype, wp, m.w, N, K);
    m.wp = wp;
    printf("%-10s %12s %12s\n", "GEMM T", "GFLOP/s", "x16 GFLOP/s (N = K = 4096)");
    const int Ts[] = {1, 2, 4, 8, 16, 32, 128, 512};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        m.T = Ts[i];
        const double t = time_per_call(w_matmul, &m), tx = wp ? time_per_call(w_x16, &m) : 0.0;
        printf("%-10d %12.1f %12.1f\n", m.T, 2.0 * N * K * m.T / t * 1e-9, wp ? 2.0 * N * K * m.T / tx * 1e-9 : 0.0);
    }
    free((void *)m.w);
    free(wp);
    free(m.y);
    free(xq);
}

int main(int argc, char **argv) {
    static const char *all[] = {"scalar", "avx2", "avx512", "neon"};
    const char *isas[8];
    int n_isas = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
            i++;
            wtype = !strcmp(argv[i], "q4_k") ? RLXC_Q4_K : !strcmp(argv[i], "q8_0") ? RLXC_Q8_0 : RLXC_Q4_0;
        } else if (!strcmp(argv[i], "-k") && i + 1 < argc) row_len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) min_seconds = atof(argv[++i]);
        else if (n_isas < 8) isas[n_isas++] = argv[i];
    }
    if (rounds < 1 || rounds > 64) rounds = 5;
#ifndef _OPENMP
    if (n_threads != 1) {
        fprintf(stderr, "built without OpenMP: -t ignored\n");
        n_threads = 1;
    }
#endif
    if (!n_isas)
        for (int i = 0; i < 4; i++) {
            char err[256];
            if (!rlxc_kernels_select(all[i], err, sizeof err) && strcmp(all[i], "scalar")) isas[n_isas++] = all[i];
        }
    for (int i = 0; i < n_isas; i++) bench_isa(isas[i]);
    return 0;
}
