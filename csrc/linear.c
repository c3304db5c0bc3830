/* The matrix products of the engine: any weight type, any T, as stages of a thread team
 * (team.h). The activations of a stage are prepared once, quantized by the whole team to each
 * activation format its weights take; then each thread multiplies its own rows of every weight. */
#define _GNU_SOURCE /* madvise */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "engine.h"
#include "kernels.h"

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

/* Bytes of T quantized rows of K in every format slot. */
static size_t xin_bytes(int K, int T) {
    size_t most = 0; /* the widest activation blocks of any weight type, for each format slot */
    for (int t = 0; t < RLXC_WTYPE_IDS; t++) {
        const size_t b = x_row_bytes(kernels_of((rlxc_wtype)t), K);
        most = b > most ? b : most;
    }
    return RLXC_X_FORMATS * (size_t)T * most;
}

/* Where the Q8_0 terms of T > 1 rows begin in the scratch, and their bytes. */
static size_t q8_terms_at(int K, int T) { return (xin_bytes(K, T) + 63) / 64 * 64; }
static size_t q8_terms_bytes(int K, int T) {
    return T > 1 ? (size_t)T * (size_t)(K / RLXC_QK) * (sizeof(int32_t) + sizeof(float)) : 0;
}

size_t rlxc_xin_scratch_bytes(int K, int T, int n_threads) {
    const size_t shared = q8_terms_at(K, T) + q8_terms_bytes(K, T);
    const size_t own = (size_t)(n_threads > 1 ? n_threads : 1) * xin_bytes(K, 1);
    return T == 1 && own > shared ? own : shared;
}

size_t rlxc_dq_scratch_floats(int K, int T, rlxc_act act) {
    /* decode takes the fused matvecs, which need no scratch */
    return act == RLXC_ACT_F32 && T > 1 ? (size_t)DQ_ROWS * K : 0;
}

size_t rlxc_linear_scratch_bytes(int cols, int T, int n_threads, rlxc_act act) {
    return rlxc_xin_scratch_bytes(cols, T, n_threads) +
           (size_t)(n_threads > 1 ? n_threads : 1) * rlxc_dq_scratch_floats(cols, T, act) * sizeof(float);
}

void rlxc_xin_prepare(const rlxc_team *tm, rlxc_xin *in, const float *x, int T, int K,
                      const rlxc_weight *const *ws, int n, rlxc_act act, void *scratch) {
    memset(in, 0, sizeof *in);
    in->x = x, in->T = T, in->K = K, in->act = act;
    if (act != RLXC_ACT_Q8) return;
    /* One token: each thread quantizes the row into its own slots, which costs less than the
     * barrier a shared copy needs (decode's products then need no barrier before them). A slot's
     * place depends on K, so products of different widths need a barrier between them. */
    const int own = T == 1 && tm->nth > 1;
    const size_t slot_bytes = xin_bytes(K, T) / RLXC_X_FORMATS;
    if (own) scratch = (char *)scratch + (size_t)tm->ith * xin_bytes(K, 1);
    for (int i = 0; i < n; i++) {
        const rlxc_wtype_kernels *k = kernels_of(ws[i]->type);
        if (!k->quantize_x) continue;
        int f = 0;
        while (f < in->n_fmt && in->fmt[f] != k->quantize_x) f++;
        if (f < in->n_fmt) continue;
        /* RLXC_X_FORMATS covers every distinct quantize_x of a table (Q8_0 and Q8_K) */
        in->fmt[f] = k->quantize_x, in->x_block[f] = k->x_block, in->row_bytes[f] = x_row_bytes(k, K);
        in->block_bytes[f] = k->x_block_bytes;
        in->q[f] = (char *)scratch + f * slot_bytes;
        if (T > 1 && k->quantize_x == kernels_of(RLXC_Q8_0)->quantize_x) {
            int32_t *sum = (int32_t *)((char *)scratch + q8_terms_at(K, T));
            in->q8_terms = (rlxc_q8_terms){sum, (const float *)(sum + (size_t)T * (K / RLXC_QK))};
            in->q8 = in->q[f];
        }
        in->n_fmt++;
    }
    /* Blocks are quantized independently, so a token's row may be cut between threads. */
    const rlxc_time was = rlxc_team_time(tm, RLXC_TIME_QUANTIZE);
    for (int f = 0; f < in->n_fmt; f++) {
        const size_t nb = (size_t)K / in->x_block[f];
        size_t a = 0, b = nb;
        if (!own) rlxc_team_share(tm, (size_t)T * nb, 1, &a, &b);
        while (a < b) {
            const size_t t = a / nb, b0 = a - t * nb, b1 = (t + 1) * nb < b ? nb : b - t * nb;
            in->fmt[f]((char *)in->q[f] + t * in->row_bytes[f] + b0 * in->block_bytes[f],
                       x + t * (size_t)K + b0 * in->x_block[f], (int)((b1 - b0) * in->x_block[f]));
            if (in->q[f] == in->q8) /* blocks t * nb + b0 .. of the copy, whose rows are contiguous */
                rlxc_q8_terms_compute((int32_t *)in->q8_terms.sum + t * nb + b0, (float *)in->q8_terms.d + t * nb + b0,
                                      (const block_q8_0 *)in->q8 + t * nb + b0, b1 - b0);
            a = t * nb + b1;
        }
    }
    if (in->n_fmt && !own) rlxc_team_sync(tm);
    rlxc_team_time(tm, was);
}

/* The activations w's products take: its quantized slot, or the float rows. */
static const void *xin_for(const rlxc_xin *in, const rlxc_wtype_kernels *k) {
    for (int f = 0; f < in->n_fmt; f++)
        if (in->fmt[f] == k->quantize_x) return in->q[f];
    return in->x;
}

static pthread_mutex_t pack_lock = PTHREAD_MUTEX_INITIALIZER;

/* RLXC_REPACK=0 keeps every weight in its GGUF layout: no second copy in memory. */
static int repack_enabled(void) {
    static int on = -1; /* threads of several pipelines may ask at once: same answer, atomic reads */
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
        v = rlxc_env_switch("RLXC_REPACK", 1);
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* Copies this large are aligned to and rounded up to 2 MiB for huge pages (streaming them then
 * misses the TLB 512 times less often); smaller ones are only 64-byte aligned (rounding a small
 * matrix to 2 MiB would waste the difference). */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_COPY_BYTES (2 * HUGE_PAGE)

static void *packed_alloc(size_t bytes) {
    if (bytes < HUGE_COPY_BYTES) return aligned_alloc(64, (bytes + 63) / 64 * 64);
    const size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, size);
    if (p) madvise(p, size, MADV_HUGEPAGE);
    return p;
}

void rlxc_weight_pack(rlxc_weight *w, int page_out) {
    if (!repack_enabled() || !rlxc_x16_packs(w->type) || w->rows < RLXC_PACK_ROWS || !w->data ||
        !kernels_of(w->type)->matvec_x16 ||
        __atomic_load_n(&w->packed, __ATOMIC_ACQUIRE))
        return;
    /* two pipelines sharing a layer may begin at once */
    pthread_mutex_lock(&pack_lock);
    if (!w->packed) {
        const size_t bytes = rlxc_x16_bytes(w->type, w->rows, w->cols);
        void *packed = packed_alloc(bytes);
        /* out of memory: decode keeps the GGUF layout */
        if (packed) {
            rlxc_pack_x16(w->type, packed, w->data, w->rows, w->cols);
            __atomic_store_n(&w->packed, packed, __ATOMIC_RELEASE);
            /* MADV_PAGEOUT keeps any memory's contents (anonymous pages just stay); where prefill
             * too reads the copy only f32 activations touch the rows again. */
            if (page_out && w->borrowed && kernels_of(w->type)->matmul_x16) {
                const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)w->data + page - 1) / page * page;
                const uintptr_t b = ((uintptr_t)w->data + (w->rows / RLXC_PACK_ROWS) * RLXC_PACK_ROWS *
                                     rlxc_wtype_row_bytes(w->type, w->cols)) / page * page;
                if (b > a) madvise((void *)a, b - a, MADV_PAGEOUT);
            }
        }
    }
    pthread_mutex_unlock(&pack_lock);
}

void rlxc_weight_row(const rlxc_weight *w, int r, float *y) {
    const int K = w->cols, P = RLXC_PACK_ROWS;
    if (!w->packed || r >= w->rows / P * P) {
        rlxc_dequantize_row(w->type, y, (const char *)w->data + (size_t)r * rlxc_wtype_row_bytes(w->type, K), K);
        return;
    }
    /* the row's GGUF blocks rebuilt ROW_BYTES at a time, then the type's own dequantizer */
    enum { ROW_BYTES = 4608 }; /* whole blocks of every packed type: 128 Q4_0, 64 Q8_0, 32 Q4_K */
    uint8_t blocks[ROW_BYTES];
    const size_t block_bytes = rlxc_wtype_row_bytes(w->type, rlxc_wtype_block_size(w->type));
    const int qk = rlxc_wtype_block_size(w->type), nb = K / qk, step = (int)(ROW_BYTES / block_bytes);
    const uint8_t *grp = (const uint8_t *)w->packed + (size_t)(r / P) * rlxc_x16_type_group_bytes(w->type, K);
    for (int b0 = 0; b0 < nb; b0 += step) {
        const int n = nb - b0 < step ? nb - b0 : step;
        rlxc_x16_row_blocks(w->type, blocks, grp, r % P, b0, n);
        rlxc_dequantize_row(w->type, y + (size_t)b0 * qk, blocks, n * qk);
    }
}

void rlxc_weight_unpack(rlxc_weight *w) {
    free(w->packed);
    w->packed = NULL;
}

/* Whether the active kernels multiply w's repacked rows for T tokens (NEON: decode only). Another
 * pipeline sharing the layer may be packing it right now, hence the acquire load. */
static int x16_runs(const rlxc_weight *w, const rlxc_wtype_kernels *k, int T) {
    return __atomic_load_n(&w->packed, __ATOMIC_ACQUIRE) && (T == 1 ? k->matvec_x16 != NULL : k->matmul_x16 != NULL);
}

/* x's terms from token t0 on, if x is the stage's Q8_0 copy (else NULL). */
static const rlxc_q8_terms *q8_terms_from(const rlxc_xin *in, const void *x, int t0, rlxc_q8_terms *part) {
    if (!in->q8 || x != in->q8) return NULL;
    *part = rlxc_xin_q8_terms_from(in, t0);
    return part;
}

static void x16_product(const rlxc_wtype_kernels *k, float *y, int ldy, const void *w, const rlxc_xin *in,
                        const void *x, int t0, int G, int K, int T) {
    const size_t x_bytes = x_row_bytes(k, K);
    rlxc_q8_terms part;
    if (T == 1) k->matvec_x16(y, w, (const char *)x + t0 * x_bytes, G, K);
    else k->matmul_x16(y, ldy, w, (const char *)x + t0 * x_bytes, q8_terms_from(in, x, t0, &part), G, K, T);
}

/* Rows [r0, r1) of T tokens from the repacked groups. A group cut by the range is computed whole
 * into a buffer, PART_T tokens at a time, so that every row's value is the same whichever thread
 * computes it; rows past the last whole group take the GGUF layout's kernels. */
#define PART_T 16
static void packed_rows(float *y, const rlxc_weight *w, const rlxc_wtype_kernels *k, const rlxc_xin *in,
                        const void *xa, int r0, int r1) {
    const int N = w->rows, K = w->cols, T = in->T, G = N / RLXC_PACK_ROWS, P = RLXC_PACK_ROWS;
    const size_t group_bytes = rlxc_x16_type_group_bytes(w->type, K);
    int r = r0;
    while (r < r1 && r < G * P) {
        const int g = r / P, g_end = r1 < G * P ? r1 / P : G;
        const char *wg = (const char *)w->packed + (size_t)g * group_bytes;
        if (r % P == 0 && g < g_end) {
            x16_product(k, y + r, N, wg, in, xa, 0, g_end - g, K, T);
            r = g_end * P;
            continue;
        }
        const int end = (g + 1) * P < r1 ? (g + 1) * P : r1;
        for (int t0 = 0; t0 < T; t0 += PART_T) {
            const int nt = T - t0 < PART_T ? T - t0 : PART_T;
            float part[PART_T * RLXC_PACK_ROWS];
            x16_product(k, part, P, wg, in, xa, t0, 1, K, nt);
            for (int t = 0; t < nt; t++)
                memcpy(y + (size_t)(t0 + t) * N + r, part + t * P + r % P, (size_t)(end - r) * sizeof(float));
        }
        r = end;
    }
    if (r >= r1) return;
    const void *wt = (const char *)w->data + (size_t)r * rlxc_wtype_row_bytes(w->type, K);
    if (T == 1) k->matvec(y + r, wt, xa, r1 - r, K);
    else k->matmul(y + r, N, wt, xa, r1 - r, K, T);
}

/* Rows [r0, r1) of one product; dq: this thread's rlxc_dq_scratch_floats. */
static void linear_rows(float *y, const rlxc_weight *w, const rlxc_weight *bias, const rlxc_xin *in, int r0, int r1,
                        float *dq) {
    const rlxc_wtype_kernels *k = kernels_of(w->type);
    const int N = w->rows, K = w->cols, n = r1 - r0, T = in->T;
    if (n <= 0) return;
    /* RLXC_ACT_F32 takes float activations; block-quantized rows are dequantized for them */
    const int dequantize = in->act == RLXC_ACT_F32 && k->dequantize;
    const void *xa = xin_for(in, k);
    const size_t rb = rlxc_wtype_row_bytes(w->type, K);
    const void *wo = (const char *)w->data + (size_t)r0 * rb;
    if (dequantize && T == 1) {
        k->matvec_fx(y + r0, wo, xa, n, K);
    } else if (dequantize) {
        for (int q0 = r0; q0 < r1; q0 += DQ_ROWS) {
            const int r = r1 - q0 < DQ_ROWS ? r1 - q0 : DQ_ROWS;
            for (int i = 0; i < r; i++)
                k->dequantize(dq + (size_t)i * K, (const char *)w->data + (size_t)(q0 + i) * rb, K);
            kernels_of(RLXC_F32)->matmul(y + q0, N, dq, xa, r, K, T);
        }
    } else if (x16_runs(w, k, T)) {
        packed_rows(y, w, k, in, xa, r0, r1);
    } else if (T == 1) {
        k->matvec(y + r0, wo, xa, n, K);
    } else {
        k->matmul(y + r0, N, wo, xa, n, K, T);
    }
    if (bias && bias->data)
        for (int t = 0; t < T; t++)
            rlxc_kernels_active()->add(y + (size_t)t * N + r0, (const float *)bias->data + r0, n);
}

/* A chunk setting from the environment: 0 = guided, 1 = a static split, c = c even chunks; unset
 * or not a whole number >= 0: dflt. */
static int env_chunks(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    const long c = strtol(v, &end, 10);
    return !*end && c >= 0 && c <= INT_MAX ? (int)c : dflt;
}

/* Chunks per thread of a stage's rows (team.h): a thread the machine slows (a busy core, a noisy
 * neighbour) should take fewer. One token's products read weights only (16-core Xeon, random
 * Llama Q4_0, 16 threads, 4 rounds: tg 144 tok/s static, 145 with 4 even chunks, 154 with 8);
 * guided chunks, large first and small last, also shorten the wait at the barrier after the
 * stage. A prefill's products are compute-bound, where the cores of a shared VM differ most (16
 * threads of one GEMM each: 57-108 GMAC/s): 4 even chunks per thread against a static split won
 * 6 of 10 paired pp256 readings there at 4-16 threads (-11 % to +22 %, median +2.5 %: the VM's
 * noise is as large as the effect), and cost 1 % on 2 cores, where guided cost 3.5 % (each chunk
 * is a GEMM call that sums every token's activation blocks again; guided's smallest chunks
 * leave half-empty 32-row tiles). Chunks are multiples of 16 rows so that the 16-row SIMD tiles
 * stay whole. */
static int chunks_per_thread(int T) {
    static int decode = -2, prefill = -2; /* read once: RLXC_CHUNKS, RLXC_CHUNKS_PP */
    if (__atomic_load_n(&decode, __ATOMIC_ACQUIRE) < -1) {
        __atomic_store_n(&prefill, env_chunks("RLXC_CHUNKS_PP", 4), __ATOMIC_RELAXED);
        __atomic_store_n(&decode, env_chunks("RLXC_CHUNKS", RLXC_CHUNKS_GUIDED), __ATOMIC_RELEASE);
    }
    return __atomic_load_n(T == 1 ? &decode : &prefill, __ATOMIC_RELAXED);
}

void rlxc_linear_team(const rlxc_team *tm, const rlxc_xin *in, const rlxc_product *ps, int n, float *dq) {
    /* the products' rows as one range, so that small ones (K, V) do not idle threads */
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)ps[i].w->rows;
    rlxc_team_loop lp = rlxc_team_loop_begin(tm, total, 16, chunks_per_thread(in->T));
    size_t a, b;
    while (rlxc_team_next(tm, &lp, &a, &b)) {
        size_t off = 0;
        for (int i = 0; i < n && off < b; off += (size_t)ps[i].w->rows, i++) {
            const size_t N = (size_t)ps[i].w->rows;
            const size_t r0 = a > off ? a - off : 0, r1 = b - off < N ? b - off : N;
            if (r0 < r1) linear_rows(ps[i].y, ps[i].w, ps[i].bias, in, (int)r0, (int)r1, dq);
        }
    }
}

void rlxc_linear_alike(const rlxc_team *tm, const rlxc_xin *in, const rlxc_product *ps, int n, float *dq,
                       rlxc_rows_done done, void *ctx) {
    rlxc_team_loop lp = rlxc_team_loop_begin(tm, (size_t)ps[0].w->rows, 16, chunks_per_thread(in->T));
    size_t a, b;
    while (rlxc_team_next(tm, &lp, &a, &b)) {
        for (int i = 0; i < n; i++) linear_rows(ps[i].y, ps[i].w, ps[i].bias, in, (int)a, (int)b, dq);
        if (done) done(ctx, (int)a, (int)b);
    }
}

typedef struct {
    float *y;
    const rlxc_weight *w;
    const float *x;
    int T, n_threads;
    void *scratch;
    rlxc_act act;
} linear_call;

static void linear_stage(const rlxc_team *tm, void *arg) {
    const linear_call *c = arg;
    rlxc_xin in;
    rlxc_xin_prepare(tm, &in, c->x, c->T, c->w->cols, &c->w, 1, c->act, c->scratch);
    float *dq = (float *)((char *)c->scratch + rlxc_xin_scratch_bytes(c->w->cols, c->T, c->n_threads)) +
                (size_t)tm->ith * rlxc_dq_scratch_floats(c->w->cols, c->T, c->act);
    rlxc_linear_alike(tm, &in, &(rlxc_product){c->y, c->w, NULL}, 1, dq, NULL, NULL);
}

void rlxc_linear(float *y, const rlxc_weight *w, const float *x, int T, int n_threads, void *scratch, rlxc_act act) {
    const int nth = n_threads < w->rows ? n_threads : w->rows;
    linear_call c = {y, w, x, T, nth, scratch, act};
    rlxc_team_run(nth, linear_stage, &c);
}
