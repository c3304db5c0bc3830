/* Run-time kernel selection: one table chosen from the CPU's features, or forced by
 * RLXC_ISA, so a single build runs on any x86-64 or aarch64 CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#define RLXC_ERRLEN_DISPATCH 256

static const rlxc_kernels *active;

/* Builds without an ISA directory (e.g. x86 files on aarch64) resolve to these. */
__attribute__((weak)) const rlxc_kernels *rlxc_kernels_avx2(void) { return NULL; }
__attribute__((weak)) const rlxc_kernels *rlxc_kernels_avx512(void) { return NULL; }
__attribute__((weak)) const rlxc_kernels *rlxc_kernels_neon(void) { return NULL; }

#if defined(__x86_64__) || defined(__i386__)
static int has_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
static int has_avx512(void) {
    return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
#else
static int has_avx2(void) { return 0; }
static int has_avx512(void) { return 0; }
#endif

#if defined(__aarch64__)
static int has_neon(void) { return 1; } /* Advanced SIMD is mandatory on AArch64 */
#else
static int has_neon(void) { return 0; }
#endif

/* The table for an ISA if both the build has it and the CPU runs it. */
static const rlxc_kernels *table_for(const char *isa, char *err, size_t errlen) {
    const rlxc_kernels *t = NULL;
    int cpu_ok = 0;
    if (!strcmp(isa, "scalar")) return &rlxc_kernels_scalar;
    if (!strcmp(isa, "avx2")) { t = rlxc_kernels_avx2(); cpu_ok = has_avx2(); }
    else if (!strcmp(isa, "avx512")) { t = rlxc_kernels_avx512(); cpu_ok = has_avx512(); }
    else if (!strcmp(isa, "neon")) { t = rlxc_kernels_neon(); cpu_ok = has_neon(); }
    else {
        snprintf(err, errlen, "unknown ISA '%s' (expected scalar, avx2, avx512 or neon)", isa);
        return NULL;
    }
    if (!t) snprintf(err, errlen, "ISA '%s' is not compiled into this build of rlxc", isa);
    else if (!cpu_ok) snprintf(err, errlen, "this CPU lacks the features ISA '%s' needs (has: %s)", isa, rlxc_cpu_features());
    return t && cpu_ok ? t : NULL;
}

static const rlxc_kernels *best_table(void) {
    const char *order[] = {"avx512", "avx2", "neon"};
    char err[128];
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        const rlxc_kernels *t = table_for(order[i], err, sizeof err);
        if (t) return t;
    }
    return &rlxc_kernels_scalar;
}

const rlxc_kernels *rlxc_kernels_active(void) {
    if (!active) active = best_table();
    return active;
}

int rlxc_kernels_select(const char *isa, char *err, size_t errlen) {
    const rlxc_kernels *t = !strcmp(isa, "auto") ? best_table() : table_for(isa, err, errlen);
    if (!t) return -1;
    active = t;
    return 0;
}

int rlxc_kernels_available(const char *isa) {
    char err[RLXC_ERRLEN_DISPATCH];
    return table_for(isa, err, sizeof err) != NULL;
}

int rlxc_kernels_init(char *err, size_t errlen) {
    const char *isa = getenv("RLXC_ISA");
    if (!isa || !*isa) isa = "auto";
    if (rlxc_kernels_select(isa, err, errlen) == 0) return 0;
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, " (from RLXC_ISA)");
    return -1;
}

const char *rlxc_cpu_features(void) {
    static char buf[160];
    buf[0] = 0;
#if defined(__x86_64__) || defined(__i386__)
    static const char *names[] = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                  "avx512vl", "avx512dq", "avx512vnni"};
    int on[10] = {__builtin_cpu_supports("sse4.2"), __builtin_cpu_supports("avx"),
                  __builtin_cpu_supports("avx2"), __builtin_cpu_supports("fma"),
                  __builtin_cpu_supports("f16c"), __builtin_cpu_supports("avx512f"),
                  __builtin_cpu_supports("avx512bw"), __builtin_cpu_supports("avx512vl"),
                  __builtin_cpu_supports("avx512dq"), __builtin_cpu_supports("avx512vnni")};
    for (int i = 0; i < 10; i++)
        if (on[i]) { strcat(buf, buf[0] ? "," : ""); strcat(buf, names[i]); }
#elif defined(__aarch64__) && defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    strcat(buf, "neon");
    if (hw & HWCAP_ASIMDDP) strcat(buf, ",dotprod");
    if (hw & HWCAP_FPHP) strcat(buf, ",fp16");
#endif
    return buf;
}
