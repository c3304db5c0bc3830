/* The NEON kernel tables: one for every AArch64 CPU (plain ARMv8.0 Advanced SIMD) and one
 * whose quantized products use the ARMv8.2 dot-product instructions. Both are "neon" to the
 * dispatcher; the choice between them is made here, once per call, from the CPU. */
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include "../csrc/kernels_ref.h"
#include "neon.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* <asm/hwcap.h>; older headers lack it */
#endif

/* The two tables differ only in the suffix of their quantized products. */
#define NEON_TABLE(q)                                   \
    {                                                   \
        .isa = "neon",                                  \
        .matvec_f32 = rlxc_matvec_f32_neon,             \
        .matmul_f32 = rlxc_matmul_f32_neon,             \
        .matvec_q4_0 = rlxc_matvec_q4_0_##q,            \
        .matmul_q4_0 = rlxc_matmul_q4_0_##q,            \
        .matvec_q8_0 = rlxc_matvec_q8_0_##q,            \
        .matmul_q8_0 = rlxc_matmul_q8_0_##q,            \
        .quantize_row_q8_0 = rlxc_quantize_row_q8_0_neon, \
        RLXC_SCALAR_WTYPE_KERNELS, /* no NEON versions yet */ \
        .rmsnorm = rlxc_rmsnorm_neon,                   \
        .layernorm = rlxc_layernorm_neon,               \
        .rope = rlxc_rope_neon,                         \
        .attn_head = rlxc_attn_head_neon,               \
        .silu = rlxc_silu_neon,                         \
        .gelu_tanh = rlxc_gelu_tanh_neon,               \
        .mul = rlxc_mul_neon,                           \
        .add = rlxc_add_neon,                           \
        .scale = rlxc_scale_neon,                       \
        .softcap = rlxc_softcap_neon,                   \
    }

static const rlxc_kernels plain = NEON_TABLE(neon);
static const rlxc_kernels dotprod = NEON_TABLE(neon_dotprod);

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
