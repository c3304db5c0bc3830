"""The architecture registry: what rlxc knows per model family, in one table.

One :class:`Arch` per transformers ``model_type`` holds

* how a transformers config maps to the per-layer fields of :class:`rlxc.Layer` (the constant
  fields, which config attribute gives each bias, the activation, eps, attention scale and
  sliding-window sources) -- :func:`rlxc.hf.layer_fields` reads it;
* its GGUF architecture name, the per-layer and model-level GGUF tensor names both ways
  (:data:`GGUF_LAYER_TENSORS`, ``Arch.layer_tensors``), the GGUF conventions (norms stored as
  ``1 + w``, llama's permuted q/k rows, the default sliding pattern and final softcap, the eps
  key) and the transformers classes and parameter names of the same network -- the GGUF loader
  (:mod:`rlxc.gguf_model`) and :func:`rlxc.save` (:mod:`rlxc.gguf_save`) read them;
* the model-level parts (:func:`model_parts`, :func:`ple_parts`: embedding scale, final norm,
  softcap, Gemma 4 per-layer embeddings) and the fused-tensor splits (:func:`split_qkv`,
  :func:`split_gate_up`, :data:`FUSED`) that every loader and ``save`` share.

Enum values are :mod:`rlxc._enums`' (``NormType.RMSNORM`` ...), which compare equal to the ints
the C engine uses. No other rlxc imports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import numpy.typing as npt

from ._enums import Activation, FfnType, NormType

__all__ = ["Arch", "ARCHS", "HF_MODEL_TYPES", "GGUF_ARCHS", "by_hf", "by_gguf", "GGUF_LAYER_TENSORS",
           "GEMMA4_LAYER_TENSORS", "GGUF_MODEL_TENSORS", "MOE_LAYER_TENSORS", "EXPERT_SLOTS", "GEMMA4_MODEL_TENSORS", "GEMMA4_SCALAR", "UNROTATED",
           "FUSED", "split_qkv", "split_gate_up", "split_expert_gate_up", "permute_rows", "unpermute_rows", "model_parts",
           "ple_parts", "hf_layer_names"]

# ============================================================================ GGUF tensor names

#: per-layer GGUF tensor suffix (after ``blk.N.``) -> rlxc slot; ``attn_qkv`` is fused (see FUSED)
GGUF_LAYER_TENSORS: Mapping[str, str] = {
    "attn_norm.weight": "attn_norm", "attn_norm.bias": "attn_norm.bias",
    "attn_q.weight": "q_proj", "attn_q.bias": "q_proj.bias",
    "attn_k.weight": "k_proj", "attn_k.bias": "k_proj.bias",
    "attn_v.weight": "v_proj", "attn_v.bias": "v_proj.bias",
    "attn_output.weight": "o_proj", "attn_output.bias": "o_proj.bias",
    "attn_q_norm.weight": "q_norm", "attn_k_norm.weight": "k_norm",
    "post_attention_norm.weight": "attn_post_norm",
    "ffn_norm.weight": "ffn_norm", "ffn_norm.bias": "ffn_norm.bias",
    "post_ffw_norm.weight": "ffn_post_norm",
    "ffn_gate.weight": "gate_proj", "ffn_gate.bias": "gate_proj.bias",
    "ffn_up.weight": "up_proj", "ffn_up.bias": "up_proj.bias",
    "ffn_down.weight": "down_proj", "ffn_down.bias": "down_proj.bias",
    "attn_qkv.weight": "qkv", "attn_qkv.bias": "qkv.bias",
}
#: mixture-of-experts tensors: the router (llama.cpp keeps it F32) and the experts stacked
#: [n_expert, rows, cols] (GGML ne = (cols, rows, n_expert))
MOE_LAYER_TENSORS: Mapping[str, str] = {
    "ffn_gate_inp.weight": "router", "ffn_gate_exps.weight": "gate_exps", "ffn_up_exps.weight": "up_exps",
    "ffn_down_exps.weight": "down_exps",
}
#: the slots whose GGUF tensors stack the experts
EXPERT_SLOTS = {"gate_exps": "expert_intermediate_size", "up_exps": "expert_intermediate_size",
                "down_exps": "hidden_size"}
# Qwen2-MoE: every layer is MoE, its dense FFN is the gated shared expert
QWEN2MOE_LAYER_TENSORS: Mapping[str, str] = {
    **{k: v for k, v in GGUF_LAYER_TENSORS.items() if not k.startswith(("ffn_gate.", "ffn_up.", "ffn_down."))},
    **MOE_LAYER_TENSORS, "ffn_gate_shexp.weight": "gate_proj", "ffn_up_shexp.weight": "up_proj",
    "ffn_down_shexp.weight": "down_proj", "ffn_gate_inp_shexp.weight": "shared_gate",
}
#: model-level GGUF tensors
GGUF_MODEL_TENSORS = ("token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
                      "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
# Gemma 4: exactly the tensors llama.cpp's llama_model_gemma4 loads for a dense model (no biases,
# no fused q/k/v), the per-layer-embedding ones included. blk.N.layer_output_scale.weight (one
# value) is the layer_scalar field, not a weight; rope_freqs.weight marks the pairs that the
# full-attention layers rotate.
GEMMA4_LAYER_TENSORS: Mapping[str, str] = {
    "attn_norm.weight": "attn_norm", "attn_q.weight": "q_proj", "attn_k.weight": "k_proj",
    "attn_v.weight": "v_proj", "attn_output.weight": "o_proj", "attn_q_norm.weight": "q_norm",
    "attn_k_norm.weight": "k_norm", "post_attention_norm.weight": "attn_post_norm",
    "ffn_norm.weight": "ffn_norm", "post_ffw_norm.weight": "ffn_post_norm", "ffn_gate.weight": "gate_proj",
    "ffn_up.weight": "up_proj", "ffn_down.weight": "down_proj",
    "inp_gate.weight": "ple_gate", "proj.weight": "ple_proj", "post_norm.weight": "ple_norm",
    # MoE (26B-A4B style): ffn_gate_inp.scale is the router's scale (rlxc's router_norm is it times
    # hidden**-0.5), ffn_down_exps.scale the per-expert scale; ffn_gate_up_exps (gate rows of each
    # expert first) is read as gate_exps and up_exps
    **MOE_LAYER_TENSORS, "ffn_gate_inp.scale": "router_norm", "ffn_down_exps.scale": "expert_scale",
    "pre_ffw_norm_2.weight": "moe_norm", "post_ffw_norm_1.weight": "dense_post_norm",
    "post_ffw_norm_2.weight": "moe_post_norm", "ffn_gate_up_exps.weight": "gate_up_exps",
}
GEMMA4_SCALAR = "layer_output_scale.weight"
GEMMA4_MODEL_TENSORS = ("token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight",
                        "per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight")
# convert_hf_to_gguf.py's rope_freqs value for the pairs that Gemma 4's proportional RoPE leaves
# unrotated: ggml divides the angle by it, which makes the rotation the identity in float32
UNROTATED = 1e30

#: fused GGUF tensors (Phi-3: llama.cpp takes q/k/v as attn_qkv and gate/up as ffn_up, gate rows
#: first; transformers as qkv_proj and gate_up_proj): (GGUF base name, the slots in row order)
FUSED = (("attn_qkv", ("q_proj", "k_proj", "v_proj")), ("ffn_up", ("gate_proj", "up_proj")))

# GGUF per-layer tensor base -> transformers per-layer module (Llama-style layers)
_HF_LAYER_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                   "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
                   "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                   "ffn_down": "mlp.down_proj", "attn_qkv": "self_attn.qkv_proj",
                   "ffn_norm": "post_attention_layernorm"}
_HF_SANDWICH_NAMES = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                      "post_ffw_norm": "post_feedforward_layernorm"}


# ============================================================================ the registry

@dataclass(frozen=True)
class Arch:
    """One model family (a transformers ``model_type``) and its GGUF architecture."""

    hf_type: str
    #: GGUF ``general.architecture`` (mistral is written and read as llama)
    gguf: str
    #: (config class, ...ForCausalLM class) of transformers 5.17 for GGUF -> transformers, None: no mapping
    hf_classes: tuple[str, str] | None = None
    norm_type: NormType = NormType.RMSNORM
    ffn_type: FfnType = FfnType.GATED
    #: the activation llama.cpp uses (transformers reads it from the config attribute below)
    gguf_activation: Activation = Activation.SILU
    hf_activation_attr: str = "hidden_act"
    #: transformers config attribute and GGUF key (after the arch prefix) of the norms' eps
    eps_attr: str = "rms_norm_eps"
    eps_key: str = "attention.layer_norm_rms_epsilon"
    #: transformers runs the main norms as ``(1 + w) x``; llama.cpp's converter stores ``1 + w`` (Gemma 1-3)
    norms_plus_one: bool = False
    #: the same for the per-head q/k norms (Gemma 3)
    qk_norms_plus_one: bool = False
    sandwich_norm: bool = False
    #: per-head q/k norms on every layer (transformers; a GGUF layer has them when it has the tensors)
    qk_norm: bool = False
    #: embeddings scaled by sqrt(hidden) (rounded to the weights' dtype; float32 in GGUF, as llama.cpp does)
    sqrt_embed: bool = False
    #: the config's final_logit_softcapping applies (transformers)
    hf_final_softcap: bool = False
    #: llama.cpp's final softcap when the GGUF key is absent
    gguf_final_softcap: float = 0.0
    #: Gemma 2: attention-logit softcap (config attn_logit_softcapping, GGUF attn_logit_softcapping, default 50)
    attn_softcap: bool = False
    #: attention scale: "head_dim" (head_dim ** -0.5), "query_pre_attn_scalar" (Gemma 2/3), "one" (Gemma 4)
    hf_attn_scale: str = "head_dim"
    #: llama.cpp's layer count of the large model that scales by (hidden / heads) ** -0.5 instead (Gemma 2/3 27B)
    gguf_big_layers: int = 0
    #: where transformers' sliding window comes from: "none", "config" (every layer), "layer_types"
    hf_sliding: str = "layer_types"
    #: llama.cpp's default sliding pattern: layer i slides iff i % n < n - 1 (0: none)
    swa_every: int = 0
    #: Gemma 3: the sliding layers have their own RoPE: GGUF's rope.freq_base_swa (default 10000), no scaling
    swa_own_rope: bool = False
    #: Phi-3: LongRoPE as GGUF's rope_factors_short / _long tensors and rope.scaling.attn_factor
    gguf_longrope: bool = False
    #: bias fields -> the config attribute that switches them on, or 1 (always)
    hf_biases: Mapping[str, str | int] = field(default_factory=dict)
    #: llama: q/k rows stored in llama.cpp's interleaved-RoPE order (see permute_rows)
    permuted_qk: bool = False
    #: Phi-3: fused attn_qkv and gate_up tensors (FUSED)
    fused: bool = False
    #: the attention rotates the whole head: the "default" rope ignores partial_rotary_factor
    full_head_rope: bool = True
    #: transformers FFN modules that are not gate_proj / up_proj / down_proj (StarCoder 2's c_fc / c_proj)
    hf_ffn_names: Mapping[str, str] = field(default_factory=dict)
    #: GGUF -> transformers: the config class takes head_dim, and keywords it needs besides the layer fields
    hf_config_head_dim: bool = False
    hf_config_extra: Mapping[str, Any] = field(default_factory=dict)
    #: mixture of experts in transformers: "" (none), "qwen" (num_experts, moe_intermediate_size,
    #: decoder_sparse_step, mlp_only_layers, norm_topk_prob, Qwen2-MoE's gated shared expert),
    #: "mixtral" (num_local_experts of intermediate_size, every layer, renormalised); Gemma 4's
    #: enable_moe_block is its own (see rlxc.hf)
    moe: str = ""
    #: biases llama.cpp loads for this GGUF architecture besides q/k/v's (which every one takes)
    gguf_biases: tuple[str, ...] = ()
    #: llama.cpp runs experts for this GGUF architecture: None (it does not), else whether it
    #: renormalises the chosen experts' weights (hard-coded per architecture)
    gguf_moe_norm: bool | None = None
    layer_tensors: Mapping[str, str] = field(default_factory=lambda: GGUF_LAYER_TENSORS)
    model_tensors: tuple[str, ...] = GGUF_MODEL_TENSORS

    @property
    def slot_tensors(self) -> dict[str, str]:
        """rlxc slot -> per-layer GGUF tensor suffix (the unfused names)."""
        return {v: k for k, v in self.layer_tensors.items() if not v.startswith("qkv") and v != "gate_up_exps"}

    @property
    def gemma4(self) -> bool:
        return self.hf_type == "gemma4_text"


# keyword sets that several entries share
_GEMMA: dict[str, Any] = dict(gguf_activation=Activation.GELU_TANH, sqrt_embed=True,
                              hf_biases={"qkv_bias": "attention_bias", "o_bias": "attention_bias"})
_SANDWICH: dict[str, Any] = dict(sandwich_norm=True, hf_final_softcap=True, hf_activation_attr="hidden_activation")

ARCHS: tuple[Arch, ...] = (
    Arch("llama", "llama", ("LlamaConfig", "LlamaForCausalLM"), permuted_qk=True, hf_sliding="none",
         hf_config_head_dim=True, gguf_moe_norm=True, layer_tensors={**GGUF_LAYER_TENSORS, **MOE_LAYER_TENSORS},
         gguf_biases=("o_proj.bias", "gate_proj.bias", "up_proj.bias", "down_proj.bias"),
         hf_biases={"qkv_bias": "attention_bias", "o_bias": "attention_bias", "ffn_up_bias": "mlp_bias",
                    "ffn_down_bias": "mlp_bias"}),
    Arch("mistral", "llama", permuted_qk=True, hf_sliding="config"),
    Arch("qwen2", "qwen2", ("Qwen2Config", "Qwen2ForCausalLM"), hf_biases={"qkv_bias": 1},
         hf_config_extra={"use_sliding_window": False}),
    Arch("qwen3", "qwen3", ("Qwen3Config", "Qwen3ForCausalLM"), qk_norm=True, hf_config_head_dim=True,
         hf_biases={"qkv_bias": "attention_bias", "o_bias": "attention_bias"}),
    Arch("qwen2_moe", "qwen2moe", ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"), hf_biases={"qkv_bias": "qkv_bias"},
         moe="qwen", gguf_moe_norm=False, layer_tensors=QWEN2MOE_LAYER_TENSORS),
    Arch("qwen3_moe", "qwen3moe", ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"), qk_norm=True, hf_config_head_dim=True,
         hf_sliding="config", hf_biases={"qkv_bias": "attention_bias", "o_bias": "attention_bias"}, moe="qwen",
         gguf_moe_norm=True, layer_tensors={**GGUF_LAYER_TENSORS, **MOE_LAYER_TENSORS}),
    Arch("mixtral", "llama", ("MixtralConfig", "MixtralForCausalLM"), permuted_qk=True, hf_sliding="config",
         hf_config_head_dim=True, moe="mixtral"),
    Arch("gemma", "gemma", ("GemmaConfig", "GemmaForCausalLM"), norms_plus_one=True, hf_sliding="none",
         hf_config_head_dim=True, **_GEMMA),
    Arch("gemma2", "gemma2", ("Gemma2Config", "Gemma2ForCausalLM"), norms_plus_one=True, attn_softcap=True,
         hf_attn_scale="query_pre_attn_scalar", gguf_big_layers=46, swa_every=2, gguf_final_softcap=30.0,
         hf_config_head_dim=True, **_GEMMA, **_SANDWICH),
    Arch("gemma3_text", "gemma3", ("Gemma3TextConfig", "Gemma3ForCausalLM"), norms_plus_one=True,
         qk_norms_plus_one=True, qk_norm=True, hf_attn_scale="query_pre_attn_scalar", gguf_big_layers=62,
         swa_every=6, swa_own_rope=True, hf_config_head_dim=True, **_GEMMA, **_SANDWICH),
    Arch("gemma4_text", "gemma4", qk_norm=True, hf_attn_scale="one", gguf_final_softcap=30.0, gguf_moe_norm=True,
         layer_tensors=GEMMA4_LAYER_TENSORS, model_tensors=GEMMA4_MODEL_TENSORS, **_GEMMA, **_SANDWICH),
    Arch("starcoder2", "starcoder2", ("Starcoder2Config", "Starcoder2ForCausalLM"), norm_type=NormType.LAYERNORM,
         ffn_type=FfnType.STANDARD, gguf_activation=Activation.GELU_TANH, eps_attr="norm_epsilon",
         eps_key="attention.layer_norm_epsilon", hf_sliding="config",
         hf_biases={"input_norm_bias": 1, "post_attn_norm_bias": 1, "qkv_bias": "use_bias", "o_bias": "use_bias",
                    "ffn_up_bias": "use_bias", "ffn_down_bias": "use_bias"},
         hf_ffn_names={"ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}, hf_config_extra={"sliding_window": None},
         gguf_biases=("attn_norm.bias", "ffn_norm.bias", "o_proj.bias", "up_proj.bias", "down_proj.bias")),
    Arch("phi3", "phi3", ("Phi3Config", "Phi3ForCausalLM"), fused=True, full_head_rope=False, hf_sliding="config",
         gguf_longrope=True,
         hf_ffn_names={"ffn_up": "mlp.gate_up_proj"}, hf_config_extra={"pad_token_id": 0}),
)

_BY_HF = {a.hf_type: a for a in ARCHS}
_BY_GGUF: dict[str, Arch] = {}
for _a in ARCHS:
    _BY_GGUF.setdefault(_a.gguf, _a)  # llama's own entry for "llama", not mistral's

#: the transformers model types rlxc maps (rlxc.from_hf, Hugging Face folders)
HF_MODEL_TYPES = tuple(_BY_HF)
#: the GGUF architectures rlxc loads and writes
GGUF_ARCHS = tuple(_BY_GGUF)


def by_hf(model_type: object) -> Arch | None:
    """The entry of a transformers model_type (None if rlxc has none)."""
    return _BY_HF.get(model_type) if isinstance(model_type, str) else None


def by_gguf(name: object) -> Arch | None:
    """The entry of a GGUF general.architecture (None if rlxc has none)."""
    return _BY_GGUF.get(name) if isinstance(name, str) else None


def hf_layer_names(arch: Arch) -> dict[str, str]:
    """GGUF per-layer tensor base (``attn_q``) -> transformers module (``self_attn.q_proj``)."""
    names = dict(_HF_LAYER_NAMES)
    if arch.sandwich_norm:
        names.update(_HF_SANDWICH_NAMES)
    names.update(arch.hf_ffn_names)
    return names


# ============================================================================ fused tensors, row orders

_A = npt.NDArray[Any]


def split_qkv(w: _A, n_q: int, n_kv: int, head_dim: int, what: str) -> tuple[_A, _A, _A]:
    """A fused ``[q | k | v]`` tensor (rows, or a bias vector) split into q, k, v (views);
    ValueError naming ``what`` when it does not have ``(n_q + 2 n_kv) head_dim`` rows."""
    q, k = n_q * head_dim, n_kv * head_dim
    if w.shape[0] != q + 2 * k:
        raise ValueError(f"{what} has {w.shape[0]} rows, {n_q} q and {n_kv} kv heads of {head_dim} need {q + 2 * k}")
    return w[:q], w[q:q + k], w[q + k:]


def split_gate_up(w: _A, inter: int, what: str) -> tuple[_A, _A]:
    """A fused ``[gate | up]`` tensor (rows, or a bias vector) split into gate, up (views);
    ValueError naming ``what`` when it does not have ``2 inter`` rows."""
    if w.shape[0] != 2 * inter:
        raise ValueError(f"{what} has {w.shape[0]} rows; a gated FFN of {inter} needs a gate or {2 * inter} "
                         "fused rows")
    return w[:inter], w[inter:]


def split_expert_gate_up(w: _A, inter: int) -> tuple[_A, _A]:
    """transformers' stacked experts ``gate_up_proj`` [E, 2 inter, H] (each expert's gate rows
    first) as rlxc's ``gate_exps`` and ``up_exps``, [E * inter, H] each (copies)."""
    E, H = w.shape[0], w.shape[2]
    return (np.ascontiguousarray(w[:, :inter]).reshape(E * inter, H),
            np.ascontiguousarray(w[:, inter:]).reshape(E * inter, H))


def unpermute_rows(rows: _A, n_head: int) -> _A:
    """Undo convert_hf_to_gguf.py's LlamaModel.permute (interleaved RoPE rows -> HF halves)."""
    n = rows.shape[0]
    return np.ascontiguousarray(rows.reshape(n_head, n // n_head // 2, 2, *rows.shape[1:]).swapaxes(1, 2)
                                .reshape(rows.shape))


def permute_rows(rows: _A, n_head: int) -> _A:
    """convert_hf_to_gguf.py's LlamaModel.permute (HF halves -> llama.cpp interleaved pairs)."""
    n = rows.shape[0]
    return np.ascontiguousarray(rows.reshape(n_head, 2, n // n_head // 2, *rows.shape[1:]).swapaxes(1, 2)
                                .reshape(rows.shape))


# ============================================================================ model-level parts

def _float32(v: float) -> float:
    return float(np.float32(v))


def model_parts(arch: Arch, hidden: int, *, eps: float, final_softcap: float | None, gguf: bool,
                round_scale: Callable[[float], float] = _float32) -> dict[str, Any]:
    """The model-level fields of :class:`rlxc.Model` that the architecture decides: the
    embedding scale (sqrt(hidden) rounded by ``round_scale``: to the weights' dtype in
    transformers, float32 in GGUF), the final norm's type, eps and offset (transformers' Gemma
    1-3 norms run as ``1 + w``; GGUF stores ``1 + w``, so ``gguf`` gives offset 0) and the
    final softcap."""
    return dict(embed_scale=round_scale(math.sqrt(hidden)) if arch.sqrt_embed else 1.0, norm_type=arch.norm_type,
                norm_eps=float(eps), norm_offset=1.0 if arch.norms_plus_one and not gguf else 0.0,
                final_softcap=float(final_softcap or 0.0))


def ple_parts(*, embed: Any, proj: Any, norm: Any, hidden: int, dim: int, num_layers: int, eps: float, gguf: bool,
              round_scale: Callable[[float], float] = _float32) -> dict[str, Any]:
    """Gemma 4 per-layer-embedding tables (:attr:`rlxc.Model.ple`) with their constants:
    ``embed * sqrt(dim)`` (rounded as the embedding scale), the projection times
    ``hidden ** -0.5`` (llama.cpp: in float32), the sum times ``2 ** -0.5``."""
    proj_scale = _float32(1.0 / math.sqrt(hidden)) if gguf else float(hidden) ** -0.5
    return dict(embed=embed, embed_scale=round_scale(dim ** 0.5), proj=proj, proj_scale=proj_scale, norm=norm,
                eps=float(eps), input_scale=2.0 ** -0.5, num_layers=int(num_layers), dim=int(dim))
