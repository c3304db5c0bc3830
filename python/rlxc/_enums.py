"""Enumerations of the per-layer fields (values match the C engine's enums)."""

from enum import IntEnum


class NormType(IntEnum):
    """The layer's main norm: RMSNorm (Llama, Gemma, ...) or LayerNorm (StarCoder2)."""

    RMSNORM = 0
    LAYERNORM = 1


class FfnType(IntEnum):
    """GATED: down(act(gate x) * up x). STANDARD: down(act(up x)) (StarCoder2's c_fc / c_proj)."""

    GATED = 0
    STANDARD = 1


class Activation(IntEnum):
    """FFN activation: SiLU or GELU with the tanh approximation."""

    SILU = 0
    GELU_TANH = 1


class RopeLayout(IntEnum):
    """PREFIX: rotate the leading rotary_dim dims, pairs (k, k + rotary_dim/2).
    PROPORTIONAL (Gemma 4 full layers): pairs (k, k + head_dim/2) for k < rotary_dim/2."""

    PREFIX = 0
    PROPORTIONAL = 1
