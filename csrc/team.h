/* The engine's thread team. A forward pass (a prefill, a decoded token, one rlxc_linear) runs
 * inside one OpenMP parallel region: every thread walks the same stages, takes its share of each
 * stage's work by its index, and a barrier separates a stage from the next that reads its
 * results. No stage opens a region of its own, so a token costs one fork/join, not one per op. */
#ifndef RLXC_TEAM_H
#define RLXC_TEAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rlxc.h"

/* The team's barrier (threads.c): a waiting thread spins for a while, then sleeps on a futex.
 * Three cache lines: the arrivals' and the chunk tickets' read-modify-writes would otherwise
 * take the line that every waiting thread polls away from all of them, each time. */
typedef struct {
    _Alignas(64) _Atomic int arrived;
    _Atomic int n;
    _Alignas(64) _Atomic unsigned gen;
    _Atomic int sleepers;
    _Alignas(64) _Atomic size_t ticket; /* the next chunk ticket of the team's chunked loops (rlxc_team_next) */
} rlxc_barrier;

void rlxc_barrier_wait(rlxc_barrier *b);

/* A thread's place in the team's sequence of chunked loops: tickets are numbered through all
 * of them in order, the loops' chunks one after the other from `base`; `held` is a ticket this
 * thread drew past the end of a loop, kept for the loop it belongs to (RLXC_NO_TICKET: none). */
typedef struct {
    size_t base, held;
} rlxc_tickets;

#define RLXC_NO_TICKET ((size_t)-1)

/* A thread's clock while a profile runs (rlxc_profile_start): the time since `last` belongs to
 * stage `what`; ns: this thread's RLXC_TIMES counters. */
typedef struct {
    uint64_t last;
    rlxc_time what;
    _Atomic uint64_t *ns;
} rlxc_clock;

typedef struct {
    int ith, nth; /* this thread's index, the team's size */
    rlxc_barrier *bar;
    rlxc_tickets *own;
    rlxc_clock *clk; /* NULL: no profile runs */
} rlxc_team;

/* Charges the time since the last switch to the stage it was in; returns that stage. */
rlxc_time rlxc_clock_switch(rlxc_clock *c, rlxc_time what);

/* This thread's time goes to `what` from here on; returns the stage it went to before. */
static inline rlxc_time rlxc_team_time(const rlxc_team *tm, rlxc_time what) {
    return tm->clk ? rlxc_clock_switch(tm->clk, what) : what;
}

/* Every thread of the team waits here until all have arrived. */
static inline void rlxc_team_sync(const rlxc_team *tm) {
    if (tm->nth <= 1) return;
    const rlxc_time was = rlxc_team_time(tm, RLXC_TIME_WAIT);
    rlxc_barrier_wait(tm->bar);
    rlxc_team_time(tm, was);
}

/* This thread's contiguous share [*a, *b) of n items, cut at multiples of `align`. */
static inline void rlxc_team_share(const rlxc_team *tm, size_t n, size_t align, size_t *a, size_t *b) {
    const size_t chunk = ((n + tm->nth - 1) / tm->nth + align - 1) / align * align, first = tm->ith * chunk;
    *a = first < n ? first : n;
    *b = n - *a > chunk ? *a + chunk : n;
}

/* A loop over n items cut into chunks at multiples of `align`, which the team's threads take
 * one at a time as they get to them, so that a thread slowed by the machine takes fewer. Every
 * thread of the team must begin the same loops in the same order (as it walks the same stages);
 * no barrier is needed before or after one beyond what the data needs. chunks_per_thread:
 *   1                   each thread its rlxc_team_share, a static split;
 *   c > 1               c even chunks per thread;
 *   RLXC_CHUNKS_GUIDED  chunks halving in size, a round of nth chunks at each size, from n / 2nth
 *                       down to `align`: few tickets, and the last chunks, which decide how long
 *                       the others wait at the next barrier, small. */
#define RLXC_CHUNKS_GUIDED 0

typedef struct {
    size_t n, align, base;
    size_t chunks; /* 0: the static split */
    size_t chunk;  /* the size of even chunks; 0: guided ones */
    int done;      /* the static split's one share was handed out */
} rlxc_team_loop;

/* Size of the chunks of round `level` of a guided loop on nth threads. */
static inline size_t rlxc_guided_size(const rlxc_team_loop *lp, size_t nth, int level) {
    const size_t want = (lp->n + (nth << (level + 1)) - 1) / (nth << (level + 1));
    const size_t s = (want + lp->align - 1) / lp->align * lp->align;
    return s > lp->align ? s : lp->align;
}

/* Chunk i of a loop on nth threads: [*a, *b). */
static inline void rlxc_team_chunk(const rlxc_team_loop *lp, size_t nth, size_t i, size_t *a, size_t *b) {
    size_t first = 0, size = lp->chunk;
    if (!lp->chunk) /* guided: whole rounds before chunk i, then its place in its round */
        for (int level = 0;; level++) {
            size = rlxc_guided_size(lp, nth, level);
            if (i < nth || size == lp->align) break;
            first += nth * size, i -= nth;
        }
    *a = first + i * size;
    *b = lp->n - *a > size ? *a + size : lp->n;
}

static inline rlxc_team_loop rlxc_team_loop_begin(const rlxc_team *tm, size_t n, size_t align, int chunks_per_thread) {
    rlxc_team_loop lp = {n, align, 0, 0, 0, 0};
    const size_t nth = (size_t)tm->nth;
    if (nth == 1 || chunks_per_thread == 1 || !n) return lp;
    if (chunks_per_thread == RLXC_CHUNKS_GUIDED) {
        size_t first = 0, size;
        for (int level = 0; (size = rlxc_guided_size(&lp, nth, level)) > align && first + nth * size < n; level++)
            first += nth * size, lp.chunks += nth;
        lp.chunks += (n - first + size - 1) / size;
    } else {
        const size_t want = (n + nth * chunks_per_thread - 1) / (nth * chunks_per_thread);
        lp.chunk = (want + align - 1) / align * align;
        lp.chunks = (n + lp.chunk - 1) / lp.chunk;
    }
    lp.base = tm->own->base;
    tm->own->base += lp.chunks;
    return lp;
}

/* This thread's next chunk [*a, *b) of the loop; 0 when the loop has none left for it. */
static inline int rlxc_team_next(const rlxc_team *tm, rlxc_team_loop *lp, size_t *a, size_t *b) {
    if (!lp->chunks) {
        if (lp->done) return 0;
        lp->done = 1;
        rlxc_team_share(tm, lp->n, lp->align, a, b);
        return *a < *b;
    }
    size_t t = tm->own->held;
    if (t == RLXC_NO_TICKET) t = atomic_fetch_add_explicit(&tm->bar->ticket, 1, memory_order_relaxed);
    if (t >= lp->base + lp->chunks) { /* a later loop's: keep it for that one */
        tm->own->held = t;
        return 0;
    }
    tm->own->held = RLXC_NO_TICKET;
    rlxc_team_chunk(lp, (size_t)tm->nth, t - lp->base, a, b);
    return 1;
}

/* Run fn(team, arg) on up to n_threads threads (one in a forked child, never touching OpenMP);
 * returns when all are done. */
void rlxc_team_run(int n_threads, void (*fn)(const rlxc_team *tm, void *arg), void *arg);

#endif
