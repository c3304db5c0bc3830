/* AVX-512 f32 GEMM for prefill, and for the f32-activation path of the quantized types, which
 * hands it rows it has just dequantized. The AVX2 kernel takes dot products along K and sums
 * each accumulator horizontally at the end; here 48 weight rows are transposed into a k-major
 * panel, so three registers hold one k of all 48 rows, and a token's x[k], broadcast once,
 * feeds three FMAs: no horizontal sums. A tile is TILE_T tokens x 48 rows (24 accumulators);
 * more tokens per tile would need more x row pointers than there are general registers (gcc
 * then reloads them from the stack inside the loop). The panel holds KC inputs (48 KB, on the
 * stack); partial sums go through y between k-chunks. Decode keeps the AVX2 dot form, which is
 * memory-bound already. */
#include "avx512.h"

#define PANEL_V 3 /* registers per k of the panel */
#define PANEL_ROWS (16 * PANEL_V)
#define KC 256
#define TILE_T 8
#define PANEL_MIN_T 4 /* fewer tokens do not pay for the transposes */

/* out[PANEL_ROWS c + r] = in[r * stride + c] for r, c < 16: 32-bit, 64-bit and two 128-bit
 * lane interleaves. After the first two, u[4q + j] holds in lane L column 4L + j of rows
 * 4q..4q+3. */
RLXC_INLINE void transpose16(float *out, const float *in, size_t stride) {
    __m512 r[16], t[16], u[16];
    RLXC_UNROLL for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(in + i * stride);
    RLXC_UNROLL for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    RLXC_UNROLL for (int q = 0; q < 4; q++) {
        const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
        u[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    RLXC_UNROLL for (int j = 0; j < 4; j++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44), v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        _mm512_store_ps(out + PANEL_ROWS * j, _mm512_shuffle_f32x4(v0, v2, 0x88));
        _mm512_store_ps(out + PANEL_ROWS * (4 + j), _mm512_shuffle_f32x4(v0, v2, 0xDD));
        _mm512_store_ps(out + PANEL_ROWS * (8 + j), _mm512_shuffle_f32x4(v1, v3, 0x88));
        _mm512_store_ps(out + PANEL_ROWS * (12 + j), _mm512_shuffle_f32x4(v1, v3, 0xDD));
    }
}

/* panel[PANEL_ROWS k + r] = w[r * K + k] for k < kc, r < nr; rows >= nr are zero. */
static void pack_panel(float *panel, const float *w, int K, int kc, int nr) {
    for (int v = 0; v < PANEL_V; v++) {
        const int r0 = 16 * v;
        int k = 0;
        if (nr >= r0 + 16)
            for (; k + 16 <= kc; k += 16) transpose16(panel + PANEL_ROWS * k + r0, w + (size_t)r0 * K + k, (size_t)K);
        for (; k < kc; k++)
            for (int r = r0; r < r0 + 16; r++) panel[PANEL_ROWS * k + r] = r < nr ? w[(size_t)r * K + k] : 0.0f;
    }
}

/* C tokens x the panel's rows (masks m[v]) over kc inputs, added to y unless first. */
RLXC_INLINE void panel_tile(float *y, int ldy, const float *panel, const float *x, int K, int kc,
                            const __mmask16 m[PANEL_V], int first, const int C) {
    __m512 acc[TILE_T][PANEL_V];
    RLXC_UNROLL for (int t = 0; t < C; t++)
        RLXC_UNROLL for (int v = 0; v < PANEL_V; v++)
            acc[t][v] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[v], y + (size_t)t * ldy + 16 * v);
    for (int k = 0; k < kc; k++) {
        __m512 w[PANEL_V];
        RLXC_UNROLL for (int v = 0; v < PANEL_V; v++) w[v] = _mm512_load_ps(panel + PANEL_ROWS * k + 16 * v);
        RLXC_UNROLL for (int t = 0; t < C; t++) {
            const __m512 xb = _mm512_set1_ps(x[(size_t)t * K + k]);
            RLXC_UNROLL for (int v = 0; v < PANEL_V; v++) acc[t][v] = _mm512_fmadd_ps(w[v], xb, acc[t][v]);
        }
    }
    RLXC_UNROLL for (int t = 0; t < C; t++)
        RLXC_UNROLL for (int v = 0; v < PANEL_V; v++) _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16 * v, m[v], acc[t][v]);
}

void rlxc_matmul_f32_avx512(float *y, int ldy, const void *vw, const void *vx, int N, int K, int T) {
    if (T < PANEL_MIN_T) {
        rlxc_matmul_f32_avx2(y, ldy, vw, vx, N, K, T);
        return;
    }
    const float *w = vw, *x = vx;
    float panel[KC * PANEL_ROWS] __attribute__((aligned(64)));
    for (int n = 0; n < N; n += PANEL_ROWS) {
        const int nr = N - n < PANEL_ROWS ? N - n : PANEL_ROWS;
        __mmask16 m[PANEL_V];
        for (int v = 0; v < PANEL_V; v++) {
            const int left = nr - 16 * v;
            m[v] = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1 : 0);
        }
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            pack_panel(panel, w + (size_t)n * K + k0, K, kc, nr);
            float *yn = y + n;
            const float *xk = x + k0;
            int t = 0;
            for (; t + TILE_T <= T; t += TILE_T)
                panel_tile(yn + (size_t)t * ldy, ldy, panel, xk + (size_t)t * K, K, kc, m, k0 == 0, TILE_T);
            for (; t < T; t++) panel_tile(yn + (size_t)t * ldy, ldy, panel, xk + (size_t)t * K, K, kc, m, k0 == 0, 1);
        }
    }
}

/* Decode: the AVX2 dot form reads each row once and is memory-bound already. */
void rlxc_matvec_f32_avx512(float *y, const void *w, const void *x, int N, int K) {
    rlxc_matvec_f32_avx2(y, w, x, N, K);
}
