/* Every kernel of an ISA table against the scalar reference, on random shapes with tails.
 *
 *   test_kernels [--big] [scalar|avx2|avx512|neon]...   (default: every ISA this CPU and build run)
 *
 * --big runs only the index tests of test_big: products of a row or token index with a row
 * length or ldy past 2^31 (tens of GiB of address space, seconds; not for valgrind).
 *
 * RLXC_TEST_SEED=n in the environment changes the random data (default: a fixed seed).
 *
 * Tolerances. quantize_row_q8_0 and quantize_row_q8_k must be bit-identical. Everything else
 * is compared per output element as |got - ref| / S <= 1e-5, where S is the sum of the
 * magnitudes of the terms that make up that element, so a summation order differing from
 * the reference's is never penalised for cancellation:
 *   matvec / matmul of every weight type: S = sum_k |w_k| |x_k| over the dequantized weights
 *     and activations (the integer block dots are exact, only the float accumulation order
 *     may differ); for Q4_K |w_k| is |d sc q| + |dmin m|, its two terms;
 *   rope: |x1 cos| + |x2 sin|; layernorm: (|x| + mean(|x|)) / std * |w| + |b|; gelu: |x| (the
 *     two terms 0.5x and 0.5x tanh(u)); attention: sum_j p_j |v_j|; the rest: |ref|.
 *   The norms may in addition differ by the reference's own rounding error (test_norms).
 * Outputs are written into buffers with sentinels around them (and ldy > N for GEMMs), so
 * a store out of bounds fails the test; inputs are malloc'ed at their exact sizes so that
 * valgrind sees any read past a tail.
 *
 * Portable C: the ISA-specific code is reached only through the kernel tables. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../csrc/kernels.h"

#define TOL 1e-5
#define GUARD 16               /* sentinel floats on each side of every output */
#define SENTINEL 12345.678f

/* ---- random numbers (deterministic: splitmix64) ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rng_u64() >> 40) / 16777216.0f; }

static void fill(float *x, int n, float lo, float hi) {
    for (int i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

/* ---- result bookkeeping ---- */

typedef struct {
    const char *name;
    int cases, failures;
    double max_err;
    char first_failure[160];
} result;

static void fail(result *r, const char *fmt, ...) {
    if (!r->failures) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->first_failure, sizeof r->first_failure, fmt, ap);
        va_end(ap);
    }
    r->failures++;
}

/* Compares n outputs; s0..s2 name the case in the first failure message. slack (or NULL)
 * is extra absolute error allowed per element: the reference's own rounding error where a
 * long float reduction makes it exceed TOL (see test_norms). */
static void compare_slack(result *r, const float *got, const float *ref, const float *scale, const float *slack, int n,
                          int s0, int s1, int s2) {
    for (int i = 0; i < n; i++) {
        double err;
        if (isnan(got[i]) || isnan(ref[i])) err = isnan(got[i]) && isnan(ref[i]) ? 0.0 : INFINITY;
        else if (got[i] == ref[i]) err = 0.0;
        else err = fmax(fabs((double)got[i] - ref[i]) - (slack ? slack[i] : 0.0), 0.0) / fmax(scale[i], 1e-30);
        if (err > r->max_err) r->max_err = err;
        if (!(err <= TOL)) {
            fail(r, "shape (%d, %d, %d): error %.3g", s0, s1, s2, err);
            return;
        }
    }
}

static void compare(result *r, const float *got, const float *ref, const float *scale, int n, int s0, int s1, int s2) {
    compare_slack(r, got, ref, scale, NULL, n, s0, s1, s2);
}

/* An output buffer of n floats with GUARD sentinels on both sides. */
static float *guarded(int n) {
    /* gcc 13 otherwise warns (-Walloc-size-larger-than) that a negative n would wrap the size */
    if (n < 0) { fprintf(stderr, "guarded(%d)\n", n); exit(2); }
    float *p = xmalloc((size_t)(n + 2 * GUARD) * sizeof(float));
    for (int i = 0; i < n + 2 * GUARD; i++) p[i] = SENTINEL;
    return p + GUARD;
}

static void check_guards(result *r, float *p, int n, int s0, int s1, int s2) {
    for (int i = 1; i <= GUARD; i++)
        if (p[-i] != SENTINEL || p[n - 1 + i] != SENTINEL) {
            fail(r, "shape (%d, %d, %d): wrote outside the output", s0, s1, s2);
            return;
        }
}

static void free_guarded(float *p) { free(p - GUARD); }

/* ---- matrix kernels: every weight type ---- */

enum { ACT_F32, ACT_Q8_0, ACT_Q8_K }; /* what a weight type's kernels take as activations */
enum { W_F32, W_Q4_0, W_Q8_0, W_Q5_0, W_Q4_1, W_Q5_1, W_IQ4_NL, W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_IQ4_XS, W_Q6_K, W_F16, W_BF16,
       N_WKINDS };

static const struct {
    const char *matvec, *matmul;
    rlxc_wtype type; /* its kernels: table->wt[type] */
    int qk;          /* weights per block; 1 for plain floats */
    size_t bytes;    /* bytes per block */
    int act;
    int scale_at[2]; /* byte offsets of the fp16 scales (-1: none), kept finite in random data */
} wkinds[N_WKINDS] = {
    [W_F32] = {"matvec_f32", "matmul_f32", RLXC_F32, 1, sizeof(float), ACT_F32, {-1, -1}},
    [W_Q4_0] = {"matvec_q4_0", "matmul_q4_0", RLXC_Q4_0, RLXC_QK, sizeof(block_q4_0), ACT_Q8_0, {0, -1}},
    [W_Q8_0] = {"matvec_q8_0", "matmul_q8_0", RLXC_Q8_0, RLXC_QK, sizeof(block_q8_0), ACT_Q8_0, {0, -1}},
    [W_Q5_0] = {"matvec_q5_0", "matmul_q5_0", RLXC_Q5_0, RLXC_QK, sizeof(block_q5_0), ACT_Q8_0, {0, -1}},
    [W_Q4_1] = {"matvec_q4_1", "matmul_q4_1", RLXC_Q4_1, RLXC_QK, sizeof(block_q4_1), ACT_Q8_0, {0, 2}},
    [W_Q5_1] = {"matvec_q5_1", "matmul_q5_1", RLXC_Q5_1, RLXC_QK, sizeof(block_q5_1), ACT_Q8_0, {0, 2}},
    [W_Q2_K] = {"matvec_q2_k", "matmul_q2_k", RLXC_Q2_K, RLXC_QK_K, sizeof(block_q2_k), ACT_Q8_K,
                {offsetof(block_q2_k, d), offsetof(block_q2_k, dmin)}},
    [W_Q3_K] = {"matvec_q3_k", "matmul_q3_k", RLXC_Q3_K, RLXC_QK_K, sizeof(block_q3_k), ACT_Q8_K,
                {offsetof(block_q3_k, d), -1}},
    [W_Q4_K] = {"matvec_q4_k", "matmul_q4_k", RLXC_Q4_K, RLXC_QK_K, sizeof(block_q4_k), ACT_Q8_K, {0, 2}},
    [W_Q5_K] = {"matvec_q5_k", "matmul_q5_k", RLXC_Q5_K, RLXC_QK_K, sizeof(block_q5_k), ACT_Q8_K, {0, 2}},
    [W_IQ4_NL] = {"matvec_iq4_nl", "matmul_iq4_nl", RLXC_IQ4_NL, RLXC_QK, sizeof(block_iq4_nl), ACT_Q8_0, {0, -1}},
    [W_IQ4_XS] = {"matvec_iq4_xs", "matmul_iq4_xs", RLXC_IQ4_XS, RLXC_QK_K, sizeof(block_iq4_xs), ACT_Q8_K, {0, -1}},
    [W_Q6_K] = {"matvec_q6_k", "matmul_q6_k", RLXC_Q6_K, RLXC_QK_K, sizeof(block_q6_k), ACT_Q8_K,
                {offsetof(block_q6_k, d), -1}},
    [W_F16] = {"matvec_f16", "matmul_f16", RLXC_F16, 1, sizeof(rlxc_fp16), ACT_F32, {-1, -1}},
    [W_BF16] = {"matvec_bf16", "matmul_bf16", RLXC_BF16, 1, sizeof(rlxc_bf16), ACT_F32, {-1, -1}},
};

static rlxc_fp16 random_scale(void) {
    const float m = rng_uniform(1e-3f, 1.0f);
    return rlxc_f32_to_fp16(rng_u64() & 1 ? m : -m);
}

/* Quantized blocks are raw random bytes (every nibble, every int8 including -128, every
 * packed scale occurs) with finite block scales; float types are uniform in [-1, 1). */
static void random_weights(int kind, void *w, size_t n_blocks) {
    uint8_t *p = w;
    for (size_t i = 0; i < n_blocks; i++, p += wkinds[kind].bytes) {
        const float f = rng_uniform(-1, 1);
        const rlxc_fp16 h = rlxc_f32_to_fp16(f);
        const rlxc_bf16 bh = rlxc_f32_to_bf16(f);
        switch (kind) {
        case W_F32: memcpy(p, &f, sizeof f); break;
        case W_F16: memcpy(p, &h, sizeof h); break;
        case W_BF16: memcpy(p, &bh, sizeof bh); break;
        default:
            for (size_t j = 0; j < wkinds[kind].bytes; j++) p[j] = (uint8_t)rng_u64();
            for (int j = 0; j < 2; j++)
                if (wkinds[kind].scale_at[j] >= 0) {
                    const rlxc_fp16 d = random_scale();
                    memcpy(p + wkinds[kind].scale_at[j], &d, sizeof d);
                }
        }
    }
}

static void dequantize_row(int kind, float *y, const void *w, int K) {
    switch (kind) {
    case W_F32: memcpy(y, w, (size_t)K * sizeof(float)); break;
    case W_F16: rlxc_dequantize_row_f16(y, w, K); break;
    case W_BF16: rlxc_dequantize_row_bf16(y, w, K); break;
    default: rlxc_kernels_scalar.wt[wkinds[kind].type].dequantize(y, w, K); /* the block types */
    }
}

/* Copy of a row with the fp16 scale at byte offset `at` of every block zeroed. */
static void *zero_scale(int kind, const void *row, int K, int at) {
    const size_t nb = (size_t)K / wkinds[kind].qk, bytes = nb * wkinds[kind].bytes;
    uint8_t *c = xmalloc(bytes);
    memcpy(c, row, bytes);
    for (size_t b = 0; b < nb; b++) memset(c + b * wkinds[kind].bytes + at, 0, sizeof(rlxc_fp16));
    return c;
}

/* |term| of each weight of a row. Q4_K weights are d * sc * q - dmin * m, Q4_1 / Q5_1 ones
 * d * q + m: two terms (the two fp16 scales) that can cancel, so their magnitudes add
 * (dequantizing copies with the second scale 0 and with the first 0). */
static void weight_terms(int kind, float *wabs, const void *row, int K) {
    dequantize_row(kind, wabs, row, K);
    if (wkinds[kind].scale_at[1] >= 0) {
        void *c = zero_scale(kind, row, K, wkinds[kind].scale_at[1]);
        float *part = xmalloc((size_t)K * sizeof(float));
        dequantize_row(kind, wabs, c, K);
        free(c);
        c = zero_scale(kind, row, K, wkinds[kind].scale_at[0]);
        dequantize_row(kind, part, c, K);
        for (int i = 0; i < K; i++) wabs[i] = fabsf(wabs[i]) + fabsf(part[i]);
        free(c), free(part);
    }
    for (int i = 0; i < K; i++) wabs[i] = fabsf(wabs[i]);
}

/* T activation rows in the format the kernels take, and their dequantized values. Block
 * magnitudes vary, and every fifth 32-block is zero. */
static void *random_activations(int act, float *xd, int T, int K) {
    float *x = xmalloc((size_t)T * K * sizeof(float));
    for (int i = 0; i < T * K; i += RLXC_QK) {
        const int n = T * K - i < RLXC_QK ? T * K - i : RLXC_QK;
        const float m = (i / RLXC_QK % 5 == 4) ? 0.0f : powf(10.0f, rng_uniform(-2.0f, 2.0f));
        fill(x + i, n, -m, m);
    }
    if (act == ACT_F32) {
        memcpy(xd, x, (size_t)T * K * sizeof(float));
        return x;
    }
    void *q;
    if (act == ACT_Q8_0) {
        block_q8_0 *b = q = xmalloc((size_t)T * K / RLXC_QK * sizeof(block_q8_0));
        rlxc_kernels_scalar.wt[RLXC_Q8_0].quantize_x(b, x, T * K);
        dequantize_row(W_Q8_0, xd, b, T * K); /* Q8_0 activations are Q8_0 weight rows */
    } else {
        block_q8_k *b = q = xmalloc((size_t)T * K / RLXC_QK_K * sizeof(block_q8_k));
        rlxc_kernels_scalar.wt[RLXC_Q4_K].quantize_x(b, x, T * K);
        for (int i = 0; i < T * K; i++) xd[i] = b[i / RLXC_QK_K].d * b[i / RLXC_QK_K].qs[i % RLXC_QK_K];
    }
    free(x);
    return q;
}

/* y (ldy) = W x through table k's matvec (T == 1 only) or matmul. */
static void call_mat(const rlxc_kernels *k, int kind, int matmul, float *y, int ldy, const void *w, const void *x,
                     int N, int K, int T) {
    const rlxc_wtype_kernels *kw = &k->wt[wkinds[kind].type];
    if (matmul) kw->matmul(y, ldy, w, x, N, K, T);
    else kw->matvec(y, w, x, N, K);
}

/* scale[t * ldy + n] = sum_k |w_nk| |x_tk| (wabs: the weight terms), 1 between rows. */
static void product_scales(float *scale, int ldy, const float *wabs, const float *xd, int N, int K, int T) {
    for (int i = 0; i < T * ldy; i++) scale[i] = 1.0f;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int j = 0; j < K; j++) s += (double)wabs[(size_t)n * K + j] * fabsf(xd[(size_t)t * K + j]);
            scale[t * ldy + n] = (float)s;
        }
}

static void mat_case(result *rv, result *rm, const rlxc_kernels *k, int kind, int N, int K, int T) {
    const int ldy = N + 3, ny = T * ldy;
    const size_t row_blocks = (size_t)K / wkinds[kind].qk;
    void *w = xmalloc((size_t)N * row_blocks * wkinds[kind].bytes);
    float *wabs = xmalloc((size_t)N * K * sizeof(float)), *xd = xmalloc((size_t)T * K * sizeof(float));
    random_weights(kind, w, (size_t)N * row_blocks);
    void *x = random_activations(wkinds[kind].act, xd, T, K);
    for (int n = 0; n < N; n++) weight_terms(kind, wabs + (size_t)n * K, (const uint8_t *)w + n * row_blocks * wkinds[kind].bytes, K);
    float *ref = guarded(ny), *got = guarded(ny), *scale = xmalloc((size_t)ny * sizeof(float));
    product_scales(scale, ldy, wabs, xd, N, K, T);

    call_mat(&rlxc_kernels_scalar, kind, 1, ref, ldy, w, x, N, K, T);
    call_mat(k, kind, 1, got, ldy, w, x, N, K, T);
    rm->cases++;
    compare(rm, got, ref, scale, ny, N, K, T);
    check_guards(rm, got, ny, N, K, T);
    if (T == 1) {
        for (int i = 0; i < ny; i++) got[i] = SENTINEL;
        call_mat(k, kind, 0, got, ldy, w, x, N, K, T);
        rv->cases++;
        compare(rv, got, ref, scale, N, N, K, T);
        check_guards(rv, got, N, N, K, T);
    }
    free_guarded(ref);
    free_guarded(got);
    free(scale), free(w), free(x), free(wabs), free(xd);
}

#define LEN(a) ((int)(sizeof(a) / sizeof *(a)))

/* Rows around every tile size and remainder, tokens around the GEMM tiles and chunks, and K
 * with odd and even block counts (plain-float types: any K). */
static void test_mat(result *out, const rlxc_kernels *k) {
    static const int Ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 67};
    static const int Ts[] = {1, 2, 3, 4, 7, 32, 65, 130};
    static const int nb32[] = {1, 2, 3, 5, 8, 9, 33}, nb256[] = {1, 2, 3}, Kf[] = {1, 3, 8, 9, 16, 31, 33, 100, 257};
    for (int kind = 0; kind < N_WKINDS; kind++) {
        result *rv = out + 2 * kind, *rm = rv + 1;
        rv->name = wkinds[kind].matvec, rm->name = wkinds[kind].matmul;
        const int qk = wkinds[kind].qk;
        const int *Ks = qk == 1 ? Kf : qk == RLXC_QK ? nb32 : nb256;
        const int nK = qk == 1 ? LEN(Kf) : qk == RLXC_QK ? LEN(nb32) : LEN(nb256);
        for (int a = 0; a < LEN(Ns); a++)
            for (int b = 0; b < nK; b++)
                for (int c = 0; c < LEN(Ts); c++) mat_case(rv, rm, k, kind, Ns[a], Ks[b] * qk, Ts[c]);
        mat_case(rv, rm, k, kind, 130, 4096, 1); /* decode-sized rows */
        mat_case(rv, rm, k, kind, 200, 4096, 70); /* interleaved GEMMs: several row panels, the last partial */
    }
}

/* The products on repacked Q4_0 / Q8_0 / Q4_K (matvec_x16 / matmul_x16, where the table has them)
 * against the scalar products on the GGUF rows: bit-identical for the scalar twin, within TOL for
 * SIMD; and (where a table has matmul_x16) each token's outputs of it bit-identical with
 * matvec_x16 (the engine's prefill == decode and its thread-count independence rest on it).
 * Block counts pass the kernels' RLXC_X16_CHUNK-block chunk, token counts the GEMM tiles. The packed buffer
 * is malloc'ed at its size and offset from 64-byte (Q4_K: 16-byte) alignment, so reads past it
 * and aligned-load assumptions both fail. Every row's blocks come back byte for byte from the
 * packed copy (rlxc_x16_row_blocks). */
static void x16_case(result *r, const rlxc_kernels *k, int kind, int G, int nb, int T) {
    const rlxc_wtype type = wkinds[kind].type;
    const rlxc_wtype_kernels *kw = &k->wt[type];
    const int N = G * RLXC_PACK_ROWS, K = nb * wkinds[kind].qk, ldy = N + 3, ny = T * ldy;
    const size_t row_bytes = (size_t)nb * wkinds[kind].bytes, packed = rlxc_x16_bytes(type, N, K);
    const size_t x_bytes = rlxc_x16_x_bytes(type, K);
    /* Q4_K's kernels take aligned loads: its copies are 64-byte aligned (the engine's), the others must not need it */
    const size_t skew = type == RLXC_Q4_K ? 64 : 16;
    uint8_t *wbuf = skew == 64 ? aligned_alloc(64, packed + 64) : xmalloc(packed + 16), *wp = wbuf + skew;
    uint8_t *w = xmalloc((size_t)N * row_bytes);
    uint8_t *back = xmalloc(row_bytes);
    float *wabs = xmalloc((size_t)N * K * sizeof(float)), *xd = xmalloc((size_t)T * K * sizeof(float));
    float *ref = guarded(ny), *got = guarded(ny), *one = guarded(N), *scale = xmalloc((size_t)ny * sizeof(float));
    random_weights(kind, w, (size_t)N * nb);
    rlxc_pack_x16(type, wp, w, N, K);
    for (int n = 0; n < N && T == 1; n++) {
        rlxc_x16_row_blocks(type, back, wp + (size_t)(n / RLXC_PACK_ROWS) * rlxc_x16_type_group_bytes(type, K),
                            n % RLXC_PACK_ROWS, 0, nb);
        if (memcmp(back, w + (size_t)n * row_bytes, row_bytes)) {
            fail(r, "G %d K %d: row %d does not come back from the packed copy", G, K, n);
            break;
        }
    }
    uint8_t *x = random_activations(wkinds[kind].act, xd, T, K);
    for (int n = 0; n < N; n++) weight_terms(kind, wabs + (size_t)n * K, w + n * row_bytes, K);
    product_scales(scale, ldy, wabs, xd, N, K, T);
    rlxc_kernels_scalar.wt[type].matmul(ref, ldy, w, x, N, K, T);
    if (T == 1) kw->matvec_x16(got, wp, x, G, K);
    else kw->matmul_x16(got, ldy, wp, x, NULL, G, K, T);
    r->cases++;
    if (T > 1 && type != RLXC_Q4_K) { /* with the terms the engine computes once per stage: the same bits */
        const size_t n = (size_t)T * nb;
        int32_t *sum = xmalloc(n * sizeof(int32_t));
        float *d = xmalloc(n * sizeof(float)), *with = guarded(ny);
        rlxc_q8_terms_compute(sum, d, (const block_q8_0 *)x, n);
        kw->matmul_x16(with, ldy, wp, x, &(rlxc_q8_terms){sum, d}, G, K, T);
        check_guards(r, with, ny, G, K, T);
        for (int t = 0; t < T; t++)
            if (memcmp(with + t * ldy, got + t * ldy, (size_t)N * sizeof(float))) {
                fail(r, "G %d K %d T %d: token %d of matmul_x16 differs with the stage's terms", G, K, T, t);
                r->max_err = INFINITY;
            }
        free(sum), free(d), free_guarded(with);
    }
    if (k == &rlxc_kernels_scalar)
        for (int t = 0; t < T; t++)
            if (memcmp(got + t * ldy, ref + t * ldy, (size_t)N * sizeof(float))) {
                fail(r, "G %d K %d T %d: the scalar twin differs from the GGUF-layout product", G, K, T);
                r->max_err = INFINITY;
            }
    compare(r, got, ref, scale, ny, G, K, T);
    check_guards(r, got, ny, G, K, T);
    for (int t = 0; t < T; t++) {
        kw->matvec_x16(one, wp, x + (size_t)t * x_bytes, G, K);
        check_guards(r, one, N, G, K, t);
        if (memcmp(one, got + t * ldy, (size_t)N * sizeof(float))) {
            fail(r, "G %d K %d T %d: token %d of matmul_x16 differs from matvec_x16", G, K, T, t);
            r->max_err = INFINITY;
        }
    }
    free(w), free(wbuf), free(back), free(wabs), free(xd), free(x), free(scale);
    free_guarded(ref), free_guarded(got), free_guarded(one);
}

static void test_x16(result *r, const rlxc_kernels *k, int kind) {
    static const int Gs[] = {1, 2, 3, 5, 9}, nbs[] = {1, 2, 3, 5, 9, 33, 256, 257, 300, 1024, 1025}, Ts[] = {2, 3, 7, 8, 9, 33, 70};
    const rlxc_wtype_kernels *kw = &k->wt[wkinds[kind].type];
    r->name = kind == W_Q4_0 ? "matvec/matmul_q4_0x16" : kind == W_Q8_0 ? "matvec/matmul_q8_0x16" : "matvec/matmul_q4_kx16";
    if (!kw->matvec_x16) return;
#if defined(__x86_64__)
    const int variants = 2; /* the decode kernels' vendor variants, both on any CPU */
#else
    const int variants = 1;
#endif
    for (int v = 0; v < variants; v++) {
#if defined(__x86_64__)
        rlxc_x16_set_intel_tuned(v);
#endif
        for (int a = 0; a < LEN(Gs); a++)
            for (int b = 0; b < LEN(nbs); b++)
                if (kind != W_Q4_K || nbs[b] < 257 || a == 0) x16_case(r, k, kind, Gs[a], nbs[b], 1);
        if (kw->matmul_x16) /* NEON: decode only */
            for (int a = 0; a < LEN(Gs); a++)
                for (int c = 0; c < LEN(Ts); c++)
                    x16_case(r, k, kind, Gs[a], kind == W_Q4_K ? (a % 2 ? 3 : 17) : a % 2 ? 9 : 130, Ts[c]);
    }
#if defined(__x86_64__)
    rlxc_x16_set_intel_tuned(-1);
#endif
}

/* ---- dequantization (the f32-activation path): bit-identical ---- */

static void test_dequantize(result *r, const rlxc_kernels *k) {
    r->name = "dequantize_*";
    for (int kind = W_Q4_0; kind <= W_Q6_K; kind++)
        for (int nb = 1; nb <= 9; nb++) {
            const int K = nb * wkinds[kind].qk;
            void *w = xmalloc((size_t)nb * wkinds[kind].bytes);
            float *got = guarded(K), *ref = xmalloc((size_t)K * sizeof(float));
            random_weights(kind, w, (size_t)nb);
            dequantize_row(kind, ref, w, K);
            k->wt[wkinds[kind].type].dequantize(got, w, K);
            r->cases++;
            if (memcmp(got, ref, (size_t)K * sizeof(float))) {
                fail(r, "%s K %d: not bit-identical", wkinds[kind].matvec + 7, K);
                r->max_err = INFINITY;
            }
            check_guards(r, got, K, kind, K, 0);
            free(w), free(ref), free_guarded(got);
        }
}

/* Block types x float activations (decode of the f32-activation path) against the scalar
 * twins, within TOL of the sum of |w x| terms. */
static void test_matvec_fx(result *r, const rlxc_kernels *k) {
    static const int Ns[] = {1, 2, 3, 5, 16, 17};
    r->name = "matvec_fx_*";
    for (int kind = W_Q4_0; kind <= W_Q6_K; kind++)
        for (int a = 0; a < LEN(Ns); a++)
            for (int nb = 1; nb <= (wkinds[kind].qk == RLXC_QK ? 70 : 9); nb += 3) {
                const int N = Ns[a], K = nb * wkinds[kind].qk;
                const size_t row_bytes = (size_t)nb * wkinds[kind].bytes;
                uint8_t *w = xmalloc((size_t)N * row_bytes);
                float *x = xmalloc((size_t)K * sizeof(float)), *wabs = xmalloc((size_t)K * sizeof(float));
                float *ref = guarded(N), *got = guarded(N), *scale = xmalloc((size_t)N * sizeof(float));
                random_weights(kind, w, (size_t)N * nb);
                fill(x, K, -3.0f, 3.0f);
                for (int n = 0; n < N; n++) {
                    weight_terms(kind, wabs, w + n * row_bytes, K);
                    double s = 0.0;
                    for (int j = 0; j < K; j++) s += (double)wabs[j] * fabsf(x[j]);
                    scale[n] = (float)s;
                }
                rlxc_kernels_scalar.wt[wkinds[kind].type].matvec_fx(ref, w, x, N, K);
                k->wt[wkinds[kind].type].matvec_fx(got, w, x, N, K);
                r->cases++;
                compare(r, got, ref, scale, N, kind, N, K);
                check_guards(r, got, N, kind, N, K);
                free(w), free(x), free(wabs), free(scale), free_guarded(ref), free_guarded(got);
            }
}

/* ---- activation quantization: bit-identical ---- */

/* nb blocks of size bytes, block b generated as kind b % kinds: the first one not bit-identical
 * with the reference fails r. */
static void compare_blocks(result *r, const void *got, const void *ref, size_t size, int nb, int K, int kinds) {
    r->cases++;
    for (int b = 0; b < nb; b++)
        if (memcmp((const char *)got + b * size, (const char *)ref + b * size, size)) {
            fail(r, "K %d block %d (kind %d): not bit-identical", K, b, b % kinds);
            r->max_err = INFINITY;
            return;
        }
}

static void test_quantize(result *r, const rlxc_kernels *k) {
    r->name = "quantize_row_q8_0";
    for (int nb = 1; nb <= 40; nb++) {
        const int K = nb * RLXC_QK;
        float *x = xmalloc((size_t)K * sizeof(float));
        for (int b = 0; b < nb; b++) {
            float *xb = x + b * RLXC_QK;
            switch (b % 6) {
            case 0: /* amax 127 -> d = 1: exact .5 ties must round away from zero */
                for (int j = 0; j < RLXC_QK; j++) xb[j] = (float)((int)(rng_u64() % 254) - 127) + (rng_u64() & 1 ? 0.5f : 0.0f);
                xb[0] = 127.0f;
                break;
            case 1: fill(xb, RLXC_QK, 0, 0); break;                      /* d = 0 */
            case 2: fill(xb, RLXC_QK, -3e-6f, 3e-6f); break;             /* fp16 subnormal d */
            case 3: fill(xb, RLXC_QK, -1e7f, 1e7f); break;               /* d overflows fp16 */
            default: {
                const float m = powf(10.0f, rng_uniform(-3.0f, 3.0f));
                fill(xb, RLXC_QK, -m, m);
            }
            }
        }
        block_q8_0 *ref = xmalloc((size_t)nb * sizeof(block_q8_0)), *got = xmalloc((size_t)nb * sizeof(block_q8_0));
        memset(got, 0x5a, (size_t)nb * sizeof(block_q8_0));
        rlxc_kernels_scalar.wt[RLXC_Q8_0].quantize_x(ref, x, K); /* Q8_0 activations: those of Q8_0 weights */
        k->wt[RLXC_Q8_0].quantize_x(got, x, K);
        compare_blocks(r, got, ref, sizeof(block_q8_0), nb, K, 6);
        free(x), free(ref), free(got);
    }
}

static void test_quantize_k(result *r, const rlxc_kernels *k) {
    r->name = "quantize_row_q8_k";
    for (int nb = 1; nb <= 8; nb++) {
        const int K = nb * RLXC_QK_K;
        float *x = xmalloc((size_t)K * sizeof(float));
        for (int b = 0; b < nb; b++) {
            float *xb = x + b * RLXC_QK_K;
            switch (b % 4) {
            case 0: /* max -127 -> scale 1: exact .5 ties must round to even */
                for (int j = 0; j < RLXC_QK_K; j++) xb[j] = (float)((int)(rng_u64() % 252) - 126) + (rng_u64() & 1 ? 0.5f : 0.0f);
                xb[7] = -127.0f;
                break;
            case 1: fill(xb, RLXC_QK_K, 0, 0); break; /* all zero */
            case 2: /* largest magnitude twice, with both signs: the first one sets the sign */
                fill(xb, RLXC_QK_K, -1, 1);
                xb[3] = 5.0f, xb[100] = -5.0f;
                break;
            default: {
                const float m = powf(10.0f, rng_uniform(-3.0f, 3.0f));
                fill(xb, RLXC_QK_K, -m, m);
            }
            }
        }
        block_q8_k *ref = xmalloc((size_t)nb * sizeof(block_q8_k)), *got = xmalloc((size_t)nb * sizeof(block_q8_k));
        memset(got, 0x5a, (size_t)nb * sizeof(block_q8_k));
        rlxc_kernels_scalar.wt[RLXC_Q4_K].quantize_x(ref, x, K); /* Q8_K activations: those of the K-quants */
        k->wt[RLXC_Q4_K].quantize_x(got, x, K);
        compare_blocks(r, got, ref, sizeof(block_q8_k), nb, K, 4);
        free(x), free(ref), free(got);
    }
}

/* ---- norms ---- */

static const int vec_n[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000, 2051};

/* The reference sums n squares (and, for layernorm, n values) in one float accumulator in
 * index order: for n in the thousands its relative error reaches 1e-5 by itself. So each
 * norm may differ from the reference by the reference's own error against a double
 * evaluation, plus TOL. */
static void test_norms(result *out, const rlxc_kernels *k) {
    result *rr = out, *rl = out + 1;
    rr->name = "rmsnorm", rl->name = "layernorm";
    for (int a = 0; a < LEN(vec_n); a++)
        for (int variant = 0; variant < 4; variant++) {
            const int n = vec_n[a];
            float *x = xmalloc(n * sizeof(float)), *w = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float));
            float *ref = guarded(n), *got = guarded(n), *scale = xmalloc(n * sizeof(float)), *slack = xmalloc(n * sizeof(float));
            fill(x, n, -3, 3);
            fill(w, n, -2, 2);
            fill(b, n, -1, 1);
            x[0] += 10.0f; /* a non-zero mean for layernorm */

            const float *wn = variant & 1 ? NULL : w, off = variant & 2 ? 1.0f : 0.0f;
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
            const double rms_r = 1.0 / sqrt(ss / n + 1e-6);
            rlxc_kernels_scalar.rmsnorm(ref, x, wn, off, 1e-6f, n);
            k->rmsnorm(got, x, wn, off, 1e-6f, n);
            for (int i = 0; i < n; i++) {
                scale[i] = fabsf(ref[i]);
                slack[i] = (float)fabs(ref[i] - x[i] * rms_r * (wn ? off + (double)wn[i] : 1.0));
            }
            rr->cases++;
            compare_slack(rr, got, ref, scale, slack, n, n, variant, 0);
            check_guards(rr, got, n, n, variant, 0);

            const float *bn = variant & 1 ? NULL : b;
            double mean = 0, mean_abs = 0, var = 0;
            for (int i = 0; i < n; i++) mean += x[i], mean_abs += fabsf(x[i]);
            mean /= n, mean_abs /= n;
            for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
            const double rstd = 1.0 / sqrt(var / n + 1e-5);
            rlxc_kernels_scalar.layernorm(ref, x, w, bn, 1e-5f, n);
            k->layernorm(got, x, w, bn, 1e-5f, n);
            for (int i = 0; i < n; i++) {
                scale[i] = (float)((fabs(x[i]) + mean_abs) * rstd * fabs(w[i]) + (bn ? fabs(bn[i]) : 0));
                slack[i] = (float)fabs(ref[i] - ((x[i] - mean) * rstd * w[i] + (bn ? bn[i] : 0)));
            }
            rl->cases++;
            compare_slack(rl, got, ref, scale, slack, n, n, variant, 0);
            check_guards(rl, got, n, n, variant, 0);
            free_guarded(ref);
            free_guarded(got);
            free(x), free(w), free(b), free(scale), free(slack);
        }
}

/* ---- RoPE ---- */

static void test_rope(result *r, const rlxc_kernels *k) {
    /* {head_dim, n_pairs, half}: prefix (n_pairs == half) and proportional (half = hd / 2) */
    static const int shapes[][3] = {{64, 32, 32}, {64, 16, 32}, {128, 64, 64}, {128, 8, 64}, {80, 16, 16},
                                    {33, 16, 16}, {33, 5, 16}, {7, 3, 3}, {2, 1, 1}, {256, 32, 128},
                                    {256, 128, 128}, {96, 12, 48}, {17, 8, 8}, {40, 9, 20}};
    static const int heads[] = {1, 3, 8};
    r->name = "rope";
    for (int a = 0; a < LEN(shapes); a++)
        for (int h = 0; h < LEN(heads); h++) {
            const int hd = shapes[a][0], np = shapes[a][1], half = shapes[a][2], nh = heads[h], n = nh * hd;
            float *c = xmalloc(np * sizeof(float)), *s = xmalloc(np * sizeof(float)), *x0 = xmalloc(n * sizeof(float));
            float *ref = guarded(n), *got = guarded(n), *scale = xmalloc(n * sizeof(float));
            for (int i = 0; i < np; i++) {
                const float th = rng_uniform(-100, 100);
                c[i] = cosf(th), s[i] = sinf(th);
            }
            fill(x0, n, -2, 2);
            for (int i = 0; i < n; i++) scale[i] = fabsf(x0[i]);
            for (int hh = 0; hh < nh; hh++)
                for (int i = 0; i < np; i++) {
                    const float x1 = x0[hh * hd + i], x2 = x0[hh * hd + i + half];
                    scale[hh * hd + i] = fabsf(x1 * c[i]) + fabsf(x2 * s[i]);
                    scale[hh * hd + i + half] = fabsf(x2 * c[i]) + fabsf(x1 * s[i]);
                }
            memcpy(ref, x0, n * sizeof(float));
            memcpy(got, x0, n * sizeof(float));
            rlxc_kernels_scalar.rope(ref, nh, hd, c, s, np, half);
            k->rope(got, nh, hd, c, s, np, half);
            r->cases++;
            compare(r, got, ref, scale, n, hd, np, nh);
            check_guards(r, got, n, hd, np, nh);
            free_guarded(ref);
            free_guarded(got);
            free(c), free(s), free(x0), free(scale);
        }
}

/* ---- attention ---- */

/* x[0..n) stored as type t into y, and x replaced by the stored values. */
static void round_rows(rlxc_wtype t, void *y, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (t == RLXC_F16) ((rlxc_fp16 *)y)[i] = rlxc_f32_to_fp16(x[i]), x[i] = rlxc_fp16_to_f32(((rlxc_fp16 *)y)[i]);
        else if (t == RLXC_BF16) ((rlxc_bf16 *)y)[i] = rlxc_f32_to_bf16(x[i]), x[i] = rlxc_bf16_to_f32(((rlxc_bf16 *)y)[i]);
        else ((float *)y)[i] = x[i];
    }
}

/* attn_block of each row type against the scalar twin: r[0] f32, r[1] f16, r[2] bf16. Random
 * query ranges [lo, hi) (empty ones too) over 1-70 keys, 1-9 queries (whole tiles of 4 and
 * tails), head_dim with and without tails of 8 / 16. Beside the tolerance: each query's bits
 * are the same computed alone, in a call with more keys after its range, or with other
 * queries (the property prefill == decode rests on), and the scalar f16 / bf16 kernels equal
 * the scalar f32 kernel on the rounded rows bit for bit. */
static void test_attn_block(result *r, const rlxc_kernels *k) {
    static const int hds[] = {1, 7, 8, 16, 24, 33, 64, 80, 256};
    static const int nks[] = {1, 2, 3, 4, 5, 9, 17, 64, 70};
    static const int nqs[] = {1, 3, 4, 5, 8, 9};
    static const rlxc_wtype types[] = {RLXC_F32, RLXC_F16, RLXC_BF16};
    r[0].name = "attn_block_f32";
    r[1].name = "attn_block_f16";
    r[2].name = "attn_block_bf16";
    for (int a = 0; a < LEN(hds); a++)
        for (int b = 0; b < LEN(nks); b++)
            for (int c = 0; c < LEN(nqs); c++) {
                const int hd = hds[a], n = nks[b], nq = nqs[c], cap = (a + b + c) % 2, extra = 3;
                const size_t nr = (size_t)(n + extra) * hd; /* rows past n: keys nobody sees */
                const float softcap = cap ? 5.0f : 0.0f, scale = 3.0f / sqrtf((float)hd);
                float *q = xmalloc((size_t)nq * hd * sizeof(float)), *kf = xmalloc(nr * sizeof(float));
                float *vf = xmalloc(nr * sizeof(float)), *s = xmalloc((size_t)nq * (n + extra) * sizeof(float));
                void *kt = xmalloc(nr * sizeof(float)), *vt = xmalloc(nr * sizeof(float));
                float *ref = guarded(nq * (hd + 2)), *got = guarded(nq * (hd + 2)), *one = xmalloc((hd + 2) * sizeof(float));
                float *sc = xmalloc((size_t)nq * (hd + 2) * sizeof(float));
                int *lo = xmalloc(nq * sizeof(int)), *hi = xmalloc(nq * sizeof(int));
                fill(q, nq * hd, -1, 1);
                for (int i = 0; i < nq; i++) {
                    lo[i] = (int)(rng_u64() % (n + 1));
                    hi[i] = i % 5 == 4 ? lo[i] : lo[i] + (int)(rng_u64() % (n - lo[i] + 1));
                }
                for (int ti = 0; ti < LEN(types); ti++) {
                    const rlxc_wtype t = types[ti];
                    const rlxc_attn_block_fn ks[] = {k->attn_block_f32, k->attn_block_f16, k->attn_block_bf16};
                    const rlxc_attn_block_fn refs[] = {rlxc_kernels_scalar.attn_block_f32,
                                                       rlxc_kernels_scalar.attn_block_f16,
                                                       rlxc_kernels_scalar.attn_block_bf16};
                    fill(kf, (int)nr, -1, 1);
                    fill(vf, (int)nr, -2, 2);
                    round_rows(t, kt, kf, nr); /* kf, vf: the rounded values */
                    round_rows(t, vt, vf, nr);
                    float *ro = ref, *rm = ref + (size_t)nq * hd, *rl = rm + nq;
                    float *go = got, *gm = got + (size_t)nq * hd, *gl = gm + nq;
                    refs[ti](ro, rm, rl, q, nq, kt, vt, n, hd, lo, hi, scale, softcap, s);
                    if (t != RLXC_F32) {
                        rlxc_kernels_scalar.attn_block_f32(go, gm, gl, q, nq, kf, vf, n, hd, lo, hi, scale, softcap, s);
                        if (memcmp(go, ro, (size_t)nq * (hd + 2) * sizeof(float)))
                            fail(&r[ti], "scalar %s != scalar f32 on the rounded rows, hd %d n %d", r[ti].name, hd, n);
                    }
                    ks[ti](go, gm, gl, q, nq, kt, vt, n, hd, lo, hi, scale, softcap, s);
                    for (int i = 0; i < nq; i++) { /* o and l relative to l * max |v|, m to the scores' size */
                        for (int d = 0; d < hd; d++) sc[(size_t)i * hd + d] = 2.0f * (rl[i] > 1.0f ? rl[i] : 1.0f);
                        sc[(size_t)nq * hd + i] = 3.0f * sqrtf((float)hd) * scale + 1.0f;
                        sc[(size_t)nq * hd + nq + i] = rl[i] > 1.0f ? rl[i] : 1.0f;
                    }
                    r[ti].cases++;
                    compare(&r[ti], got, ref, sc, nq * (hd + 2), hd, n, nq);
                    check_guards(&r[ti], got, nq * (hd + 2), hd, n, nq);
                    for (int i = 0; i < nq; i++) { /* query i alone, with keys past its block */
                        ks[ti](one, one + hd, one + hd + 1, q + (size_t)i * hd, 1, kt, vt, n + extra, hd, lo + i, hi + i,
                               scale, softcap, s);
                        if (memcmp(one, go + (size_t)i * hd, hd * sizeof(float)) || memcmp(one + hd, gm + i, sizeof(float)) ||
                            memcmp(one + hd + 1, gl + i, sizeof(float))) {
                            fail(&r[ti], "query %d of (%d, %d, %d) alone differs from its bits among %d queries", i, hd, n,
                                 nq, nq);
                            break;
                        }
                    }
                }
                free_guarded(ref);
                free_guarded(got);
                free(q), free(kf), free(vf), free(s), free(kt), free(vt), free(one), free(sc), free(lo), free(hi);
            }
}

/* ---- element-wise ---- */

static void test_elementwise(result *out, const rlxc_kernels *k) {
    static const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 1e4f, -1e4f, 88.0f, -88.0f, 20.0f, -20.0f};
    const char *names[] = {"silu", "gelu_tanh", "mul", "add", "scale", "softcap"};
    for (int f = 0; f < 6; f++) out[f].name = names[f];
    for (int a = 0; a < LEN(vec_n); a++) {
        const int n = vec_n[a];
        float *x = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float)), *sc = xmalloc(n * sizeof(float));
        float *ref = guarded(n), *got = guarded(n);
        fill(x, n, -20, 20);
        fill(b, n, -3, 3);
        for (int i = 0; i < n && i < LEN(specials); i++) x[(i * 7) % n] = specials[i];
        for (int f = 0; f < 6; f++) {
            memcpy(ref, x, n * sizeof(float));
            memcpy(got, x, n * sizeof(float));
            switch (f) {
            case 0: rlxc_kernels_scalar.silu(ref, x, n), k->silu(got, x, n); break;
            case 1: rlxc_kernels_scalar.gelu_tanh(ref, x, n), k->gelu_tanh(got, x, n); break;
            case 2: rlxc_kernels_scalar.mul(ref, x, b, n), k->mul(got, x, b, n); break;
            case 3: rlxc_kernels_scalar.add(ref, b, n), k->add(got, b, n); break;
            case 4: rlxc_kernels_scalar.scale(ref, 0.37f, n), k->scale(got, 0.37f, n); break;
            case 5: rlxc_kernels_scalar.softcap(ref, 30.0f, n), k->softcap(got, 30.0f, n); break;
            }
            for (int i = 0; i < n; i++) sc[i] = f == 1 ? fabsf(x[i]) : fabsf(ref[i]);
            out[f].cases++;
            compare(out + f, got, ref, sc, n, n, 0, 0);
            check_guards(out + f, got, n, n, 0, 0);
            for (int i = 0; i < n; i++)
                if (isnan(got[i])) { fail(out + f, "n %d: NaN at %d for x = %g", n, i, x[i]); break; }
        }
        free_guarded(ref);
        free_guarded(got);
        free(x), free(b), free(sc);
    }
}

/* ---- driver helpers ---- */

/* The table of isa, or NULL after printing why this machine skips it. */
static const rlxc_kernels *table_or_skip(const char *isa) {
    char err[256];
    if (rlxc_kernels_select(isa, err, sizeof err)) {
        printf("%-8s SKIP  %s\n", isa, err);
        return NULL;
    }
    return rlxc_kernels_active();
}

/* One line per result that ran any case; returns how many failed. */
static int report(const rlxc_kernels *k, const result *res, int n) {
    int bad = 0;
    for (const result *r = res; r < res + n; r++) {
        if (!r->cases) continue;
        printf("%-8s %-18s %s  max err %.2e  (%d cases)%s%s\n", k->isa, r->name, r->failures ? "FAIL" : "PASS",
               r->max_err, r->cases, r->failures ? "  first: " : "", r->failures ? r->first_failure : "");
        bad += r->failures != 0;
    }
    return bad;
}

/* ---- indices past 2^31 (--big) ----
 * A tile's element offsets (row r * K, token t * K, t * ldy) exceed INT_MAX long before the
 * operands stop fitting in memory. The operands here are MAP_NORESERVE mappings: pages never
 * written cost nothing, and pages only read map the kernel's shared zero page (its 2 MiB one
 * where transparent huge pages are on), so a 16 GiB row costs a pass over cached zeros. A few
 * elements are set so that every output is a known integer that a wrong offset would change
 * (or a crash would stop). */

static void *reserve(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "cannot reserve %zu bytes of address space\n", bytes);
        exit(2);
    }
    madvise(p, bytes, MADV_HUGEPAGE); /* 512 times fewer read faults (THP set to madvise) */
    return p;
}

/* Element i of a plain-float weight type (f32, f16, bf16) set to v. */
static void set_float_weight(int kind, void *w, size_t i, float v) {
    if (kind == W_F32) ((float *)w)[i] = v;
    else if (kind == W_F16) ((rlxc_fp16 *)w)[i] = rlxc_f32_to_fp16(v);
    else ((rlxc_bf16 *)w)[i] = rlxc_f32_to_bf16(v);
}

/* Output stores at t * ldy + n with ldy > 2^30: every weight type, T spanning every GEMM tile
 * (3-token tiles, 4- and 6-token interleaved ones and their leftovers). ldy only moves the
 * stores, so the rows must be bit-identical with the same kernel's at ldy = N, and each must
 * be followed by untouched zeros. */
static void big_ldy(result *r, const rlxc_kernels *k, int kind) {
    enum { N = 37, T = 13 };
    const int K = 2 * (wkinds[kind].qk == 1 ? 32 : wkinds[kind].qk);
    const size_t ldy = ((size_t)1 << 30) + 5;
    const size_t row_blocks = (size_t)K / wkinds[kind].qk;
    void *w = xmalloc((size_t)N * row_blocks * wkinds[kind].bytes);
    float *xd = xmalloc((size_t)T * K * sizeof(float)), ref[T * N];
    random_weights(kind, w, (size_t)N * row_blocks);
    void *x = random_activations(wkinds[kind].act, xd, T, K);
    float *y = reserve(T * ldy * sizeof(float));
    call_mat(k, kind, 1, ref, N, w, x, N, K, T);
    call_mat(k, kind, 1, y, (int)ldy, w, x, N, K, T);
    r->cases++;
    static const float zeros[GUARD];
    for (int t = 0; t < T; t++) {
        const float *yt = y + (size_t)t * ldy;
        if (memcmp(yt, ref + t * N, sizeof(float) * N) || memcmp(yt + N, zeros, sizeof zeros)) {
            fail(r, "%s ldy %zu: token %d differs from ldy = N, or a store went past it", wkinds[kind].matmul, ldy, t);
            break;
        }
    }
    munmap(y, T * ldy * sizeof(float));
    free(w), free(x), free(xd);
}

/* Rows of K > 2^31 / 4 plain-float weights (row 3 starts past element 2^31), and for T = 3
 * tokens K > 2^30 activations (token 2 starts past it): y[t][n] = (t + 1) (n + 1) (1 + 10),
 * from two nonzero products per dot, one in the vector body and one in the tail. */
static void big_rows(result *r, const rlxc_kernels *k, int kind, int T) {
    enum { N = 4 };
    const size_t K = T == 1 ? ((size_t)1 << 31) / 3 + 1 : ((size_t)1 << 30) + 1;
    void *w = reserve(N * K * wkinds[kind].bytes);
    float *x = reserve(T * K * sizeof(float)), y[N * 3];
    for (int n = 0; n < N; n++) {
        set_float_weight(kind, w, n * K + K - 1, (float)(n + 1));
        set_float_weight(kind, w, n * K + K - 40, (float)(n + 1));
    }
    for (int t = 0; t < T; t++) x[t * K + K - 1] = (float)(t + 1), x[t * K + K - 40] = 10.0f * (float)(t + 1);
    call_mat(k, kind, T > 1, y, N, w, x, N, (int)K, T);
    r->cases++;
    for (int i = 0; i < N * T; i++)
        if (y[i] != 11.0f * (float)(i / N + 1) * (float)(i % N + 1)) {
            fail(r, "%s K %zu T %d: y[%d][%d] = %g", T > 1 ? wkinds[kind].matmul : wkinds[kind].matvec, K, T, i / N,
                 i % N, y[i]);
            break;
        }
    munmap(w, N * K * wkinds[kind].bytes);
    munmap(x, T * K * sizeof(float));
}

/* Q5_0 / Q8_0 GEMMs of 8 tokens (AVX-512's interleaved GEMM, whose packs gather 16 rows at
 * byte offsets r * row_bytes) with rows of more than 2^31 / 15 bytes: each row's last block
 * holds quant v_n = n % 7 + 1 at element 0 with scale 1, each token's last block t + 1 there,
 * so y[t][n] = v_n (t + 1). The activations are reserved zeros too (a zero Q8_0 block is
 * zero bytes). Q4_0 is left out: AVX2's interleaved GEMM would copy a whole 8-row tile of such
 * rows (2.3 GiB); its AVX-512 pack gathers with the same functions as these two. */
static void big_blocks(result *r, const rlxc_kernels *k, int kind) {
    enum { N = 16, T = 8 };
    const size_t bytes = wkinds[kind].bytes, nb = ((size_t)1 << 31) / 15 / bytes + 1, row_bytes = nb * bytes;
    const rlxc_fp16 one = rlxc_f32_to_fp16(1.0f);
    uint8_t *w = reserve(N * row_bytes);
    block_q8_0 *x = reserve(T * nb * sizeof(block_q8_0));
    float y[N * T];
    for (int n = 0; n < N; n++) {
        uint8_t *b = w + n * row_bytes + (nb - 1) * bytes;
        const int v = n % 7 + 1;
        memcpy(b, &one, sizeof one); /* d comes first in all three */
        if (kind == W_Q5_0) ((block_q5_0 *)b)->qs[0] = (uint8_t)v, ((block_q5_0 *)b)->qh[0] = 1; /* v + 16 - 16 */
        else ((block_q8_0 *)b)->qs[0] = (int8_t)v;
    }
    for (int t = 0; t < T; t++) x[t * nb + nb - 1].d = one, x[t * nb + nb - 1].qs[0] = (int8_t)(t + 1);
    call_mat(k, kind, 1, y, N, w, x, N, (int)(nb * wkinds[kind].qk), T);
    r->cases++;
    for (int i = 0; i < N * T; i++)
        if (y[i] != (float)(i % N % 7 + 1) * (float)(i / N + 1)) {
            fail(r, "%s K %zu: y[%d][%d] = %g", wkinds[kind].matmul, nb * wkinds[kind].qk, i / N, i % N, y[i]);
            break;
        }
    munmap(w, N * row_bytes);
    munmap(x, T * nb * sizeof(block_q8_0));
}

static int run_big(const char *isa) {
    const rlxc_kernels *k = table_or_skip(isa);
    if (!k) return 0;
    result res[4] = {{.name = "big ldy"}, {.name = "big K rows"}, {.name = "big K tokens"}, {.name = "big K blocks"}};
    for (int kind = 0; kind < N_WKINDS; kind++) {
        big_ldy(&res[0], k, kind);
        /* the scalar loops would take minutes over these rows; their offsets are those of
         * RLXC_DEFINE_SCALAR_MAT, which big_ldy runs */
        if (k == &rlxc_kernels_scalar) continue;
        if (wkinds[kind].qk == 1) big_rows(&res[1], k, kind, 1), big_rows(&res[2], k, kind, 3);
        if (kind == W_Q5_0 || kind == W_Q8_0) big_blocks(&res[3], k, kind);
    }
    return report(k, res, 4);
}

/* ---- driver ---- */

#define N_RESULTS (2 * N_WKINDS + 19)

static int run_isa_once(const char *isa) {
    const rlxc_kernels *k = table_or_skip(isa);
    if (!k) return 0;
    result res[N_RESULTS];
    memset(res, 0, sizeof res);
    result *r = res;
    test_mat(r, k), r += 2 * N_WKINDS;
    test_quantize(r++, k);
    test_quantize_k(r++, k);
    test_dequantize(r++, k);
    test_matvec_fx(r++, k);
    test_x16(r++, k, W_Q4_0);
    test_x16(r++, k, W_Q8_0);
    test_x16(r++, k, W_Q4_K);
    test_norms(r, k), r += 2;
    test_rope(r++, k);
    test_attn_block(r, k), r += 3;
    test_elementwise(r, k);
    return report(k, res, N_RESULTS);
}

/* AVX-512 twice where AMX is usable: its Q4_0 / Q5_0 / Q8_0 GEMMs without the tiles, then with. */
static int run_isa(const char *isa) {
#if defined(__x86_64__)
    if (!strcmp(isa, "avx512")) {
        rlxc_amx_set_enabled(0);
        int bad = run_isa_once(isa);
        if (rlxc_amx_set_enabled(1)) {
            printf("avx512 again, the GEMMs on AMX tiles:\n");
            bad += run_isa_once(isa);
        } else
            printf("(AMX not usable here: the avx512 GEMMs ran on AVX-512 alone)\n");
        rlxc_amx_set_enabled(-1);
        return bad;
    }
#endif
    return run_isa_once(isa);
}

int main(int argc, char **argv) {
    static const char *all[] = {"scalar", "avx2", "avx512", "neon"};
    int bad = 0, a = 1;
    const int big = argc > 1 && !strcmp(argv[1], "--big");
    int (*run)(const char *) = big ? run_big : run_isa;
    a += big;
    if (getenv("RLXC_TEST_SEED")) rng_state = strtoull(getenv("RLXC_TEST_SEED"), NULL, 0);
    if (argc > a)
        for (int i = a; i < argc; i++) {
            char err[256];
            if (rlxc_kernels_select(argv[i], err, sizeof err)) {
                printf("%s\n", err);
                return 2;
            }
            bad += run(argv[i]);
        }
    else
        for (int i = 0; i < LEN(all); i++) bad += run(all[i]);
    printf(bad ? "FAILED: %d kernel(s)\n" : "all kernels passed\n", bad);
    return bad ? 1 : 0;
}
