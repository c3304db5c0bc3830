"""NumPy oracle for one rlxc layer and a stack of them with a KV cache.

Driven only by a *fields* dict (the rlxc.Layer / ``rlxc_layer`` field names) and a *weights*
dict (the weight slot names, float arrays, matrices ``[out, in]``). Nothing here knows about
architectures: it is exactly the per-layer computation of csrc/rlxc.h, written for clarity.

Computation of one layer (per token, all in ``dtype``, float64 by default)::

    a = Norm_in(x)                         # RMSNorm x*rsqrt(mean(x^2)+eps)*(norm_offset+w)
                                           # or LayerNorm (w, + b if input_norm_bias)
    q = Wq a (+bq if qkv_bias); k, v alike (v_from_k: v = raw k projection)
    has_qk_norm: per-head RMSNorm of q and k with weight (qk_norm_offset + w)
    has_v_norm:  per-head weightless RMSNorm of v
    RoPE(q, k) at the token position (rotate-half pairs; see rope_cos_sin)
    K/V appended to the layer's cache (kv_shared_from = j >= 0: no K/V, read layer j's cache)
    s = attn_scale q.k ; softcap if attn_softcap > 0 ; causal + sliding window
        (key j visible to query i iff j <= i and i - j < W; W = 0: full) ; softmax ; @ v
        GQA: query head h reads kv head h // (nq / nkv)
    o = Wo attn (+bo if o_bias) ; sandwich_norm: o = Norm(o; attn_post_norm)
    h = x + o
    f = Norm(h; ffn_norm (+ ffn_norm.bias if post_attn_norm_bias))
    GATED:    f = down(act(gate f (+gb)) * (up f (+ub))) (+db)
    STANDARD: f = down(act(up f (+ub))) (+db)      biases iff ffn_up_bias / ffn_down_bias
    sandwich_norm: f = Norm(f; ffn_post_norm)
    y = h + f
    ple_dim > 0: y = y + RMSNorm(ple_proj(act(ple_gate y) * ple_slice); ple_norm, norm_offset)
    y = y * layer_scalar

Quantized matrices: pass the (dequantized) float weights and ``wtypes={slot: "q4_0"|"q8_0"}``;
the engine multiplies such matrices with activations rounded to Q8_0 blocks, which
``wtypes`` reproduces here (``quant_act=False`` turns that off).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = [
    "DEFAULT_FIELDS",
    "RMSNORM", "LAYERNORM", "GATED", "STANDARD", "SILU", "GELU_TANH", "PREFIX", "PROPORTIONAL",
    "full_fields",
    "rmsnorm", "layernorm", "silu", "gelu_tanh", "softcap",
    "quantize_q4_0", "dequantize_q4_0", "quantize_q8_0", "dequantize_q8_0", "roundtrip",
    "rope_inv_freq", "rope_cos_sin", "apply_rope",
    "weight_shapes", "random_weights",
    "LayerCache", "ref_layer_forward", "ref_pipeline", "ref_layers_isolated", "RefPipeline",
    "fields_of", "weights_of", "wtypes_of",
]

# Enum values, equal to the C enums (and the rlxc IntEnums).
RMSNORM, LAYERNORM = 0, 1
GATED, STANDARD = 0, 1
SILU, GELU_TANH = 0, 1
PREFIX, PROPORTIONAL = 0, 1

#: Llama-style defaults (hidden 64, 4 heads of 16, SiLU gated FFN of 128, RMSNorm). Fields that
#: a dict leaves out take these values; ``attn_scale``/``rotary_dim`` None mean
#: ``head_dim ** -0.5`` / ``head_dim``.
DEFAULT_FIELDS: dict[str, Any] = dict(
    eps=1e-6, attn_scale=None, head_dim=16, num_q_heads=4, num_kv_heads=4, rope_base=10000.0,
    rotary_dim=None, sliding_window=0, has_v_norm=0, layer_scalar=1.0, norm_type=RMSNORM,
    ffn_type=GATED, activation=SILU, qk_norm_offset=0.0, input_norm_bias=0,
    post_attn_norm_bias=0, ffn_up_bias=0, ffn_down_bias=0, hidden_size=64,
    intermediate_size=128, norm_offset=0.0, qkv_bias=0, o_bias=0, has_qk_norm=0,
    sandwich_norm=0, attn_softcap=0.0, rope_layout=PREFIX, rope_attn_factor=1.0, v_from_k=0,
    kv_shared_from=-1, ple_dim=0, num_experts=0, num_experts_used=0, expert_intermediate_size=0,
    moe_norm_topk=0,
)

FIELD_NAMES = tuple(DEFAULT_FIELDS)


def full_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``fields`` completed with DEFAULT_FIELDS (enums as plain ints)."""
    unknown = set(fields) - set(DEFAULT_FIELDS)
    if unknown:
        raise KeyError(f"unknown layer fields: {sorted(unknown)}")
    f = dict(DEFAULT_FIELDS)
    f.update(fields)
    if f["attn_scale"] is None:
        f["attn_scale"] = f["head_dim"] ** -0.5
    if f["rotary_dim"] is None:
        f["rotary_dim"] = f["head_dim"]
    for key in ("norm_type", "ffn_type", "activation", "rope_layout", "sliding_window",
                "kv_shared_from", "ple_dim", "head_dim", "num_q_heads", "num_kv_heads",
                "rotary_dim", "hidden_size", "intermediate_size"):
        f[key] = int(f[key])
    for key in ("has_v_norm", "input_norm_bias", "post_attn_norm_bias", "ffn_up_bias",
                "ffn_down_bias", "qkv_bias", "o_bias", "has_qk_norm", "sandwich_norm", "v_from_k"):
        f[key] = bool(f[key])
    return f


# ----------------------------------------------------------------------------- elementwise ops

def rmsnorm(x: np.ndarray, w: np.ndarray | None, eps: float, offset: float = 0.0) -> np.ndarray:
    """``x * rsqrt(mean(x^2, -1) + eps) * (offset + w)``; ``w=None``: no weight (and no offset)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    if w is not None:
        y = y * (offset + np.asarray(w, dtype=x.dtype))
    return y


def layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * w (+ b)`` over the last axis (biased variance)."""
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * np.asarray(w, dtype=x.dtype)
    if b is not None:
        y = y + np.asarray(b, dtype=x.dtype)
    return y


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``."""
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """tanh-approximated GELU (torch ``gelu(approximate="tanh")``)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """``cap * tanh(x / cap)``."""
    return cap * np.tanh(x / cap)


def _act(kind: int):
    if kind == SILU:
        return silu
    if kind == GELU_TANH:
        return gelu_tanh
    raise ValueError(f"unknown activation {kind}")


# ----------------------------------------------------------------------------- quantization
# GGUF block formats: 32 weights per block; Q4_0 = fp16 d + 16 nibble bytes (x = d*(q-8)),
# Q8_0 = fp16 d + 32 int8 (x = d*q). Implemented by the gguf package (ggml's *_ref quantizers).

def _gguf_type(name: str):
    from gguf import GGMLQuantizationType
    return {"q4_0": GGMLQuantizationType.Q4_0, "q8_0": GGMLQuantizationType.Q8_0}[name]


def quantize_q4_0(w: np.ndarray) -> np.ndarray:
    """float32 [N, K] (K % 32 == 0) -> uint8 [N, K//32*18] GGUF Q4_0 bytes."""
    from gguf import quants
    return quants.quantize(np.ascontiguousarray(w, dtype=np.float32), _gguf_type("q4_0"))


def dequantize_q4_0(b: np.ndarray) -> np.ndarray:
    """uint8 [N, K//32*18] Q4_0 bytes -> float32 [N, K]."""
    from gguf import quants
    return quants.dequantize(np.ascontiguousarray(b, dtype=np.uint8), _gguf_type("q4_0"))


def quantize_q8_0(w: np.ndarray) -> np.ndarray:
    """float32 [N, K] (K % 32 == 0) -> uint8 [N, K//32*34] GGUF Q8_0 bytes."""
    from gguf import quants
    return quants.quantize(np.ascontiguousarray(w, dtype=np.float32), _gguf_type("q8_0"))


def dequantize_q8_0(b: np.ndarray) -> np.ndarray:
    """uint8 [N, K//32*34] Q8_0 bytes -> float32 [N, K]."""
    from gguf import quants
    return quants.dequantize(np.ascontiguousarray(b, dtype=np.uint8), _gguf_type("q8_0"))


def roundtrip(w: np.ndarray, wtype: str) -> np.ndarray:
    """The float32 values a matrix holds after quantization to ``wtype`` ("f32": unchanged)."""
    if wtype == "f32":
        return np.asarray(w, dtype=np.float32)
    if wtype == "q4_0":
        return dequantize_q4_0(quantize_q4_0(w))
    if wtype == "q8_0":
        return dequantize_q8_0(quantize_q8_0(w))
    raise ValueError(f"unknown weight type {wtype!r}")


def _q8_activations(x: np.ndarray) -> np.ndarray:
    """Round activation rows to Q8_0 (what the engine feeds quantized matmuls), same dtype."""
    shape = x.shape
    x2 = np.asarray(x, dtype=np.float32).reshape(-1, shape[-1])
    return roundtrip(x2, "q8_0").reshape(shape).astype(x.dtype)


def quantize_q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_K_ref in float32 NumPy, the activations of the K-quant dots:
    rows [T, K] (K % 256 == 0) -> (d [T, K//256] float32, q [T, K//256, 256] int8). Per block
    the value of largest magnitude (the first on ties) maps to -127; q = round-half-even."""
    x = np.asarray(x, dtype=np.float32).reshape(x.shape[0], -1, 256)
    big = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)          # [T, nb, 1]
    with np.errstate(divide="ignore"):
        iscale = np.where(big == 0, np.float32(0), np.float32(-127) / big).astype(np.float32)
    q = np.minimum(np.rint(iscale * x), 127).astype(np.int8)
    with np.errstate(divide="ignore"):
        d = np.where(iscale == 0, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    return d[..., 0], q


def _q8k_activations(x: np.ndarray) -> np.ndarray:
    """Round activation rows to Q8_K (what the engine feeds K-quant matmuls), same dtype."""
    shape = x.shape
    d, q = quantize_q8_k(np.asarray(x, dtype=np.float32).reshape(-1, shape[-1]))
    return (d[..., None] * q.astype(np.float32)).reshape(shape).astype(x.dtype)


def round_activations(x: np.ndarray, wtype: str) -> np.ndarray:
    """The activations a matrix of ``wtype`` multiplies: Q8_0 for the 32-blocks (q4_0, q4_1,
    q5_0, q5_1, q8_0, iq4_nl), Q8_K for the 256-blocks, unchanged for float types."""
    if wtype in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"):
        return _q8_activations(x)
    if wtype in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"):
        return _q8k_activations(x)
    return x


# ----------------------------------------------------------------------------- RoPE

def rope_inv_freq(f: Mapping[str, Any], freq_factors: np.ndarray | None = None) -> np.ndarray:
    """Inverse frequencies of the ``rotary_dim/2`` rotated pairs.

    ``inv_freq[k] = rope_base ** (-2k / denom) / factor[k]`` with ``denom = rotary_dim``
    (PREFIX) or ``head_dim`` (PROPORTIONAL).
    """
    rd, hd = f["rotary_dim"], f["head_dim"]
    denom = rd if f["rope_layout"] == PREFIX else hd
    k = np.arange(rd // 2, dtype=np.float64)
    inv = float(f["rope_base"]) ** (-2.0 * k / denom)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64).reshape(-1)
    return inv


def rope_cos_sin(f: Mapping[str, Any], positions: np.ndarray,
                 freq_factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin`` of shape [T, rotary_dim/2], both multiplied by ``rope_attn_factor``."""
    ang = np.asarray(positions, dtype=np.float64)[:, None] * rope_inv_freq(f, freq_factors)[None, :]
    a = float(f["rope_attn_factor"])
    return np.cos(ang) * a, np.sin(ang) * a


def apply_rope(x: np.ndarray, f: Mapping[str, Any], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE of ``x`` [T, n_heads, head_dim]; other dims pass through.

    PREFIX: pairs (k, k + rotary_dim/2) for k < rotary_dim/2.
    PROPORTIONAL: pairs (k, k + head_dim/2) for k < rotary_dim/2.
    """
    rd, hd = f["rotary_dim"], f["head_dim"]
    n = rd // 2
    if n == 0:
        return x
    half = n if f["rope_layout"] == PREFIX else hd // 2
    y = x.copy()
    c = cos[:, None, :].astype(x.dtype)
    s = sin[:, None, :].astype(x.dtype)
    x1 = x[..., 0:n]
    x2 = x[..., half:half + n]
    y[..., 0:n] = x1 * c - x2 * s
    y[..., half:half + n] = x2 * c + x1 * s
    return y


# ----------------------------------------------------------------------------- weights

def weight_shapes(fields: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Shapes of the slots a layer with these fields uses (vectors as 1-D shapes)."""
    f = full_fields(fields)
    H, I, hd = f["hidden_size"], f["intermediate_size"], f["head_dim"]
    nq, nkv = f["num_q_heads"], f["num_kv_heads"]
    own_kv = f["kv_shared_from"] < 0
    s: dict[str, tuple[int, ...]] = {"attn_norm": (H,), "q_proj": (nq * hd, H), "o_proj": (H, nq * hd),
                                     "ffn_norm": (H,)}
    if I > 0:
        s.update(up_proj=(I, H), down_proj=(H, I))
    E, EI = f["num_experts"], f["expert_intermediate_size"]
    if E > 0:
        s.update(router=(E, H), gate_exps=(E * EI, H), up_exps=(E * EI, H), down_exps=(E * H, EI))
    if f["norm_type"] == LAYERNORM and f["input_norm_bias"]:
        s["attn_norm.bias"] = (H,)
    if f["norm_type"] == LAYERNORM and f["post_attn_norm_bias"]:
        s["ffn_norm.bias"] = (H,)
    if f["qkv_bias"]:
        s["q_proj.bias"] = (nq * hd,)
    if own_kv:
        s["k_proj"] = (nkv * hd, H)
        if f["qkv_bias"]:
            s["k_proj.bias"] = (nkv * hd,)
        if not f["v_from_k"]:
            s["v_proj"] = (nkv * hd, H)
            if f["qkv_bias"]:
                s["v_proj.bias"] = (nkv * hd,)
    if f["o_bias"]:
        s["o_proj.bias"] = (H,)
    if f["has_qk_norm"]:
        s["q_norm"] = (hd,)
        if own_kv:
            s["k_norm"] = (hd,)
    if f["sandwich_norm"]:
        s["attn_post_norm"] = (H,)
        s["ffn_post_norm"] = (H,)
    if f["ffn_type"] == GATED and I > 0:
        s["gate_proj"] = (I, H)
        if f["ffn_up_bias"]:
            s["gate_proj.bias"] = (I,)
    if f["ffn_up_bias"] and I > 0:
        s["up_proj.bias"] = (I,)
    if f["ffn_down_bias"] and I > 0:
        s["down_proj.bias"] = (H,)
    if f["ple_dim"] > 0:
        P = f["ple_dim"]
        s["ple_gate"] = (P, H)
        s["ple_proj"] = (H, P)
        s["ple_norm"] = (H,)
    return s


def random_weights(fields: Mapping[str, Any], rng: np.random.Generator, scale: float = 0.1,
                   freq_factors: bool = False) -> dict[str, np.ndarray]:
    """Random float32 weights for every used slot (norm weights around 1 - norm_offset)."""
    f = full_fields(fields)
    out = {}
    for name, shape in weight_shapes(f).items():
        w = rng.normal(0.0, scale, size=shape)
        if name in ("attn_norm", "ffn_norm", "attn_post_norm", "ffn_post_norm", "ple_norm"):
            w = w + 1.0 - f["norm_offset"]
        elif name in ("q_norm", "k_norm"):
            w = w + 1.0 - f["qk_norm_offset"]
        out[name] = w.astype(np.float32)
    if freq_factors and f["rotary_dim"] > 0:
        out["rope_freq_factors"] = rng.uniform(0.5, 4.0, size=f["rotary_dim"] // 2).astype(np.float32)
    return out


# ----------------------------------------------------------------------------- layer

class LayerCache:
    """K/V cache of one layer: ``k``, ``v`` of shape [n_tokens, num_kv_heads, head_dim]."""

    def __init__(self, nkv: int, hd: int, dtype=np.float64):
        self.k = np.zeros((0, nkv, hd), dtype=dtype)
        self.v = np.zeros((0, nkv, hd), dtype=dtype)

    def __len__(self) -> int:
        return self.k.shape[0]

    def truncate(self, n: int) -> None:
        """Forget positions >= n (rewind)."""
        self.k = self.k[:n]
        self.v = self.v[:n]

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        self.k = np.concatenate([self.k, k.astype(self.k.dtype)], axis=0)
        self.v = np.concatenate([self.v, v.astype(self.v.dtype)], axis=0)


def _norm(f: Mapping[str, Any], x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if f["norm_type"] == RMSNORM:
        return rmsnorm(x, w, f["eps"], f["norm_offset"])
    return layernorm(x, w, b, f["eps"])


def ref_layer_forward(fields: Mapping[str, Any], weights: Mapping[str, np.ndarray], x: np.ndarray,
                      cache: LayerCache, pos0: int, ple: np.ndarray | None = None,
                      wtypes: Mapping[str, str] | None = None, quant_act: bool = True,
                      dtype=np.float64) -> np.ndarray:
    """Run one layer on ``x`` [T, hidden] at positions ``pos0 .. pos0+T-1``.

    ``cache``: this layer's LayerCache; it is rewound to ``pos0`` and the T new K/V rows are
    appended. For a layer with ``kv_shared_from = j >= 0`` pass layer j's cache instead: it is
    only read (it must already hold positions ``0 .. pos0+T-1``).
    ``ple``: [T, ple_dim], this layer's slice of the per-layer input (required iff ple_dim > 0).
    ``wtypes``: slot -> weight type ("f32", "q4_0", "q4_k", ...); for integer-dot slots the
    activation entering the matrix is rounded as the engine does (round_activations) when
    ``quant_act`` (the weights themselves are taken as given, i.e. pass already dequantized
    values).
    Returns the layer output [T, hidden] in ``dtype``.
    """
    f = full_fields(fields)
    W = {k: np.asarray(v, dtype=dtype) for k, v in weights.items() if v is not None}
    wt = dict(wtypes or {})
    x = np.asarray(x, dtype=dtype)
    if x.ndim != 2 or x.shape[1] != f["hidden_size"]:
        raise ValueError(f"x must be [T, {f['hidden_size']}], got {x.shape}")
    T = x.shape[0]
    H, hd, nq, nkv = f["hidden_size"], f["head_dim"], f["num_q_heads"], f["num_kv_heads"]
    if nq % nkv:
        raise ValueError("num_q_heads must be a multiple of num_kv_heads")
    act = _act(f["activation"])

    def lin(name: str, inp: np.ndarray, bias: bool) -> np.ndarray:
        if quant_act:
            inp = round_activations(inp, wt.get(name, "f32"))
        y = inp @ W[name].T
        if bias:
            y = y + W[name + ".bias"]
        return y

    positions = np.arange(pos0, pos0 + T)
    cos, sin = rope_cos_sin(f, positions, W.get("rope_freq_factors"))

    # attention input
    a = _norm(f, x, W["attn_norm"], W.get("attn_norm.bias") if f["input_norm_bias"] else None)
    q = lin("q_proj", a, f["qkv_bias"]).reshape(T, nq, hd)
    if f["has_qk_norm"]:
        q = rmsnorm(q, W["q_norm"], f["eps"], f["qk_norm_offset"])
    q = apply_rope(q, f, cos, sin)

    if f["kv_shared_from"] < 0:
        k = lin("k_proj", a, f["qkv_bias"]).reshape(T, nkv, hd)
        if f["v_from_k"]:
            v = k.copy()
        else:
            v = lin("v_proj", a, f["qkv_bias"]).reshape(T, nkv, hd)
        if f["has_qk_norm"]:
            k = rmsnorm(k, W["k_norm"], f["eps"], f["qk_norm_offset"])
        if f["has_v_norm"]:
            v = rmsnorm(v, None, f["eps"])
        k = apply_rope(k, f, cos, sin)
        cache.truncate(pos0)
        if len(cache) != pos0:
            raise ValueError(f"cache holds {len(cache)} positions, cannot append at {pos0}")
        cache.append(k, v)
    if len(cache) < pos0 + T:
        raise ValueError(f"shared cache holds {len(cache)} positions, need {pos0 + T}")
    K = np.asarray(cache.k[:pos0 + T], dtype=dtype)
    V = np.asarray(cache.v[:pos0 + T], dtype=dtype)
    if K.shape[1:] != (nkv, hd):
        raise ValueError(f"cache K/V heads {K.shape[1:]} do not match ({nkv}, {hd})")

    # scores [nq, T, S]
    group = nq // nkv
    Kh = np.repeat(K, group, axis=1)  # [S, nq, hd]; head h -> kv head h // group
    Vh = np.repeat(V, group, axis=1)
    s = np.einsum("thd,shd->hts", q, Kh) * f["attn_scale"]
    if f["attn_softcap"] > 0:
        s = softcap(s, f["attn_softcap"])
    S = pos0 + T
    i = positions[:, None]
    j = np.arange(S)[None, :]
    visible = j <= i
    if f["sliding_window"] > 0:
        visible &= (i - j) < f["sliding_window"]
    s = np.where(visible[None], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    attn = np.einsum("hts,shd->thd", p, Vh).reshape(T, nq * hd)

    o = lin("o_proj", attn, f["o_bias"])
    if f["sandwich_norm"]:
        o = rmsnorm(o, W["attn_post_norm"], f["eps"], f["norm_offset"]) if f["norm_type"] == RMSNORM \
            else layernorm(o, W["attn_post_norm"], None, f["eps"])
    h = x + o

    g = _norm(f, h, W["ffn_norm"], W.get("ffn_norm.bias") if f["post_attn_norm_bias"] else None)
    m = np.zeros_like(h)
    if f["intermediate_size"] > 0:
        if f["ffn_type"] == GATED:
            m = act(lin("gate_proj", g, f["ffn_up_bias"])) * lin("up_proj", g, f["ffn_up_bias"])
        else:
            m = act(lin("up_proj", g, f["ffn_up_bias"]))
        m = lin("down_proj", m, f["ffn_down_bias"])
    if f["num_experts"] > 0:
        m = _experts(f, W, h, g, m, lambda name, inp, w: (round_activations(inp, wt.get(name, "f32")) if quant_act
                                                         else inp) @ w.T, act)
    if f["sandwich_norm"]:
        m = rmsnorm(m, W["ffn_post_norm"], f["eps"], f["norm_offset"]) if f["norm_type"] == RMSNORM \
            else layernorm(m, W["ffn_post_norm"], None, f["eps"])
    y = h + m

    if f["ple_dim"] > 0:
        if ple is None:
            raise ValueError("layer has ple_dim > 0 but no ple input was given")
        ple = np.asarray(ple, dtype=dtype).reshape(T, f["ple_dim"])
        e = act(lin("ple_gate", y, False)) * ple
        e = lin("ple_proj", e, False)
        y = y + rmsnorm(e, W["ple_norm"], f["eps"], f["norm_offset"])
    return y * f["layer_scalar"]


def _experts(f: Mapping[str, Any], W: Mapping[str, np.ndarray], h: np.ndarray, g: np.ndarray, dense: np.ndarray,
             lin: Any, act: Any) -> np.ndarray:
    """The FFN output of a mixture-of-experts layer: softmax router over every expert, the
    num_experts_used most probable (stable order on ties), renormalised if moe_norm_topk, times
    expert_scale; plus the dense FFN ``dense`` (times sigmoid(shared_gate . g), after its
    dense_post_norm) when intermediate_size > 0."""
    E, k, I, H, eps = f["num_experts"], f["num_experts_used"], f["expert_intermediate_size"], f["hidden_size"], f["eps"]

    def post(x: np.ndarray, name: str) -> np.ndarray:
        if name not in W:
            return x
        return rmsnorm(x, W[name], eps, f["norm_offset"]) if f["norm_type"] == RMSNORM \
            else layernorm(x, W[name], None, eps)

    xr = rmsnorm(h, W["router_norm"], eps) if "router_norm" in W else g
    xe = rmsnorm(h, W["moe_norm"], eps, f["norm_offset"]) if "moe_norm" in W else g
    z = lin("router", xr, W["router"])
    p = np.exp(z - z.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-p[t], kind="stable")[:k]
        w = p[t, chosen]
        if f["moe_norm_topk"]:
            w = w / w.sum()
        if "expert_scale" in W:
            w = w * W["expert_scale"][chosen]
        for e, we in zip(chosen, w):
            rows = slice(e * I, (e + 1) * I)
            a = act(lin("gate_exps", xe[t:t + 1], W["gate_exps"][rows])) * lin("up_exps", xe[t:t + 1], W["up_exps"][rows])
            out[t] += we * lin("down_exps", a, W["down_exps"][e * H:(e + 1) * H])[0]
    out = post(out, "moe_post_norm")
    if f["intermediate_size"] == 0:
        return out
    if "shared_gate" in W:
        dense = dense / (1.0 + np.exp(-(g @ W["shared_gate"])))[:, None]
    return post(dense, "dense_post_norm") + out


# ----------------------------------------------------------------------------- stack

def _as_pair(layer) -> tuple[dict, dict, dict]:
    """Accept (fields, weights), (fields, weights, wtypes), a dict with those keys or an
    rlxc.Layer; return (fields, weights, wtypes)."""
    if isinstance(layer, Mapping):
        return dict(layer["fields"]), dict(layer["weights"]), dict(layer.get("wtypes") or {})
    if isinstance(layer, (tuple, list)):
        if len(layer) == 2:
            return dict(layer[0]), dict(layer[1]), {}
        return dict(layer[0]), dict(layer[1]), dict(layer[2] or {})
    return fields_of(layer), weights_of(layer), wtypes_of(layer)


class RefPipeline:
    """Reference twin of ``rlxc.Pipeline``: ``prefill`` / ``decode_token`` / ``reset`` /
    ``n_past`` over a list of layers (see :func:`_as_pair` for accepted layer forms)."""

    def __init__(self, layers: Sequence[Any], quant_act: bool = True, dtype=np.float64):
        self.layers = [_as_pair(l) for l in layers]
        self.quant_act = quant_act
        self.dtype = dtype
        self.reset()

    def reset(self) -> None:
        self.caches = []
        for f, _, _ in self.layers:
            ff = full_fields(f)
            self.caches.append(LayerCache(ff["num_kv_heads"], ff["head_dim"], self.dtype))
        self.n_past = 0

    def _ple_slices(self, ple: np.ndarray | None, T: int) -> list[np.ndarray | None]:
        dims = [full_fields(f)["ple_dim"] for f, _, _ in self.layers]
        if sum(dims) == 0:
            return [None] * len(dims)
        if ple is None:
            raise ValueError("a layer has ple_dim > 0: ple is required")
        ple = np.asarray(ple).reshape(T, sum(dims))
        out, o = [], 0
        for d in dims:
            out.append(ple[:, o:o + d] if d else None)
            o += d
        return out

    def prefill(self, x: np.ndarray, ple: np.ndarray | None = None, layer_outputs: bool = False):
        """Run x [T, hidden] at positions n_past .. n_past+T-1; return out (and per-layer)."""
        x = np.asarray(x, dtype=self.dtype)
        T = x.shape[0]
        pos0 = self.n_past
        slices = self._ple_slices(ple, T)
        per = []
        for i, (f, w, wt) in enumerate(self.layers):
            j = int(full_fields(f)["kv_shared_from"])
            cache = self.caches[j] if j >= 0 else self.caches[i]
            x = ref_layer_forward(f, w, x, cache, pos0, slices[i], wt, self.quant_act, self.dtype)
            per.append(x)
        self.n_past = pos0 + T
        if layer_outputs:
            return x, np.stack(per)
        return x

    def decode_token(self, x: np.ndarray, pos: int, ple: np.ndarray | None = None,
                     layer_outputs: bool = False):
        """One token x [hidden] at position pos (<= n_past; smaller rewinds the cache)."""
        if pos > self.n_past:
            raise ValueError(f"pos {pos} > n_past {self.n_past}")
        self.n_past = pos
        x = np.asarray(x, dtype=self.dtype).reshape(1, -1)
        if ple is not None:
            ple = np.asarray(ple).reshape(1, -1)
        r = self.prefill(x, ple, layer_outputs)
        if layer_outputs:
            return r[0][0], r[1][:, 0]
        return r[0]


def ref_pipeline(layers: Sequence[Any], x: np.ndarray, ple: np.ndarray | None = None,
                 layer_outputs: bool = False, quant_act: bool = True, dtype=np.float64):
    """Run a fresh stack of layers on x [T, hidden] from position 0.

    Returns the last layer's output [T, hidden], and with ``layer_outputs`` also every layer's
    output stacked as [n_layers, T, hidden].
    """
    return RefPipeline(layers, quant_act, dtype).prefill(x, ple, layer_outputs)


def ref_layers_isolated(layers: Sequence[Any], x: np.ndarray, layer_outputs: np.ndarray,
                        ple: np.ndarray | None = None, quant_act: bool = True,
                        dtype=np.float64) -> np.ndarray:
    """Teacher-forced reference: layer i runs on the *given* output of layer i-1
    (``layer_outputs[i-1]``, e.g. the engine's; layer 0 on ``x``), from position 0.

    Returns [n_layers, T, hidden]. Each layer is then checked in isolation, so an error (or
    a rounding difference) in one layer does not propagate into the next layers' comparison.
    """
    pipe = RefPipeline(layers, quant_act, dtype)
    T = np.asarray(x).shape[0]
    slices = pipe._ple_slices(ple, T)
    out = []
    for i, (f, w, wt) in enumerate(pipe.layers):
        inp = x if i == 0 else layer_outputs[i - 1]
        j = int(full_fields(f)["kv_shared_from"])
        cache = pipe.caches[j] if j >= 0 else pipe.caches[i]
        out.append(ref_layer_forward(f, w, inp, cache, 0, slices[i], wt, quant_act, dtype))
    return np.stack(out)


# ----------------------------------------------------------------------------- rlxc.Layer glue

def fields_of(layer: Any) -> dict[str, Any]:
    """Read every field of an ``rlxc.Layer`` (or any object with those attributes)."""
    return {name: getattr(layer, name) for name in FIELD_NAMES}


_SLOTS = ("attn_norm", "attn_norm.bias", "q_proj", "q_proj.bias", "k_proj", "k_proj.bias",
          "v_proj", "v_proj.bias", "o_proj", "o_proj.bias", "q_norm", "k_norm", "attn_post_norm",
          "ffn_norm", "ffn_norm.bias", "gate_proj", "gate_proj.bias", "up_proj", "up_proj.bias",
          "down_proj", "down_proj.bias", "ffn_post_norm", "ple_gate", "ple_proj", "ple_norm",
          "rope_freq_factors", "router", "gate_exps", "up_exps", "down_exps", "expert_scale", "router_norm",
          "moe_norm", "shared_gate", "dense_post_norm", "moe_post_norm")


def weights_of(layer: Any) -> dict[str, np.ndarray]:
    """Every set weight of an ``rlxc.Layer`` as float32 (dequantized)."""
    out = {}
    for s in _SLOTS:
        w = layer.weight(s)
        if w is not None:
            out[s] = np.asarray(w, dtype=np.float32)
    return out


def wtypes_of(layer: Any) -> dict[str, str]:
    """Slot -> storage type of an ``rlxc.Layer``, if the binding exposes ``weight_type(name)``."""
    get = getattr(layer, "weight_type", None)
    if get is None:
        return {}
    out = {}
    for s in _SLOTS:
        try:
            t = get(s)
        except Exception:  # pragma: no cover - depends on the binding
            continue
        if t is not None:
            out[s] = str(t)
    return out


def kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(p || q) per row, from logits (float64 recommended)."""
    lp = p_logits - np.logaddexp.reduce(p_logits, axis=-1, keepdims=True)
    lq = q_logits - np.logaddexp.reduce(q_logits, axis=-1, keepdims=True)
    return (np.exp(lp) * (lp - lq)).sum(-1)
