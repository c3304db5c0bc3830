/* What one stage boundary of the engine's thread team costs: rlxc_team_run with the engine's
 * own barrier and chunk tickets (csrc/threads.c, csrc/team.h), per thread count, median of 7
 * timed repetitions of 2000 stages each.
 *   barrier  barriers back to back (nothing between them);
 *   stage    stages of a decode-sized product: a guided chunked loop over 1024 rows (16-row
 *            chunks, 16 dependent adds per row: ~13 us of work on one thread, under 1 us a
 *            thread on 16, like the products of a 640-wide model) and a barrier.
 * Build against a tree's csrc (to compare two trees, build it twice):
 *   gcc -O2 -fopenmp -Icsrc benchmarks/bench_barrier.c csrc/threads.c -o bench_barrier
 *   ./bench_barrier 1,2,4,8,16 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "team.h"

enum { ROUNDS = 2000, ROWS = 1024, ROW_WORK = 16, REPS = 7 };

typedef struct {
    int stage;
    float *sink; /* per thread, a cache line apart */
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void rounds(const rlxc_team *tm, void *arg) {
    const job *j = arg;
    float acc = 0.0f;
    for (int r = 0; r < ROUNDS; r++) {
        if (j->stage) {
            rlxc_team_loop lp = rlxc_team_loop_begin(tm, ROWS, 16, RLXC_CHUNKS_GUIDED);
            size_t a, b;
            while (rlxc_team_next(tm, &lp, &a, &b))
                for (size_t row = a; row < b; row++)
                    for (int k = 0; k < ROW_WORK; k++) acc += (float)(row ^ (size_t)k) * 1e-9f;
        }
        rlxc_team_sync(tm);
    }
    j->sink[tm->ith * 16] = acc;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    char list[256] = "1,2";
    if (argc > 1) snprintf(list, sizeof list, "%s", argv[1]);
    static float sink[1024 * 16];
    printf("threads  barrier ns  stage ns\n");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int nth = atoi(tok);
        double med[2];
        for (int stage = 0; stage < 2; stage++) {
            job j = {stage, sink};
            double t[REPS];
            rlxc_team_run(nth, rounds, &j); /* warm the pool */
            for (int i = 0; i < REPS; i++) {
                const double t0 = now_s();
                rlxc_team_run(nth, rounds, &j);
                t[i] = (now_s() - t0) / ROUNDS * 1e9;
            }
            qsort(t, REPS, sizeof t[0], cmp);
            med[stage] = t[REPS / 2];
        }
        printf("%7d  %10.0f  %8.0f\n", nth, med[0], med[1]);
    }
    return 0;
}
