/* Thread count policy. GNU OpenMP's pool does not survive fork(): a child that enters a
 * parallel region after the parent used threads hangs. So a forked child runs the engine
 * single-threaded, without ever entering an OpenMP construct. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "rlxc.h"
#include "team.h"

#define RLXC_SPIN_US_DEFAULT 50

static volatile int in_fork_child;

static void on_fork_child(void) { in_fork_child = 1; }

__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

int rlxc_threads_usable(int requested) {
    if (in_fork_child || requested < 1) return 1;
    return requested;
}

/* Physical cores among the CPUs this process may run on: SMT siblings share a core, and a
 * memory-bound matvec gains nothing from a second thread on the same core. */
static int physical_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set)) return 1;
    int seen[CPU_SETSIZE] = {0}, cores = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
        FILE *f = fopen(path, "r");
        int first = cpu; /* the lowest sibling names the core */
        if (f) {
            if (fscanf(f, "%d", &first) != 1) first = cpu;
            fclose(f);
        }
        if (first >= 0 && first < CPU_SETSIZE && !seen[first]) {
            seen[first] = 1;
            cores++;
        }
    }
    return cores > 0 ? cores : 1;
}

int rlxc_threads_default(void) {
    if (in_fork_child) return 1;
#ifdef _OPENMP
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return omp_get_max_threads();
    return physical_cores();
#else
    return 1;
#endif
}

/* How long a thread at a barrier spins before it sleeps (RLXC_SPIN_US, microseconds). Spinning
 * answers in nanoseconds when the others are close behind, as on an idle machine; sleeping
 * gives the core back, so that on a loaded machine the scheduler can move a preempted team
 * thread onto it. */
static long spin_ns(void) {
    static _Atomic long ns = -1;
    long v = atomic_load_explicit(&ns, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv("RLXC_SPIN_US");
        v = env && atoi(env) >= 0 ? 1000L * atoi(env) : 1000L * RLXC_SPIN_US_DEFAULT;
        atomic_store_explicit(&ns, v, memory_order_relaxed);
    }
    return v;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex(_Atomic unsigned *addr, int op, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, op, val, NULL, NULL, 0);
}

/* The last thread to arrive starts the next generation; the others wait for it to change.
 * A sleeper registers before its last look at gen, the waker bumps gen before it looks at the
 * sleepers (both sequentially consistent), so one of them sees the other: no lost wake-up. */
void rlxc_barrier_wait(rlxc_barrier *b) {
    const unsigned gen = atomic_load(&b->gen);
    if (atomic_fetch_add(&b->arrived, 1) == atomic_load_explicit(&b->n, memory_order_relaxed) - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->gen, 1);
        if (atomic_load(&b->sleepers)) futex(&b->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
        return;
    }
    const long budget = spin_ns();
    const uint64_t t0 = budget ? now_ns() : 0;
    for (unsigned i = 1; budget; i++) {
        if (atomic_load_explicit(&b->gen, memory_order_acquire) != gen) return;
        cpu_relax();
        if (!(i & 63) && now_ns() - t0 > (uint64_t)budget) break;
    }
    atomic_fetch_add(&b->sleepers, 1);
    while (atomic_load(&b->gen) == gen) futex(&b->gen, FUTEX_WAIT_PRIVATE, gen);
    atomic_fetch_sub(&b->sleepers, 1);
}

/* The profile's counters (rlxc_profile_start): per thread and stage, and the runs' own. */
static _Atomic uint64_t prof_ns[RLXC_PROFILE_THREADS][RLXC_TIMES], prof_wall, prof_runs;
static _Atomic int prof_on, prof_threads;

static const char *const time_names[RLXC_TIMES] = {
    "other", "embed", "norm", "quantize", "qkv", "heads", "attention", "o_proj",
    "ffn_up", "ffn_down", "experts", "ple", "lm_head", "taps", "wait"};

const char *rlxc_time_name(rlxc_time t) { return (unsigned)t < RLXC_TIMES ? time_names[t] : "?"; }

int rlxc_profile_start(void) {
    if (atomic_load(&prof_on)) return -1;
    for (int t = 0; t < RLXC_PROFILE_THREADS; t++)
        for (int s = 0; s < RLXC_TIMES; s++) atomic_store_explicit(&prof_ns[t][s], 0, memory_order_relaxed);
    atomic_store(&prof_wall, 0);
    atomic_store(&prof_runs, 0);
    atomic_store(&prof_threads, 0);
    atomic_store(&prof_on, 1);
    return 0;
}

int rlxc_profile_stop(uint64_t *ns, int max_threads, uint64_t *wall_ns, uint64_t *runs) {
    if (!atomic_exchange(&prof_on, 0)) return -1;
    int n = atomic_load(&prof_threads);
    n = n < max_threads ? n : max_threads;
    for (size_t t = 0; t < (size_t)n; t++)
        for (size_t s = 0; s < RLXC_TIMES; s++) ns[t * RLXC_TIMES + s] = atomic_load_explicit(&prof_ns[t][s], memory_order_relaxed);
    *wall_ns = atomic_load(&prof_wall);
    *runs = atomic_load(&prof_runs);
    return n;
}

rlxc_time rlxc_clock_switch(rlxc_clock *c, rlxc_time what) {
    const uint64_t t = now_ns();
    const rlxc_time was = c->what;
    atomic_fetch_add_explicit(&c->ns[was], t - c->last, memory_order_relaxed);
    c->last = t, c->what = what;
    return was;
}

/* fn on one thread of the team, on a clock while a profile runs. */
static void run_timed(const rlxc_team *tm, void (*fn)(const rlxc_team *tm, void *arg), void *arg, int timed) {
    if (!timed || tm->ith >= RLXC_PROFILE_THREADS) {
        fn(tm, arg);
        return;
    }
    rlxc_clock clk = {now_ns(), RLXC_TIME_OTHER, prof_ns[tm->ith]};
    rlxc_team own = *tm;
    own.clk = &clk;
    fn(&own, arg);
    rlxc_clock_switch(&clk, RLXC_TIME_OTHER);
    for (int n = atomic_load(&prof_threads); n <= tm->ith && !atomic_compare_exchange_weak(&prof_threads, &n, tm->ith + 1);) {
    }
}

void rlxc_team_run(int n_threads, void (*fn)(const rlxc_team *tm, void *arg), void *arg) {
    const int nth = rlxc_threads_usable(n_threads), timed = atomic_load_explicit(&prof_on, memory_order_relaxed);
    const uint64_t t0 = timed ? now_ns() : 0;
    if (nth == 1) {
        run_timed(&(rlxc_team){0, 1, NULL, NULL, NULL}, fn, arg, timed);
    } else {
        rlxc_barrier bar = {0};
#pragma omp parallel num_threads(nth)
        {
            rlxc_tickets own = {0, RLXC_NO_TICKET};
#ifdef _OPENMP
            const rlxc_team tm = {omp_get_thread_num(), omp_get_num_threads(), &bar, &own, NULL};
#else
            const rlxc_team tm = {0, 1, &bar, &own, NULL};
#endif
            /* every thread stores the same size (OpenMP may grant fewer threads than asked) */
            atomic_store_explicit(&bar.n, tm.nth, memory_order_relaxed);
            run_timed(&tm, fn, arg, timed);
        }
    }
    if (!timed) return;
    atomic_fetch_add(&prof_wall, now_ns() - t0);
    atomic_fetch_add(&prof_runs, 1);
}
