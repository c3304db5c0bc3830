/* Thread count policy. GNU OpenMP's pool does not survive fork(): a child that enters a
 * parallel region after the parent used threads hangs. So a forked child runs the engine
 * single-threaded, without ever entering an OpenMP construct. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "rlxc.h"
#include "team.h"

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

void rlxc_team_run(int n_threads, void (*fn)(const rlxc_team *tm, void *arg), void *arg) {
    const int nth = rlxc_threads_usable(n_threads);
    if (nth == 1) {
        fn(&(rlxc_team){0, 1}, arg);
        return;
    }
#pragma omp parallel num_threads(nth)
    {
#ifdef _OPENMP
        const rlxc_team tm = {omp_get_thread_num(), omp_get_num_threads()};
#else
        const rlxc_team tm = {0, 1};
#endif
        fn(&tm, arg);
    }
}
