/* Whether the AVX-512 GEMMs may use AMX tiles (kernels_avx512/gemm.c): the CPU must have AMX-TILE
 * and AMX-INT8, and Linux (5.16 and later) must grant the process the tile data state, which it
 * refuses where a thread's signal stack is too small for the larger signal frame. */
#define _GNU_SOURCE /* syscall */
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "avx512.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_state = -1; /* -1: not asked yet */

static int amx_granted(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return 0;
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

int rlxc_amx_usable(void) {
    int v = __atomic_load_n(&amx_state, __ATOMIC_RELAXED);
    if (v < 0) {
        v = rlxc_env_switch("RLXC_AMX", 1) ? amx_granted() : 0;
        __atomic_store_n(&amx_state, v, __ATOMIC_RELAXED);
    }
    return v;
}

int rlxc_amx_set_enabled(int on) {
    __atomic_store_n(&amx_state, on < 0 ? -1 : on ? amx_granted() : 0, __ATOMIC_RELAXED);
    return rlxc_amx_usable();
}
