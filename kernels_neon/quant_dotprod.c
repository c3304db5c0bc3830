/* The quantized products of the dotprod table: the same template as quant.c with SDOT
 * (ARMv8.2 dotprod, 16 products per instruction) for the int8 dot. Only the functions of
 * this file carry the dotprod target, so the rest of the build stays plain ARMv8.0, and
 * rlxc_kernels_neon() hands this table out only when HWCAP_ASIMDDP is set. */
#include "neon.h"

/* Every function defined from here on, the template's included, targets dotprod. */
#pragma GCC target("arch=armv8.2-a+dotprod")

RLXC_INLINE int32x4_t dot32_sdot(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
    return vdotq_s32(vdotq_s32(acc, w0, x0), w1, x1);
}

#define QMAT_NAME(f) f##_neon_dotprod
#define QMAT_DOT32 dot32_sdot
#include "qmat.h"
