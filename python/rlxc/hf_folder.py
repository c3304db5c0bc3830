"""Hugging Face checkpoint folders -> rlxc: ``config.json`` + ``*.safetensors`` (sharded or not).

The safetensors files are parsed here (bf16/f16/f32, without torch, :mod:`rlxc.safetensors`),
the config goes through ``transformers``' config class and :func:`rlxc.hf.layer_fields` (the
same mapping as :func:`rlxc.from_hf`), and the matrices are quantized at load. The folder is
untrusted: every config value rlxc reads is checked (:func:`rlxc.hf.validate_config`), the layer
count against the tensors before any layer is built, and a malformed value raises ValueError
naming the file and the field.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from . import archs, hf
from ._files import read_json_object
from ._layer import Layer
from .archs import split_expert_gate_up, split_gate_up, split_qkv
from .hf import arch_of
from .model import WEIGHT_FORMATS, Model
from .safetensors import Checkpoint
from .tokenizer import from_folder

__all__ = ["model_from_folder"]

_F32 = npt.NDArray[np.float32]

_HF_LAYER_IGNORE = ("rotary_emb.inv_freq", "self_attn.rotary_emb.inv_freq")
# one expert's matrix in a hub checkpoint: Qwen's mlp.experts.E.gate_proj, Mixtral's
# block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down)
_EXPERT_PARTS = {"gate_proj": "gate_exps", "up_proj": "up_exps", "down_proj": "down_exps", "w1": "gate_exps",
                 "w3": "up_exps", "w2": "down_exps"}
# transformers' own stacked form, [E, 2I, H] (gate rows first) and [E, H, I]
_STACKED_EXPERTS = ("mlp.experts.gate_up_proj", "experts.gate_up_proj", "mlp.experts.down_proj", "experts.down_proj")


def _expert_part(n: str) -> tuple[str, int] | None:
    """(slot, expert) of a per-expert parameter name, else None."""
    pieces = n.split(".")
    if (len(pieces) == 5 and pieces[0] in ("mlp", "block_sparse_moe") and pieces[1] == "experts"
            and pieces[2].isdigit() and pieces[2].isascii() and pieces[3] in _EXPERT_PARTS and pieces[4] == "weight"):
        return _EXPERT_PARTS[pieces[3]], int(pieces[2])
    return None


def _stack_experts(parts: Mapping[str, Mapping[int, _F32]], f: Mapping[str, Any], where: str) -> dict[str, _F32]:
    """The per-expert matrices stacked expert by expert into rlxc's gate_exps / up_exps / down_exps."""
    E, I, H = f["num_experts"], f["expert_intermediate_size"], f["hidden_size"]
    out = {}
    for slot, shape in (("gate_exps", (I, H)), ("up_exps", (I, H)), ("down_exps", (H, I))):
        got = parts.get(slot, {})
        if sorted(got) != list(range(E)):
            raise ValueError(f"{where}: the experts' {slot[:-5]} matrices are for experts {sorted(got)[:8]}, "
                             f"expected 0 .. {E - 1}")
        for e, w in got.items():
            if w.shape != shape:
                raise ValueError(f"{where}: expert {e}'s {slot[:-5]} matrix has shape {w.shape}, expected {shape}")
        out[slot] = np.concatenate([got[e] for e in range(E)], axis=0)
    return out
# torch dtype names a config's torch_dtype / dtype may give (rlxc reads the tensors' own dtypes)
_TORCH_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double", "float8_e4m3fn",
                 "float8_e5m2", "int8", "uint8", "auto")


def _check_dtype_fields(cfg: Mapping[str, Any], path: str, where: str = "") -> None:
    """config.json's torch_dtype / dtype: None or a torch dtype name (transformers looks the string
    up in torch: AttributeError for "x", IndexError for [])."""
    for key in ("torch_dtype", "dtype"):
        v = cfg.get(key)
        if v is not None and not (isinstance(v, str) and v.removeprefix("torch.") in _TORCH_DTYPES):
            raise ValueError(f"{path}: field {where + key!r} is {type(v).__name__} {v!r:.60}, expected a torch "
                             f"dtype name ({', '.join(_TORCH_DTYPES[:3])}, ...)")
    for sub in ("text_config", "vision_config", "audio_config"):
        if isinstance(cfg.get(sub), Mapping):
            _check_dtype_fields(cfg[sub], path, f"{where}{sub}.")


def _check_layer_count(ck: Checkpoint, prefix: str, L: int, cfg_path: str) -> None:
    """num_hidden_layers must be the layers the checkpoint has tensors for, 0 .. L-1, all of them."""
    lp = f"{prefix}layers."
    have = set()
    for k in ck.where:
        if k.startswith(lp):
            n = k[len(lp):].split(".", 1)[0]
            if n.isdigit() and n.isascii():
                have.add(int(n))
    if have != set(range(L)):
        missing = sorted(set(range(L)) - have)
        if len(have) < L:
            what = f"has tensors of {len(have)} layers (none of layer {missing[0]})"
        else:
            what = f"has tensors of layer {max(have - set(range(L)))}"
        raise ValueError(f"{cfg_path}: field 'num_hidden_layers' is {L}, but the checkpoint {what}")


def model_from_folder(folder: str, weights: str | None = None, threads: int | None = None,
                      max_seq: int | None = None, tokenizer: bool = True, mmap: bool = True) -> Model:
    """The :class:`rlxc.Model` of a Hugging Face checkpoint folder (``rlxc.load`` of a folder): the
    config through transformers' config class and :func:`rlxc.hf.layer_fields`, every value rlxc
    reads checked first, the tensors quantized at load to ``weights`` (default "q4_0")."""
    weights = "q4_0" if weights is None else weights
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, got {weights!r}")
    cfg_path = os.path.join(folder, "config.json")
    cfg_dict = read_json_object(cfg_path)
    try:
        import transformers
    except ImportError:  # pragma: no cover
        raise ImportError("loading a Hugging Face folder needs the transformers package (pip install rlxc[hf])") \
            from None
    mt = cfg_dict.get("model_type")
    if archs.by_hf(mt) is None and mt not in ("gemma3", "gemma4"):
        raise NotImplementedError(f"{folder}: model_type {mt!r} is not supported; supported: "
                                  f"{', '.join(hf.SUPPORTED_MODEL_TYPES)}")
    _check_dtype_fields(cfg_dict, cfg_path)
    hf.check_config_dict(cfg_dict, cfg_path)
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        if mt in ("gemma3", "gemma4"):
            config = config.get_text_config()
    except (ImportError, MemoryError, NotImplementedError):
        raise
    except Exception as e:  # transformers' config classes check types (StrictDataclass...Error, KeyError, ...)
        msg = " ".join(str(e).split())
        raise ValueError(f"{cfg_path}: rejected by transformers ({type(e).__name__}: {msg:.300})") from None
    mtype = config.model_type
    arch = arch_of(config)
    if getattr(type(config), "model_type", mtype) != mtype:  # e.g. a gemma4_text text_config of a gemma3 model
        raise ValueError(f"{cfg_path}: field '{'text_config.' if mt != mtype else ''}model_type' is {mtype!r}, but "
                         f"transformers reads the config as {type(config).__name__} ({type(config).model_type})")
    ck = Checkpoint(folder, mmap)
    # the decoder's parameter prefix
    prefix = None
    for p in ("model.", "model.language_model.", "language_model.model.", ""):
        if f"{p}embed_tokens.weight" in ck:
            prefix = p
            break
    if prefix is None:
        raise ValueError(f"{folder}: no embed_tokens.weight in the checkpoint")
    # the layer count against the tensors first: every later step loops over the layers
    L = hf.config_int(config, "num_hidden_layers", cfg_path, hi=hf._MAX_LAYERS)
    _check_layer_count(ck, prefix, L, cfg_path)
    hf.validate_config(config, cfg_path)
    if max_seq is None:
        max_seq = int(config.max_position_embeddings or 4096)
    hf.check_supported(config, max_seq, cfg_path)

    def layer_spec(i: int) -> tuple[dict[str, Any], dict[str, _F32]]:
        f = hf.layer_fields(config, i, max_seq)
        lp = f"{prefix}layers.{i}."
        names = [k[len(lp):] for k in ck.where if k.startswith(lp)]
        ws: dict[str, _F32] = {}
        experts: dict[str, dict[int, _F32]] = {}
        try:
            probe = Layer(**f)
        except ValueError as e:  # a rule of the engine's fields (rotary_dim even, ...)
            raise ValueError(f"{cfg_path}: layer {i}: {e}") from None
        for n in names:
            if n in _HF_LAYER_IGNORE:
                continue
            if n == "layer_scalar":
                v = ck.get(lp + n).reshape(-1)
                if v.size != 1:
                    raise NotImplementedError(f"{folder}: layer {i} layer_scalar has {v.size} values")
                f["layer_scalar"] = float(v[0])
                continue
            if n == "self_attn.qkv_proj.weight":  # fused (phi3)
                ws["q_proj"], ws["k_proj"], ws["v_proj"] = split_qkv(
                    ck.get(lp + n), f["num_q_heads"], f["num_kv_heads"], f["head_dim"], f"{folder}: {lp + n}")
                continue
            part = _expert_part(n)
            if part is not None and f["num_experts"]:
                experts.setdefault(part[0], {})[part[1]] = ck.get(lp + n)
                continue
            if n in _STACKED_EXPERTS and f["num_experts"]:
                E, I, H = f["num_experts"], f["expert_intermediate_size"], f["hidden_size"]
                w = ck.get(lp + n)
                want = (E, 2 * I, H) if n.endswith("gate_up_proj") else (E, H, I)
                if w.shape != want:
                    raise ValueError(f"{folder}: {lp + n} has shape {w.shape}, expected {want}")
                if n.endswith("gate_up_proj"):
                    ws["gate_exps"], ws["up_exps"] = split_expert_gate_up(w, I)
                else:
                    ws["down_exps"] = w.reshape(E * H, I)
                continue
            if n == "router.scale" and f["num_experts"]:  # Gemma 4: rlxc's router_norm is it / sqrt(hidden)
                ws["router_norm"] = ck.get(lp + n).reshape(-1) * np.float32(f["hidden_size"] ** -0.5)
                continue
            if n == "mlp.gate_up_proj.weight":
                ws["gate_proj"], ws["up_proj"] = split_gate_up(ck.get(lp + n), f["intermediate_size"],
                                                               f"{folder}: {lp + n}")
                continue
            try:
                slot = probe.weight_name(n)
            except KeyError:
                raise NotImplementedError(f"{folder}: parameter {lp + n!r} ({mtype}) is not supported") from None
            ws[slot] = ck.get(lp + n)
            if slot == "shared_gate":  # a Linear(hidden, 1)
                ws[slot] = ws[slot].reshape(-1)
        if experts:  # one tensor per expert (hub checkpoints); missing slots are reported below
            ws.update(_stack_experts(experts, f, f"{folder}: layer {i}"))
        _, factors = hf.rope_fields(config, i, max_seq)
        if factors is not None:
            ws["rope_freq_factors"] = factors
        missing = [slot for slot in probe.used_weights() if slot not in ws]
        if missing:
            raise ValueError(f"{folder}: layer {i} lacks tensors for {', '.join(missing)} (under {lp!r}; the "
                             f"fields of config.json need them)")
        return f, ws

    embed = ck.get(f"{prefix}embed_tokens.weight")
    if embed.shape != (config.vocab_size, config.hidden_size):
        raise ValueError(f"{cfg_path}: fields 'vocab_size' = {config.vocab_size} and 'hidden_size' = "
                         f"{config.hidden_size}, but {prefix}embed_tokens.weight has shape {embed.shape}")
    tied = bool(getattr(config, "tie_word_embeddings", False))
    head_name = "lm_head.weight"
    lm_head = None if tied or head_name not in ck else ck.get(head_name)
    norm_bias_name = f"{prefix}norm.bias"
    parts: dict[str, Any] = dict(
        model_type=mtype, embed=embed, lm_head=lm_head, norm_weight=ck.get(f"{prefix}norm.weight"),
        norm_bias=ck.get(norm_bias_name) if norm_bias_name in ck else None, ple=None,
        **archs.model_parts(arch, config.hidden_size, eps=getattr(config, arch.eps_attr), gguf=False,
                            final_softcap=getattr(config, "final_logit_softcapping", None) if arch.hf_final_softcap
                            else 0.0))
    ple_dim: int = getattr(config, "hidden_size_per_layer_input", 0) or 0
    if arch.gemma4 and ple_dim:
        parts["ple"] = archs.ple_parts(
            embed=ck.get(f"{prefix}embed_tokens_per_layer.weight"),
            proj=ck.get(f"{prefix}per_layer_model_projection.weight"),
            norm=ck.get(f"{prefix}per_layer_projection_norm.weight"), hidden=config.hidden_size,
            dim=ple_dim, num_layers=L, eps=config.rms_norm_eps, gguf=False)
    try:
        from tqdm.auto import tqdm
        it: Iterable[tuple[dict[str, Any], dict[str, _F32]]] = tqdm((layer_spec(i) for i in range(L)), total=L, desc=f"rlxc.load {weights}", unit="layer",
                            leave=False, disable=None)
    except ImportError:  # pragma: no cover
        it = (layer_spec(i) for i in range(L))
    model = Model.from_parts(it, parts, weights=weights, threads=threads, max_seq=max_seq,
                             name=f"{os.path.basename(os.path.normpath(folder))} ({mtype})")
    model.metadata.update(source=folder, format="hf", config=cfg_dict)
    if tokenizer:
        try:
            model.tokenizer = from_folder(folder)
        except FileNotFoundError:
            model.tokenizer = None
        except NotImplementedError as e:
            warnings.warn(f"rlxc.load: no tokenizer attached ({e})", stacklevel=2)
            model.tokenizer = None
    return model


