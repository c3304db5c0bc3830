/* The engine's thread team. A forward pass (a prefill, a decoded token, one rlxc_linear) runs
 * inside one OpenMP parallel region: every thread walks the same stages, takes its share of each
 * stage's work by its index, and a barrier separates a stage from the next that reads its
 * results. No stage opens a region of its own, so a token costs one fork/join, not one per op. */
#ifndef RLXC_TEAM_H
#define RLXC_TEAM_H

#include <stddef.h>

/* The team's barrier (threads.c): a waiting thread spins for a while, then sleeps on a futex. */
typedef struct {
    _Atomic int arrived, sleepers, n;
    _Atomic unsigned gen;
} rlxc_barrier;

void rlxc_barrier_wait(rlxc_barrier *b);

typedef struct {
    int ith, nth; /* this thread's index, the team's size */
    rlxc_barrier *bar;
} rlxc_team;

/* Every thread of the team waits here until all have arrived. */
static inline void rlxc_team_sync(const rlxc_team *tm) {
    if (tm->nth > 1) rlxc_barrier_wait(tm->bar);
}

/* This thread's contiguous share [*a, *b) of n items, cut at multiples of `align`. */
static inline void rlxc_team_share(const rlxc_team *tm, size_t n, size_t align, size_t *a, size_t *b) {
    const size_t chunk = ((n + tm->nth - 1) / tm->nth + align - 1) / align * align, first = tm->ith * chunk;
    *a = first < n ? first : n;
    *b = n - *a > chunk ? *a + chunk : n;
}

/* Run fn(team, arg) on up to n_threads threads (one in a forked child, never touching OpenMP);
 * returns when all are done. */
void rlxc_team_run(int n_threads, void (*fn)(const rlxc_team *tm, void *arg), void *arg);

#endif
