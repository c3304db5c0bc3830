"""Kernels one by one on NumPy arrays, through the active ISA's kernel table.

Inputs must be C-contiguous float32 arrays (quantized weights: uint8 GGUF blocks); they are
never modified, and every op returns a new array. ``rlxc.set_isa()`` picks the kernels.
"""

from ._rlxc import (  # noqa: F401
    attention,
    dequantize,
    gelu_tanh,
    layernorm,
    matmul,
    quantize_q4_0,
    quantize_q4_1,
    quantize_q4_k,
    quantize_q5_1,
    quantize_q5_k,
    quantize_q8_0,
    rmsnorm,
    rope,
    scale,
    silu,
    softcap,
)

__all__ = ["attention", "dequantize", "gelu_tanh", "layernorm", "matmul", "quantize_q4_0", "quantize_q4_1",
           "quantize_q4_k", "quantize_q5_1", "quantize_q5_k", "quantize_q8_0", "rmsnorm", "rope", "scale", "silu", "softcap"]
