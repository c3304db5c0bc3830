/* Does AMX run on this machine, and how fast? Asks the kernel for the tile data permission, checks
 * one TDPBSSD tile product against a scalar loop, then times a chain of them on one core.
 *   gcc -O2 -mamx-tile -mamx-int8 benchmarks/amx_probe.c -o amx_probe && ./amx_probe
 * Prints the int8 multiply-accumulates per second of one core (the bound an AMX Q4_0/Q8_0 GEMM
 * would work under), or why AMX is not usable. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM): AMX not granted");
        return 1;
    }
    tile_config cfg = {.palette_id = 1};
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    /* A: 16 x 64 int8; B: 16 rows of 4-byte groups (K = 64 in VNNI layout); C: 16 x 16 int32 */
    static int8_t a[16 * 64], b[16 * 64];
    static int32_t c[16 * 16];
    for (int i = 0; i < 16 * 64; i++) a[i] = (int8_t)(i * 37 % 255 - 127), b[i] = (int8_t)(i * 91 % 253 - 126);
    _tile_zero(0);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    _tile_dpbssd(0, 4, 5);
    _tile_stored(0, c, 64);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t ref = 0;
            for (int k = 0; k < 64; k++) ref += a[m * 64 + k] * b[(k / 4) * 64 + n * 4 + k % 4];
            if (ref != c[m * 16 + n]) {
                printf("TDPBSSD wrong at (%d, %d): %d, expected %d\n", m, n, c[m * 16 + n], ref);
                return 1;
            }
        }
    /* four independent accumulators: a tile product's latency is longer than its issue interval */
    const long reps = 20000000;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    double t0 = now();
    for (long r = 0; r < reps; r++) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
    }
    double s = now() - t0;
    _tile_stored(0, c, 64);
    _tile_release();
    printf("AMX int8 ok: %.0f GMAC/s on one core (checksum %d)\n", reps * 4 * 16384.0 / s * 1e-9, c[0]);
    return 0;
}
