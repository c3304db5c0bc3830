"""rlxc.Model -> GGUF: :func:`save` writes a file llama.cpp loads, the stored bytes as they are.

The architecture keys and tensor names come from the registry (:mod:`rlxc.archs`); a layer
field that the architecture's GGUF keys cannot express raises NotImplementedError naming it.
"""

from __future__ import annotations

import math
import os
from typing import Any, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from . import archs
from ._enums import Activation, FfnType, NormType, RopeLayout
from ._layer import Layer
from .archs import EXPERT_SLOTS, FUSED, GEMMA4_SCALAR, GGUF_ARCHS, UNROTATED, Arch, permute_rows
from .gguf import GGUFWriter
from .model import Model, QuantMatrix
from .wtypes import type_id

__all__ = ["save"]


class _Add(Protocol):
    """``a(key, value, vtype=None)``: adds the architecture's key ``{arch}.{key}``."""

    def __call__(self, key: str, value: Any, vtype: int | None = None) -> None: ...


#: Layer slots that edit a forward (rlxc.interp) rather than hold the model's weights.
INTERVENTION_SLOTS = ("steer_resid_pre", "steer_resid_mid", "steer_resid_post", "head_scale", "neuron_scale")


def _layer_tensor(layer: Layer, slot: str) -> tuple[npt.NDArray[Any], int, tuple[int, ...]] | None:
    """(stored data, GGML type id, GGML shape) of a layer's weight, None if unset."""
    t = layer.weight_type(slot)
    if t is None:
        return None
    shape = layer.weight_shape(slot)
    if len(shape) == 1 or t == "f32":
        arr = _weight(layer, slot)
        return np.ascontiguousarray(arr, np.float32), 0, tuple(reversed(arr.shape))
    raw = layer.weight_raw(slot)
    if raw is None:  # pragma: no cover - weight_type said it is set
        raise ValueError(f"rlxc.save: weight {slot} is unset")
    return raw, type_id(t), (shape[1], shape[0])


def _weight(layer: Layer, slot: str) -> npt.NDArray[np.float32]:
    """A set weight as float32 (dequantized)."""
    arr = layer.weight(slot)
    if arr is None:  # pragma: no cover - the callers check weight_type first
        raise ValueError(f"rlxc.save: weight {slot} is unset")
    return arr


def _uniform(layers: Sequence[Layer], field: str) -> Any:
    """The value of ``field`` if every layer has the same, else the list of per-layer values."""
    vals = [getattr(lay, field) for lay in layers]
    return vals[0] if all(v == vals[0] for v in vals) else vals


def _hparams(w: GGUFWriter, a: _Add, arch: Arch, model: Model, layers: Sequence[Layer], ctx: int) -> None:
    """The architecture keys (and RoPE factor tensors) of every arch but gemma4, for :func:`save`.
    ``a(key, value, type)`` adds ``{arch.gguf}.{key}``."""
    L, l0, H = len(layers), layers[0], int(model.hidden_size)
    hd = _uniform(layers, "head_dim")
    if isinstance(hd, list):
        raise NotImplementedError("rlxc.save: layers with different head_dim")
    a("attention.key_length", int(hd))
    a("attention.value_length", int(hd))
    rd = _uniform(layers, "rotary_dim")
    if isinstance(rd, list):
        raise NotImplementedError("rlxc.save: layers with different rotary_dim")
    a("rope.dimension_count", int(rd))
    eps = float(l0.eps)
    a(arch.eps_key, eps)
    for lay in layers:
        for fld in ("v_from_k", "has_v_norm", "ple_dim"):
            if getattr(lay, fld):
                raise NotImplementedError(f"rlxc.save: {fld} (Gemma 4) cannot be written as {arch.gguf}")
        if lay.kv_shared_from >= 0 or lay.layer_scalar != 1.0 or lay.rope_layout != RopeLayout.PREFIX:
            raise NotImplementedError(f"rlxc.save: Gemma 4 features cannot be written as {arch.gguf}")
        if lay.rope_attn_factor != 1.0 and not arch.gguf_longrope:
            raise NotImplementedError("rlxc.save: rope_attn_factor != 1 (YaRN)")
    full_base = [float(lay.rope_base) for lay in layers if not lay.sliding_window] or [float(l0.rope_base)]
    if arch.swa_own_rope:
        sw = [float(lay.rope_base) for lay in layers if lay.sliding_window]
        if len(set(full_base)) > 1 or len(set(sw)) > 1:
            raise NotImplementedError(f"rlxc.save: {arch.gguf} layers of one kind with different rope_base")
        a("rope.freq_base", full_base[0])
        if sw and sw[0] != 10000.0:
            a("rope.freq_base_swa", sw[0])
    else:
        bases = {float(lay.rope_base) for lay in layers}
        if len(bases) > 1:
            raise NotImplementedError(f"rlxc.save: {arch.gguf} layers with different rope_base")
        a("rope.freq_base", bases.pop())
    if arch.swa_every:
        windows = {int(lay.sliding_window) for lay in layers if lay.sliding_window}
        if len(windows) > 1:
            raise NotImplementedError("rlxc.save: different sliding windows")
        pattern = [bool(lay.sliding_window) for lay in layers]
        n = arch.swa_every
        if pattern != [(i % n) < n - 1 for i in range(L)]:
            a("attention.sliding_window_pattern", pattern, 9)  # newer llama.cpp reads a per-layer array
        a("attention.sliding_window", windows.pop() if windows else 0)
        if arch.attn_softcap:
            a("attn_logit_softcapping", float(l0.attn_softcap))
        want = (H / l0.num_q_heads) ** -0.5 if L == arch.gguf_big_layers else hd ** -0.5
        if any(abs(lay.attn_scale - want) > 1e-6 * want for lay in layers):
            raise NotImplementedError(f"rlxc.save: attn_scale {l0.attn_scale} differs from what llama.cpp uses "
                                      f"for {arch.gguf} ({want})")
    else:
        for lay in layers:
            if lay.sliding_window:
                raise NotImplementedError(f"rlxc.save: llama.cpp runs {arch.gguf} without a sliding window")
            if abs(lay.attn_scale - hd ** -0.5) > 1e-6 * hd ** -0.5:
                raise NotImplementedError(f"rlxc.save: attn_scale {lay.attn_scale} != head_dim**-0.5")
            if lay.attn_softcap:
                raise NotImplementedError(f"rlxc.save: attn_softcap on {arch.gguf}")
    if model.final_softcap or arch.gguf_final_softcap:  # (written when llama.cpp's default is not 0)
        if not arch.hf_final_softcap:
            raise NotImplementedError(f"rlxc.save: final logit softcap on {arch.gguf}")
        a("final_logit_softcapping", float(model.final_softcap))
    for lay in layers:
        if float(lay.norm_offset) not in (0.0, 1.0) or (float(lay.norm_offset) == 1.0 and not arch.norms_plus_one):
            raise NotImplementedError(f"rlxc.save: norm_offset {lay.norm_offset} on {arch.gguf}")
    # tensors
    ff_all = [lay.weight("rope_freq_factors") if lay.weight_type("rope_freq_factors") else None for lay in layers]
    ff = next((x for x in ff_all if x is not None), None)
    if ff is not None:
        if arch.swa_own_rope:  # Gemma 3: linear scaling, full-attention layers only
            vals = {float(v) for x in ff_all if x is not None for v in x}
            if len(vals) != 1 or any(x is not None for x, lay in zip(ff_all, layers) if lay.sliding_window):
                raise NotImplementedError(f"rlxc.save: {arch.gguf} with RoPE factors other than linear on full "
                                          "layers")
            a("rope.scaling.type", "linear")
            a("rope.scaling.factor", vals.pop())
            ff = None
        elif any(x is None or not np.array_equal(x, ff) for x in ff_all):
            raise NotImplementedError("rlxc.save: layers with different RoPE factors")
    if ff is not None and arch.gguf_longrope:
        w.tensor("rope_factors_short.weight", ff, 0, (ff.size,))
        w.tensor("rope_factors_long.weight", ff, 0, (ff.size,))
        a("rope.scaling.attn_factor", float(l0.rope_attn_factor))
        a("rope.scaling.original_context_length", ctx)
    elif ff is not None:
        w.tensor("rope_freqs.weight", ff, 0, (ff.size,))


def _moe_hparams(a: _Add, arch: Arch, layers: Sequence[Layer]) -> None:
    """The expert keys, where the layers have experts: llama.cpp's architectures with experts run
    them on every layer, of one shape, with the renormalisation their code hard-codes."""
    E = _uniform(layers, "num_experts")
    if E == 0:
        return
    if arch.gguf_moe_norm is None:
        raise NotImplementedError(f"rlxc.save: llama.cpp runs no experts for {arch.gguf}")
    if isinstance(E, list):
        raise NotImplementedError(f"rlxc.save: {arch.gguf} with experts on some layers only (llama.cpp: every layer)")
    for fld in ("num_experts_used", "expert_intermediate_size", "moe_norm_topk"):
        if isinstance(_uniform(layers, fld), list):
            raise NotImplementedError(f"rlxc.save: {arch.gguf} layers with different {fld}")
    l0 = layers[0]
    if bool(l0.moe_norm_topk) != arch.gguf_moe_norm:
        raise NotImplementedError(f"rlxc.save: moe_norm_topk={bool(l0.moe_norm_topk)}, but llama.cpp's {arch.gguf} "
                                  f"always runs it {arch.gguf_moe_norm}")
    only = {"shared_gate": "qwen2moe", "router_norm": "gemma4", "moe_norm": "gemma4", "dense_post_norm": "gemma4",
            "moe_post_norm": "gemma4"}
    for i, lay in enumerate(layers):
        dense = int(lay.intermediate_size) > 0
        if dense != (arch.gguf in ("qwen2moe", "gemma4")):
            raise NotImplementedError(f"rlxc.save: {arch.gguf} layer {i} {'with' if dense else 'without'} a dense FFN "
                                      "beside its experts")
        for slot, owner in only.items():
            if (lay.weight_type(slot) is not None) != (arch.gguf == owner and (dense or slot != "shared_gate")):
                raise NotImplementedError(f"rlxc.save: {arch.gguf} layer {i}: {slot} "
                                          f"{'set' if lay.weight_type(slot) else 'unset'} (llama.cpp's {owner} only)")
    a("expert_count", int(E))
    a("expert_used_count", int(l0.num_experts_used))
    if arch.gguf != "llama":  # llama's are feed_forward_length wide (save)
        a("expert_feed_forward_length", int(l0.expert_intermediate_size))
    if arch.gguf == "qwen2moe":
        a("expert_shared_feed_forward_length", int(l0.intermediate_size))
    if arch.gguf != "gemma4":
        scales = [lay.weight("expert_scale") if lay.weight_type("expert_scale") else None for lay in layers]
        if any(x is not None for x in scales):
            vals = {float(v) for x in scales if x is not None for v in x}
            if any(x is None for x in scales) or len(vals) != 1:
                raise NotImplementedError(f"rlxc.save: {arch.gguf} expert_scale other than one value for all")
            a("expert_weights_scale", vals.pop())


def _gemma4_hparams(w: GGUFWriter, a: _Add, model: Model, layers: Sequence[Layer]) -> None:
    """Gemma 4 keys and its model-level tensors (rope_freqs, per-layer embeddings) for
    :func:`save`, as llama.cpp's converter writes them: the generic keys describe the
    full-attention layers, the ``*_swa`` keys the sliding ones. Raises NotImplementedError for a
    model that llama.cpp's llama_model_gemma4 would run differently."""
    L, H = len(layers), int(model.hidden_size)
    swa = [bool(lay.sliding_window) for lay in layers]
    if not any(swa):
        raise NotImplementedError("rlxc.save: gemma4 without sliding-window layers (llama.cpp's gemma4 needs some)")

    def one(field: str, sliding: bool) -> Any:
        """The value of ``field`` on the sliding (or full-attention) layers, which must agree."""
        vals = {getattr(lay, field) for lay, s in zip(layers, swa) if s == sliding}
        if len(vals) > 1:
            kind = "sliding" if sliding else "full-attention"
            raise NotImplementedError(f"rlxc.save: gemma4 {kind} layers with different {field} ({sorted(vals)})")
        return vals.pop() if vals else None

    # what llama_model_gemma4 hard-codes, per layer
    fixed = dict(norm_type=NormType.RMSNORM, ffn_type=FfnType.GATED, activation=Activation.GELU_TANH,
                 sandwich_norm=1, has_qk_norm=1,
                 attn_scale=1.0, attn_softcap=0.0, rope_attn_factor=1.0)
    first = L - sum(lay.kv_shared_from >= 0 for lay in layers)
    for i, lay in enumerate(layers):
        wrong = [f"{k}={getattr(lay, k)}" for k, v in fixed.items() if getattr(lay, k) != v]
        if any(slot.endswith(".bias") for slot in lay.used_weights()):
            wrong.append("biases")
        if lay.kv_shared_from < 0 and not lay.has_v_norm:
            wrong.append("has_v_norm=0")
        # llama.cpp shares K/V in the last layers only, from layer first - (2 if sliding else 1)
        if (lay.kv_shared_from >= 0) != (i >= first) or i >= first and lay.kv_shared_from != first - (2 if swa[i] else 1):
            wrong.append(f"kv_shared_from={lay.kv_shared_from}")
        if swa[i] and (lay.rope_layout != RopeLayout.PREFIX or lay.weight_type("rope_freq_factors")):
            wrong.append("sliding layer with proportional RoPE or RoPE factors")
        if not swa[i] and lay.rope_layout != RopeLayout.PROPORTIONAL and lay.rotary_dim != lay.head_dim:
            wrong.append("full-attention layer with partial prefix RoPE")
        if wrong:
            raise NotImplementedError(f"rlxc.save: gemma4 layer {i}: {', '.join(wrong)} (not what llama.cpp's "
                                      "gemma4 runs)")
    eps = _uniform(layers, "eps")
    P = _uniform(layers, "ple_dim")
    if isinstance(eps, list) or isinstance(P, list):
        raise NotImplementedError("rlxc.save: gemma4 layers with different eps or ple_dim")
    hd_swa, hd_full = one("head_dim", True), one("head_dim", False)
    a("attention.sliding_window_pattern", swa, 9)
    a("attention.sliding_window", int(one("sliding_window", True)))
    a("attention.key_length", int(hd_full or hd_swa))
    a("attention.value_length", int(hd_full or hd_swa))
    a("attention.key_length_swa", int(hd_swa))
    a("attention.value_length_swa", int(hd_swa))
    a("attention.layer_norm_rms_epsilon", float(eps))
    a("attention.shared_kv_layers", L - first)
    a("rope.freq_base_swa", float(one("rope_base", True)))
    a("rope.dimension_count_swa", int(one("rotary_dim", True)))
    a("rope.dimension_count", int(hd_full or hd_swa))
    a("embedding_length_per_layer_input", int(P))
    a("final_logit_softcapping", float(model.final_softcap))  # written even when 0: absent means 30
    if hd_full is not None:
        a("rope.freq_base", float(one("rope_base", False)))
        # one rope_freqs tensor for all full layers: the rotated pairs' divisors, then UNROTATED
        angles = int(one("rotary_dim", False)) // 2
        rotated = [_weight(lay, "rope_freq_factors") if lay.weight_type("rope_freq_factors")
                   else np.ones(angles, np.float32) for lay, s in zip(layers, swa) if not s]
        if any(not np.array_equal(r, rotated[0]) for r in rotated):
            raise NotImplementedError("rlxc.save: gemma4 full-attention layers with different RoPE factors")
        ff = np.concatenate([rotated[0], np.full(hd_full // 2 - angles, UNROTATED)]).astype(np.float32)
        w.tensor("rope_freqs.weight", ff, 0, (ff.size,))
    ple = model.ple
    if (ple is not None) != (P > 0):
        raise NotImplementedError(f"rlxc.save: gemma4 layers with ple_dim {P} and model.ple {'set' if ple else 'None'}")
    if ple is None:
        return
    # llama.cpp's constants (build_inp_per_layer / project_per_layer_inputs)
    want = dict(embed_scale=math.sqrt(P), proj_scale=H ** -0.5, input_scale=2 ** -0.5, eps=float(eps))
    off = [k for k, v in want.items() if abs(ple[k] - v) > 1e-6 * v] + (["num_layers"] if ple["num_layers"] != L else [])
    if off:
        raise NotImplementedError(f"rlxc.save: gemma4 per-layer-embedding {', '.join(off)} differ from llama.cpp's")
    emb = ple["embed"]
    if isinstance(emb, QuantMatrix):
        w.tensor("per_layer_token_embd.weight", emb.data, type_id(emb.wtype), (emb.cols, emb.shape[0]))
    else:
        w.tensor("per_layer_token_embd.weight", np.asarray(emb, np.float32), 0, (L * P, len(emb)))
    w.tensor("per_layer_model_proj.weight", np.asarray(ple["proj"], np.float32), 0, (H, L * P))
    w.tensor("per_layer_proj_norm.weight", np.asarray(ple["norm"], np.float32), 0, (P,))


def save(model: Model, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as a GGUF file llama.cpp can load, the stored (quantized) bytes as they are.

    Layouts: llama (with q/k rows permuted back to llama.cpp's interleaved RoPE order), qwen2,
    qwen3, gemma, gemma2, gemma3 (norm weights written as ``offset + w``, which is what llama.cpp
    expects), gemma4 (as llama.cpp's converter writes it, see :func:`_gemma4_hparams`), starcoder2,
    phi3 (fused q/k/v and gate/up tensors). The tokenizer: the GGUF keys
    the model was loaded with, else built from ``model.tokenizer`` (SentencePiece-style or
    byte-level BPE), else a placeholder vocabulary. Raises NotImplementedError when a layer's
    fields cannot be expressed in that architecture's GGUF keys.

    The file is written to a private temporary file in the same directory and renamed over
    ``path`` when complete (see :func:`rlxc._files.write_atomically`): a failed save leaves
    ``path`` as it was and no temporary file behind, and a model memory-mapping the old file
    keeps running.
    """
    path = os.fspath(path)
    name = getattr(model, "arch", None)
    arch = archs.by_gguf(name) if isinstance(name, str) else None
    if arch is None:
        raise NotImplementedError(f"rlxc.save: architecture {name!r} cannot be written as GGUF "
                                  f"(supported: {', '.join(GGUF_ARCHS)})")
    layers = list(model.layers)
    L = len(layers)
    if L == 0:
        raise ValueError("rlxc.save: the model has no layers")
    H = int(model.hidden_size)
    w = GGUFWriter()
    w.add("general.architecture", arch.gguf)
    w.add("general.name", str(model.name))
    w.add("general.quantization_version", 2)
    ctx = int(model.metadata.get("gguf", {}).get(f"{arch.gguf}.context_length", model.max_seq) or model.max_seq)

    def a(key: str, value: Any, vtype: int | None = None) -> None:
        w.add(f"{arch.gguf}.{key}", value, vtype)

    a("context_length", ctx)
    a("embedding_length", H)
    a("block_count", L)

    def scalar_or_array(key: str, field: str) -> None:
        v = _uniform(layers, field)
        if isinstance(v, list):
            a(key, [int(x) for x in v], 9)
        else:
            a(key, int(v))

    # llama's experts (Mixtral) are feed_forward_length wide, beside no dense FFN
    mixtral = arch.gguf == "llama" and any(int(lay.num_experts) for lay in layers)
    scalar_or_array("feed_forward_length", "expert_intermediate_size" if mixtral else "intermediate_size")
    _moe_hparams(a, arch, layers)
    scalar_or_array("attention.head_count", "num_q_heads")
    scalar_or_array("attention.head_count_kv", "num_kv_heads")
    if arch.gemma4:
        _gemma4_hparams(w, a, model, layers)
    else:
        _hparams(w, a, arch, model, layers, ctx)

    emb = model.embed
    if isinstance(emb, QuantMatrix):
        w.tensor("token_embd.weight", emb.data, type_id(emb.wtype), (emb.cols, emb.shape[0]))
    else:
        e = np.ascontiguousarray(emb, np.float32)
        w.tensor("token_embd.weight", e, 0, (e.shape[1], e.shape[0]))
    norm_off = float(model.norm_offset)
    if norm_off and not arch.norms_plus_one:
        raise NotImplementedError(f"rlxc.save: final norm offset on {arch.gguf}")
    if model.norm_weight is None:
        raise NotImplementedError("rlxc.save: a model without a final norm")
    nw = np.asarray(model.norm_weight, np.float32) + np.float32(norm_off)
    w.tensor("output_norm.weight", nw, 0, (nw.size,))
    if model.norm_bias is not None:
        w.tensor("output_norm.bias", np.asarray(model.norm_bias, np.float32), 0, (model.norm_bias.size,))
    if not model.tied or (not isinstance(emb, QuantMatrix) and model.lm_head_type != "f32"):
        lm = model._lm
        if model.lm_head_type == "f32":
            lm = np.ascontiguousarray(lm, np.float32)
            w.tensor("output.weight", lm, 0, (lm.shape[1], lm.shape[0]))
        else:
            w.tensor("output.weight", lm, type_id(model.lm_head_type), (H, model.lm_vocab))
    if arch.sqrt_embed and model.embed_scale != 1.0 and abs(model.embed_scale - math.sqrt(H)) > 1e-3 * math.sqrt(H):
        raise NotImplementedError(f"rlxc.save: embed_scale {model.embed_scale} (llama.cpp uses sqrt(hidden))")
    if not arch.sqrt_embed and model.embed_scale != 1.0:
        raise NotImplementedError(f"rlxc.save: embed_scale on {arch.gguf}")

    slot_tensors = arch.slot_tensors
    for i, lay in enumerate(layers):
        edits = [s for s in lay.used_weights() if s in INTERVENTION_SLOTS]
        if edits:
            raise ValueError(f"rlxc.save: layer {i} has interventions set ({', '.join(edits)}), which a GGUF file "
                             f"cannot hold: set them to None first")
    for i, lay in enumerate(layers):
        pre = f"blk.{i}."
        off = float(lay.norm_offset)
        qk_off = float(lay.qk_norm_offset)
        fused = _write_fused(w, lay, pre, f"{arch.gguf} layer {i}") if arch.fused else set()
        for slot in lay.used_weights():
            if slot in fused or slot == "rope_freq_factors":
                continue
            got = _layer_tensor(lay, slot)
            if got is None:
                raise ValueError(f"rlxc.save: layer {i} has no {slot}")
            data, tid, shape = got
            tname = slot_tensors.get(slot)
            if slot.endswith(".bias") and slot not in ("q_proj.bias", "k_proj.bias", "v_proj.bias") + arch.gguf_biases:
                raise NotImplementedError(f"rlxc.save: layer {i}'s {slot}: llama.cpp's {arch.gguf} has no such bias")
            if tname is None:
                raise NotImplementedError(f"rlxc.save: weight {slot} has no GGUF name")
            if slot in ("attn_norm", "ffn_norm", "attn_post_norm", "ffn_post_norm") and off:
                data = data + np.float32(off)
            if slot in ("q_norm", "k_norm") and qk_off:
                data = data + np.float32(qk_off)
            if arch.permuted_qk and slot in ("q_proj", "k_proj", "q_proj.bias", "k_proj.bias"):
                data = permute_rows(data, lay.num_q_heads if slot.startswith("q") else lay.num_kv_heads)
            if slot in EXPERT_SLOTS:  # stacked [E][rows][cols]
                E = int(lay.num_experts)
                shape = (shape[0], shape[1] // E, E)
            if slot == "router_norm":  # the router's own scale (llama.cpp divides by sqrt(hidden) itself)
                data = (data.astype(np.float64) * math.sqrt(H)).astype(np.float32)
            if slot == "expert_scale" and not arch.gemma4:
                continue  # expert_weights_scale (_moe_hparams)
            w.tensor(pre + tname, data, tid, shape)
        if arch.gemma4:  # the converter writes every layer's layer_scalar buffer
            w.tensor(pre + GEMMA4_SCALAR, np.array([lay.layer_scalar], np.float32), 0, (1,))

    _write_tokenizer(w, model)
    w.write(path)


def _write_fused(w: GGUFWriter, lay: Layer, pre: str, what: str) -> set[str]:
    """The fused tensors of :data:`rlxc.archs.FUSED` (Phi-3: llama.cpp takes attn_qkv and ffn_up,
    gate rows first) from the layer's separate slots; returns the slots written."""
    done: set[str] = set()
    for name, slots in FUSED:
        got = [_layer_tensor(lay, s) for s in slots]
        parts = [x for x in got if x is not None]
        if len(parts) != len(slots) or len({x[1] for x in parts}) != 1:
            raise NotImplementedError(f"rlxc.save: {what}: {'/'.join(slots)} differ in type")
        data = np.concatenate([x[0] for x in parts], axis=0)
        w.tensor(pre + name + ".weight", data, parts[0][1], (parts[0][2][0], sum(x[2][1] for x in parts)))
        bias = [lay.weight(s + ".bias") if lay.weight_type(s + ".bias") else None for s in slots]
        if any(b is not None for b in bias):
            if any(b is None for b in bias):
                raise NotImplementedError(f"rlxc.save: {what}: partial biases")
            bb = np.concatenate([b for b in bias if b is not None]).astype(np.float32)
            w.tensor(pre + name + ".bias", bb, 0, (bb.size,))
        done.update(slots)
        done.update(s + ".bias" for s in slots)
    return done


def _write_tokenizer(w: GGUFWriter, model: Model) -> None:
    """The tokenizer keys: as loaded from a GGUF, else the tokenizer's own, else a placeholder."""
    g = getattr(model, "_gguf", None)
    if g is not None and "tokenizer.ggml.model" in g.metadata:
        for k, v in g.metadata.items():
            if k.startswith("tokenizer."):
                if k == "tokenizer.ggml.token_type":
                    w.add(k, np.asarray(v, np.int32), 9, 5)
                elif k == "tokenizer.ggml.scores":
                    w.add(k, np.asarray(v, np.float32), 9, 6)
                elif isinstance(v, bool):
                    w.add(k, v, 7)
                elif isinstance(v, (int, np.integer)):
                    w.add(k, int(v), 4)
                else:
                    w.add(k, v)
        return
    tok = getattr(model, "tokenizer", None)
    meta = tok.gguf_metadata() if tok is not None and hasattr(tok, "gguf_metadata") else None
    if meta and len(meta.get("tokenizer.ggml.tokens", ((),))[0]) == model.vocab_size:
        for k, (v, vt, et) in meta.items():
            w.add(k, v, vt, et)
        return
    # placeholder vocabulary (the model is usable from llama.cpp with token ids)
    V = model.vocab_size
    toks = ["<unk>", "<s>", "</s>"] + [f"<t{i}>" for i in range(3, V)]
    w.add("tokenizer.ggml.model", "llama")
    w.add("tokenizer.ggml.tokens", toks[:V], 9, 8)
    w.add("tokenizer.ggml.scores", np.zeros(V, np.float32), 9, 6)
    w.add("tokenizer.ggml.token_type", np.array(([2, 3, 3] + [1] * V)[:V], np.int32), 9, 5)
    w.add("tokenizer.ggml.bos_token_id", 1 if V > 1 else 0)
    w.add("tokenizer.ggml.eos_token_id", 2 if V > 2 else 0)
    w.add("tokenizer.ggml.unknown_token_id", 0)
    w.add("tokenizer.ggml.add_bos_token", False)
