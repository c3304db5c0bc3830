"""GGUF files -> rlxc: per-layer fields, the :class:`rlxc.Model` (``rlxc.load`` of a ``.gguf``), and
the transformers config and state dict of the same network.

The file is memory-mapped (:class:`rlxc.gguf.GGUFFile`); weight matrices are used **in place**
(``Layer.set_weight_view`` borrows the mapped bytes), the embedding table stays as stored (the
looked-up rows are dequantized per call) and a tied lm_head multiplies the quantized table in
place. Only llama's q/k matrices are copied: llama.cpp stores them with rows permuted for its
interleaved RoPE, and they are put back in Hugging Face order (halves) for the engine. Gemma 1-3
norms in GGUF already hold ``1 + w`` (llama.cpp's converter adds the 1), so they run with offset
0; Gemma 4's are plain weights. Gemma 4 (dense and MoE) maps as llama.cpp's
llama_model_gemma4 reads it: ``*_swa`` keys for the sliding layers, proportional RoPE on the
full ones from rope_freqs.weight, K/V sharing, K as V where attn_v is absent, per-layer
embeddings, layer_output_scale as ``layer_scalar``, a final cap of 30 when the key is absent.
What differs per architecture comes from the registry (:mod:`rlxc.archs`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, cast

import numpy as np
import numpy.typing as npt

from . import archs, gguf
from ._enums import Activation, FfnType, RopeLayout
from ._layer import Layer
from .archs import EXPERT_SLOTS, GEMMA4_SCALAR, GGUF_ARCHS, UNROTATED, Arch, split_gate_up, split_qkv, unpermute_rows
from .gguf import REQUIRED, TensorInfo, gguf_meta, meta_value
from .model import MATRIX_SLOTS, WEIGHT_FORMATS, Model, QuantMatrix, matrix_wtype
from .tokenizer import from_gguf_metadata
from .wtypes import dequantize, engine_wtypes

__all__ = ["GGUFFile", "read_gguf", "gguf_layer_fields", "model_from_gguf", "gguf_hf_config", "gguf_hf_state_dict"]

_F32 = npt.NDArray[np.float32]


class GGUFFile(gguf.GGUFFile):
    """:class:`rlxc.gguf.GGUFFile` whose ``array(name)`` dequantizes every type rlxc knows (and
    the other GGML types with the ``gguf`` package), with ``matrix(name)``: the tensor as a
    :class:`rlxc.model.QuantMatrix` over the mapped bytes."""

    def _dequantize(self, data: npt.NDArray[np.uint8], t: TensorInfo) -> _F32:
        return dequantize(data, t.wtype, t.cols)

    def matrix(self, name: str) -> QuantMatrix:
        t = self.info(name)
        return QuantMatrix(self.raw(name), t.wtype, t.cols)


def read_gguf(path: str | os.PathLike[str], mmap: bool = True) -> GGUFFile:
    """Parse and validate a GGUF file (memory-mapped, or with ``mmap=False`` read into owned
    memory); see :class:`GGUFFile`."""
    return GGUFFile(path, mmap)


class _KV:
    """Arch-prefixed, type-checked metadata access (see :func:`gguf_meta`), with per-layer arrays."""

    def __init__(self, md: Mapping[str, Any], arch: str, path: str) -> None:
        self.md, self.arch, self.path = md, arch, path

    def get(self, key: str, kind: type, default: Any = REQUIRED, array: bool = False) -> Any:
        return gguf_meta(self.md, f"{self.arch}.{key}", kind, default, self.path, array)

    def layer(self, key: str, i: int, default: Any = REQUIRED) -> int:
        """An int given for all layers or as an array with one per layer."""
        k = f"{self.arch}.{key}"
        v = self.md.get(k)
        if isinstance(v, (list, np.ndarray)):
            if len(v) <= i:
                raise ValueError(f"{self.path}: {k} has {len(v)} entries, layer {i} needs one")
            return int(meta_value(v[i], int, f"{k}[{i}]", self.path))
        return int(self.get(key, int, default))


def _swa_layers(kv: _KV, arch: Arch, n_layers: int) -> list[bool]:
    """Which layers use the sliding window (llama.cpp's hparams.swa_layers)."""
    key = "attention.sliding_window_pattern"
    if isinstance(kv.md.get(f"{kv.arch}.{key}"), (list, np.ndarray)):  # newer llama.cpp: one bool per layer
        pat = kv.get(key, bool, array=True)
        if len(pat) != n_layers:
            raise ValueError(f"{kv.path}: {kv.arch}.{key} has {len(pat)} entries for {n_layers} layers")
        return [bool(p) for p in pat]
    if arch.gemma4:  # llama.cpp's gemma4 requires the per-layer array
        raise ValueError(f"{kv.path}: gemma4 needs {kv.arch}.{key} as one bool per layer")
    if not arch.swa_every:
        return [False] * n_layers
    n = kv.get(key, int, arch.swa_every)
    # llama.cpp set_swa_pattern(n): layer il is sliding iff il % n < n - 1 (n = 0: all sliding)
    return [n == 0 or (i % n) < (n - 1) for i in range(n_layers)]


def _rope_scaling(kv: _KV, rd: int) -> tuple[_F32 | None, str]:
    stype = kv.get("rope.scaling.type", str, None)
    factor = kv.get("rope.scaling.factor", float, None)
    if factor is None:
        lin = kv.get("rope.scale_linear", float, None)
        if lin is not None:
            stype, factor = "linear", lin
    if stype in (None, "none") or factor in (None, 0.0, 1.0) and stype != "longrope":
        return None, "none"
    if stype == "linear":
        return np.full(rd // 2, factor, np.float32), "linear"
    if stype == "longrope":
        return None, "longrope"
    raise NotImplementedError(f"{kv.path}: rope scaling type {stype!r} ({kv.arch}) is not supported "
                              "(supported: none, linear, llama3 rope_freqs, phi3 longrope factors)")


def gguf_layer_fields(g: gguf.GGUFFile, i: int, max_seq: int | None = None) -> dict[str, Any]:
    """Fields of rlxc.Layer for layer ``i`` of a GGUF file (norm weights are used as stored:
    ``norm_offset = qk_norm_offset = 0`` even for Gemma, whose GGUF norms already hold 1 + w)."""
    arch, kv, L = _arch(g)
    H = kv.get("embedding_length", int)
    if not 0 <= i < L:
        raise IndexError(f"layer {i} out of range ({L} layers)")
    nq = kv.layer("attention.head_count", i)
    nkv = kv.layer("attention.head_count_kv", i, nq)
    hd = kv.layer("attention.key_length", i, H // nq if nq else 0)
    vd = kv.layer("attention.value_length", i, hd)
    if nq <= 0 or nkv <= 0 or hd <= 0:
        raise ValueError(f"{g.path}: layer {i}: {nq} heads, {nkv} kv heads, head dim {hd}")
    if vd != hd:
        raise NotImplementedError(f"{g.path}: key_length {hd} != value_length {vd}")
    inter = kv.layer("feed_forward_length", i)
    rd = kv.layer("rope.dimension_count", i, hd)
    base = kv.get("rope.freq_base", float, 10000.0)
    pre = f"blk.{i}."

    def has(suffix: str) -> bool:
        return (pre + suffix) in g.tensors

    f: dict[str, Any] = dict(
        eps=kv.get("attention.layer_norm_rms_epsilon", float, kv.get("attention.layer_norm_epsilon", float, 1e-5)),
        attn_scale=hd ** -0.5, head_dim=hd, num_q_heads=nq, num_kv_heads=nkv, rope_base=base,
        rotary_dim=rd, sliding_window=0, has_v_norm=0, layer_scalar=1.0, norm_type=arch.norm_type,
        ffn_type=arch.ffn_type, activation=arch.gguf_activation, qk_norm_offset=0.0,
        input_norm_bias=int(has("attn_norm.bias")), post_attn_norm_bias=int(has("ffn_norm.bias")),
        ffn_up_bias=int(has("ffn_up.bias")), ffn_down_bias=int(has("ffn_down.bias")),
        hidden_size=H, intermediate_size=inter, norm_offset=0.0,
        qkv_bias=int(has("attn_q.bias") or has("attn_qkv.bias")), o_bias=int(has("attn_output.bias")),
        has_qk_norm=int(has("attn_q_norm.weight")), sandwich_norm=int(arch.sandwich_norm), attn_softcap=0.0,
        rope_layout=RopeLayout.PREFIX,
        rope_attn_factor=1.0, v_from_k=0, kv_shared_from=-1, ple_dim=0,
    )
    if rd > hd or rd % 2:
        raise ValueError(f"{g.path}: rope dimension {rd} vs head dim {hd}")
    if arch.permuted_qk and rd != hd:
        raise NotImplementedError(f"{g.path}: {arch.gguf} with partial rotary ({rd} of {hd})")
    if arch.gguf_big_layers:
        # llama.cpp: 1/sqrt(n_embd / n_head) for the 27B models, else 1/sqrt(head dim)
        f["attn_scale"] = float((H / nq) ** -0.5 if L == arch.gguf_big_layers else hd ** -0.5)
    if arch.swa_every and _swa_layers(kv, arch, L)[i]:
        f["sliding_window"] = kv.get("attention.sliding_window", int, 4096)
        if arch.swa_own_rope:
            f["rope_base"] = kv.get("rope.freq_base_swa", float, 10000.0)
    if arch.attn_softcap:
        f["attn_softcap"] = kv.get("attn_logit_softcapping", float, 50.0)
    if arch.gemma4:
        f.update(_gemma4_fields(g, kv, arch, i, L, f))
    if has("ffn_gate_inp.weight"):
        f.update(_moe_fields(g, kv, arch, i, f))
    # (phi3: llama.cpp runs Phi-3 without its sliding window: "Phi SWA is currently disabled")
    return f


def _moe_fields(g: gguf.GGUFFile, kv: _KV, arch: Arch, i: int, f: Mapping[str, Any]) -> dict[str, Any]:
    """A mixture-of-experts layer as llama.cpp reads it: expert_count / expert_used_count, the
    experts' width (expert_feed_forward_length; llama: feed_forward_length), the dense FFN beside
    them (Qwen2-MoE's shared expert, Gemma 4's MLP) where the layer has its tensors, the chosen
    experts' weights renormalised as the architecture's llama.cpp code hard-codes."""
    pre = f"blk.{i}."
    E = kv.get("expert_count", int, 0)
    k = kv.get("expert_used_count", int, 0)
    if not 0 < k <= E:
        raise ValueError(f"{g.path}: layer {i} has experts but {arch.gguf}.expert_count = {E}, expert_used_count = {k}")
    ff = f["intermediate_size"]
    width = kv.get("expert_feed_forward_length", int, ff if arch.gguf == "llama" else ff // k)
    dense = 0
    if pre + "ffn_up_shexp.weight" in g.tensors:
        dense = kv.get("expert_shared_feed_forward_length", int, g.info(pre + "ffn_up_shexp.weight").rows)
    elif pre + "ffn_up.weight" in g.tensors:
        dense = ff
    return dict(num_experts=E, num_experts_used=k, expert_intermediate_size=width, intermediate_size=dense,
                moe_norm_topk=int(bool(arch.gguf_moe_norm)))


def _gemma4_fields(g: gguf.GGUFFile, kv: _KV, arch: Arch, i: int, L: int, f: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma 4 fields of layer ``i`` as llama.cpp's llama_model_gemma4 reads them, over the
    generic ones in ``f``. The generic keys (key_length, rope.freq_base, rope.dimension_count)
    describe the full-attention layers, the ``*_swa`` keys the sliding ones. Norms are stored as
    they are (the converter adds no 1), the attention scale is 1, V is RMS-normalized without a
    weight, and a layer without attn_v uses K as V (``attention_k_eq_v``)."""
    pattern = _swa_layers(kv, arch, L)
    swa = pattern[i]
    out: dict[str, Any] = dict(attn_scale=1.0, ple_dim=kv.get("embedding_length_per_layer_input", int))
    if _rope_scaling(kv, f["rotary_dim"])[1] != "none":
        raise NotImplementedError(f"{g.path}: gemma4 with rope scaling (llama.cpp's converter writes none)")
    if swa:
        hd = kv.get("attention.key_length_swa", int)
        if kv.get("attention.value_length_swa", int) != hd:
            raise NotImplementedError(f"{g.path}: gemma4 key_length_swa != value_length_swa")
        rd = kv.get("rope.dimension_count_swa", int, f["rotary_dim"])  # llama.cpp's default: the full layers'
        if rd > hd or rd % 2:
            raise ValueError(f"{g.path}: gemma4 rope.dimension_count_swa {rd} vs key_length_swa {hd}")
        out.update(head_dim=hd, rotary_dim=rd, rope_layout=RopeLayout.PREFIX,
                   rope_base=kv.get("rope.freq_base_swa", float, f["rope_base"]),
                   sliding_window=kv.get("attention.sliding_window", int))
    else:
        if f["rotary_dim"] != f["head_dim"]:
            raise NotImplementedError(f"{g.path}: gemma4 full-attention layers with rope.dimension_count "
                                      f"{f['rotary_dim']} != key_length {f['head_dim']}")
        out.update(rotary_dim=2 * _gemma4_rope_freqs(g, f["head_dim"]).size, rope_layout=RopeLayout.PROPORTIONAL)
    # K/V sharing: the last shared_kv_layers layers reuse the cache of layer
    # L - shared - (2 if sliding else 1), llama.cpp's rule (it assumes the layers before end sliding, full)
    first = L - kv.get("attention.shared_kv_layers", int, 0)
    if not 0 <= first <= L:
        raise ValueError(f"{g.path}: gemma4.attention.shared_kv_layers = {L - first} for {L} layers")
    src = -1
    if i >= first:
        src = first - (2 if swa else 1)
        if src < 0 or pattern[src] != swa:
            raise NotImplementedError(f"{g.path}: gemma4 layer {i} would share the K/V of layer {src}, which is "
                                      "not of its attention type (llama.cpp's sharing rule)")
    pre = f"blk.{i}."
    out.update(kv_shared_from=src, has_v_norm=int(src < 0),
               v_from_k=int(src < 0 and pre + "attn_v.weight" not in g))
    if pre + GEMMA4_SCALAR in g:
        scalar = g.array(pre + GEMMA4_SCALAR).reshape(-1)
        if scalar.size != 1:
            raise ValueError(f"{g.path}: {pre + GEMMA4_SCALAR} has {scalar.size} values, expected 1")
        out["layer_scalar"] = float(scalar[0])
    return out


def _gemma4_rope_freqs(g: gguf.GGUFFile, head_dim: int) -> _F32:
    """Divisors of the pairs that Gemma 4's full-attention layers rotate, from rope_freqs.weight.

    The converter writes 1 for the first ``partial_rotary_factor * head_dim / 2`` pairs and
    ``UNROTATED`` for the rest (ggml's NeoX RoPE over the whole head, the angle of pair k being
    ``pos * base**(-2k / head_dim) / factor[k]``). Those trailing pairs are dropped here: rlxc's
    proportional layout rotates pairs ``(k, k + head_dim/2)`` for k < rotary_dim/2 with the same
    angles, and leaves the others as they are."""
    if "rope_freqs.weight" not in g:
        raise ValueError(f"{g.path}: gemma4 full-attention layers need the tensor 'rope_freqs.weight'")
    ff = g.array("rope_freqs.weight").reshape(-1)
    if ff.size != head_dim // 2:
        raise ValueError(f"{g.path}: rope_freqs.weight has {ff.size} values, head dim {head_dim} needs {head_dim // 2}")
    n = ff.size
    while n and ff[n - 1] >= UNROTATED:
        n -= 1
    return ff[:n]


def _arch(g: gguf.GGUFFile) -> tuple[Arch, _KV, int]:
    """The file's registry entry, its arch-prefixed metadata and its layer count."""
    name = gguf_meta(g.metadata, "general.architecture", str, source=g.path)
    arch = archs.by_gguf(name)
    if arch is None:
        raise NotImplementedError(f"{g.path}: GGUF architecture {name!r} is not supported; "
                                  f"supported: {', '.join(GGUF_ARCHS)}")
    kv = _KV(g.metadata, name, g.path)
    E, k = kv.get("expert_count", int, 0), kv.get("expert_used_count", int, 0)
    if E > 0 and not 0 < k <= E:  # (llama.cpp asserts it too)
        raise ValueError(f"{g.path}: {name}.expert_count = {E} needs an expert_used_count in [1, {E}], got {k}")
    if E > 0:
        if arch.gguf_moe_norm is None:
            raise NotImplementedError(f"{g.path}: {name}.expert_count > 0: rlxc (and llama.cpp) run no experts for "
                                      f"{name}")
        gating = kv.get("expert_gating_func", int, 1)
        if gating != 1:
            raise NotImplementedError(f"{g.path}: {name}.expert_gating_func {gating} (rlxc routes by softmax, 1)")
    L = kv.get("block_count", int)
    # every layer has tensors: a larger count is corrupt, and the per-layer work (a list of L
    # sliding-window flags per layer, ...) would run for ever on a count like 2**32
    if L > len(g.tensors):
        raise ValueError(f"{g.path}: {name}.block_count = {L}, but the file has {len(g.tensors)} tensors")
    return arch, kv, L


def model_from_gguf(g: GGUFFile, weights: str | None = None, threads: int | None = None,
                    max_seq: int | None = None, tokenizer: bool = True) -> Model:
    """The :class:`rlxc.Model` of an open GGUF file (``rlxc.load`` of a ``.gguf``): matrices used in
    place (``Layer.set_weight_view``) or, with ``weights``, converted; see :func:`rlxc.load`."""
    arch, kv, L = _arch(g)
    if weights is not None and weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be None (as stored) or one of {WEIGHT_FORMATS}, got {weights!r}")
    ctx = kv.get("context_length", int, 4096) or 4096
    if max_seq is None:
        max_seq = ctx
    supported = engine_wtypes()
    blk = arch.layer_tensors
    known = set(arch.model_tensors)
    for name in g.tensors:
        if name in known:
            continue
        pieces = name.split(".", 2)
        if (len(pieces) == 3 and pieces[0] == "blk" and pieces[1].isdigit() and int(pieces[1]) < L
                and (pieces[2] in blk or arch.gemma4 and pieces[2] == GEMMA4_SCALAR)):
            continue
        raise NotImplementedError(f"{g.path}: tensor {name!r} ({arch.gguf}) is not supported by rlxc")

    # model-level RoPE factors (llama3 rope_freqs; phi3 longrope short/long; Gemma 4's rope_freqs
    # belongs to its full-attention layers only, see below)
    freq_factors = None
    if "rope_freqs.weight" in g and not arch.gemma4:
        freq_factors = g.array("rope_freqs.weight").astype(np.float32)
    attn_factor = 1.0
    if "rope_factors_short.weight" in g or "rope_factors_long.weight" in g:
        orig = kv.get("rope.scaling.original_context_length", int, ctx) or ctx
        use = "rope_factors_long.weight" if max_seq > orig else "rope_factors_short.weight"
        if use not in g:
            raise ValueError(f"{g.path}: {use} is missing")
        freq_factors = g.array(use).astype(np.float32)
        attn_factor = kv.get("rope.scaling.attn_factor", float, 1.0) or 1.0

    def matrix(layer: Layer, slot: str, data: npt.NDArray[np.uint8], t: TensorInfo) -> str:
        """Set a matrix slot from stored rows: in place, or converted when weights= is given."""
        if weights is None:
            if t.wtype not in supported:
                raise NotImplementedError(
                    f"{g.path}: tensor {t.name!r} is {t.type_name}, which this rlxc build cannot use in place "
                    f"(it runs: {', '.join(sorted(supported))}); pass weights='q8_0' (or 'q4_0', 'f32') to convert "
                    "at load")
            layer.set_weight_view(slot, data, t.cols, cast(Any, t.wtype))  # one of the engine's: supported
            return t.wtype
        stored = matrix_wtype(weights, (len(data), t.cols))
        layer.set_weight(slot, dequantize(data, t.wtype, t.cols), stored)
        return stored

    def bias(layer: Layer, slot: str, vec: _F32) -> None:
        layer.set_weight(slot, np.ascontiguousarray(vec, np.float32))

    layers, wtypes = [], []
    for i in range(L):
        f = gguf_layer_fields(g, i, max_seq)
        layer = Layer(**f)
        E = f.get("num_experts", 0)
        pre = f"blk.{i}."
        types: dict[str, str] = {}
        hd, nq, nkv = f["head_dim"], f["num_q_heads"], f["num_kv_heads"]
        # a gated FFN without ffn_gate has the gate rows first in ffn_up (phi3)
        fused_up = f["ffn_type"] == FfnType.GATED and (pre + arch.slot_tensors["gate_proj"]) not in g
        for suffix, slot in blk.items():
            name = pre + suffix
            if name not in g:
                continue
            t = g.info(name)
            experts = slot in EXPERT_SLOTS or slot == "gate_up_exps"
            if experts and not E:
                raise NotImplementedError(f"{g.path}: tensor {name!r} in a layer without a router (ffn_gate_inp) "
                                          f"or without {arch.gguf}.expert_count")
            if len(t.shape) > 2 and not (experts and len(t.shape) == 3 and t.shape[2] == E):
                raise ValueError(f"{g.path}: {name} has shape {t.shape}")
            if slot == "gate_up_exps":  # [E][gate rows, up rows]: copied apart (the layer holds the copies)
                per = 2 * f["expert_intermediate_size"]
                if t.rows != E * per:
                    raise ValueError(f"{g.path}: {name} has {t.rows} rows, {E} experts of {per} need {E * per}")
                both = g.raw(name).reshape(E, per, -1)
                for s, half in (("gate_exps", both[:, :per // 2]), ("up_exps", both[:, per // 2:])):
                    types[s] = matrix(layer, s, np.ascontiguousarray(half).reshape(E * per // 2, -1), t)
            elif slot == "router":  # kept as stored where the engine multiplies it (llama.cpp: F32)
                if weights is None and t.wtype in supported:
                    layer.set_weight_view(slot, g.raw(name), t.cols, cast(Any, t.wtype))
                else:
                    layer.set_weight(slot, g.array(name).reshape(t.rows, t.cols))
            elif slot == "qkv":  # fused [q | k | v] rows (phi3): row slices of the mapped bytes are still views
                for s, rows in zip(("q_proj", "k_proj", "v_proj"), split_qkv(g.raw(name), nq, nkv, hd, f"{g.path}: {name}")):
                    types[s] = matrix(layer, s, rows, t)
            elif slot == "qkv.bias":
                for s, vec in zip(("q_proj", "k_proj", "v_proj"),
                                  split_qkv(g.array(name), nq, nkv, hd, f"{g.path}: {name}")):
                    bias(layer, s + ".bias", vec)
            elif slot in MATRIX_SLOTS:
                data = g.raw(name)
                if slot == "up_proj" and fused_up:
                    gate, data = split_gate_up(data, f["intermediate_size"], f"{g.path}: {name}")
                    types["gate_proj"] = matrix(layer, "gate_proj", gate, t)
                if arch.permuted_qk and slot in ("q_proj", "k_proj"):
                    data = unpermute_rows(data, nq if slot == "q_proj" else nkv)
                types[slot] = matrix(layer, slot, data, t)
            else:
                vec = g.array(name).reshape(-1)
                if arch.permuted_qk and slot in ("q_proj.bias", "k_proj.bias"):
                    vec = unpermute_rows(vec, nq if slot == "q_proj.bias" else nkv)
                if slot == "up_proj.bias" and fused_up:
                    gate, vec = split_gate_up(vec, f["intermediate_size"], f"{g.path}: {name}")
                    bias(layer, "gate_proj.bias", gate)
                if slot == "router_norm":  # llama.cpp: rms_norm(x) / sqrt(hidden) * scale
                    vec = vec * np.float32(f["hidden_size"] ** -0.5)
                bias(layer, slot, vec)
        if E and arch.gguf != "gemma4":
            scale = kv.get("expert_weights_scale", float, 0.0)
            if scale not in (0.0, 1.0):  # llama.cpp multiplies the chosen experts' weights by it
                layer.set_weight("expert_scale", np.full(E, scale, np.float32))
        if arch.gemma4:
            if f["rope_layout"] == RopeLayout.PROPORTIONAL:
                rotated = _gemma4_rope_freqs(g, f["head_dim"])
                if np.any(rotated != 1.0):
                    layer.set_weight("rope_freq_factors", rotated)
        elif freq_factors is not None:
            if freq_factors.size != f["rotary_dim"] // 2:
                raise ValueError(f"{g.path}: RoPE factors have {freq_factors.size} entries, rotary dim "
                                 f"{f['rotary_dim']} needs {f['rotary_dim'] // 2}")
            layer.set_weight("rope_freq_factors", freq_factors)
            layer.rope_attn_factor = attn_factor
        else:
            ff, kind = _rope_scaling(kv, f["rotary_dim"])
            if ff is not None and not (arch.swa_own_rope and f["sliding_window"]):
                layer.set_weight("rope_freq_factors", ff)  # gemma3: linear scaling on full layers only
        missing = [s for s in layer.used_weights() if layer.weight_type(s) is None]
        if missing:
            names = [pre + arch.slot_tensors.get(s, s) for s in missing]
            raise ValueError(f"{g.path}: layer {i} lacks {', '.join(names)}")
        layers.append(layer)
        wtypes.append(types)

    # model-level pieces
    if "token_embd.weight" not in g:
        raise ValueError(f"{g.path}: missing tensor 'token_embd.weight'")
    te = g.info("token_embd.weight")
    H = kv.get("embedding_length", int)
    if te.cols != H or len(te.shape) != 2:
        raise ValueError(f"{g.path}: token_embd.weight is {te.shape}, hidden size {H}")
    embed: QuantMatrix | _F32 = g.f32("token_embd.weight") if te.type_id == 0 else g.matrix("token_embd.weight")
    lm_head: QuantMatrix | _F32 | None = None
    if "output.weight" in g:
        lm_head = g.matrix("output.weight")
        if g.info("output.weight").cols != H:
            raise ValueError(f"{g.path}: output.weight is {g.info('output.weight').shape}, hidden size {H}")
    head = lm_head if lm_head is not None else (embed if isinstance(embed, QuantMatrix) else None)
    head_name = "output.weight" if lm_head is not None else "token_embd.weight"
    model_weights = "f32"
    if weights is not None:
        model_weights = weights
        if isinstance(head, QuantMatrix):  # convert the lm_head (the embedding rows stay as stored)
            lm_head = head.dequantize()
            if lm_head.shape[1] % 32:
                model_weights = "f32"
    elif isinstance(head, QuantMatrix) and head.wtype not in supported:
        raise NotImplementedError(f"{g.path}: tensor {head_name!r} is {head.wtype.upper()}, which this rlxc build "
                                  f"cannot multiply in place; pass weights='q8_0' to convert at load")
    if "output_norm.weight" not in g:
        raise ValueError(f"{g.path}: missing tensor 'output_norm.weight'")
    parts = archs.model_parts(
        arch, H, eps=float(layers[0].eps) if layers else 1e-6, gguf=True,
        # absent key: llama.cpp's default cap of 30 (Gemma 4's converter writes the key only when
        # the config has a cap, so a Gemma 4 file without it still runs capped in llama.cpp)
        final_softcap=kv.get("final_logit_softcapping", float, arch.gguf_final_softcap))
    parts.update(norm_weight=g.array("output_norm.weight"),
                 norm_bias=g.array("output_norm.bias") if "output_norm.bias" in g else None,
                 ple=_gemma4_ple(g, kv, L, H, layers) if arch.gemma4 else None)
    tok = from_gguf_metadata(g.metadata, g.path) if tokenizer else None
    meta = {"source": g.path, "format": "gguf", "gguf": {k: v for k, v in g.metadata.items()
                                                          if not k.startswith("tokenizer.ggml.")}}
    name = gguf_meta(g.metadata, "general.name", str, "", g.path) or os.path.basename(g.path)
    model = Model(layers, embed, lm_head=lm_head, weights=model_weights, max_seq=max_seq, threads=threads,
                  name=f"{name} ({arch.gguf}, GGUF)", layer_wtypes=wtypes, arch=arch.gguf, tokenizer=tok,
                  metadata=meta, **parts)
    model._gguf = g  # keeps the mapping (and the tokenizer metadata for rlxc.save) alive
    return model


def _gemma4_ple(g: GGUFFile, kv: _KV, L: int, H: int, layers: list[Layer]) -> dict[str, Any] | None:
    """Gemma 4 per-layer-embedding tables (:attr:`rlxc.Model.ple`), None when
    embedding_length_per_layer_input is 0. The [vocab, L * P] token table stays as stored (rows
    dequantized per lookup); the model projection is dequantized. The constants are llama.cpp's
    (build_inp_per_layer / project_per_layer_inputs), :func:`rlxc.archs.ple_parts`."""
    P = kv.get("embedding_length_per_layer_input", int)
    if P == 0:
        return None
    for name, want in (("per_layer_token_embd.weight", (L * P, g.info("token_embd.weight").rows)),
                       ("per_layer_model_proj.weight", (H, L * P)), ("per_layer_proj_norm.weight", (P,))):
        if g.info(name).shape != want:
            raise ValueError(f"{g.path}: {name} has shape {g.info(name).shape}, expected {want}")
    return archs.ple_parts(embed=g.matrix("per_layer_token_embd.weight"), proj=g.array("per_layer_model_proj.weight"),
                           norm=g.array("per_layer_proj_norm.weight"), hidden=H, dim=P, num_layers=L,
                           eps=float(layers[0].eps), gguf=True)


# ============================================================================ GGUF -> transformers

def _hf_arch(g: GGUFFile) -> tuple[Arch, _KV, int, tuple[str, str]]:
    """:func:`_arch` for the GGUF -> transformers helpers, with the transformers classes."""
    arch, kv, L = _arch(g)
    if kv.get("expert_count", int, 0) > 0:
        raise NotImplementedError(f"{g.path}: no GGUF -> transformers mapping for mixture-of-experts files here "
                                  "(compare against the Hugging Face checkpoint, or llama.cpp's logits)")
    if arch.hf_classes is None:
        raise NotImplementedError(f"{g.path}: no GGUF -> transformers mapping for {arch.gguf} here "
                                  "(compare against its Hugging Face checkpoint instead)")
    return arch, kv, L, arch.hf_classes


def gguf_hf_config(g: GGUFFile) -> tuple[str, str, dict[str, Any]]:
    """``(config class, model class, kwargs)``: the transformers (5.17) config that describes the
    same network as a GGUF file, as llama.cpp runs it (e.g. for checking rlxc against HF on the
    file's dequantized weights: see :func:`gguf_hf_state_dict`)."""
    arch, kv, L, (cls, mcls) = _hf_arch(g)
    f0 = gguf_layer_fields(g, 0)
    fs = [gguf_layer_fields(g, i) for i in range(L)]
    for key in ("num_q_heads", "num_kv_heads", "head_dim", "intermediate_size"):
        if len({f[key] for f in fs}) > 1:
            raise NotImplementedError(f"{g.path}: per-layer {key} has no transformers config equivalent")
    H = f0["hidden_size"]
    kw: dict[str, Any] = dict(
        vocab_size=g.info("token_embd.weight").rows, hidden_size=H, intermediate_size=f0["intermediate_size"],
        num_hidden_layers=L, num_attention_heads=f0["num_q_heads"], num_key_value_heads=f0["num_kv_heads"],
        max_position_embeddings=kv.get("context_length", int, 4096), tie_word_embeddings="output.weight" not in g,
        rope_theta=kv.get("rope.freq_base", float, 10000.0))
    kw[arch.eps_attr] = f0["eps"]
    for bias, attr in arch.hf_biases.items():
        if isinstance(attr, str):
            kw.setdefault(attr, bool(f0[bias]))  # the first field it switches (qkv_bias, ffn_up_bias)
    if arch.gguf_activation == Activation.GELU_TANH:
        kw[arch.hf_activation_attr] = "gelu_pytorch_tanh"
    if arch.hf_config_head_dim:
        kw["head_dim"] = f0["head_dim"]
    kw.update(arch.hf_config_extra)
    if arch.hf_attn_scale == "query_pre_attn_scalar":  # Gemma 2 / 3
        qpas = float(f0["attn_scale"]) ** -2
        kw.update(query_pre_attn_scalar=int(round(qpas)) if abs(qpas - round(qpas)) < 1e-3 else qpas,
                  sliding_window=max(f["sliding_window"] for f in fs) or None,
                  layer_types=["sliding_attention" if f["sliding_window"] else "full_attention" for f in fs])
        kw["final_logit_softcapping"] = kv.get("final_logit_softcapping", float, arch.gguf_final_softcap) or None
    if arch.attn_softcap:
        kw["attn_logit_softcapping"] = f0["attn_softcap"] or None
    if arch.swa_own_rope:  # Gemma 3
        full = [f for f in fs if not f["sliding_window"]] or fs
        sw = [f for f in fs if f["sliding_window"]] or fs
        kw["rope_theta"] = full[0]["rope_base"]
        kw["rope_local_base_freq"] = sw[0]["rope_base"]
        ff, kind = _rope_scaling(kv, f0["rotary_dim"])
        if kind == "linear" and ff is not None:
            kw["rope_scaling"] = {"rope_type": "linear", "factor": float(ff[0])}
    if not arch.full_head_rope:
        kw["partial_rotary_factor"] = f0["rotary_dim"] / f0["head_dim"]
    if "rope_freqs.weight" in g or "rope_factors_short.weight" in g:
        raise NotImplementedError(f"{g.path}: RoPE factor tensors have no plain transformers config equivalent here")
    return cls, mcls, kw


def gguf_hf_state_dict(g: GGUFFile) -> dict[str, _F32]:
    """transformers parameter name -> float32 array of a GGUF file's tensors (dequantized;
    llama q/k rows put back in HF order; Gemma norms minus the 1 llama.cpp's converter added)."""
    arch, kv, L, _ = _hf_arch(g)
    one = np.float32(1.0 if arch.norms_plus_one else 0.0)
    sd: dict[str, _F32] = {"model.embed_tokens.weight": g.array("token_embd.weight"),
                           "model.norm.weight": g.array("output_norm.weight") - one}
    if "output_norm.bias" in g:
        sd["model.norm.bias"] = g.array("output_norm.bias")
    if "output.weight" in g:
        sd["lm_head.weight"] = g.array("output.weight")
    names = archs.hf_layer_names(arch)
    for i in range(L):
        f = gguf_layer_fields(g, i)
        for name in g.tensors:
            pre = f"blk.{i}."
            if not name.startswith(pre):
                continue
            base, kind = name[len(pre):].rsplit(".", 1)
            if base not in names:
                raise NotImplementedError(f"{g.path}: no transformers name for {name}")
            a = g.array(name)
            if arch.permuted_qk and base in ("attn_q", "attn_k"):
                a = unpermute_rows(a, f["num_q_heads"] if base == "attn_q" else f["num_kv_heads"])
            if arch.norms_plus_one and base.endswith("norm") and kind == "weight":
                a = a - one
            sd[f"model.layers.{i}.{names[base]}.{kind}"] = np.ascontiguousarray(a, np.float32)
    return sd
