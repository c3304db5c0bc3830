/* The loops around an interleaved-rows GEMM tile, shared by kernels_avx2/gemm.c and
 * kernels_avx512/gemm.c. IL_ROWS weight rows are copied into an interleaved layout (one row
 * per 32-bit lane, see those files) once per chunk of IL_TCHUNK tokens, whose activations stay
 * in L2 while every row tile passes; the tile then runs over IL_C, IL_C2 and 1 tokens at a time.
 *
 * The includer defines IL_ROWS, IL_C, IL_C2, the type il_block (one block of IL_ROWS
 * interleaved rows) and
 *   il_tile(y, ldy, wp, x, bias, dx, nb, nr, C): y[t * ldy + r] for r < nr, t < C (constant),
 * where bias[t * nb + b] = -weight_offset * (sum of token t's block b) and dx its scale. */
#include <stdlib.h>

#define IL_TCHUNK 64

/* Returns 0 if out of memory (the caller then takes its per-row kernels). */
static int il_gemm(float *y, int ldy, const void *w, size_t row_bytes, const block_q8_0 *xq, int N, int K, int T,
                   void (*pack)(il_block *, const void *, int, int), int weight_offset) {
    const int nb = K / RLXC_QK;
    il_block *wp = aligned_alloc(64, ((size_t)nb * sizeof(il_block) + 63) / 64 * 64); /* C11: size a multiple of the alignment */
    int32_t *bias = malloc((size_t)IL_TCHUNK * nb * sizeof(int32_t));
    float *dx = malloc((size_t)IL_TCHUNK * nb * sizeof(float));
    const int ok = wp && bias && dx;
    for (int t0 = 0; ok && t0 < T; t0 += IL_TCHUNK) {
        const int nt = T - t0 < IL_TCHUNK ? T - t0 : IL_TCHUNK;
        const block_q8_0 *x = xq + (size_t)t0 * nb;
        for (int i = 0; i < nt * nb; i++) {
            int s = 0;
            for (int j = 0; j < RLXC_QK; j++) s += x[i].qs[j];
            bias[i] = -weight_offset * s;
            dx[i] = rlxc_h2f(x[i].d);
        }
        for (int n = 0; n < N; n += IL_ROWS) {
            const int nr = N - n < IL_ROWS ? N - n : IL_ROWS;
            pack(wp, (const uint8_t *)w + n * row_bytes, nb, nr);
            float *yt = y + (size_t)t0 * ldy + n;
            int t = 0;
#define IL_TILES(C)                 \
    for (; t + (C) <= nt; t += (C)) \
        il_tile(yt + (size_t)t * ldy, ldy, wp, x + (size_t)t * nb, bias + t * nb, dx + t * nb, nb, nr, (C));
            IL_TILES(IL_C)
            IL_TILES(IL_C2)
            IL_TILES(1)
#undef IL_TILES
        }
    }
    free(wp), free(bias), free(dx);
    return ok;
}
