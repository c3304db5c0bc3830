"""Real checkpoints: ``rlxc.load`` of GGUF files and Hugging Face checkpoint folders, and the
names the loaders had before they were split by job (kept importable from here).

``rlxc.load(path)`` builds an :class:`rlxc.Model` (with its tokenizer attached) from

* a **GGUF file** (llama.cpp's format, :mod:`rlxc.gguf`), memory-mapped; weight matrices are
  used **in place**, so the file must not change while the model lives (truncated: SIGBUS at
  the next call; overwritten in place: other results) -- ``mmap=False`` reads it into owned
  memory instead. Architectures: llama, qwen2, qwen3, gemma, gemma2, gemma3, gemma4, starcoder2,
  phi3 (:mod:`rlxc.gguf_model`);
* a **Hugging Face checkpoint folder** (``config.json`` + ``*.safetensors``, sharded or not:
  :mod:`rlxc.hf_folder`, :mod:`rlxc.safetensors`), the matrices quantized at load to
  ``weights`` (default "q4_0").

``rlxc.save(model, "out.gguf")`` (:mod:`rlxc.gguf_save`) writes a GGUF that llama.cpp loads.
What differs per architecture lives in one registry, :mod:`rlxc.archs`; the weight types in
:mod:`rlxc.wtypes`.

Errors: a file that is not GGUF / safetensors, truncated or corrupt, or a malformed config value
raises ``ValueError`` naming the file and the field; an architecture, tensor type or feature that
rlxc cannot run raises ``NotImplementedError`` naming it.
"""

from __future__ import annotations

import os
import warnings

from ._files import write_atomically
from .archs import GGUF_ARCHS
from .archs import permute_rows as _permute_rows, unpermute_rows as _unpermute_rows  # noqa: F401 (old names)
from .gguf import GGML_TYPES, GGUF_MAGIC, GGUFWriter, TensorInfo, gguf_meta
from .gguf import GGUFWriter as _Writer  # noqa: F401 (the writer's name before the split)
from .gguf_model import GGUFFile, gguf_hf_config, gguf_hf_state_dict, gguf_layer_fields, model_from_gguf, read_gguf
from .gguf_save import save
from .hf_folder import model_from_folder
from .model import KV_TYPE_BYTES, Model
from .safetensors import SafetensorsFile, read_safetensors
from .wtypes import RLXC_WTYPES, dequantize, engine_wtypes, row_bytes, wtype_of

__all__ = [
    "load", "save", "GGUFFile", "TensorInfo", "read_gguf", "read_safetensors", "dequantize",
    "engine_wtypes", "GGML_TYPES", "gguf_layer_fields", "GGUF_ARCHS", "gguf_hf_config", "gguf_hf_state_dict",
    "gguf_meta", "GGUFWriter", "SafetensorsFile", "RLXC_WTYPES", "row_bytes", "wtype_of", "write_atomically",
]


def load(path: str | os.PathLike[str], weights: str | None = None, threads: int | None = None,
         max_seq: int | None = None, tokenizer: bool = True, activations: str = "q8", mmap: bool = True,
         kv_type: str | None = None) -> Model:
    """An :class:`rlxc.Model` from a GGUF file or a Hugging Face checkpoint folder.

    Args:
        path: a ``.gguf`` file, or a folder with ``config.json`` and ``*.safetensors``.
        weights: GGUF: None keeps every tensor as stored, used in place from the memory map;
            "q8_0" / "q4_0" / "f32" converts the layer matrices and the lm_head (copies).
            HF folder: the matrix format, default "q4_0" (matrices whose input width is not a
            multiple of 32, norms, biases and the embedding stay float32).
        threads: engine threads (None: the engine default). max_seq: KV-cache length (default:
            the model's own context length, lowered with a warning where its KV cache would
            take more than half of this machine's memory; the cache's pages fill as the
            sequence grows). tokenizer: attach ``model.tokenizer``.
        kv_type: "f32", "f16", "bf16" or "q8_0" (:attr:`rlxc.Model.kv_type`); default f16 for a model with
            quantized matrices run with ``activations="q8"`` (as llama.cpp), else f32.
        activations: "q8" or "f32", how quantized matrices meet the activations
            (:attr:`rlxc.Model.activations`; settable later).
        mmap: GGUF: True (the default) memory-maps the file and the model reads its weights
            from the mapping for as long as it lives; False reads the file once into memory the
            model owns (as much memory as the file, and its pages are all read at load).
    Raises:
        ValueError: not a GGUF file / checkpoint folder, truncated or corrupt, a malformed config.
        NotImplementedError: an architecture, tensor type or feature rlxc cannot run.

    A memory-mapped GGUF file must not change while the model is alive: the matrices (and with
    ``weights="q8_0"`` etc. still the embedding table, which stays as stored) are read from the
    file's pages at every call, so a file **truncated** after loading kills the process with
    SIGBUS at the next forward pass, and a file **overwritten in place** silently changes the
    results. Replacing the file by a rename (what ``rlxc.save`` does) is safe: the model keeps
    the old file. Pass ``mmap=False`` when the file may be modified while the model is in use.
    A Hugging Face folder's tensors are always copied at load (converted to float32 or
    quantized), so the model never reads its files afterwards; ``mmap=False`` reads the
    safetensors files with read() instead of through a mapping during the load itself.
    """
    if activations not in ("q8", "f32"):
        raise ValueError(f"activations must be 'q8' or 'f32', got {activations!r}")
    if kv_type is not None and kv_type not in KV_TYPE_BYTES:
        raise ValueError(f"kv_type must be one of {', '.join(map(repr, KV_TYPE_BYTES))} or None, got {kv_type!r}")
    model = _load_path(os.fspath(path), weights, threads, max_seq, tokenizer, bool(mmap))
    model.activations = activations
    if kv_type is None:
        quantized = any(t not in ("f32", "f16", "bf16") for i in range(len(model.layers))
                        for t in model._wtypes(i).values())
        kv_type = "f16" if quantized and activations == "q8" else "f32"
    model.kv_type = kv_type
    if max_seq is None:
        _fit_context(model)
    return model


def _fit_context(model: Model) -> None:
    """Lower model.max_seq (before its caches exist) to what half of the memory holds."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    kv = model.kv_memory()
    if kv["at_max_seq"] <= memory // 2 or not kv["per_token"]:
        return
    fit = max(1, (memory // 2 - kv["windowed"]) // kv["per_token"])
    if fit < model.max_seq:
        warnings.warn(f"rlxc.load: the model's context of {model.max_seq} tokens needs "
                      f"{kv['at_max_seq'] / 1e9:.1f} GB of {model.kv_type} KV cache; using max_seq={fit} (half of "
                      f"this machine's {memory / 1e9:.1f} GB). Pass max_seq= or kv_type= to choose.", stacklevel=3)
        model.max_seq = int(fit)


def _load_path(p: str, weights: str | None, threads: int | None, max_seq: int | None, tokenizer: bool,
               mmap: bool) -> Model:
    if os.path.isdir(p):
        if not os.path.exists(os.path.join(p, "config.json")):
            ggufs = sorted(x for x in os.listdir(p) if x.endswith(".gguf"))
            if len(ggufs) == 1:
                return _load_path(os.path.join(p, ggufs[0]), weights, threads, max_seq, tokenizer, mmap)
            raise ValueError(f"{p}: neither a Hugging Face checkpoint folder (no config.json) nor a GGUF file")
        return model_from_folder(p, weights, threads, max_seq, tokenizer, mmap)
    if not os.path.exists(p):
        raise FileNotFoundError(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == GGUF_MAGIC:
        g = GGUFFile(p, mmap)
        try:
            return model_from_gguf(g, weights, threads, max_seq, tokenizer)
        except (TypeError, KeyError, OverflowError, IndexError) as e:  # metadata of an unexpected type / size
            raise ValueError(f"{p}: corrupt or unexpected GGUF metadata ({type(e).__name__}: {e})") from e
    if p.endswith(".safetensors"):
        return _load_path(os.path.dirname(os.path.abspath(p)), weights, threads, max_seq, tokenizer, mmap)
    raise ValueError(f"{p}: not a GGUF file (magic {magic!r}) nor a Hugging Face checkpoint folder")
