"""Hugging Face transformers -> rlxc.

``from_hf(model)`` turns a transformers ``...ForCausalLM`` (float weights, already loaded) into an
:class:`rlxc.Model`. The mapping is split in two pure parts, both usable on their own:

* :func:`layer_fields` ``(config, i) -> dict``: the per-layer fields of rlxc.Layer, from the
  config alone, as each architecture's modeling code in transformers (``modeling_<type>.py``) reads it;
* :func:`layer_weights` ``(model, i) -> dict[slot, float32 array]``: the weights of layer i under
  rlxc's slot names (fused phi3 projections split), plus the ``rope_freq_factors`` slot that
  expresses scaled RoPE variants.

Supported ``config.model_type``: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text
(Gemma3ForCausalLM), gemma4_text (Gemma4ForCausalLM, dense), starcoder2, phi3. Anything else, and
any config feature the engine cannot reproduce exactly, raises ``NotImplementedError`` naming it:

* rope_type ``dynamic`` (NTK rescaling at run time) and any unknown rope_type;
* ``longrope`` when the model may run past ``original_max_position_embeddings`` with
  ``short_factor != long_factor`` (transformers switches factor sets on the sequence length; rlxc
  keeps one set per layer). With ``max_seq <= original_max_position_embeddings`` (or equal factor
  sets) the short factors are used and the result is exact;
* a partial_rotary_factor < 1 with a non-default rope_type on archs whose attention rotates the
  whole head (transformers itself fails there); the ``default`` rope of those archs ignores it,
  as transformers does;
* Gemma 3 ``use_bidirectional_attention``, Gemma 4 ``use_bidirectional_attention="all"``,
  Gemma 4 ``enable_moe_block`` (MoE), heterogeneous ``per_layer_config`` outside Gemma 4;
* activations other than SiLU and tanh-GELU (e.g. exact ``gelu``: note that Gemma-1 hub configs
  carry ``hidden_act="gelu"``, which transformers 5.17 runs as exact GELU).

Weight formats: ``weights="q4_0"|"q8_0"`` quantizes every matrix whose input dimension is a
multiple of 32 (the GGUF block size), including the lm_head; matrices with another input
dimension stay float32, as do norms, biases, RoPE factors and the embedding tables.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, Mapping, overload

import numpy as np
import numpy.typing as npt

from . import archs
from ._enums import Activation, FfnType, RopeLayout
from .archs import Arch
from .model import WEIGHT_FORMATS, Model

_F32 = npt.NDArray[np.float32]

__all__ = [
    "SUPPORTED_MODEL_TYPES", "layer_fields", "layer_weights", "layer_model_fields",
    "rope_fields", "check_supported", "validate_config", "check_config_dict", "arch_of", "model_parts", "from_hf",
]

SUPPORTED_MODEL_TYPES = archs.HF_MODEL_TYPES

_ACTIVATIONS = {"silu": Activation.SILU, "swish": Activation.SILU, "gelu_pytorch_tanh": Activation.GELU_TANH,
                "gelu_new": Activation.GELU_TANH}


# ----------------------------------------------------------------------------- helpers

def arch_of(config: Any) -> Arch:
    """The registry entry of ``config.model_type`` (NotImplementedError if rlxc has none)."""
    mt = getattr(config, "model_type", None)
    arch = archs.by_hf(mt) if isinstance(mt, str) else None
    if arch is None:
        hint = ""
        if mt in ("gemma3", "gemma4"):
            hint = f" (use the text-only {mt}_text config / ...ForCausalLM model)"
        raise NotImplementedError(f"rlxc.hf: model_type {mt!r} is not supported{hint}; "
                                  f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return arch


def _model_type(config: Any) -> str:
    return arch_of(config).hf_type


def _layer_config(config: Any, i: int) -> Any:
    """The config that holds layer i's attributes (Gemma 4's per_layer_config view)."""
    if getattr(config, "is_heterogeneous", False):
        return config.per_layer_config[i]
    return config


def _activation(config: Any, arch: Arch) -> Activation:
    name = getattr(config, arch.hf_activation_attr)
    if name not in _ACTIVATIONS:
        raise NotImplementedError(f"rlxc.hf: activation {name!r} ({arch.hf_type}) is not supported; "
                                  f"supported: {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _head_dim(lc: Any) -> int:
    return int(getattr(lc, "head_dim", None) or lc.hidden_size // lc.num_attention_heads)


def _num_kv_heads(lc: Any) -> int:
    n = getattr(lc, "num_key_value_heads", None)
    return int(n if n is not None else lc.num_attention_heads)


def _layer_type(config: Any, i: int) -> str | None:
    lts = getattr(config, "layer_types", None)
    return lts[i] if lts is not None else None


def _rope_params(config: Any, i: int, mt: str) -> tuple[dict[str, Any], bool]:
    """(rope parameter dict of layer i, whether the config keeps one dict per layer type)."""
    rp = config.rope_parameters
    if mt in ("gemma3_text", "gemma4_text"):
        lt = _layer_type(config, i)
        if lt not in rp or rp[lt] is None:
            raise NotImplementedError(f"rlxc.hf: no rope_parameters for layer type {lt!r} ({mt})")
        return dict(rp[lt]), True
    return dict(rp), False


def _kv_shared_source(config: Any, i: int) -> int:
    """Gemma 4: index of the layer whose K/V layer i reuses, or -1."""
    L = config.num_hidden_layers
    n_shared = int(getattr(config, "num_kv_shared_layers", 0) or 0)
    first = L - n_shared
    if not (i >= first >= 0) or n_shared == 0:
        return -1
    lt = config.layer_types[i]
    prev = [j for j in range(first) if config.layer_types[j] == lt]
    if not prev:
        raise NotImplementedError(f"rlxc.hf: gemma4 layer {i} shares K/V but no earlier "
                                  f"{lt!r} layer exists")
    return prev[-1]


# ----------------------------------------------------------------------------- RoPE

def rope_fields(config: Any, i: int, max_seq: int | None = None) -> tuple[dict[str, Any], _F32 | None]:
    """RoPE of layer i: ``(fields, freq_factors)``.

    ``fields`` holds rope_base, rotary_dim, rope_layout, rope_attn_factor. ``freq_factors`` is the
    ``[rotary_dim/2]`` array of divisors of ``rope_base ** (-2k/denom)`` (None when all are 1).
    Scaled variants (linear, llama3, yarn, longrope, proportional) are re-derived here in float64
    from transformers 5.17's ``modeling_rope_utils``.
    """
    arch = arch_of(config)
    mt = arch.hf_type
    lc = _layer_config(config, i)
    hd = _head_dim(lc)
    rp, layered = _rope_params(config, i, mt)
    rtype = rp.get("rope_type", rp.get("type", "default"))
    base = float(rp["rope_theta"])
    prf = float(rp.get("partial_rotary_factor", 1.0) or 1.0)
    layout = RopeLayout.PREFIX
    attn_factor = 1.0
    factors = None

    if rtype == "proportional":
        angles = int(prf * hd // 2)
        rd = 2 * angles
        layout = RopeLayout.PROPORTIONAL
        factors = np.full(angles, float(rp.get("factor", 1.0) or 1.0))
        return _rope_out(base, rd, layout, attn_factor, factors)

    if rtype == "default":
        # phi3's default honours partial_rotary_factor; every other arch's default ignores it.
        dim = hd if arch.full_head_rope else int(hd * prf)
        return _rope_out(base, dim, layout, 1.0, None)

    if rtype not in ("linear", "llama3", "yarn", "longrope"):
        raise NotImplementedError(f"rlxc.hf: rope_type {rtype!r} ({mt}, layer {i}) is not supported "
                                  "(supported: default, linear, llama3, yarn, longrope, proportional)")
    dim = int(hd * prf)
    if dim != hd and arch.full_head_rope:
        raise NotImplementedError(f"rlxc.hf: partial_rotary_factor={prf} with rope_type {rtype!r} on "
                                  f"{mt} (transformers rotates the whole head there and cannot run it)")
    k = np.arange(0, dim, 2, dtype=np.float64)
    inv = base ** (-k / dim)  # what the engine computes from rope_base (PREFIX: denom = rotary_dim)

    if rtype == "linear":
        factors = np.full(dim // 2, float(rp["factor"]))
    elif rtype == "llama3":
        factor = float(rp["factor"])
        lff, hff = float(rp["low_freq_factor"]), float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        low_wl, high_wl = old / lff, old / hff
        wl = 2 * math.pi / inv
        new = np.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - lff) / (hff - lff)
        smoothed = (1 - smooth) * new / factor + smooth * new
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        new = np.where(medium, smoothed, new)
        factors = inv / new
    elif rtype == "yarn":
        orig = float(rp["original_max_position_embeddings"])
        factor = float(rp["factor"] if rp.get("factor") is not None else config.max_position_embeddings / orig)
        af = rp.get("attention_factor")
        mscale, mscale_all = rp.get("mscale"), rp.get("mscale_all_dim")

        def get_mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if af is None:
            af = (get_mscale(factor, mscale) / get_mscale(factor, mscale_all)) if (mscale and mscale_all) \
                else get_mscale(factor)
        attn_factor = float(af)
        beta_fast = rp.get("beta_fast") or 32
        beta_slow = rp.get("beta_slow") or 1
        # transformers reads `truncate` from the top-level rope_parameters (per-type dicts: default)
        truncate = (config.rope_parameters.get("truncate", True) if not layered else True)

        def corr_dim(n_rot: float) -> float:
            return (dim * math.log(orig / (n_rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extra = 1 - ramp
        new = (inv / factor) * (1 - extra) + inv * extra
        factors = inv / new
    else:  # longrope
        orig_len = int(rp["original_max_position_embeddings"])
        short, long_ = rp["short_factor"], rp["long_factor"]
        if max_seq is not None and max_seq > orig_len and list(short) != list(long_):
            raise NotImplementedError(
                f"rlxc.hf: longrope ({mt}) with max_seq={max_seq} > original_max_position_embeddings="
                f"{orig_len}: transformers switches from short_factor to long_factor past {orig_len} tokens; "
                f"rlxc keeps one factor set per layer. Use max_seq <= {orig_len}.")
        factor = rp["factor"] if rp.get("factor") is not None else config.max_position_embeddings / orig_len
        af = rp.get("attention_factor")
        if af is None:
            af = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig_len))
        attn_factor = float(af)
        factors = np.asarray(short, dtype=np.float64)
        if factors.shape != (dim // 2,):
            raise ValueError(f"longrope short_factor has {factors.size} entries, expected {dim // 2}")
    return _rope_out(base, dim, layout, attn_factor, factors)


def _rope_out(base: float, rd: int, layout: int, attn_factor: float,
              factors: npt.NDArray[np.float64] | None) -> tuple[dict[str, Any], _F32 | None]:
    if factors is not None and np.all(factors == 1.0):
        factors = None
    f = dict(rope_base=base, rotary_dim=int(rd), rope_layout=layout, rope_attn_factor=float(attn_factor))
    return f, (None if factors is None else np.asarray(factors, dtype=np.float32))


# ----------------------------------------------------------------------------- config values

#: the largest dimension the engine's int fields hold
_MAX_DIM = 2 ** 31 - 1


def _shown(v: Any) -> str:
    return f"{type(v).__name__} {v!r:.60}"


@overload
def config_int(obj: Any, name: str, source: str, lo: int = 1, hi: int = _MAX_DIM, optional: Literal[False] = False,
               where: str = "") -> int: ...
@overload
def config_int(obj: Any, name: str, source: str, lo: int = 1, hi: int = _MAX_DIM, *, optional: bool,
               where: str = "") -> int | None: ...
def config_int(obj: Any, name: str, source: str, lo: int = 1, hi: int = _MAX_DIM, optional: bool = False,
               where: str = "") -> int | None:
    """Attribute (or, for a dict, key) ``name`` of a config checked to be an int in ``[lo, hi]``
    (None allowed with ``optional``), else a ValueError naming ``source`` (the file) and the
    field (``where`` + name)."""
    v = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    if v is None and optional:
        return None
    # type(v) is int: a JSON true / false loads as a bool, which isinstance takes for an int
    if not (type(v) is int or isinstance(v, np.integer)) or not lo <= v <= hi:
        raise ValueError(f"{source}: field {where + name!r} is {_shown(v)}, expected "
                         f"{'None or ' if optional else ''}an integer in [{lo}, {hi}]")
    return int(v)


@overload
def config_float(obj: Any, name: str, source: str, lo: float = 0.0, positive: bool = False,
                 optional: Literal[False] = False, where: str = "") -> float: ...
@overload
def config_float(obj: Any, name: str, source: str, lo: float = 0.0, positive: bool = False, *, optional: bool,
                 where: str = "") -> float | None: ...
def config_float(obj: Any, name: str, source: str, lo: float = 0.0, positive: bool = False, optional: bool = False,
                 where: str = "") -> float | None:
    """Attribute (or, for a dict, key) ``name`` checked to be a finite number >= ``lo`` (> ``lo``
    with ``positive``); None allowed with ``optional``; else a ValueError naming file and field."""
    v = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    if v is None and optional:
        return None
    x = float(v) if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else math.nan
    if not math.isfinite(x) or x < lo or (positive and x == lo):
        raise ValueError(f"{source}: field {where + name!r} is {_shown(v)}, expected "
                         f"{'None or ' if optional else ''}a finite number {'>' if positive else '>='} {lo:g}")
    return x


# dimension fields -> their least value (head_dim 0: derived from hidden_size, as transformers does)
_DIMS = {"hidden_size": 1, "intermediate_size": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
         "head_dim": 0, "vocab_size": 1, "max_position_embeddings": 1, "num_hidden_layers": 1}
_MAX_LAYERS = 100_000  # rlxc.Pipeline's bound


def check_config_dict(d: Mapping[str, Any], source: str) -> None:
    """The dimension fields of a config.json document (and of its text_config) that are given,
    checked before transformers' config class sees them: it divides by some (a ZeroDivisionError
    for num_attention_heads = 0). :func:`validate_config` checks the config object afterwards."""
    for where, sub in (("", d), ("text_config.", d.get("text_config"))):
        if isinstance(sub, Mapping):
            for name, lo in _DIMS.items():
                config_int(sub, name, source, lo=lo, hi=_MAX_LAYERS if name == "num_hidden_layers" else _MAX_DIM,
                           optional=True, where=where)


def validate_config(config: Any, source: str = "config") -> None:
    """Raise ValueError, naming ``source`` (the config file) and the field, for a value rlxc reads
    from ``config`` that is of the wrong type or out of range: dimensions that are not positive
    ints (a 0 divided by, a -1 raised to -0.5), eps, RoPE and softcap numbers that are not finite
    non-negative numbers, a head count that the kv-head count does not divide, ... The type
    checks of transformers' own config classes come first; this adds the ranges and whatever
    they let through. Call it before anything loops over ``num_hidden_layers``."""
    mt = _model_type(config)
    L = config_int(config, "num_hidden_layers", source, hi=_MAX_LAYERS)
    config_int(config, "hidden_size", source)
    config_int(config, "vocab_size", source)
    config_int(config, "max_position_embeddings", source, optional=True)
    for name in ("num_local_experts", "num_experts", "pretraining_tp"):
        config_int(config, name, source, lo=0, optional=True)
    E = int(getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) or 0)
    if E and (arch_of(config).moe or getattr(config, "enable_moe_block", False)):
        k = "top_k_experts" if mt == "gemma4_text" else "num_experts_per_tok"
        config_int(config, k, source, hi=E)
        for name in ("moe_intermediate_size", "decoder_sparse_step"):
            config_int(config, name, source, optional=True)
        if mt == "gemma4_text":
            config_int(config, "moe_intermediate_size", source)
    config_float(config, arch_of(config).eps_attr, source)
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        config_float(config, name, source, optional=True)
    if mt in ("gemma2", "gemma3_text"):
        config_float(config, "query_pre_attn_scalar", source, positive=True)
    if mt not in ("llama", "gemma"):
        config_int(config, "sliding_window", source, lo=0, optional=True)
    lts = getattr(config, "layer_types", None)
    if lts is not None and (not isinstance(lts, (list, tuple)) or len(lts) != L
                            or not all(isinstance(t, str) for t in lts)):
        raise ValueError(f"{source}: field 'layer_types' is {_shown(lts)}, expected a list of {L} strings")
    if mt == "gemma4_text":
        config_int(config, "hidden_size_per_layer_input", source, lo=0, optional=True)
        config_int(config, "num_kv_shared_layers", source, lo=0, hi=L or 0, optional=True)
    for i in range(L or 0):
        lc = _layer_config(config, i)
        where = f"per_layer_config[{i}]." if lc is not config else ""
        nq = config_int(lc, "num_attention_heads", source, where=where)
        nkv = config_int(lc, "num_key_value_heads", source, optional=True, where=where) or nq
        config_int(lc, "intermediate_size", source, where=where)
        hd = config_int(lc, "head_dim", source, lo=0, optional=True, where=where)
        if not hd and config.hidden_size < nq:
            raise ValueError(f"{source}: field '{where}num_attention_heads' is {nq}, more than hidden_size "
                             f"{config.hidden_size}, and there is no head_dim")
        if nq % nkv:
            raise ValueError(f"{source}: field '{where}num_attention_heads' is {nq}, not a multiple of "
                             f"num_key_value_heads {nkv}")
    for i in sorted({list(lts).index(t) for t in lts}) if lts else [0]:  # one layer of each type
        _validate_rope(config, i, mt, source)


def _validate_rope(config: Any, i: int, mt: str, source: str) -> None:
    rp = getattr(config, "rope_parameters", None)
    if mt in ("gemma3_text", "gemma4_text"):
        if not isinstance(rp, Mapping):
            raise ValueError(f"{source}: field 'rope_parameters' is {_shown(rp)}, expected an object")
        lt = _layer_type(config, i)
        if rp.get(lt) is None:
            return  # rope_fields: NotImplementedError naming the layer type
        rp, where = rp[lt], f"rope_parameters[{lt!r}]."
    else:
        where = "rope_parameters."
    if not isinstance(rp, Mapping):
        raise ValueError(f"{source}: field {where[:-1]!r} is {_shown(rp)}, expected an object")
    config_float(rp, "rope_theta", source, positive=True, where=where)
    config_float(rp, "partial_rotary_factor", source, positive=True, optional=True, where=where)
    if (rp.get("partial_rotary_factor") or 1.0) > 1.0:
        raise ValueError(f"{source}: field '{where}partial_rotary_factor' is {rp['partial_rotary_factor']!r}, "
                         "expected a number in (0, 1]")
    for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        config_float(rp, key, source, positive=key != "mscale" and key != "mscale_all_dim", optional=True,
                     where=where)
    for key in ("short_factor", "long_factor"):
        v = rp.get(key)
        if v is not None and (not isinstance(v, (list, tuple))
                              or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                         and math.isfinite(x) and x > 0 for x in v)):
            raise ValueError(f"{source}: field {where + key!r} is {_shown(v)}, expected a list of positive numbers")


# ----------------------------------------------------------------------------- checks

def check_supported(config: Any, max_seq: int | None = None, source: str = "config") -> None:
    """Raise NotImplementedError if any part of this config cannot be reproduced by rlxc
    (ValueError, naming ``source`` and the field, for a malformed value: :func:`validate_config`)."""
    mt = _model_type(config)
    validate_config(config, source)
    if mt != "gemma4_text" and getattr(config, "is_heterogeneous", False):
        raise NotImplementedError(f"rlxc.hf: heterogeneous per_layer_config on {mt}")
    if mt == "gemma3_text" and getattr(config, "use_bidirectional_attention", False):
        raise NotImplementedError("rlxc.hf: gemma3 use_bidirectional_attention=True (non-causal)")
    if mt == "gemma4_text":
        if getattr(config, "use_bidirectional_attention", None) == "all":
            raise NotImplementedError("rlxc.hf: gemma4 use_bidirectional_attention='all' (non-causal)")
    if mt in ("llama",) and int(getattr(config, "pretraining_tp", 1) or 1) != 1:
        raise NotImplementedError("rlxc.hf: llama pretraining_tp != 1")
    arch = arch_of(config)
    for key in ("num_local_experts", "num_experts"):
        if (getattr(config, key, None) or 0) > 0 and not arch.moe and not arch.gemma4:
            raise NotImplementedError(f"rlxc.hf: {mt} {key} (mixture of experts)")
    if arch.moe == "mixtral" and not getattr(config, "num_local_experts", 0):
        raise NotImplementedError("rlxc.hf: mixtral with num_local_experts=0")
    _activation(config, arch_of(config))
    for i in range(config.num_hidden_layers):
        rope_fields(config, i, max_seq)
        _sliding(config, i, arch_of(config))
    if mt == "gemma4_text":
        for i in range(config.num_hidden_layers):
            _kv_shared_source(config, i)


def _sliding(config: Any, i: int, arch: Arch) -> int:
    mt = arch.hf_type
    if arch.hf_sliding == "none":
        return 0
    if arch.hf_sliding == "config":
        w = getattr(config, "sliding_window", None)
        return int(w) if w else 0
    lt = _layer_type(config, i)
    if lt == "full_attention":
        return 0
    if lt != "sliding_attention":
        raise NotImplementedError(f"rlxc.hf: layer type {lt!r} ({mt}, layer {i})")
    w = config.sliding_window
    if not w:
        raise NotImplementedError(f"rlxc.hf: {mt} layer {i} is 'sliding_attention' but sliding_window "
                                  f"is {w!r} (qwen needs use_sliding_window=True)")
    return int(w)


# ----------------------------------------------------------------------------- fields

def layer_fields(config: Any, i: int, max_seq: int | None = None) -> dict[str, Any]:
    """Fields of rlxc.Layer for layer ``i`` of a transformers config (a pure function).

    ``layer_scalar`` is 1 here; Gemma 4 keeps the real value in a checkpoint buffer, which
    :func:`layer_model_fields` reads. Raises NotImplementedError for unsupported configs.
    """
    arch = arch_of(config)
    mt = arch.hf_type
    rope, _ = rope_fields(config, i, max_seq)  # raises on unsupported RoPE
    if not 0 <= i < config.num_hidden_layers:
        raise IndexError(f"layer {i} out of range (num_hidden_layers={config.num_hidden_layers})")
    lc = _layer_config(config, i)
    if not arch.gemma4 and lc is not config:
        raise NotImplementedError(f"rlxc.hf: heterogeneous per_layer_config on {mt}")
    hd = _head_dim(lc)
    nq = int(lc.num_attention_heads)
    nkv = _num_kv_heads(lc)
    H = int(config.hidden_size)
    inter = int(lc.intermediate_size)
    if arch.hf_attn_scale == "query_pre_attn_scalar":
        attn_scale = float(config.query_pre_attn_scalar) ** -0.5
    else:
        attn_scale = 1.0 if arch.hf_attn_scale == "one" else hd ** -0.5
    f: dict[str, Any] = dict(
        eps=float(getattr(config, arch.eps_attr)), attn_scale=attn_scale, head_dim=hd, num_q_heads=nq,
        num_kv_heads=nkv, sliding_window=_sliding(config, i, arch), has_v_norm=0, layer_scalar=1.0,
        norm_type=arch.norm_type, ffn_type=arch.ffn_type, activation=_activation(config, arch),
        qk_norm_offset=1.0 if arch.qk_norms_plus_one else 0.0, input_norm_bias=0, post_attn_norm_bias=0,
        ffn_up_bias=0, ffn_down_bias=0, hidden_size=H, intermediate_size=inter,
        norm_offset=1.0 if arch.norms_plus_one else 0.0, qkv_bias=0, o_bias=0, has_qk_norm=int(arch.qk_norm),
        sandwich_norm=int(arch.sandwich_norm),
        attn_softcap=float(config.attn_logit_softcapping or 0.0) if arch.attn_softcap else 0.0, v_from_k=0,
        kv_shared_from=-1, ple_dim=0,
    )
    f.update(rope)
    f.update(_moe_fields(config, i, arch))
    for bias, attr in arch.hf_biases.items():  # an attribute of the config, or 1
        f[bias] = int(bool(getattr(config, attr))) if isinstance(attr, str) else attr
    if arch.gemma4:
        src = _kv_shared_source(config, i)
        f["kv_shared_from"] = src
        f["has_v_norm"] = int(src < 0)
        full = config.layer_types[i] == "full_attention"
        f["v_from_k"] = int(bool(config.attention_k_eq_v) and full and src < 0)
        L, n_sh = config.num_hidden_layers, int(config.num_kv_shared_layers or 0)
        if config.use_double_wide_mlp and i >= L - n_sh > 0:
            f["intermediate_size"] = 2 * inter
        f["ple_dim"] = int(config.hidden_size_per_layer_input or 0)
    return f


def _moe_fields(config: Any, i: int, arch: Arch) -> dict[str, Any]:
    """Layer i's mixture-of-experts fields (none on a dense layer). The dense FFN beside the
    experts: Qwen2-MoE's shared expert, Gemma 4's parallel MLP; none for Qwen3-MoE and Mixtral."""
    f: dict[str, Any] = dict(num_experts=0, num_experts_used=0, expert_intermediate_size=0, moe_norm_topk=0)
    if arch.moe == "mixtral":
        f.update(num_experts=int(config.num_local_experts), num_experts_used=int(config.num_experts_per_tok),
                 expert_intermediate_size=int(config.intermediate_size), moe_norm_topk=1, intermediate_size=0)
    elif arch.moe == "qwen":
        E = int(config.num_experts or 0)
        if E and i not in (config.mlp_only_layers or ()) and (i + 1) % int(config.decoder_sparse_step) == 0:
            f.update(num_experts=E, num_experts_used=int(config.num_experts_per_tok),
                     expert_intermediate_size=int(config.moe_intermediate_size),
                     moe_norm_topk=int(bool(config.norm_topk_prob)),
                     intermediate_size=int(getattr(config, "shared_expert_intermediate_size", 0) or 0))
    elif arch.gemma4 and getattr(config, "enable_moe_block", False):
        f.update(num_experts=int(config.num_experts), num_experts_used=int(config.top_k_experts),
                 expert_intermediate_size=int(config.moe_intermediate_size), moe_norm_topk=1)
    return f


def layer_model_fields(model: Any, i: int) -> dict[str, Any]:
    """Fields that live in the checkpoint rather than the config (Gemma 4 ``layer_scalar``)."""
    layer = _decoder(model).layers[i]
    out: dict[str, Any] = {}
    ls = getattr(layer, "layer_scalar", None)
    if ls is not None:
        v = ls.detach().float().cpu().numpy().reshape(-1)
        if v.size != 1:
            raise NotImplementedError(f"rlxc.hf: layer {i} layer_scalar has {v.size} values")
        out["layer_scalar"] = float(v[0])
    return out


# ----------------------------------------------------------------------------- weights

def _decoder(model: Any) -> Any:
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers"):
        raise NotImplementedError(f"rlxc.hf: {type(model).__name__} has no .model.layers "
                                  "(pass a ...ForCausalLM)")
    return base


def _np(t: Any) -> _F32:
    return np.array(t.detach().to(device="cpu").float().numpy(), np.float32)


def layer_weights(model: Any, i: int) -> dict[str, np.ndarray]:
    """Weights of layer ``i`` as float32 arrays under rlxc slot names (matrices ``[out, in]``)."""
    config = model.config
    arch = arch_of(config)
    layer = _decoder(model).layers[i]
    at = layer.self_attn
    f = layer_fields(config, i)
    w: dict[str, npt.NDArray[np.float32]] = {}

    def lin(slot: str, mod: Any) -> None:
        w[slot] = _np(mod.weight)
        if getattr(mod, "bias", None) is not None:
            w[slot + ".bias"] = _np(mod.bias)

    def norm(slot: str, mod: Any) -> None:
        w[slot] = _np(mod.weight)
        if getattr(mod, "bias", None) is not None:
            w[slot + ".bias"] = _np(mod.bias)

    norm("attn_norm", layer.input_layernorm)
    if arch.fused:
        qkv = archs.split_qkv(_np(at.qkv_proj.weight), f["num_q_heads"], f["num_kv_heads"], f["head_dim"],
                              f"layer {i} self_attn.qkv_proj.weight")
        w["q_proj"], w["k_proj"], w["v_proj"] = (x.copy() for x in qkv)
        lin("o_proj", at.o_proj)
        gate_up = archs.split_gate_up(_np(layer.mlp.gate_up_proj.weight), f["intermediate_size"],
                                      f"layer {i} mlp.gate_up_proj.weight")
        w["gate_proj"], w["up_proj"] = (x.copy() for x in gate_up)
        lin("down_proj", layer.mlp.down_proj)
    else:
        lin("q_proj", at.q_proj)
        if f["kv_shared_from"] < 0:
            lin("k_proj", at.k_proj)
            if not f["v_from_k"]:
                lin("v_proj", at.v_proj)
        lin("o_proj", at.o_proj)
        if f["intermediate_size"] == 0:
            pass  # experts only
        elif arch.ffn_type == FfnType.STANDARD:  # StarCoder 2's c_fc / c_proj
            lin("up_proj", layer.mlp.c_fc)
            lin("down_proj", layer.mlp.c_proj)
        else:
            dense = layer.mlp.shared_expert if arch.moe == "qwen" and f["num_experts"] else layer.mlp
            lin("gate_proj", dense.gate_proj)
            lin("up_proj", dense.up_proj)
            lin("down_proj", dense.down_proj)
    if f["num_experts"]:
        w.update(_expert_weights(layer, f, arch))
    if f["has_qk_norm"]:
        w["q_norm"] = _np(at.q_norm.weight)
        if f["kv_shared_from"] < 0:
            w["k_norm"] = _np(at.k_norm.weight)
    if f["sandwich_norm"]:
        w["attn_post_norm"] = _np(layer.post_attention_layernorm.weight)
        norm("ffn_norm", layer.pre_feedforward_layernorm)
        w["ffn_post_norm"] = _np(layer.post_feedforward_layernorm.weight)
    else:
        norm("ffn_norm", layer.post_attention_layernorm)
    if f["ple_dim"] > 0:
        w["ple_gate"] = _np(layer.per_layer_input_gate.weight)
        w["ple_proj"] = _np(layer.per_layer_projection.weight)
        w["ple_norm"] = _np(layer.post_per_layer_input_norm.weight)
    _, factors = rope_fields(config, i)
    if factors is not None:
        w["rope_freq_factors"] = factors
    return w


def _expert_weights(layer: Any, f: Mapping[str, Any], arch: Arch) -> dict[str, _F32]:
    """The router and the experts stacked expert by expert (``gate_exps`` [E*I, H], ``down_exps``
    [E*H, I]), from transformers' fused ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I];
    Qwen2-MoE's shared-expert gate, Gemma 4's router norm (``scale * hidden**-0.5``), per-expert
    scale and the norms around its experts."""
    E, I, H = f["num_experts"], f["expert_intermediate_size"], f["hidden_size"]
    experts = layer.experts if arch.gemma4 else layer.mlp.experts
    gate_up = _np(experts.gate_up_proj)
    down = _np(experts.down_proj)
    if gate_up.shape != (E, 2 * I, H) or down.shape != (E, H, I):
        raise NotImplementedError(f"rlxc.hf: experts of shapes {tuple(gate_up.shape)} / {tuple(down.shape)}, "
                                  f"expected {(E, 2 * I, H)} / {(E, H, I)}")
    gate, up = archs.split_expert_gate_up(gate_up, I)
    w: dict[str, _F32] = {
        "router": _np(layer.router.proj.weight if arch.gemma4 else layer.mlp.gate.weight),
        "gate_exps": gate, "up_exps": up, "down_exps": down.reshape(E * H, I),
    }
    if arch.moe == "qwen" and f["intermediate_size"] > 0:
        w["shared_gate"] = _np(layer.mlp.shared_expert_gate.weight).reshape(H)
    if arch.gemma4:
        w["router_norm"] = _np(layer.router.scale) * np.float32(H ** -0.5)
        w["expert_scale"] = _np(layer.router.per_expert_scale)
        w["moe_norm"] = _np(layer.pre_feedforward_layernorm_2.weight)
        w["dense_post_norm"] = _np(layer.post_feedforward_layernorm_1.weight)
        w["moe_post_norm"] = _np(layer.post_feedforward_layernorm_2.weight)
    return w


# ----------------------------------------------------------------------------- model

def model_parts(model: Any) -> dict[str, Any]:
    """Model-level pieces: embedding (and its scale), final norm, lm_head, final softcap, PLE."""
    import torch

    config = model.config
    arch = arch_of(config)
    base = _decoder(model)
    emb = base.embed_tokens.weight
    head = getattr(model, "lm_head", None)
    if head is None:
        raise NotImplementedError(f"rlxc.hf: {type(model).__name__} has no lm_head")
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError("rlxc.hf: lm_head with bias")
    tied = head.weight.data_ptr() == emb.data_ptr() and head.weight.shape == emb.shape
    norm = base.norm

    def in_dtype(dtype: Any) -> Callable[[float], float]:
        """Gemma: embeddings * sqrt(dim), the scalar rounded to the weight dtype first."""
        return lambda v: float(torch.tensor(v).to(dtype))

    parts: dict[str, Any] = dict(
        model_type=arch.hf_type, embed=_np(emb), tied=tied, lm_head=None if tied else _np(head.weight),
        norm_weight=_np(norm.weight), norm_bias=_np(norm.bias) if getattr(norm, "bias", None) is not None else None,
        ple=None,
        **archs.model_parts(arch, config.hidden_size, eps=getattr(config, arch.eps_attr), gguf=False,
                            final_softcap=getattr(config, "final_logit_softcapping", None) if arch.hf_final_softcap
                            else 0.0, round_scale=in_dtype(emb.dtype)))
    if arch.gemma4 and config.hidden_size_per_layer_input:
        et = base.embed_tokens_per_layer.weight
        parts["ple"] = archs.ple_parts(
            embed=_np(et), proj=_np(base.per_layer_model_projection.weight),
            norm=_np(base.per_layer_projection_norm.weight), hidden=config.hidden_size,
            dim=config.hidden_size_per_layer_input, num_layers=config.num_hidden_layers, eps=config.rms_norm_eps,
            gguf=False, round_scale=in_dtype(et.dtype))
    return parts


def from_hf(model: Any, weights: str = "f32", threads: int | None = None,
            max_seq: int | None = None, activations: str = "q8") -> Model:
    """Build an :class:`rlxc.Model` from a transformers ``...ForCausalLM``.

    ``weights``: "f32", "q4_0" or "q8_0" (matrices with in-dim % 32 == 0 and the lm_head are
    quantized; everything else stays float32). ``max_seq``: KV-cache length (default
    ``min(config.max_position_embeddings, 4096)``). ``activations``: "q8" or "f32", how the
    quantized matrices meet the activations (:attr:`rlxc.Model.activations`). Raises NotImplementedError for unsupported
    model types or config features, before building anything.
    """
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, got {weights!r}")
    config = model.config
    _model_type(config)
    if max_seq is None:
        max_seq = int(min(getattr(config, "max_position_embeddings", 4096) or 4096, 4096))
    check_supported(config, max_seq)
    parts = model_parts(model)
    layer_specs = []
    for i in range(config.num_hidden_layers):
        f = layer_fields(config, i, max_seq)
        f.update(layer_model_fields(model, i))
        layer_specs.append((f, layer_weights(model, i)))
    return Model.from_parts(layer_specs, parts, weights=weights, threads=threads, max_seq=max_seq,
                            activations=activations, name=f"{type(model).__name__} ({parts['model_type']})")
