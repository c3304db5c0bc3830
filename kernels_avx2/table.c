/* The AVX2 kernel table: every kernel has an AVX2 implementation. */
#include "avx2.h"

static const rlxc_kernels table = {
    .isa = "avx2",
    .matvec_f32 = rlxc_matvec_f32_avx2,
    .matmul_f32 = rlxc_matmul_f32_avx2,
    .matvec_q4_0 = rlxc_matvec_q4_0_avx2,
    .matmul_q4_0 = rlxc_matmul_q4_0_avx2,
    .matvec_q8_0 = rlxc_matvec_q8_0_avx2,
    .matmul_q8_0 = rlxc_matmul_q8_0_avx2,
    .quantize_row_q8_0 = rlxc_quantize_row_q8_0_avx2,
    RLXC_AVX2_WTYPE_KERNELS,
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

const rlxc_kernels *rlxc_kernels_avx2(void) { return &table; }
