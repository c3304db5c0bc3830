/* How fast one core (or each of OMP_NUM_THREADS) streams memory with software prefetch at a
 * given distance and hint, against the hardware prefetchers alone: whether decode, which is
 * one streaming read of the weights per token, can beat stream_read.c's figure on this CPU.
 * Each thread reads its own 256 MiB share of a 256 MiB x threads array in S interleaved streams
 * (as rlxc's x16 decode groups read S row groups side by side); best of 5 passes per variant,
 * variants taking turns.
 *
 *   gcc -O3 -march=native -fopenmp benchmarks/read_prefetch.c -o read_prefetch && OMP_NUM_THREADS=1 ./read_prefetch
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
    const char *name;
    int streams, dist, hint, dist2, hint2; /* dist: bytes ahead in each stream (0: no prefetch), hint 0-2: T0-T2;
                                               dist2, hint2: a second prefetch further on */
} variant;

#define PREFETCH(p, hint)                                                               \
    ((hint) == 0 ? _mm_prefetch(p, _MM_HINT_T0) : (hint) == 1 ? _mm_prefetch(p, _MM_HINT_T1) \
                                                               : _mm_prefetch(p, _MM_HINT_T2))

/* Sums n bytes at a in `streams` equal consecutive parts read side by side, 64 bytes per part
 * per step, prefetching dist bytes ahead in each. */
static uint64_t read_streams(const char *a, size_t n, const variant *v) {
    const size_t part = n / v->streams;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
    for (size_t o = 0; o < part; o += 128)
        for (int s = 0; s < v->streams; s++) {
            const char *p = a + s * part + o;
            if (v->dist) PREFETCH(p + v->dist, v->hint), PREFETCH(p + v->dist + 64, v->hint);
            if (v->dist2) PREFETCH(p + v->dist2, v->hint2), PREFETCH(p + v->dist2 + 64, v->hint2);
            s0 = _mm256_add_epi64(s0, _mm256_add_epi64(_mm256_load_si256((const __m256i *)p),
                                                       _mm256_load_si256((const __m256i *)(p + 32))));
            s1 = _mm256_add_epi64(s1, _mm256_add_epi64(_mm256_load_si256((const __m256i *)(p + 64)),
                                                       _mm256_load_si256((const __m256i *)(p + 96))));
        }
    s0 = _mm256_add_epi64(s0, s1);
    return (uint64_t)_mm256_extract_epi64(s0, 0) + (uint64_t)_mm256_extract_epi64(s0, 3);
}

int main(void) {
    static const variant vs[] = {
        {"none, 1 stream", 1, 0, 0, 0, 0},
        {"none, 4 streams", 4, 0, 0, 0, 0},
        {"T0 512 B, 4 streams", 4, 512, 0, 0, 0},
        {"T0 1 KiB, 4 streams", 4, 1024, 0, 0, 0},
        {"T1 2 KiB, 4 streams", 4, 2048, 1, 0, 0},
        {"T1 4 KiB, 4 streams", 4, 4096, 1, 0, 0},
        {"T2 8 KiB, 4 streams", 4, 8192, 2, 0, 0},
        {"T1 2 KiB, 8 streams", 8, 2048, 1, 0, 0},
        {"T0 512 + T1 4 KiB, 4", 4, 512, 0, 4096, 1},
        {"T0 512 + T2 8 KiB, 4", 4, 512, 0, 8192, 2},
        {"T1 1 KiB + 4 KiB, 4", 4, 1024, 1, 4096, 1},
        {"T2 8 KiB, 1 stream", 1, 8192, 2, 0, 0},
    };
    enum { NV = sizeof vs / sizeof vs[0], PASSES = 5 };
    const int nt = omp_get_max_threads();
    const size_t share = (size_t)256 << 20, bytes = share * nt;
    char *a = aligned_alloc(64, bytes);
    if (!a) return 1;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bytes; i += 8) *(uint64_t *)(a + i) = i;
    double best[NV];
    for (int v = 0; v < NV; v++) best[v] = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < PASSES; r++)
        for (int v = 0; v < NV; v++) {
            uint64_t total = 0;
            const double t0 = now();
#pragma omp parallel reduction(+ : total)
            total += read_streams(a + share * omp_get_thread_num(), share, &vs[v]);
            const double dt = now() - t0;
            sink += total;
            if (dt < best[v]) best[v] = dt;
        }
    printf("%d thread(s), GB/s (best of %d):\n", nt, PASSES);
    for (int v = 0; v < NV; v++) printf("  %-22s %6.2f\n", vs[v].name, bytes / best[v] / 1e9);
    free(a);
    return 0;
}
