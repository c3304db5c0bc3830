"""The Python face of the C layer and pipeline: HF weight names, repr and HTML."""

from __future__ import annotations

import html
from typing import Any, Mapping, cast

import numpy as np

from . import _rlxc
from ._enums import Activation, FfnType, NormType, RopeLayout

# HF per-layer parameter names (prefix "model.layers.N." removed) -> rlxc weight names.
# post_attention_layernorm means the pre-FFN norm in Llama-style layers and the norm of the
# attention output in sandwich (Gemma 2/3/4) layers, so it is resolved per layer.
_HF_NAMES = {
    "input_layernorm.weight": "attn_norm",
    "input_layernorm.bias": "attn_norm.bias",
    "self_attn.q_proj.weight": "q_proj",
    "self_attn.q_proj.bias": "q_proj.bias",
    "self_attn.k_proj.weight": "k_proj",
    "self_attn.k_proj.bias": "k_proj.bias",
    "self_attn.v_proj.weight": "v_proj",
    "self_attn.v_proj.bias": "v_proj.bias",
    "self_attn.o_proj.weight": "o_proj",
    "self_attn.o_proj.bias": "o_proj.bias",
    "self_attn.q_norm.weight": "q_norm",
    "self_attn.k_norm.weight": "k_norm",
    "pre_feedforward_layernorm.weight": "ffn_norm",
    "post_feedforward_layernorm.weight": "ffn_post_norm",
    "mlp.gate_proj.weight": "gate_proj",
    "mlp.gate_proj.bias": "gate_proj.bias",
    "mlp.up_proj.weight": "up_proj",
    "mlp.up_proj.bias": "up_proj.bias",
    "mlp.down_proj.weight": "down_proj",
    "mlp.down_proj.bias": "down_proj.bias",
    "mlp.c_fc.weight": "up_proj",
    "mlp.c_fc.bias": "up_proj.bias",
    "mlp.c_proj.weight": "down_proj",
    "mlp.c_proj.bias": "down_proj.bias",
    # mixture of experts: routers, Qwen2-MoE's shared expert, Gemma 4's norms around its experts
    # (the experts themselves are stacked from their own tensors by the loaders)
    "mlp.gate.weight": "router",
    "block_sparse_moe.gate.weight": "router",
    "router.proj.weight": "router",
    "router.per_expert_scale": "expert_scale",
    "mlp.shared_expert.gate_proj.weight": "gate_proj",
    "mlp.shared_expert.up_proj.weight": "up_proj",
    "mlp.shared_expert.down_proj.weight": "down_proj",
    "mlp.shared_expert_gate.weight": "shared_gate",
    "pre_feedforward_layernorm_2.weight": "moe_norm",
    "post_feedforward_layernorm_1.weight": "dense_post_norm",
    "post_feedforward_layernorm_2.weight": "moe_post_norm",
    "per_layer_input_gate.weight": "ple_gate",
    "per_layer_projection.weight": "ple_proj",
    "post_per_layer_input_norm.weight": "ple_norm",
}


_LAYER_DOC = """One decoder layer: the C FullPipelineLayer, every field an attribute.

``rlxc.Layer()`` is a valid Llama-style layer (hidden 64, 4 heads of 16, SiLU gated FFN of
128, RMSNorm); ``rlxc.Layer(**fields)`` sets fields by keyword (keywords only). Fields are
validated on write (``rotary_dim`` even and <= ``head_dim``, ``num_q_heads`` a multiple of
``num_kv_heads``, ...: ValueError names the rule); ``head_dim=`` also sets ``attn_scale`` and
``rotary_dim`` unless they are given. Nothing is model-wide: adjacent layers may differ in
every field, and a running Pipeline uses an edited field on its next call (call
``Pipeline.reset()`` / ``Model.reset()`` after changing a K/V shape: head_dim, num_kv_heads,
kv_shared_from).

Weights are set by rlxc name (``Layer.WEIGHTS``) or by HF per-layer parameter name
(``"self_attn.q_proj.weight"``, ``"model.layers.3.mlp.down_proj.weight"``): ``set_weight``
copies a float32 array, stored as f32, f16, bf16, q4_0 or q8_0; ``set_weight_raw`` /
``set_weight_view`` take GGUF bytes of any supported type (also q5_0, q2_k ... q6_k, iq4_nl, iq4_xs), the latter
in place. ``layer[name]`` reads a weight back as float32, ``layer.weight_type(name)`` its
storage type, ``layer.weight_shape(name)`` the shape the current fields need and
``layer.used_weights()`` the slots they use; ``nbytes`` counts the stored bytes.

Weight slots (shapes for hidden H, q heads Q, kv heads K, head_dim D, intermediate I):
  attn_norm [H] (+ attn_norm.bias, LayerNorm), q_proj [Q*D, H], k_proj / v_proj [K*D, H]
  (+ q_proj.bias, k_proj.bias, v_proj.bias with qkv_bias), o_proj [H, Q*D] (+ o_proj.bias),
  q_norm / k_norm [D] (has_qk_norm), attn_post_norm [H] (sandwich_norm), ffn_norm [H] (+ ffn_norm.bias, the
  pre-FFN norm), gate_proj / up_proj [I, H] (+ gate_proj.bias / up_proj.bias), down_proj
  [H, I] (+ down_proj.bias), ffn_post_norm [H] (sandwich_norm), ple_gate [P, H], ple_proj
  [H, P], ple_norm [H] (Gemma 4 per-layer embeddings, P = ple_dim), rope_freq_factors
  [rotary_dim / 2] (scaled RoPE frequencies: llama3, YaRN, LongRoPE, linear).
Mixture of experts (num_experts E > 0, each of expert_intermediate_size X; the dense FFN slots
then hold the FFN beside the experts, if intermediate_size > 0): router [E, H] (float32, as
llama.cpp keeps it), gate_exps / up_exps [E*X, H] and down_exps [E*H, X] (the experts stacked,
expert e's rows from e*X, resp. e*H, as in GGUF's ffn_*_exps); optional: expert_scale [E]
(multiplies a chosen expert's weight), router_norm [H] (the router reads RMSNorm(resid_mid) * w
instead of mlp_in: Gemma 4's scale * H**-0.5), moe_norm [H] (the experts read the norm of
resid_mid with it), shared_gate [H] (the dense FFN's output times sigmoid(w . mlp_in): Qwen2-MoE),
dense_post_norm / moe_post_norm [H] (norms of the two outputs before their sum: Gemma 4).
Interventions, optional f32 vectors (also as attributes: ``layer.steer_resid_post = vec``):
  steer_resid_pre / steer_resid_mid / steer_resid_post [H] (added times ``steer_scale``),
  head_scale [Q] (multiplies each head's attention output), neuron_scale [I] (multiplies mlp_act).

Fields (``Layer.FIELDS``), each per layer:
"""


def _fields_doc() -> str:
    """``name: doc`` for every C field, from the getset descriptors (what ``help()`` lists too)."""
    lines = []
    for f in _rlxc.Layer.FIELDS:
        doc = (getattr(_rlxc.Layer, f).__doc__ or "").strip()
        lines.append(f"  {f}: {doc}")
    return "\n".join(lines) + "\n"


def _intervention(slot: str, doc: str) -> property:
    """A property over an optional float32 vector slot: None when unset; assigning None unsets."""

    def get(self: "Layer") -> np.ndarray | None:
        return self.weight(slot) if self.weight_type(slot) is not None else None

    def put(self: "Layer", value: Any) -> None:
        if value is None:
            self.clear_weight(slot)
        else:
            self.set_weight(slot, np.ascontiguousarray(value, dtype=np.float32))

    return property(get, put, doc=doc)


class Layer(_rlxc.Layer):
    __doc__ = _LAYER_DOC + _fields_doc()

    steer_resid_pre = _intervention("steer_resid_pre", "Steering vector [hidden] added (times steer_scale) to the "
                                    "residual stream as the layer begins, or None.")
    steer_resid_mid = _intervention("steer_resid_mid", "Steering vector [hidden] added (times steer_scale) after "
                                    "the attention block's residual add, or None.")
    steer_resid_post = _intervention("steer_resid_post", "Steering vector [hidden] added (times steer_scale) to the "
                                     "layer's output, or None.")
    head_scale = _intervention("head_scale", "Per-head multipliers [num_q_heads] of the attention output before "
                               "o_proj (0 ablates a head), or None.")
    neuron_scale = _intervention("neuron_scale", "Per-neuron multipliers [intermediate_size] of mlp_act (the "
                                 "input of down_proj; 0 ablates a neuron), or None.")

    def weight_name(self, name: str) -> str:
        """The rlxc weight name for an rlxc or HF per-layer parameter name."""
        if not isinstance(name, str):
            raise TypeError(f"weight name must be a str, got {type(name).__name__}")
        if name in self.WEIGHTS:
            return name
        for prefix in ("model.", "language_model."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name.startswith("layers."):
            name = name.split(".", 2)[2]
        if name in ("post_attention_layernorm.weight", "post_attention_layernorm.bias"):
            base = "attn_post_norm" if self.sandwich_norm else "ffn_norm"
            return base + (".bias" if name.endswith("bias") else "")
        if name in _HF_NAMES:
            return _HF_NAMES[name]
        raise KeyError(f"unknown weight name {name!r}: use one of Layer.WEIGHTS or an HF per-layer parameter name")

    def set_weight(self, name: str, array: np.ndarray, dtype: str = "f32") -> None:
        """Copy a float32 array into a weight, stored as ``dtype`` ('f32', 'f16', 'bf16', 'q4_0',
        'q8_0', 'q4_1', 'q5_1', 'q4_k', 'q5_k'); q5_0, q2_k, q3_k, q6_k and the IQ types come as GGUF
        bytes (``set_weight_raw`` / ``set_weight_view``)."""
        super().set_weight(self.weight_name(name), array, cast(Any, dtype))  # (the C call checks dtype)

    def set_weights(self, weights: Mapping[str, np.ndarray], dtype: str = "f32") -> None:
        """Set several weights; quantized ``dtype`` applies to matrices, vectors stay f32."""
        for name, arr in weights.items():
            rname = self.weight_name(name)
            is_matrix = len(self.weight_shape(rname)) == 2
            self.set_weight(rname, arr, dtype if is_matrix else "f32")

    def __setitem__(self, name: str, array: np.ndarray) -> None:
        """``layer[name] = array``: ``set_weight(name, array)`` stored as f32."""
        self.set_weight(name, array)

    def __getitem__(self, name: str) -> np.ndarray:
        """``layer[name]``: the weight as float32 (a dequantized copy); KeyError if it is not set."""
        w = self.weight(self.weight_name(name))
        if w is None:
            raise KeyError(f"weight {name!r} is not set")
        return w

    @property
    def weights(self) -> dict[str, np.ndarray]:
        """Every set weight as a float32 array (dequantized copies), by rlxc name."""
        out: dict[str, np.ndarray] = {}
        for n in self.WEIGHTS:
            w = self.weight(n) if self.weight_type(n) is not None else None
            if w is not None:
                out[n] = w
        return out

    def fields(self) -> dict[str, Any]:
        """The fields as a dict (what ``Layer(**layer.fields())`` rebuilds)."""
        return {f: getattr(self, f) for f in self.FIELDS}

    @property
    def attention_kind(self) -> str:
        """'sliding(W)' or 'full', with ', shared KV of layer j' where it applies."""
        return _attention_kind(self)

    def _weight_summary(self) -> str:
        types: dict[str, int] = {}
        for n in self.WEIGHTS:
            t = self.weight_type(n)
            if t is not None:
                types[t] = types.get(t, 0) + 1
        return ", ".join(f"{k}x{v}" for k, v in sorted(types.items())) or "none"

    def __repr__(self) -> str:
        changed = []
        default = _DEFAULT_FIELDS
        for f in self.FIELDS:
            v = getattr(self, f)
            if f in ("hidden_size", "head_dim", "num_q_heads", "num_kv_heads") or v != default[f]:
                changed.append(f"{f}={_fmt(v)}")
        return f"rlxc.Layer({', '.join(changed)}; weights: {self._weight_summary()})"

    def _repr_html_(self) -> str:
        """Jupyter: every field (with its doc as a tooltip) and every set weight's type and shape."""
        rows = "".join(
            f"<tr title=\"{html.escape((getattr(_rlxc.Layer, f).__doc__ or '').strip())}\"><td><code>{f}</code></td>"
            f"<td>{html.escape(_fmt(getattr(self, f)))}</td></tr>" for f in self.FIELDS)
        wrows = "".join(
            f"<tr><td><code>{n}</code></td><td>{self.weight_type(n)}</td><td>{self.weight_shape(n)}</td></tr>"
            for n in self.WEIGHTS if self.weight_type(n) is not None)
        return (f"<b>rlxc.Layer</b> ({self.attention_kind}; FFN {_ffn_kind(self)}; {self.nbytes / 1e6:.2f} MB of weights)"
                f"<table><tr><th>field</th><th>value</th></tr>{rows}</table>"
                f"<table><tr><th>weight</th><th>type</th><th>shape</th></tr>{wrows}</table>")


def _fmt(v: Any) -> str:
    if isinstance(v, (NormType, FfnType, Activation, RopeLayout)):
        return f"{type(v).__name__}.{v.name}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return repr(v)


_DEFAULT_FIELDS: dict[str, Any] = {}


def _ffn_kind(layer: _rlxc.Layer) -> str:
    """``GATED/SILU``, or for a mixture of experts ``experts 8 of 128 x 768, SILU`` (+ the dense FFN's width)."""
    dense = f"{layer.ffn_type.name}/{layer.activation.name}"
    if not layer.num_experts:
        return dense
    kind = (f"experts {layer.num_experts_used} of {layer.num_experts} x {layer.expert_intermediate_size}, "
            f"{layer.activation.name}")
    return kind + (f" + dense {layer.intermediate_size}" if layer.intermediate_size else "")


def _attention_kind(layer: _rlxc.Layer) -> str:
    kind = f"sliding({layer.sliding_window})" if layer.sliding_window else "full"
    return kind + (f", KV of layer {layer.kv_shared_from}" if layer.kv_shared_from >= 0 else "")


class Pipeline(_rlxc.Pipeline):
    """A stack of Layers run over a per-layer KV cache (each sized by its own layer).

    ``Pipeline(layers, max_seq, threads=None)``; ``prefill(x[T, hidden])`` appends T tokens,
    ``decode_token(x[hidden], pos)`` runs one, ``reset()`` empties the cache. Layers are
    held, not copied: edit a field between calls and the next call uses it. Calls release the
    GIL; threads sharing one pipeline are serialized by its lock.
    """

    def __repr__(self) -> str:
        lines = [f"rlxc.Pipeline({len(self.layers)} layers, hidden={self.hidden_size}, max_seq={self.max_seq}, "
                 f"n_past={self.n_past}, threads={self.threads})"]
        lines += [f"  [{i}] {layer!r}" for i, layer in enumerate(self.layers)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = ("<tr><th>#</th><th>attention</th><th>head_dim</th><th>q/kv heads</th><th>rope base</th>"
                "<th>rotary</th><th>norm</th><th>ffn</th><th>weights</th></tr>")
        rows = "".join(
            f"<tr><td>{i}</td><td>{_attention_kind(lay)}</td><td>{lay.head_dim}</td>"
            f"<td>{lay.num_q_heads}/{lay.num_kv_heads}</td><td>{lay.rope_base:g}</td><td>{lay.rotary_dim}</td>"
            f"<td>{lay.norm_type.name}</td><td>{_ffn_kind(lay)}</td>"
            f"<td>{lay._weight_summary() if isinstance(lay, Layer) else ''}</td></tr>"
            for i, lay in enumerate(self.layers))
        return (f"<b>rlxc.Pipeline</b>: {len(self.layers)} layers, hidden {self.hidden_size}, "
                f"max_seq {self.max_seq}, n_past {self.n_past}, threads {self.threads}<table>{head}{rows}</table>")


def _init_defaults() -> None:
    base = _rlxc.Layer()
    for f in _rlxc.Layer.FIELDS:
        _DEFAULT_FIELDS[f] = getattr(base, f)
