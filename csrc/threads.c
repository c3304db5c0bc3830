/* Thread count policy. GNU OpenMP's pool does not survive fork(): a child that enters a
 * parallel region after the parent used threads hangs. So a forked child runs the engine
 * single-threaded, without ever entering an OpenMP construct. */
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "rlxc.h"

static volatile int in_fork_child;

static void on_fork_child(void) { in_fork_child = 1; }

__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

int rlxc_threads_usable(int requested) {
    if (in_fork_child || requested < 1) return 1;
    return requested;
}

int rlxc_threads_default(void) {
#ifdef _OPENMP
    return in_fork_child ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}
