/* The NEON kernel tables: one for every AArch64 CPU (plain ARMv8.0 Advanced SIMD) and one
 * whose quantized products use the ARMv8.2 dot-product instructions. Both are "neon" to the
 * dispatcher; the choice between them is made here, once per call, from the CPU. */
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include "neon.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* <asm/hwcap.h>; older headers lack it */
#endif

/* The two tables differ only in their quantized products (groups q and wq, and the decode on
 * repacked Q4_0 / Q8_0 rows, dotprod only). */
#define NEON_TABLE(q, x16) RLXC_KERNEL_TABLE("neon", neon, q, q, neon, neon, neon, neon, neon, neon, x16, none)

static const rlxc_kernels plain = NEON_TABLE(neon, none);
static const rlxc_kernels dotprod = NEON_TABLE(neon_dotprod, neon_dotprod);

/* The dotprod table when the CPU has SDOT, else the plain one. RLXC_NEON_NODOT=1 forces the
 * plain table on a dotprod CPU, so both can be tested on one machine. */
const rlxc_kernels *rlxc_kernels_neon(void) {
    const char *nodot = getenv("RLXC_NEON_NODOT");
    if (nodot && *nodot && strcmp(nodot, "0") != 0) return &plain;
#if defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) return &dotprod;
#endif
    return &plain;
}
