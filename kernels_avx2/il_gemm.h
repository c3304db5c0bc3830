/* The loops around an interleaved-rows GEMM tile, shared by kernels_avx2/gemm.c and
 * kernels_avx512/gemm.c. IL_ROWS weight rows are copied into an interleaved layout (one row
 * per 32-bit lane, see those files); the tile then runs over IL_C, IL_C2 and 1 tokens at a time.
 *
 * Each row tile is packed once per call: rows go a panel at a time, as many tiles as fit in
 * IL_PANEL_BYTES once interleaved, and the tokens pass each panel in chunks of IL_TCHUNK. A
 * panel and one chunk's activations (64 tokens x K = 4096: 280 KB) then both stay in L2, the
 * panel across chunks and the chunk across the panel's tiles. Packing a tile per chunk instead
 * cost ~20% of the time at T = 512.
 *
 * The includer defines IL_ROWS, IL_C, IL_C2, the type il_block (one block of IL_ROWS
 * interleaved rows), pack functions pack(dst, w, row0, nb, nr) that fill dst with the nb blocks of
 * rows row0 .. row0 + nr of w (rows past nr as zeros), and
 *   il_tile(y, ldy, wp, x, bias, dx, nb, nr, C): y[t * ldy + r] for r < nr, t < C (constant),
 * where bias[t * nb + b] = -weight_offset * (sum of token t's block b) and dx its scale.
 *
 * An includer that defines IL_AMX_T (kernels_avx512/gemm.c) also provides il_amx_begin(tail) (1
 * if this thread's tiles are configured for groups of IL_AMX_T tokens and a last one of tail, else
 * 0), il_amx_end(), il_amx_signed(blocks, n, weight_offset) and il_amx_tile(y, ldy, wp, x, dx, nb,
 * nr, count) over count tokens; where il_amx_begin returns 1, every token goes through il_amx_tile. */

#define IL_TCHUNK 64
#define IL_PANEL_BYTES (384 << 10)

/* bias[i] = -weight_offset * (sum of block i's quants) (none if bias is NULL: the AMX tiles need
 * no bias), dx[i] its scale, for calls without the stage's rlxc_q8_terms (in AVX2: the compiler's
 * loop of it cost ~4 % of a 16-thread share of a prefill's down projection, one horizontal sum per
 * block). */
static void il_block_terms(int32_t *bias, float *dx, const block_q8_0 *xq, size_t n, int weight_offset) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (size_t i = 0; i < n; i++) {
        dx[i] = rlxc_h2f(xq[i].d);
        if (!bias) continue;
        const __m256i q = _mm256_loadu_si256((const __m256i *)xq[i].qs);
        const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
        bias[i] = -weight_offset * _mm_cvtsi128_si32(s);
    }
}

/* bias[i] = -weight_offset * sum[i]: from terms computed once for the stage (rlxc_q8_terms). */
static void il_block_bias(int32_t *bias, const int32_t *sum, size_t n, int weight_offset) {
    const __m256i m = _mm256_set1_epi32(-weight_offset);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(bias + i), _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(sum + i)), m));
    for (; i < n; i++) bias[i] = -weight_offset * sum[i];
}

/* terms: xq's rlxc_q8_terms, or NULL to compute them here. Returns 0 if out of memory (the
 * caller then takes its per-row kernels). */
static int il_gemm(float *y, int ldy, const void *w, const block_q8_0 *xq, const rlxc_q8_terms *terms, int N, int K,
                   int T, void (*pack)(il_block *, const void *, int, int, int), int weight_offset) {
    const int nb = K / RLXC_QK;
    const size_t tile_bytes = (size_t)nb * sizeof(il_block);
    const int n_tiles = (N + IL_ROWS - 1) / IL_ROWS;
    int panel = (int)(IL_PANEL_BYTES / tile_bytes); /* tiles per panel */
    panel = panel < 1 ? 1 : panel > n_tiles ? n_tiles : panel;
    const size_t wp_bytes = (panel * tile_bytes + 63) / 64 * 64, n_terms = (size_t)T * nb;
#ifdef IL_AMX_T
    _Static_assert(IL_TCHUNK % IL_AMX_T == 0, "only the last chunk ends in a partial AMX group");
    const int amx = il_amx_begin(T % IL_AMX_T);
#else
    const int amx = 0;
#endif
    il_block *wp = rlxc_thread_scratch(wp_bytes + n_terms * (sizeof(int32_t) + (terms ? 0 : sizeof(float))));
    int32_t *bias = wp ? (int32_t *)((char *)wp + wp_bytes) : NULL;
    const float *dx = terms ? terms->d : wp ? (float *)(bias + n_terms) : NULL;
    const int ok = wp != NULL;
    if (ok && terms && !amx) il_block_bias(bias, terms->sum, n_terms, weight_offset);
    else if (ok && !terms) il_block_terms(amx ? NULL : bias, (float *)dx, xq, n_terms, weight_offset);
    for (int p0 = 0; ok && p0 < n_tiles; p0 += panel) {
        const int p1 = p0 + panel < n_tiles ? p0 + panel : n_tiles;
        for (int p = p0; p < p1; p++)
            pack(wp + (size_t)(p - p0) * nb, w, p * IL_ROWS, nb, N - p * IL_ROWS < IL_ROWS ? N - p * IL_ROWS : IL_ROWS);
#ifdef IL_AMX_T
        if (amx) il_amx_signed(wp, (size_t)(p1 - p0) * nb, weight_offset);
#endif
        for (int t0 = 0; t0 < T; t0 += IL_TCHUNK) {
            const int t1 = T - t0 < IL_TCHUNK ? T : t0 + IL_TCHUNK;
            for (int p = p0; p < p1; p++) {
                const il_block *tile = wp + (size_t)(p - p0) * nb;
                const int n = p * IL_ROWS, nr = N - n < IL_ROWS ? N - n : IL_ROWS;
                int t = t0;
#ifdef IL_AMX_T
                for (; amx && t < t1; t += IL_AMX_T)
                    il_amx_tile(y + (size_t)t * ldy + n, ldy, tile, xq + (size_t)t * nb, dx + (size_t)t * nb, nb, nr,
                                t1 - t < IL_AMX_T ? t1 - t : IL_AMX_T);
#endif
#define IL_TILES(C)                                                                                       \
    for (; t + (C) <= t1; t += (C))                                                                        \
        il_tile(y + (size_t)t * ldy + n, ldy, tile, xq + (size_t)t * nb, bias + (size_t)t * nb, dx + (size_t)t * nb, \
                nb, nr, (C));
                IL_TILES(IL_C)
                IL_TILES(IL_C2)
                IL_TILES(1)
#undef IL_TILES
            }
        }
    }
#ifdef IL_AMX_T
    if (amx) il_amx_end();
#endif
    return ok;
}
