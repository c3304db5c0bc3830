/* The Q4_K products on repacked 16-row groups (rlxc_q4_kx16, kernels.h) around an ISA's tile, so
 * that decode and the prefill GEMM run the same tile and a token's outputs are the same bits
 * whatever T. The includer defines KX_C (tokens per GEMM tile) and
 *   q4_kx16_tile(y, ldy, w, x, xs, nb, b0, n, first, C): 16 rows (w: the group's records) x C
 *   tokens (x: their Q8_K rows of nb blocks) over blocks b0 .. b0 + n, y[t * ldy + r] (+= unless
 *   first), xs[t * n + b]: rlxc_q8_k_sums32 of token t's block b0 + b. */
#ifndef RLXC_KERNELS_AVX2_Q4_KX16_H
#define RLXC_KERNELS_AVX2_Q4_KX16_H

#define KX_CHUNK 256               /* super-blocks per pass over a row (the activation sums on the stack) */
#define KX_PANEL_BYTES (384 << 10) /* groups whose records stay in L2 while a chunk of tokens passes */
#define KX_TCHUNK 64

static void q4_kx16_sums(__m128i *xs, const block_q8_k *x, int nb, int b0, int n, int T) {
    for (int t = 0; t < T; t++)
        for (int b = 0; b < n; b++) xs[(size_t)t * n + b] = rlxc_q8_k_sums32(x + (size_t)t * nb + b0 + b);
}

#define RLXC_DEFINE_Q4_KX16(sfx)                                                                                   \
    void rlxc_matvec_q4_kx16_##sfx(float *y, const void *vw, const void *vx, int G, int K) {                      \
        const rlxc_q4_kx16 *w = vw;                                                                                \
        const int nb = K / RLXC_QK_K;                                                                              \
        __m128i xs[KX_CHUNK];                                                                                      \
        for (int b0 = 0; b0 < nb; b0 += KX_CHUNK) {                                                                \
            const int n = nb - b0 < KX_CHUNK ? nb - b0 : KX_CHUNK;                                                 \
            q4_kx16_sums(xs, vx, nb, b0, n, 1);                                                                    \
            for (int g = 0; g < G; g++)                                                                            \
                q4_kx16_tile(y + 16 * (size_t)g, 16, w + (size_t)g * nb, vx, xs, nb, b0, n, !b0, 1);               \
        }                                                                                                          \
    }                                                                                                              \
    /* Panels of groups that stay in L2 while the tokens pass them in chunks (their activation sums */            \
    /* in a thread scratch), KX_C tokens per tile, the rest one at a time. */                                      \
    void rlxc_matmul_q4_kx16_##sfx(float *y, int ldy, const void *vw, const void *vx, const rlxc_q8_terms *terms,  \
                                   int G, int K, int T) { /* Q8_K activations: terms is NULL */              \
        const rlxc_q4_kx16 *w = vw;                                                                                \
        const block_q8_k *x = vx;                                                                                  \
        const int nb = K / RLXC_QK_K, tc = T < KX_TCHUNK ? T : KX_TCHUNK, n0 = nb < KX_CHUNK ? nb : KX_CHUNK;      \
        __m128i *xs = T > 1 ? rlxc_thread_scratch((size_t)tc * n0 * sizeof(__m128i)) : NULL;                      \
        if (!xs) {                                                                                                 \
            rlxc_matmul_x16_by_token(rlxc_matvec_q4_kx16_##sfx, RLXC_Q4_K, y, ldy, vw, vx, G, K, T);               \
            return;                                                                                                \
        }                                                                                                          \
        int panel = (int)(KX_PANEL_BYTES / ((size_t)nb * sizeof(rlxc_q4_kx16)));                                   \
        panel = panel < 1 ? 1 : panel > G ? G : panel;                                                             \
        for (int g0 = 0; g0 < G; g0 += panel) {                                                                    \
            const int g1 = G - g0 < panel ? G : g0 + panel;                                                        \
            for (int t0 = 0; t0 < T; t0 += KX_TCHUNK) {                                                            \
                const int nt = T - t0 < KX_TCHUNK ? T - t0 : KX_TCHUNK;                                            \
                const block_q8_k *xt = x + (size_t)t0 * nb;                                                        \
                for (int b0 = 0; b0 < nb; b0 += KX_CHUNK) {                                                        \
                    const int n = nb - b0 < KX_CHUNK ? nb - b0 : KX_CHUNK;                                         \
                    q4_kx16_sums(xs, xt, nb, b0, n, nt);                                                           \
                    for (int g = g0; g < g1; g++) {                                                                \
                        const rlxc_q4_kx16 *wg = w + (size_t)g * nb;                                               \
                        float *yg = y + (size_t)t0 * ldy + 16 * (size_t)g;                                         \
                        int t = 0;                                                                                 \
                        for (; t + KX_C <= nt; t += KX_C)                                                          \
                            q4_kx16_tile(yg + (size_t)t * ldy, ldy, wg, xt + (size_t)t * nb, xs + (size_t)t * n,   \
                                         nb, b0, n, !b0, KX_C);                                                    \
                        for (; t < nt; t++)                                                                        \
                            q4_kx16_tile(yg + (size_t)t * ldy, ldy, wg, xt + (size_t)t * nb, xs + (size_t)t * n,   \
                                         nb, b0, n, !b0, 1);                                                       \
                    }                                                                                              \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }

#endif
