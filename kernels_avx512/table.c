/* The AVX-512 kernel table: the AVX2 kernels, with those that measurably win on 512-bit
 * registers (the VNNI quantized dot products) replaced. */
#include "avx512.h"

static const rlxc_kernels table = {
    .isa = "avx512",
    .matvec_f32 = rlxc_matvec_f32_avx2,
    .matmul_f32 = rlxc_matmul_f32_avx2,
    .matvec_q4_0 = rlxc_matvec_q4_0_avx512,
    .matmul_q4_0 = rlxc_matmul_q4_0_avx512,
    .matvec_q8_0 = rlxc_matvec_q8_0_avx512,
    .matmul_q8_0 = rlxc_matmul_q8_0_avx512,
    .quantize_row_q8_0 = rlxc_quantize_row_q8_0_avx2,
    RLXC_AVX512_WTYPE_KERNELS,
    .rmsnorm = rlxc_rmsnorm_avx2,
    .layernorm = rlxc_layernorm_avx2,
    .rope = rlxc_rope_avx2,
    .attn_head = rlxc_attn_head_avx2,
    .silu = rlxc_silu_avx2,
    .gelu_tanh = rlxc_gelu_tanh_avx2,
    .mul = rlxc_mul_avx2,
    .add = rlxc_add_avx2,
    .scale = rlxc_scale_avx2,
    .softcap = rlxc_softcap_avx2,
};

const rlxc_kernels *rlxc_kernels_avx512(void) { return &table; }
