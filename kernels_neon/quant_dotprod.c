/* The quantized products of the dotprod table: the same templates as quant.c with SDOT
 * (ARMv8.2 dotprod, 16 products per instruction) for the int8 dot. Only the functions of
 * this file carry the dotprod target, so the rest of the build stays plain ARMv8.0, and
 * rlxc_kernels_neon() hands this table out only when HWCAP_ASIMDDP is set. */
#include "neon.h"

/* Every function defined from here on, the templates' included, targets dotprod. */
#pragma GCC target("arch=armv8.2-a+dotprod")

#define QMAT_NAME(f) f##_neon_dotprod
#define QMAT_DOT16 vdotq_s32
#include "qmat.h"
#include "kqmat.h"
