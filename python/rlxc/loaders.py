"""Real checkpoints: GGUF files, Hugging Face checkpoint folders, and writing GGUF.

``rlxc.load(path)`` builds an :class:`rlxc.Model` (with its tokenizer attached) from

* a **GGUF file** (llama.cpp's format). The file is memory-mapped and parsed here (no copy of
  the header arrays into per-element objects); every tensor's offset and size is checked against
  the file before any pointer reaches C. Weight matrices are used **in place**
  (``Layer.set_weight_view`` borrows the mapped bytes), the embedding table stays quantized (the
  looked-up rows are dequantized per call) and a tied lm_head multiplies the quantized table in
  place. Only llama's q/k matrices are copied: llama.cpp stores them with rows permuted for its
  interleaved RoPE, and they are put back in Hugging Face order (halves) for the engine. The file
  must therefore not change while the model lives (truncated: SIGBUS at the next call;
  overwritten in place: other results); ``mmap=False`` reads it into owned memory instead.
  Architectures: llama, qwen2, qwen3, gemma, gemma2, gemma3, gemma4, starcoder2, phi3. Gemma 1-3
  norms in GGUF already hold ``1 + w`` (llama.cpp's converter adds the 1), so they run with offset
  0; Gemma 4's are plain weights. Gemma 4 (dense; MoE raises) maps as llama.cpp's
  llama_model_gemma4 reads it: ``*_swa`` keys for the sliding layers, proportional RoPE on the
  full ones from rope_freqs.weight, K/V sharing, K as V where attn_v is absent, per-layer
  embeddings, layer_output_scale as ``layer_scalar``, a final cap of 30 when the key is absent.
* a **Hugging Face checkpoint folder** (``config.json`` + ``*.safetensors``, sharded or not): the
  safetensors files are parsed here too (bf16/f16/f32, without torch), the config goes through
  ``transformers``' config class and :func:`rlxc.hf.layer_fields` (the same mapping as
  :func:`rlxc.from_hf`), and the matrices are quantized at load to ``weights`` (default "q4_0").

``rlxc.save(model, "out.gguf")`` writes a GGUF that llama.cpp loads (llama, qwen2, qwen3, gemma,
gemma2, gemma3, gemma4, starcoder2, phi3 layouts), with the stored quantized bytes as they are.

Errors: a file that is not GGUF / safetensors, truncated or corrupt raises ``ValueError``; an
architecture, tensor type or feature that rlxc cannot run raises ``NotImplementedError`` naming it.
"""

from __future__ import annotations

import json
import math
import mmap as _mmap
import os
import stat as _stat
import struct
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = [
    "load", "save", "GGUFFile", "TensorInfo", "read_gguf", "read_safetensors", "dequantize",
    "engine_wtypes", "GGML_TYPES", "gguf_layer_fields", "GGUF_ARCHS", "gguf_hf_config", "gguf_hf_state_dict",
]

# ============================================================================ GGML types

#: GGML type id -> (GGUF name, block size in elements, block size in bytes)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
_TYPE_ID = {v[0]: k for k, v in GGML_TYPES.items()}
#: the weight types the engine knows by name (which of them this build runs: engine_wtypes())
RLXC_WTYPES = ("f32", "f16", "bf16", "q4_0", "q5_0", "q8_0", "q4_k", "q6_k")


def wtype_of(type_id: int) -> str:
    """rlxc's lower-case name of a GGML type ("Q4_K" -> "q4_k")."""
    return GGML_TYPES[type_id][0].lower()


def row_bytes(wtype: str, cols: int) -> int:
    """Bytes of one row of ``cols`` elements of ``wtype``."""
    name, block, size = GGML_TYPES[_TYPE_ID[wtype.upper()]]
    if cols % block:
        raise ValueError(f"{cols} columns of {wtype} are not a whole number of {block}-element blocks")
    return cols // block * size


_ENGINE_WTYPES: frozenset[str] | None = None


def engine_wtypes() -> frozenset[str]:
    """The weight types this build of the engine accepts for layer matrices (probed once)."""
    global _ENGINE_WTYPES
    if _ENGINE_WTYPES is None:
        from . import _rlxc
        ok = set()
        for wt in RLXC_WTYPES:
            layer = _rlxc.Layer(hidden_size=256, intermediate_size=256, head_dim=64, num_q_heads=4, num_kv_heads=4)
            try:
                layer.set_weight_raw("q_proj", np.zeros((256, row_bytes(wt, 256)), np.uint8), 256, wt)
            except (ValueError, TypeError):
                continue
            ok.add(wt)
        _ENGINE_WTYPES = frozenset(ok)
    return _ENGINE_WTYPES


def _f16_to_f32(raw: np.ndarray) -> np.ndarray:
    return raw.view("<f2").astype(np.float32)


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16 or bytes) -> float32, exactly (the bits are the top half of an f32)."""
    u = raw.view("<u2").astype(np.uint32) << 16
    return u.view(np.float32)


def dequantize(data: np.ndarray, wtype: str, cols: int) -> np.ndarray:
    """float32 ``[rows, cols]`` of GGUF rows ``data`` (uint8 ``[rows, row_bytes]``) of ``wtype``.

    Uses the engine's ``rlxc.ops.dequantize`` where it has the type, else NumPy (f32/f16/bf16)
    or the ``gguf`` package's reference dequantizers; raises NotImplementedError otherwise."""
    data = np.ascontiguousarray(data)
    if data.dtype != np.uint8:
        raise TypeError("dequantize: data must be uint8 [rows, row_bytes]")
    if data.ndim == 1:
        data = data.reshape(1, -1)
    rows = data.shape[0]
    rb = row_bytes(wtype, cols)
    if data.shape[1] != rb:
        raise ValueError(f"dequantize: rows have {data.shape[1]} bytes, {cols} columns of {wtype} need {rb}")
    if rows == 0:
        return np.zeros((0, cols), np.float32)
    if wtype == "f32":
        return data.view("<f4").reshape(rows, cols).astype(np.float32, copy=True)
    if wtype == "f16":
        return _f16_to_f32(data).reshape(rows, cols)
    if wtype == "bf16":
        return _bf16_to_f32(data).reshape(rows, cols)
    from . import _rlxc, ops
    fn = getattr(ops, "dequantize", None) or getattr(_rlxc, "dequantize", None)
    if fn is not None and wtype in engine_wtypes():
        return np.asarray(fn(data, wtype, cols), np.float32).reshape(rows, cols)
    if wtype == "q4_0":
        return np.asarray(ops.dequantize_q4_0(data), np.float32)
    if wtype == "q8_0":
        return np.asarray(ops.dequantize_q8_0(data), np.float32)
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:  # pragma: no cover - gguf is a test dependency
        raise NotImplementedError(f"dequantizing {wtype} needs rlxc.ops.dequantize or the gguf package") from None
    try:
        out = quants.dequantize(data, GGMLQuantizationType[wtype.upper()])
    except NotImplementedError:
        raise NotImplementedError(f"no dequantizer for GGML type {wtype.upper()}") from None
    return np.asarray(out, np.float32).reshape(rows, cols)


def _quantize(arr: np.ndarray, wtype: str) -> np.ndarray:
    from . import ops
    arr = np.ascontiguousarray(arr, np.float32)
    if wtype == "q4_0":
        return ops.quantize_q4_0(arr)
    if wtype == "q8_0":
        return ops.quantize_q8_0(arr)
    raise ValueError(f"cannot quantize to {wtype}")


# ============================================================================ GGUF reading

_GGUF_MAGIC = b"GGUF"
# value type -> (struct format, size); 8 = string, 9 = array
_VT = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
       7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_VT_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
          12: "<f8"}
_MAX_DIMS = 4


@dataclass(frozen=True)
class TensorInfo:
    """One GGUF tensor: ``shape`` is GGML's ``ne`` (``ne[0]`` = columns), ``offset`` is absolute."""
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type_id][0]

    @property
    def wtype(self) -> str:
        return wtype_of(self.type_id)

    @property
    def cols(self) -> int:
        return self.shape[0]

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def row_bytes(self) -> int:
        return self.nbytes // self.rows if self.rows else 0


class GGUFFile:
    """A GGUF file, memory-mapped read-only and validated.

    ``metadata``: key -> value (ints, floats, bools, str; arrays as lists, numeric arrays as
    NumPy arrays). ``tensors``: name -> :class:`TensorInfo` in file order. ``raw(name)``:
    uint8 ``[rows, row_bytes]`` view of the stored bytes; ``f32(name)``: float32 view (F32 only);
    ``array(name)``: float32 copy (dequantized). Views keep the mapping alive.
    """

    def __init__(self, path: str | os.PathLike, mmap: bool = True) -> None:
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        if size < 24:
            raise ValueError(f"{self.path}: not a GGUF file ({size} bytes, too short for a header)")
        self.size = size
        self.mapped = bool(mmap)
        if self.mapped:
            # kept open for copies (array()): they are read with pread, not through the mapping, because
            # the kernel maps a whole large page-cache folio (up to 2 MiB) on the first touch of a page:
            # reading the small norm vectors through the mapping made ~57 MiB of weights resident at load
            self._file: Any = open(self.path, "rb")
            self._mm = _mmap.mmap(self._file.fileno(), 0, access=_mmap.ACCESS_READ)
        else:
            # owned memory (an anonymous mapping: page-aligned like the file's), filled once: what the
            # file becomes afterwards (truncated, overwritten) no longer reaches the model
            self._file = None
            self._mm = _read_all(self.path, size)
        try:
            self._parse()
        except struct.error as e:  # pragma: no cover - every read is bounds-checked first
            raise ValueError(f"{self.path}: corrupt GGUF header ({e})") from None

    # ------------------------------------------------------------------ low-level reads
    def _need(self, off: int, n: int, what: str) -> None:
        if n < 0 or off + n > self.size:
            raise ValueError(f"{self.path}: truncated or corrupt GGUF file: {what} at byte {off} needs {n} bytes, "
                             f"the file has {self.size}")

    def _u32(self, off: int, what: str) -> tuple[int, int]:
        self._need(off, 4, what)
        return struct.unpack_from("<I", self._mm, off)[0], off + 4

    def _u64(self, off: int, what: str) -> tuple[int, int]:
        self._need(off, 8, what)
        return struct.unpack_from("<Q", self._mm, off)[0], off + 8

    def _str(self, off: int, what: str) -> tuple[str, int]:
        n, off = self._u64(off, what)
        self._need(off, n, what)
        return self._mm[off:off + n].decode("utf-8", errors="surrogateescape"), off + n

    def _value(self, vt: int, off: int, what: str, depth: int = 0) -> tuple[Any, int]:
        if vt in _VT:
            fmt, n = _VT[vt]
            self._need(off, n, what)
            return struct.unpack_from(fmt, self._mm, off)[0], off + n
        if vt == 8:
            return self._str(off, what)
        if vt == 9:
            if depth > 2:
                raise ValueError(f"{self.path}: corrupt GGUF: arrays nested too deep in {what}")
            et, off = self._u32(off, what)
            count, off = self._u64(off, what)
            if et in _VT_NP:
                n = _VT[et][1] * count
                self._need(off, n, what)
                arr = np.frombuffer(self._mm, _VT_NP[et], count, off).copy()
                return arr, off + n
            if et == 8:
                if count > (self.size - off) // 8:
                    raise ValueError(f"{self.path}: corrupt GGUF: {what} claims {count} strings")
                out = []
                mm, size = self._mm, self.size
                unpack = struct.unpack_from
                for _ in range(count):
                    if off + 8 > size:
                        self._need(off, 8, what)
                    n = unpack("<Q", mm, off)[0]
                    off += 8
                    if off + n > size:
                        self._need(off, n, what)
                    out.append(mm[off:off + n].decode("utf-8", errors="surrogateescape"))
                    off += n
                return out, off
            if et == 9:
                if count > (self.size - off) // 12:
                    raise ValueError(f"{self.path}: corrupt GGUF: {what} claims {count} arrays")
                out = []
                for _ in range(count):
                    v, off = self._value(9, off, what, depth + 1)
                    out.append(v)
                return out, off
            raise ValueError(f"{self.path}: corrupt GGUF: unknown array element type {et} in {what}")
        raise ValueError(f"{self.path}: corrupt GGUF: unknown value type {vt} in {what}")

    # ------------------------------------------------------------------ parse
    def _parse(self) -> None:
        mm = self._mm
        if mm[:4] != _GGUF_MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file (magic {bytes(mm[:4])!r}, expected b'GGUF')")
        version, off = self._u32(4, "version")
        if version in (1,):
            raise NotImplementedError(f"{self.path}: GGUF version 1 is not supported (re-convert the model)")
        if version not in (2, 3):
            if version > 0xFFFF:
                raise NotImplementedError(f"{self.path}: big-endian GGUF files are not supported")
            raise ValueError(f"{self.path}: unknown GGUF version {version}")
        self.version = version
        n_tensors, off = self._u64(off, "tensor count")
        n_kv, off = self._u64(off, "metadata count")
        if n_tensors > self.size // 24 or n_kv > self.size // 12:
            raise ValueError(f"{self.path}: corrupt GGUF header ({n_tensors} tensors, {n_kv} keys in {self.size} bytes)")
        md: dict[str, Any] = {}
        for i in range(n_kv):
            key, off = self._str(off, f"metadata key {i}")
            vt, off = self._u32(off, f"type of {key!r}")
            val, off = self._value(vt, off, f"metadata {key!r}")
            md[key] = val
        self.metadata = md
        align = gguf_meta(md, "general.alignment", int, 32, self.path)
        if align <= 0 or align & (align - 1):
            raise ValueError(f"{self.path}: corrupt GGUF: general.alignment = {align!r} is not a power of two")
        self.alignment = align
        infos = []
        for i in range(n_tensors):
            name, off = self._str(off, f"tensor {i} name")
            nd, off = self._u32(off, f"tensor {name!r} dims")
            if not 1 <= nd <= _MAX_DIMS:
                raise ValueError(f"{self.path}: corrupt GGUF: tensor {name!r} has {nd} dimensions")
            self._need(off, 8 * nd, f"tensor {name!r} shape")
            shape = struct.unpack_from(f"<{nd}Q", mm, off)
            off += 8 * nd
            tid, off = self._u32(off, f"tensor {name!r} type")
            toff, off = self._u64(off, f"tensor {name!r} offset")
            infos.append((name, tuple(int(d) for d in shape), tid, toff))
        self.data_offset = (off + align - 1) // align * align
        tensors: dict[str, TensorInfo] = {}
        spans = []
        for name, shape, tid, toff in infos:
            if name in tensors:
                raise ValueError(f"{self.path}: corrupt GGUF: tensor {name!r} appears twice")
            if tid not in GGML_TYPES:
                raise NotImplementedError(f"{self.path}: tensor {name!r} has unknown GGML type id {tid}")
            tname, block, bsize = GGML_TYPES[tid]
            if any(d <= 0 or d > 1 << 40 for d in shape):
                raise ValueError(f"{self.path}: corrupt GGUF: tensor {name!r} has shape {shape}")
            if shape[0] % block:
                raise ValueError(f"{self.path}: corrupt GGUF: tensor {name!r} ({tname}) has {shape[0]} columns, "
                                 f"not a multiple of its block size {block}")
            n = 1
            for d in shape:
                n *= d
            nbytes = n // block * bsize
            if toff % align:
                raise ValueError(f"{self.path}: corrupt GGUF: tensor {name!r} offset {toff} is not {align}-aligned")
            start = self.data_offset + toff
            if start + nbytes > self.size:
                raise ValueError(f"{self.path}: truncated GGUF file: tensor {name!r} needs bytes "
                                 f"[{start}, {start + nbytes}) but the file has {self.size}")
            tensors[name] = TensorInfo(name, shape, tid, start, nbytes)
            spans.append((start, start + nbytes, name))
        spans.sort()
        for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
            if s1 < e0:
                raise ValueError(f"{self.path}: corrupt GGUF: tensors {n0!r} and {n1!r} overlap")
        self.tensors = tensors

    # ------------------------------------------------------------------ access
    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ValueError(f"{self.path}: missing tensor {name!r}") from None

    def _view(self, dtype: str, count: int, offset: int) -> np.ndarray:
        a = np.frombuffer(self._mm, dtype, count, offset)
        a.flags.writeable = False  # the owned copy (mmap=False) is as read-only as the file mapping
        return a

    def raw(self, name: str) -> np.ndarray:
        """uint8 ``[rows, row_bytes]`` view of the stored bytes (read-only, no copy)."""
        t = self.info(name)
        return self._view("u1", t.nbytes, t.offset).reshape(t.rows, t.row_bytes)

    def f32(self, name: str) -> np.ndarray:
        """float32 view of an F32 tensor (``[rows, cols]``, or ``[cols]`` for a vector)."""
        t = self.info(name)
        if t.type_id != 0:
            raise ValueError(f"tensor {name!r} is {t.type_name}, not F32")
        a = self._view("<f4", t.n_elements, t.offset)
        return a if len(t.shape) == 1 else a.reshape(t.rows, t.cols)

    def array(self, name: str) -> np.ndarray:
        """float32 copy of any tensor (dequantized), ``[rows, cols]`` or ``[cols]``."""
        t = self.info(name)
        if self._file is None:
            buf = bytearray(self._mm[t.offset:t.offset + t.nbytes])
        else:
            buf = bytearray(t.nbytes)
            if os.preadv(self._file.fileno(), [buf], t.offset) != t.nbytes:
                raise ValueError(f"{self.path}: tensor {name!r} ends past the end of the file (truncated after "
                                 "opening?)")
        data = np.frombuffer(buf, np.uint8).reshape(t.rows, t.row_bytes)
        out = dequantize(data, t.wtype, t.cols)
        return out.reshape(-1) if len(t.shape) == 1 else out

    def matrix(self, name: str) -> Any:
        """The tensor as a :class:`rlxc.model.QuantMatrix` over the mapped bytes."""
        from .model import QuantMatrix
        t = self.info(name)
        return QuantMatrix(self.raw(name), t.wtype, t.cols)

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, v{self.version}, {len(self.tensors)} tensors, "
                f"{len(self.metadata)} keys, arch {self.metadata.get('general.architecture')!r})")


def read_gguf(path: str | os.PathLike, mmap: bool = True) -> GGUFFile:
    """Parse and validate a GGUF file (memory-mapped, or with ``mmap=False`` read into owned
    memory); see :class:`GGUFFile`."""
    return GGUFFile(path, mmap)


def _read_all(path: str, size: int) -> Any:
    """The first ``size`` bytes of a file in an anonymous (page-aligned, owned) mapping."""
    buf = _mmap.mmap(-1, size)
    view, got = memoryview(buf), 0
    with open(path, "rb", buffering=0) as f:
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                view.release()
                raise ValueError(f"{path}: the file shrank while it was read ({got} of {size} bytes)")
            got += n
    view.release()
    return buf


# ============================================================================ typed metadata

# a metadata value read as int / float / str / bool: the scalar types it may have (Python from the
# header, NumPy for an element of a numeric array), the dtype kinds of a numeric array of them, and
# their names for messages
_META_KINDS: dict[type, tuple[tuple[type, ...], str, str, str]] = {
    int: ((int, np.integer), "iu", "an integer", "integers"),
    float: ((int, float, np.integer, np.floating), "iuf", "a number", "numbers"),
    str: ((str,), "", "a string", "strings"),
    bool: ((bool, np.bool_), "b", "a bool", "bools"),
}
_REQUIRED = object()


def gguf_meta(md: Mapping[str, Any], key: str, kind: type, default: Any = _REQUIRED, source: str = "GGUF",
              array: bool = False) -> Any:
    """Metadata ``md[key]`` checked to be a ``kind`` (int, float, str or bool; with ``array``, an
    array of them), or ``default`` when the key is absent (ValueError when there is none).

    The file is untrusted: a value of another type (a string, a bool or an array where a number
    is expected, ...) raises a ValueError naming the key here, rather than a TypeError where it is
    used or, worse, being taken as something else (``int("32")``)."""
    if key not in md:
        if default is _REQUIRED:
            raise ValueError(f"{source}: GGUF metadata lacks {key!r}")
        return default
    return _meta_value(md[key], kind, key, source, array)


def _meta_value(v: Any, kind: type, key: str, source: str, array: bool = False) -> Any:
    types, dtype_kinds, name, plural = _META_KINDS[kind]

    def fits(x: Any) -> bool:
        return isinstance(x, types) and (kind is bool or not isinstance(x, bool))  # a Python bool is an int

    if array:
        # the reader gives numeric arrays as NumPy arrays, string (and nested) arrays as lists
        ok = (v.dtype.kind in dtype_kinds if isinstance(v, np.ndarray)
              else isinstance(v, list) and all(fits(x) for x in v))
    else:
        ok = fits(v)
    if not ok:
        if isinstance(v, np.ndarray):
            shown = f"an array of {v.size} {v.dtype} values"
        elif isinstance(v, list):  # strings or nested arrays
            shown = f"an array of {len(v)} {type(v[0]).__name__} values" if v else "an empty array"
        else:
            shown = f"{type(v).__name__} {v!r:.60}"
        raise ValueError(f"{source}: GGUF metadata {key!r} is {shown}, expected "
                         f"{'an array of ' + plural if array else name}")
    return v if array else kind(v)


# ============================================================================ GGUF -> per-layer fields

#: GGUF architectures rlxc maps to per-layer fields
GGUF_ARCHS = ("llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma4", "starcoder2", "phi3")
_RMSNORM, _LAYERNORM = 0, 1
_GATED, _STANDARD = 0, 1
_SILU, _GELU_TANH = 0, 1
_PREFIX, _PROPORTIONAL = 0, 1
_GEMMAS = ("gemma", "gemma2", "gemma3")  # norms stored as 1 + w (Gemma 4's are stored as they are)
_SQRT_EMBED = _GEMMAS + ("gemma4",)  # embeddings scaled by sqrt(hidden) (in float32, as llama.cpp does)

# per-layer GGUF tensor suffix -> rlxc slot ("" suffix is the .weight)
_BLK = {
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
_SLOT_TO_BLK = {v: k for k, v in _BLK.items() if not v.startswith("qkv")}
_MODEL_TENSORS = ("token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
                  "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
# Gemma 4: exactly the tensors llama.cpp's llama_model_gemma4 loads for a dense model (no biases,
# no fused q/k/v), the per-layer-embedding ones included. blk.N.layer_output_scale.weight (one
# value) is the layer_scalar field, not a weight; rope_freqs.weight marks the pairs that the
# full-attention layers rotate (see _gemma4_rope_freqs).
_GEMMA4_BLK = {
    "attn_norm.weight": "attn_norm", "attn_q.weight": "q_proj", "attn_k.weight": "k_proj",
    "attn_v.weight": "v_proj", "attn_output.weight": "o_proj", "attn_q_norm.weight": "q_norm",
    "attn_k_norm.weight": "k_norm", "post_attention_norm.weight": "attn_post_norm",
    "ffn_norm.weight": "ffn_norm", "post_ffw_norm.weight": "ffn_post_norm", "ffn_gate.weight": "gate_proj",
    "ffn_up.weight": "up_proj", "ffn_down.weight": "down_proj",
    "inp_gate.weight": "ple_gate", "proj.weight": "ple_proj", "post_norm.weight": "ple_norm",
}
_GEMMA4_SLOT_TO_BLK = {v: k for k, v in _GEMMA4_BLK.items()}
_GEMMA4_SCALAR = "layer_output_scale.weight"
_GEMMA4_MODEL_TENSORS = ("token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight",
                         "per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight")
# convert_hf_to_gguf.py's rope_freqs value for the pairs that Gemma 4's proportional RoPE leaves
# unrotated: ggml divides the angle by it, which makes the rotation the identity in float32
_UNROTATED = 1e30


class _KV:
    """Arch-prefixed, type-checked metadata access (see :func:`gguf_meta`), with per-layer arrays."""

    def __init__(self, md: Mapping[str, Any], arch: str, path: str) -> None:
        self.md, self.arch, self.path = md, arch, path

    def get(self, key: str, kind: type, default: Any = _REQUIRED, array: bool = False) -> Any:
        return gguf_meta(self.md, f"{self.arch}.{key}", kind, default, self.path, array)

    def layer(self, key: str, i: int, default: Any = _REQUIRED) -> int:
        """An int given for all layers or as an array with one per layer."""
        k = f"{self.arch}.{key}"
        v = self.md.get(k)
        if isinstance(v, (list, np.ndarray)):
            if len(v) <= i:
                raise ValueError(f"{self.path}: {k} has {len(v)} entries, layer {i} needs one")
            return _meta_value(v[i], int, f"{k}[{i}]", self.path)
        return self.get(key, int, default)


def _swa_layers(kv: _KV, arch: str, n_layers: int) -> list[bool]:
    """Which layers use the sliding window (llama.cpp's hparams.swa_layers)."""
    key = "attention.sliding_window_pattern"
    if isinstance(kv.md.get(f"{arch}.{key}"), (list, np.ndarray)):  # newer llama.cpp: one bool per layer
        pat = kv.get(key, bool, array=True)
        if len(pat) != n_layers:
            raise ValueError(f"{kv.path}: {arch}.{key} has {len(pat)} entries for {n_layers} layers")
        return [bool(p) for p in pat]
    if arch == "gemma4":  # llama.cpp's gemma4 requires the per-layer array
        raise ValueError(f"{kv.path}: gemma4 needs {arch}.{key} as one bool per layer")
    if arch == "gemma2":
        n = 2
    elif arch == "gemma3":
        n = 6
    else:
        return [False] * n_layers
    n = kv.get(key, int, n)
    # llama.cpp set_swa_pattern(n): layer il is sliding iff il % n < n - 1 (n = 0: all sliding)
    return [n == 0 or (i % n) < (n - 1) for i in range(n_layers)]


def _rope_scaling(kv: _KV, rd: int) -> tuple[np.ndarray | None, str]:
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


def gguf_layer_fields(g: GGUFFile, i: int, max_seq: int | None = None) -> dict[str, Any]:
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
    has = lambda s: (pre + s) in g.tensors  # noqa: E731
    f: dict[str, Any] = dict(
        eps=kv.get("attention.layer_norm_rms_epsilon", float, kv.get("attention.layer_norm_epsilon", float, 1e-5)),
        attn_scale=hd ** -0.5, head_dim=hd, num_q_heads=nq, num_kv_heads=nkv, rope_base=base,
        rotary_dim=rd, sliding_window=0, has_v_norm=0, layer_scalar=1.0, norm_type=_RMSNORM,
        ffn_type=_GATED, activation=_SILU, qk_norm_offset=0.0,
        input_norm_bias=int(has("attn_norm.bias")), post_attn_norm_bias=int(has("ffn_norm.bias")),
        ffn_up_bias=int(has("ffn_up.bias")), ffn_down_bias=int(has("ffn_down.bias")),
        hidden_size=H, intermediate_size=inter, norm_offset=0.0,
        qkv_bias=int(has("attn_q.bias") or has("attn_qkv.bias")), o_bias=int(has("attn_output.bias")),
        has_qk_norm=int(has("attn_q_norm.weight")), sandwich_norm=0, attn_softcap=0.0, rope_layout=0,
        rope_attn_factor=1.0, v_from_k=0, kv_shared_from=-1, ple_dim=0,
    )
    if rd > hd or rd % 2:
        raise ValueError(f"{g.path}: rope dimension {rd} vs head dim {hd}")
    if arch == "llama" and rd != hd:
        raise NotImplementedError(f"{g.path}: llama with partial rotary ({rd} of {hd})")
    if arch in _GEMMAS:
        f["activation"] = _GELU_TANH
        if arch != "gemma":
            f["sandwich_norm"] = 1
        if arch in ("gemma2", "gemma3"):
            # llama.cpp: 1/sqrt(n_embd / n_head) for the 27B models, else 1/sqrt(head dim)
            big = (arch == "gemma2" and L == 46) or (arch == "gemma3" and L == 62)
            f["attn_scale"] = float((H / nq) ** -0.5 if big else hd ** -0.5)
            swa = _swa_layers(kv, arch, L)
            if swa[i]:
                f["sliding_window"] = kv.get("attention.sliding_window", int, 4096)
        if arch == "gemma2":
            f["attn_softcap"] = kv.get("attn_logit_softcapping", float, 50.0)
        if arch == "gemma3" and f["sliding_window"]:
            f["rope_base"] = kv.get("rope.freq_base_swa", float, 10000.0)
    elif arch == "gemma4":
        f.update(_gemma4_fields(g, kv, i, L, f))
    elif arch == "starcoder2":
        f.update(norm_type=_LAYERNORM, ffn_type=_STANDARD, activation=_GELU_TANH)
    elif arch == "phi3":
        pass  # llama.cpp runs Phi-3 without its sliding window (hparams: "Phi SWA is currently disabled")
    return f


def _gemma4_fields(g: GGUFFile, kv: _KV, i: int, L: int, f: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma 4 fields of layer ``i`` as llama.cpp's llama_model_gemma4 reads them, over the
    generic ones in ``f``. The generic keys (key_length, rope.freq_base, rope.dimension_count)
    describe the full-attention layers, the ``*_swa`` keys the sliding ones. Norms are stored as
    they are (the converter adds no 1), the attention scale is 1, V is RMS-normalized without a
    weight, and a layer without attn_v uses K as V (``attention_k_eq_v``)."""
    pattern = _swa_layers(kv, "gemma4", L)
    swa = pattern[i]
    out: dict[str, Any] = dict(activation=_GELU_TANH, sandwich_norm=1, attn_scale=1.0,
                               ple_dim=kv.get("embedding_length_per_layer_input", int))
    if _rope_scaling(kv, f["rotary_dim"])[1] != "none":
        raise NotImplementedError(f"{g.path}: gemma4 with rope scaling (llama.cpp's converter writes none)")
    if swa:
        hd = kv.get("attention.key_length_swa", int)
        if kv.get("attention.value_length_swa", int) != hd:
            raise NotImplementedError(f"{g.path}: gemma4 key_length_swa != value_length_swa")
        rd = kv.get("rope.dimension_count_swa", int, f["rotary_dim"])  # llama.cpp's default: the full layers'
        if rd > hd or rd % 2:
            raise ValueError(f"{g.path}: gemma4 rope.dimension_count_swa {rd} vs key_length_swa {hd}")
        out.update(head_dim=hd, rotary_dim=rd, rope_layout=_PREFIX,
                   rope_base=kv.get("rope.freq_base_swa", float, f["rope_base"]),
                   sliding_window=kv.get("attention.sliding_window", int))
    else:
        if f["rotary_dim"] != f["head_dim"]:
            raise NotImplementedError(f"{g.path}: gemma4 full-attention layers with rope.dimension_count "
                                      f"{f['rotary_dim']} != key_length {f['head_dim']}")
        out.update(rotary_dim=2 * _gemma4_rope_freqs(g, f["head_dim"]).size, rope_layout=_PROPORTIONAL)
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
    if pre + _GEMMA4_SCALAR in g:
        scalar = g.array(pre + _GEMMA4_SCALAR).reshape(-1)
        if scalar.size != 1:
            raise ValueError(f"{g.path}: {pre + _GEMMA4_SCALAR} has {scalar.size} values, expected 1")
        out["layer_scalar"] = float(scalar[0])
    return out


def _gemma4_rope_freqs(g: GGUFFile, head_dim: int) -> np.ndarray:
    """Divisors of the pairs that Gemma 4's full-attention layers rotate, from rope_freqs.weight.

    The converter writes 1 for the first ``partial_rotary_factor * head_dim / 2`` pairs and
    ``_UNROTATED`` for the rest (ggml's NeoX RoPE over the whole head, the angle of pair k being
    ``pos * base**(-2k / head_dim) / factor[k]``). Those trailing pairs are dropped here: rlxc's
    proportional layout rotates pairs ``(k, k + head_dim/2)`` for k < rotary_dim/2 with the same
    angles, and leaves the others as they are."""
    if "rope_freqs.weight" not in g:
        raise ValueError(f"{g.path}: gemma4 full-attention layers need the tensor 'rope_freqs.weight'")
    ff = g.array("rope_freqs.weight").reshape(-1)
    if ff.size != head_dim // 2:
        raise ValueError(f"{g.path}: rope_freqs.weight has {ff.size} values, head dim {head_dim} needs {head_dim // 2}")
    n = ff.size
    while n and ff[n - 1] >= _UNROTATED:
        n -= 1
    return ff[:n]


def _arch(g: GGUFFile) -> tuple[str, _KV, int]:
    arch = gguf_meta(g.metadata, "general.architecture", str, source=g.path)
    if arch not in GGUF_ARCHS:
        raise NotImplementedError(f"{g.path}: GGUF architecture {arch!r} is not supported; "
                                  f"supported: {', '.join(GGUF_ARCHS)}")
    kv = _KV(g.metadata, arch, g.path)
    for key in ("expert_count", "expert_used_count"):
        if kv.get(key, int, 0) > 0:
            raise NotImplementedError(f"{g.path}: {arch}.{key} > 0 (mixture of experts) is not supported")
    L = kv.get("block_count", int)
    # every layer has tensors: a larger count is corrupt, and the per-layer work (a list of L
    # sliding-window flags per layer, ...) would run for ever on a count like 2**32
    if L > len(g.tensors):
        raise ValueError(f"{g.path}: {arch}.block_count = {L}, but the file has {len(g.tensors)} tensors")
    return arch, kv, L


def _unpermute_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Undo convert_hf_to_gguf.py's LlamaModel.permute (interleaved RoPE rows -> HF halves)."""
    n = rows.shape[0]
    return np.ascontiguousarray(rows.reshape(n_head, n // n_head // 2, 2, *rows.shape[1:]).swapaxes(1, 2)
                                .reshape(rows.shape))


def _permute_rows(rows: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute (HF halves -> llama.cpp interleaved pairs)."""
    n = rows.shape[0]
    return np.ascontiguousarray(rows.reshape(n_head, 2, n // n_head // 2, *rows.shape[1:]).swapaxes(1, 2)
                                .reshape(rows.shape))


def _gguf_model(g: GGUFFile, weights: str | None, threads: int | None, max_seq: int | None,
                tokenizer: bool) -> Any:
    from . import _rlxc
    from .model import Model, QuantMatrix

    arch, kv, L = _arch(g)
    if weights not in (None, "f32", "q4_0", "q8_0"):
        raise ValueError(f"weights must be None (as stored), 'f32', 'q4_0' or 'q8_0', got {weights!r}")
    ctx = kv.get("context_length", int, 4096) or 4096
    if max_seq is None:
        max_seq = min(ctx, 4096)
    supported = engine_wtypes()
    gemma4 = arch == "gemma4"
    blk = _GEMMA4_BLK if gemma4 else _BLK
    known = set(_GEMMA4_MODEL_TENSORS if gemma4 else _MODEL_TENSORS)
    for name in g.tensors:
        if name in known:
            continue
        parts = name.split(".", 2)
        if (len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < L
                and (parts[2] in blk or gemma4 and parts[2] == _GEMMA4_SCALAR)):
            continue
        raise NotImplementedError(f"{g.path}: tensor {name!r} ({arch}) is not supported by rlxc")

    # model-level RoPE factors (llama3 rope_freqs; phi3 longrope short/long; Gemma 4's rope_freqs
    # belongs to its full-attention layers only, see below)
    freq_factors = None
    if "rope_freqs.weight" in g and not gemma4:
        freq_factors = g.array("rope_freqs.weight").astype(np.float32)
    attn_factor = 1.0
    if "rope_factors_short.weight" in g or "rope_factors_long.weight" in g:
        orig = kv.get("rope.scaling.original_context_length", int, ctx) or ctx
        use = "rope_factors_long.weight" if max_seq > orig else "rope_factors_short.weight"
        if use not in g:
            raise ValueError(f"{g.path}: {use} is missing")
        freq_factors = g.array(use).astype(np.float32)
        attn_factor = kv.get("rope.scaling.attn_factor", float, 1.0) or 1.0

    def matrix(layer: Any, slot: str, data: np.ndarray, wt: str, cols: int, name: str) -> str:
        """Set a matrix slot from stored rows: in place, or converted when weights= is given."""
        if weights is None:
            if wt not in supported:
                raise NotImplementedError(
                    f"{g.path}: tensor {name!r} is {wt.upper()}, which this rlxc build cannot use in place "
                    f"(it runs: {', '.join(sorted(supported))}); pass weights='q8_0' (or 'q4_0', 'f32') to convert "
                    "at load")
            layer.set_weight_view(slot, data, cols, wt)
            return wt
        arr = dequantize(data, wt, cols)
        t = weights if (weights != "f32" and cols % 32 == 0) else "f32"
        layer.set_weight(slot, arr, t)
        return t

    layers, wtypes = [], []
    for i in range(L):
        f = gguf_layer_fields(g, i, max_seq)
        layer = _rlxc_layer(f)
        pre = f"blk.{i}."
        types: dict[str, str] = {}
        hd, nq, nkv = f["head_dim"], f["num_q_heads"], f["num_kv_heads"]
        for suffix, slot in blk.items():
            name = pre + suffix
            if name not in g:
                continue
            t = g.info(name)
            if slot in ("qkv", "qkv.bias"):
                # fused [q | k | v] rows (phi3): row slices of the mapped bytes are still views
                data = g.raw(name) if slot == "qkv" else g.array(name)
                n_q, n_k = nq * hd, nkv * hd
                if data.shape[0] != n_q + 2 * n_k:
                    raise ValueError(f"{g.path}: {name} has {data.shape[0]} rows, expected {n_q + 2 * n_k}")
                parts = {"q_proj": data[:n_q], "k_proj": data[n_q:n_q + n_k], "v_proj": data[n_q + n_k:]}
                for s, d in parts.items():
                    if slot == "qkv":
                        types[s] = matrix(layer, s, d, t.wtype, t.cols, name)
                    else:
                        layer.set_weight(s + ".bias", np.ascontiguousarray(d, np.float32))
                continue
            if len(t.shape) > 2:
                raise ValueError(f"{g.path}: {name} has {len(t.shape)} dimensions")
            if slot in _MATRIX:
                data = g.raw(name)
                if slot == "up_proj" and f["ffn_type"] == _GATED and (pre + "ffn_gate.weight") not in g:
                    # fused gate_up (phi3): gate = first half of the rows, up = second
                    inter = f["intermediate_size"]
                    if data.shape[0] != 2 * inter:
                        raise ValueError(f"{g.path}: {name} has {data.shape[0]} rows; a gated FFN of "
                                         f"{inter} needs ffn_gate or {2 * inter} fused rows")
                    types["gate_proj"] = matrix(layer, "gate_proj", data[:inter], t.wtype, t.cols, name)
                    data = data[inter:]
                if arch == "llama" and slot in ("q_proj", "k_proj"):
                    data = _unpermute_rows(data, nq if slot == "q_proj" else nkv)
                types[slot] = matrix(layer, slot, data, t.wtype, t.cols, name)
            else:
                vec = g.array(name).reshape(-1)
                if arch == "llama" and slot in ("q_proj.bias", "k_proj.bias"):
                    vec = _unpermute_rows(vec, nq if slot == "q_proj.bias" else nkv)
                if slot == "up_proj.bias" and f["ffn_type"] == _GATED and (pre + "ffn_gate.weight") not in g:
                    inter = f["intermediate_size"]  # fused gate_up bias
                    layer.set_weight("gate_proj.bias", np.ascontiguousarray(vec[:inter]))
                    vec = vec[inter:]
                layer.set_weight(slot, np.ascontiguousarray(vec, np.float32))
        if gemma4:
            if f["rope_layout"] == _PROPORTIONAL:
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
            if ff is not None and not (arch == "gemma3" and f["sliding_window"]):
                layer.set_weight("rope_freq_factors", ff)  # gemma3: linear scaling on full layers only
        missing = [s for s in layer.used_weights() if layer.weight_type(s) is None]
        if missing:
            names = [pre + (_GEMMA4_SLOT_TO_BLK if gemma4 else _SLOT_TO_BLK).get(s, s) for s in missing]
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
    embed = g.matrix("token_embd.weight")
    if te.type_id == 0:
        embed = g.f32("token_embd.weight")
    lm_head: Any = None
    if "output.weight" in g:
        lm_head = g.matrix("output.weight")
        if g.info("output.weight").cols != H:
            raise ValueError(f"{g.path}: output.weight is {g.info('output.weight').shape}, hidden size {H}")
    head = lm_head if lm_head is not None else (embed if isinstance(embed, QuantMatrix) else None)
    head_name = "output.weight" if lm_head is not None else "token_embd.weight"
    model_weights = "f32"
    if weights is not None:
        model_weights = weights
        if head is not None:  # convert the lm_head (the embedding rows stay as stored)
            lm_head = head.dequantize()
            if lm_head.shape[1] % 32:
                model_weights = "f32"
    elif head is not None and head.wtype not in supported:
        raise NotImplementedError(f"{g.path}: tensor {head_name!r} is {head.wtype.upper()}, which this rlxc build "
                                  f"cannot multiply in place; pass weights='q8_0' to convert at load")
    norm_b = g.array("output_norm.bias") if "output_norm.bias" in g else None
    parts: dict[str, Any] = dict(
        embed_scale=float(np.float32(math.sqrt(H))) if arch in _SQRT_EMBED else 1.0,
        norm_type=_LAYERNORM if arch == "starcoder2" else _RMSNORM,
        norm_weight=g.array("output_norm.weight") if "output_norm.weight" in g else None,
        norm_bias=norm_b, norm_eps=float(layers[0].eps) if layers else 1e-6, norm_offset=0.0,
        # absent key: llama.cpp's default cap of 30 (Gemma 4's converter writes the key only when
        # the config has a cap, so a Gemma 4 file without it still runs capped in llama.cpp)
        final_softcap=kv.get("final_logit_softcapping", float, 30.0 if arch in ("gemma2", "gemma4") else 0.0),
        ple=_gemma4_ple(g, kv, L, H, layers) if gemma4 else None,
    )
    if parts["norm_weight"] is None:
        raise ValueError(f"{g.path}: missing tensor 'output_norm.weight'")
    tok = None
    if tokenizer:
        from .tokenizer import from_gguf_metadata
        tok = from_gguf_metadata(g.metadata, g.path)
    meta = {"source": g.path, "format": "gguf", "gguf": {k: v for k, v in g.metadata.items()
                                                          if not k.startswith("tokenizer.ggml.")}}
    name = gguf_meta(g.metadata, "general.name", str, "", g.path) or os.path.basename(g.path)
    model = Model(layers, embed, lm_head=lm_head, weights=model_weights, max_seq=max_seq, threads=threads,
                  name=f"{name} ({arch}, GGUF)", layer_wtypes=wtypes, arch=arch, tokenizer=tok, metadata=meta,
                  **parts)
    model._gguf = g  # keeps the mapping (and the tokenizer metadata for rlxc.save) alive
    return model


_MATRIX = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "ple_gate", "ple_proj")


def _gemma4_ple(g: GGUFFile, kv: _KV, L: int, H: int, layers: list) -> dict[str, Any] | None:
    """Gemma 4 per-layer-embedding tables (:attr:`rlxc.Model.ple`), None when
    embedding_length_per_layer_input is 0. The [vocab, L * P] token table stays as stored (rows
    dequantized per lookup); the model projection is dequantized. The constants are llama.cpp's
    (build_inp_per_layer / project_per_layer_inputs): sqrt(P), 1/sqrt(hidden), 1/sqrt(2)."""
    P = kv.get("embedding_length_per_layer_input", int)
    if P == 0:
        return None
    for name, want in (("per_layer_token_embd.weight", (L * P, g.info("token_embd.weight").rows)),
                       ("per_layer_model_proj.weight", (H, L * P)), ("per_layer_proj_norm.weight", (P,))):
        if g.info(name).shape != want:
            raise ValueError(f"{g.path}: {name} has shape {g.info(name).shape}, expected {want}")
    return dict(embed=g.matrix("per_layer_token_embd.weight"), embed_scale=float(np.float32(math.sqrt(P))),
                proj=g.array("per_layer_model_proj.weight"), proj_scale=float(np.float32(1.0 / math.sqrt(H))),
                norm=g.array("per_layer_proj_norm.weight"), eps=float(layers[0].eps), input_scale=2.0 ** -0.5,
                num_layers=L, dim=P)


def _rlxc_layer(fields: Mapping[str, Any]) -> Any:
    from . import Layer
    return Layer(**dict(fields))


# ============================================================================ GGUF -> transformers

_HF_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "gemma": ("GemmaConfig", "GemmaForCausalLM"),
               "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"), "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
               "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM"), "phi3": ("Phi3Config", "Phi3ForCausalLM")}


def _hf_arch(g: GGUFFile) -> tuple[str, _KV, int]:
    """:func:`_arch` for the GGUF -> transformers helpers, which cover the archs of _HF_CLASSES."""
    arch, kv, L = _arch(g)
    if arch not in _HF_CLASSES:
        raise NotImplementedError(f"{g.path}: no GGUF -> transformers mapping for {arch} here "
                                  "(compare against its Hugging Face checkpoint instead)")
    return arch, kv, L


def gguf_hf_config(g: GGUFFile) -> tuple[str, str, dict[str, Any]]:
    """``(config class, model class, kwargs)``: the transformers (5.17) config that describes the
    same network as a GGUF file, as llama.cpp runs it (e.g. for checking rlxc against HF on the
    file's dequantized weights: see :func:`gguf_hf_state_dict`)."""
    arch, kv, L = _hf_arch(g)
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
    if arch == "starcoder2":
        kw.update(norm_epsilon=f0["eps"], use_bias=bool(f0["qkv_bias"]), sliding_window=None,
                  hidden_act="gelu_pytorch_tanh")
    else:
        kw["rms_norm_eps"] = f0["eps"]
    if arch in ("llama", "qwen3", "gemma", "gemma2", "gemma3"):
        kw["head_dim"] = f0["head_dim"]
    if arch in ("llama", "qwen3", "gemma", "gemma2", "gemma3"):
        kw["attention_bias"] = bool(f0["qkv_bias"])
    if arch == "llama":
        kw["mlp_bias"] = bool(f0["ffn_up_bias"])
    if arch == "gemma":
        kw["hidden_act"] = "gelu_pytorch_tanh"
    if arch in ("gemma2", "gemma3"):
        qpas = float(f0["attn_scale"]) ** -2
        kw.update(query_pre_attn_scalar=int(round(qpas)) if abs(qpas - round(qpas)) < 1e-3 else qpas,
                  sliding_window=max(f["sliding_window"] for f in fs) or None,
                  layer_types=["sliding_attention" if f["sliding_window"] else "full_attention" for f in fs],
                  hidden_activation="gelu_pytorch_tanh")
        cap = kv.get("final_logit_softcapping", float, 30.0 if arch == "gemma2" else 0.0)
        kw["final_logit_softcapping"] = cap or None
    if arch == "gemma2":
        kw["attn_logit_softcapping"] = f0["attn_softcap"] or None
    if arch == "gemma3":
        full = [f for f in fs if not f["sliding_window"]] or fs
        sw = [f for f in fs if f["sliding_window"]] or fs
        kw["rope_theta"] = full[0]["rope_base"]
        kw["rope_local_base_freq"] = sw[0]["rope_base"]
        ff, kind = _rope_scaling(kv, f0["rotary_dim"])
        if kind == "linear":
            kw["rope_scaling"] = {"rope_type": "linear", "factor": float(ff[0])}
    if arch == "phi3":
        kw["partial_rotary_factor"] = f0["rotary_dim"] / f0["head_dim"]
        kw["pad_token_id"] = 0
    if arch == "qwen2":
        kw["use_sliding_window"] = False
    if "rope_freqs.weight" in g or "rope_factors_short.weight" in g:
        raise NotImplementedError(f"{g.path}: RoPE factor tensors have no plain transformers config equivalent here")
    cls, mcls = _HF_CLASSES[arch]
    return cls, mcls, kw


def gguf_hf_state_dict(g: GGUFFile) -> dict[str, np.ndarray]:
    """transformers parameter name -> float32 array of a GGUF file's tensors (dequantized;
    llama q/k rows put back in HF order; Gemma norms minus the 1 llama.cpp's converter added)."""
    arch, kv, L = _hf_arch(g)
    gemma = arch in _GEMMAS
    sd: dict[str, np.ndarray] = {"model.embed_tokens.weight": g.array("token_embd.weight"),
                                 "model.norm.weight": g.array("output_norm.weight") - (1.0 if gemma else 0.0)}
    if "output_norm.bias" in g:
        sd["model.norm.bias"] = g.array("output_norm.bias")
    if "output.weight" in g:
        sd["lm_head.weight"] = g.array("output.weight")
    names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
             "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_qkv": "self_attn.qkv_proj"}
    if gemma and arch != "gemma":
        names.update(post_attention_norm="post_attention_layernorm", ffn_norm="pre_feedforward_layernorm",
                     post_ffw_norm="post_feedforward_layernorm")
    else:
        names["ffn_norm"] = "post_attention_layernorm"
    if arch == "starcoder2":
        names.update(ffn_up="mlp.c_fc", ffn_down="mlp.c_proj")
    if arch == "phi3":
        names["ffn_up"] = "mlp.gate_up_proj"
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
            if arch == "llama" and base in ("attn_q", "attn_k"):
                a = _unpermute_rows(a, f["num_q_heads"] if base == "attn_q" else f["num_kv_heads"])
            if gemma and base.endswith("norm") and kind == "weight":
                a = a - 1.0
            sd[f"model.layers.{i}.{names[base]}.{kind}"] = np.ascontiguousarray(a, np.float32)
    return sd


# ============================================================================ safetensors

_ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8), "I64": ("<i8", 8),
              "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("<i1", 1), "U8": ("<u1", 1), "BOOL": ("?", 1)}


class SafetensorsFile:
    """A .safetensors file, memory-mapped (or with ``mmap=False`` read into owned memory) and
    validated; ``tensor(name)`` -> float32 array (a copy)."""

    def __init__(self, path: str | os.PathLike, mmap: bool = True) -> None:
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        if size < 8:
            raise ValueError(f"{self.path}: not a safetensors file ({size} bytes)")
        with open(self.path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > size - 8 or n > 100_000_000:
                raise ValueError(f"{self.path}: truncated or corrupt safetensors file (header of {n} bytes, "
                                 f"file of {size})")
            head = f.read(n)
            self._mm = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ) if mmap else None
        if self._mm is None:
            self._mm = _read_all(self.path, size)
        try:
            header = json.loads(head.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # RecursionError: nested too deep
            raise ValueError(f"{self.path}: corrupt safetensors header ({e})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        if not isinstance(self.metadata, dict):
            raise ValueError(f"{self.path}: corrupt safetensors header (__metadata__ is not a JSON object)")
        base = 8 + n
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            dtype, shape, b, count = self._entry(name, e, size - base)
            self.entries[name] = (dtype, shape, base + b, count)

    def _entry(self, name: str, e: Any, data_size: int) -> tuple[str, tuple[int, ...], int, int]:
        """(dtype, shape, offset in the data section, element count) of header entry ``name``, every
        field checked: the header is untrusted JSON, any value may be of any type or size."""
        def corrupt(what: str) -> ValueError:
            return ValueError(f"{self.path}: corrupt safetensors entry {name!r}: {what}")

        if not isinstance(e, dict):
            raise corrupt(f"{e!r:.60} is not a JSON object")
        missing = [k for k in ("dtype", "shape", "data_offsets") if k not in e]
        if missing:
            raise corrupt(f"no {', '.join(missing)}")
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str):
            raise corrupt(f"dtype {dtype!r:.60} is not a string")
        # type(x) is int: JSON true / false load as bools, which are ints to isinstance
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise corrupt(f"shape {shape!r:.60} is not a list of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
            raise corrupt(f"data_offsets {offsets!r:.60} is not a list of two integers")
        if dtype not in _ST_DTYPES:
            raise NotImplementedError(f"{self.path}: tensor {name!r} has dtype {dtype}, not supported")
        b, end = offsets
        if not 0 <= b <= end:
            raise corrupt(f"data_offsets [{b}, {end}] are not 0 <= begin <= end")
        if end > data_size:
            raise ValueError(f"{self.path}: truncated safetensors file: {name!r} needs {end} bytes of data, "
                             f"the file has {data_size}")
        count = math.prod(shape)  # Python ints: dims of any size cannot overflow
        if end - b != count * _ST_DTYPES[dtype][1]:
            raise corrupt(f"data_offsets [{b}, {end}] hold {end - b} bytes, shape {shape} of {dtype} needs "
                          f"{count * _ST_DTYPES[dtype][1]}")
        return dtype, tuple(shape), b, count

    def keys(self) -> list[str]:
        return list(self.entries)

    def tensor(self, name: str) -> np.ndarray:
        """float32 array (bf16 converted exactly by bit shifting; f16/f64 cast)."""
        dtype, shape, off, count = self.entries[name]
        np_dt, _ = _ST_DTYPES[dtype]
        a = np.frombuffer(self._mm, np_dt, count, off).reshape(shape)
        if dtype == "BF16":
            return _bf16_to_f32(np.ascontiguousarray(a)).reshape(shape)
        return a.astype(np.float32)


def read_safetensors(path: str | os.PathLike, mmap: bool = True) -> SafetensorsFile:
    return SafetensorsFile(path, mmap)


class _Checkpoint:
    """All tensors of a (possibly sharded) safetensors checkpoint folder."""

    def __init__(self, folder: str, mmap: bool = True) -> None:
        self.folder = folder
        index = os.path.join(folder, "model.safetensors.index.json")
        files: list[str]
        if os.path.exists(index):
            try:
                with open(index, encoding="utf-8") as f:
                    wm = json.load(f)["weight_map"]
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, KeyError, TypeError) as e:
                raise ValueError(f"{index}: corrupt index ({type(e).__name__}: {e})") from None
            if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                raise ValueError(f"{index}: corrupt index (weight_map must map tensor names to file names)")
            files = sorted(set(wm.values()))
        else:
            files = sorted(x for x in os.listdir(folder) if x.endswith(".safetensors"))
        if not files:
            if any(x.endswith((".bin", ".pt", ".pth")) for x in os.listdir(folder)):
                raise NotImplementedError(f"{folder}: only safetensors checkpoints are supported (found PyTorch .bin)")
            raise ValueError(f"{folder}: no *.safetensors files")
        self.where: dict[str, SafetensorsFile] = {}
        for fn in files:
            p = os.path.join(folder, fn)
            if not os.path.exists(p):
                raise ValueError(f"{folder}: shard {fn} named by the index is missing")
            st = SafetensorsFile(p, mmap)
            for k in st.keys():
                self.where[k] = st

    def __contains__(self, k: str) -> bool:
        return k in self.where

    def get(self, k: str) -> np.ndarray:
        if k not in self.where:
            raise ValueError(f"{self.folder}: checkpoint lacks tensor {k!r}")
        return self.where[k].tensor(k)


_HF_LAYER_IGNORE = ("rotary_emb.inv_freq", "self_attn.rotary_emb.inv_freq")
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


def _check_layer_count(ck: "_Checkpoint", prefix: str, L: int, cfg_path: str) -> None:
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


def _hf_folder_model(folder: str, weights: str | None, threads: int | None, max_seq: int | None,
                     tokenizer: bool, mmap: bool = True) -> Any:
    from . import hf
    from .model import Model

    weights = "q4_0" if weights is None else weights
    if weights not in ("f32", "q4_0", "q8_0"):
        raise ValueError(f"weights must be 'f32', 'q4_0' or 'q8_0', got {weights!r}")
    cfg_path = os.path.join(folder, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg_dict = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{cfg_path}: not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(cfg_dict, dict):
        raise ValueError(f"{cfg_path}: not a JSON object")
    try:
        import transformers
    except ImportError:  # pragma: no cover
        raise ImportError("loading a Hugging Face folder needs the transformers package (pip install rlxc[hf])") \
            from None
    mt = cfg_dict.get("model_type")
    if mt not in hf.SUPPORTED_MODEL_TYPES and mt not in ("gemma3", "gemma4"):
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
    if getattr(type(config), "model_type", mtype) != mtype:  # e.g. a gemma4_text text_config of a gemma3 model
        raise ValueError(f"{cfg_path}: field '{'text_config.' if mt != mtype else ''}model_type' is {mtype!r}, but "
                         f"transformers reads the config as {type(config).__name__} ({type(config).model_type})")
    ck = _Checkpoint(folder, mmap)
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
        max_seq = int(min(config.max_position_embeddings or 4096, 4096))
    hf.check_supported(config, max_seq, cfg_path)

    def layer_spec(i: int) -> tuple[dict, dict]:
        f = hf.layer_fields(config, i, max_seq)
        lp = f"{prefix}layers.{i}."
        names = [k[len(lp):] for k in ck.where if k.startswith(lp)]
        ws: dict[str, np.ndarray] = {}
        try:
            probe = _rlxc_layer(f)
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
            if n == "self_attn.qkv_proj.weight":
                w = ck.get(lp + n)
                hd, nq, nkv = f["head_dim"], f["num_q_heads"], f["num_kv_heads"]
                ws["q_proj"], ws["k_proj"], ws["v_proj"] = (w[:nq * hd], w[nq * hd:(nq + nkv) * hd],
                                                            w[(nq + nkv) * hd:])
                continue
            if n == "mlp.gate_up_proj.weight":
                w = ck.get(lp + n)
                h = w.shape[0] // 2
                ws["gate_proj"], ws["up_proj"] = w[:h], w[h:]
                continue
            try:
                slot = probe.weight_name(n)
            except KeyError:
                raise NotImplementedError(f"{folder}: parameter {lp + n!r} ({mtype}) is not supported") from None
            ws[slot] = ck.get(lp + n)
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
        model_type=mtype, embed=embed, lm_head=lm_head,
        embed_scale=float(np.float32(math.sqrt(config.hidden_size))) if mtype in hf._GEMMA_FAMILY else 1.0,
        norm_type=_LAYERNORM if mtype == "starcoder2" else _RMSNORM,
        norm_weight=ck.get(f"{prefix}norm.weight"),
        norm_bias=ck.get(norm_bias_name) if norm_bias_name in ck else None,
        norm_eps=float(config.norm_epsilon if mtype == "starcoder2" else config.rms_norm_eps),
        norm_offset=1.0 if mtype in ("gemma", "gemma2", "gemma3_text") else 0.0,
        final_softcap=float((getattr(config, "final_logit_softcapping", None) if mtype in hf._SANDWICH else None)
                            or 0.0),
        ple=None,
    )
    if mtype == "gemma4_text" and getattr(config, "hidden_size_per_layer_input", 0):
        P = int(config.hidden_size_per_layer_input)
        parts["ple"] = dict(
            embed=ck.get(f"{prefix}embed_tokens_per_layer.weight"), embed_scale=float(np.float32(P ** 0.5)),
            proj=ck.get(f"{prefix}per_layer_model_projection.weight"), proj_scale=float(config.hidden_size) ** -0.5,
            norm=ck.get(f"{prefix}per_layer_projection_norm.weight"), eps=float(config.rms_norm_eps),
            input_scale=2.0 ** -0.5, num_layers=L, dim=P)
    try:
        from tqdm.auto import tqdm
        it: Iterable = tqdm((layer_spec(i) for i in range(L)), total=L, desc=f"rlxc.load {weights}", unit="layer",
                            leave=False, disable=None)
    except ImportError:  # pragma: no cover
        it = (layer_spec(i) for i in range(L))
    model = Model.from_parts(it, parts, weights=weights, threads=threads, max_seq=max_seq,
                             name=f"{os.path.basename(os.path.normpath(folder))} ({mtype})")
    model.metadata.update(source=folder, format="hf", config=cfg_dict)
    if tokenizer:
        from .tokenizer import from_folder
        try:
            model.tokenizer = from_folder(folder)
        except FileNotFoundError:
            model.tokenizer = None
        except NotImplementedError as e:
            import warnings
            warnings.warn(f"rlxc.load: no tokenizer attached ({e})", stacklevel=2)
            model.tokenizer = None
    return model


# ============================================================================ load

def load(path: str | os.PathLike, weights: str | None = None, threads: int | None = None,
         max_seq: int | None = None, tokenizer: bool = True, activations: str = "q8", mmap: bool = True) -> Any:
    """An :class:`rlxc.Model` from a GGUF file or a Hugging Face checkpoint folder.

    Args:
        path: a ``.gguf`` file, or a folder with ``config.json`` and ``*.safetensors``.
        weights: GGUF: None keeps every tensor as stored, used in place from the memory map;
            "q8_0" / "q4_0" / "f32" converts the layer matrices and the lm_head (copies).
            HF folder: the matrix format, default "q4_0" (matrices whose input width is not a
            multiple of 32, norms, biases and the embedding stay float32).
        threads: engine threads (None: the engine default). max_seq: KV-cache length (default
            ``min(context length, 4096)``). tokenizer: attach ``model.tokenizer``.
        activations: "q8" or "f32", how quantized matrices meet the activations
            (:attr:`rlxc.Model.activations`; settable later).
        mmap: GGUF: True (the default) memory-maps the file and the model reads its weights
            from the mapping for as long as it lives; False reads the file once into memory the
            model owns (as much memory as the file, and its pages are all read at load).
    Raises:
        ValueError: not a GGUF file / checkpoint folder, truncated or corrupt.
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
    model = _load_path(os.fspath(path), weights, threads, max_seq, tokenizer, bool(mmap))
    model.activations = activations
    return model


def _load_path(p: str, weights: str | None, threads: int | None, max_seq: int | None, tokenizer: bool,
               mmap: bool) -> Any:
    if os.path.isdir(p):
        if not os.path.exists(os.path.join(p, "config.json")):
            ggufs = sorted(x for x in os.listdir(p) if x.endswith(".gguf"))
            if len(ggufs) == 1:
                return _load_path(os.path.join(p, ggufs[0]), weights, threads, max_seq, tokenizer, mmap)
            raise ValueError(f"{p}: neither a Hugging Face checkpoint folder (no config.json) nor a GGUF file")
        return _hf_folder_model(p, weights, threads, max_seq, tokenizer, mmap)
    if not os.path.exists(p):
        raise FileNotFoundError(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == _GGUF_MAGIC:
        g = GGUFFile(p, mmap)
        try:
            return _gguf_model(g, weights, threads, max_seq, tokenizer)
        except (TypeError, KeyError, OverflowError, IndexError) as e:  # metadata of an unexpected type / size
            raise ValueError(f"{p}: corrupt or unexpected GGUF metadata ({type(e).__name__}: {e})") from e
    if p.endswith(".safetensors"):
        return _load_path(os.path.dirname(os.path.abspath(p)), weights, threads, max_seq, tokenizer, mmap)
    raise ValueError(f"{p}: not a GGUF file (magic {magic!r}) nor a Hugging Face checkpoint folder")


# ============================================================================ GGUF writing

class _Writer:
    """A minimal GGUF v3 writer: metadata, tensor infos, aligned data (bytes written as given)."""

    def __init__(self, alignment: int = 32) -> None:
        self.kv: list[tuple[str, int, Any]] = []
        self.tensors: list[tuple[str, tuple[int, ...], int, np.ndarray]] = []
        self.alignment = alignment

    def add(self, key: str, value: Any, vtype: int | None = None, etype: int | None = None) -> None:
        if vtype is None:
            if isinstance(value, bool):
                vtype = 7
            elif isinstance(value, (int, np.integer)):
                vtype = 4 if 0 <= value < 2 ** 32 else 11
            elif isinstance(value, (float, np.floating)):
                vtype = 6
            elif isinstance(value, str):
                vtype = 8
            elif isinstance(value, (list, tuple, np.ndarray)):
                vtype = 9
            else:
                raise TypeError(f"GGUF value of {key!r}: {type(value).__name__}")
        self.kv.append((key, vtype, (value, etype)))

    def tensor(self, name: str, data: np.ndarray, type_id: int, shape: tuple[int, ...]) -> None:
        """``shape`` in GGML order (ne[0] = columns); ``data`` the stored bytes / float32 values."""
        data = np.ascontiguousarray(data)
        _, block, size = GGML_TYPES[type_id]
        n = int(np.prod(shape))
        if data.nbytes != n // block * size:
            raise ValueError(f"tensor {name}: {data.nbytes} bytes for {shape} of {GGML_TYPES[type_id][0]}")
        self.tensors.append((name, tuple(int(s) for s in shape), type_id, data))

    @staticmethod
    def _s(s: str) -> bytes:
        b = s.encode("utf-8", errors="surrogateescape")
        return struct.pack("<Q", len(b)) + b

    def _val(self, vtype: int, value: Any, etype: int | None) -> bytes:
        if vtype in _VT:
            return struct.pack(_VT[vtype][0], value)
        if vtype == 8:
            return self._s(value)
        if vtype == 9:
            vals = list(value) if not isinstance(value, np.ndarray) else value
            if etype is None:
                if isinstance(value, np.ndarray):
                    etype = {np.dtype("float32"): 6, np.dtype("int32"): 5, np.dtype("uint32"): 4,
                             np.dtype("bool"): 7, np.dtype("int64"): 11, np.dtype("uint64"): 10,
                             np.dtype("float64"): 12, np.dtype("uint8"): 0, np.dtype("int8"): 1,
                             np.dtype("uint16"): 2, np.dtype("int16"): 3}[value.dtype]
                elif len(vals) and isinstance(vals[0], str):
                    etype = 8
                elif len(vals) and isinstance(vals[0], bool):
                    etype = 7
                elif len(vals) and isinstance(vals[0], float):
                    etype = 6
                else:
                    etype = 5
            head = struct.pack("<IQ", etype, len(vals))
            if etype == 8:
                return head + b"".join(self._s(v) for v in vals)
            if etype in _VT_NP:
                return head + np.asarray(vals, dtype=_VT_NP[etype]).tobytes()
            raise TypeError(f"GGUF array element type {etype}")
        raise TypeError(f"GGUF value type {vtype}")

    def write(self, path: str) -> None:
        a = self.alignment
        head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, (value, etype) in self.kv:
            head += self._s(key) + struct.pack("<I", vtype) + self._val(vtype, value, etype)
        offsets, off = [], 0
        for name, shape, tid, data in self.tensors:
            offsets.append(off)
            off += (data.nbytes + a - 1) // a * a
        for (name, shape, tid, data), o in zip(self.tensors, offsets):
            head += self._s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
            head += struct.pack("<IQ", tid, o)
        head += b"\0" * ((-len(head)) % a)

        def body(f: Any) -> None:
            f.write(head)
            for name, shape, tid, data in self.tensors:
                f.write(memoryview(data.reshape(-1).view(np.uint8)))
                f.write(b"\0" * ((-data.nbytes) % a))

        write_atomically(path, body)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:  # pragma: no cover - not Linux
        pass
    mask = os.umask(0o022)  # pragma: no cover - (racy with other threads: the fallback only)
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def write_atomically(path: str, body: Any) -> None:
    """Write a file through ``body(f)`` (a binary file object) and put it at ``path`` at once.

    The data goes to a new private file in ``path``'s directory (``tempfile.mkstemp``: a random
    name created with O_EXCL, so no symlink or existing file is followed), which is renamed over
    ``path`` once complete: readers see the old file or the new one, never a partial one, and a
    model memory-mapping the old file keeps it. On any failure the temporary file is removed and
    ``path`` is left as it was. The file gets the permissions of the file it replaces, else
    those of a new file (0o666 less the umask); a symlink at ``path`` is replaced, not followed.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.lstat(path)
        mode = st.st_mode & 0o7777 if _stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            body(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # pragma: no cover
            pass
        raise


def _layer_tensor(layer: Any, slot: str) -> tuple[np.ndarray, int, tuple[int, ...]] | None:
    t = layer.weight_type(slot)
    if t is None:
        return None
    shape = layer.weight_shape(slot)
    if len(shape) == 1 or t == "f32":
        arr = layer.weight(slot)
        return np.ascontiguousarray(arr, np.float32), 0, tuple(reversed(arr.shape))
    raw = layer.weight_raw(slot)
    return raw, _TYPE_ID[t.upper()], (shape[1], shape[0])


def _uniform(layers: list, field: str) -> Any:
    """The value of ``field`` if every layer has the same, else the list of per-layer values."""
    vals = [getattr(lay, field) for lay in layers]
    return vals[0] if all(v == vals[0] for v in vals) else vals


def _hparams(w: _Writer, a: Any, arch: str, model: Any, layers: list, ctx: int) -> None:
    """The architecture keys (and RoPE factor tensors) of every arch but gemma4, for :func:`save`.
    ``a(key, value, type)`` adds ``{arch}.{key}``."""
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
    a("attention.layer_norm_epsilon" if arch == "starcoder2" else "attention.layer_norm_rms_epsilon", eps)
    for lay in layers:
        for fld in ("v_from_k", "has_v_norm", "ple_dim"):
            if getattr(lay, fld):
                raise NotImplementedError(f"rlxc.save: {fld} (Gemma 4) cannot be written as {arch}")
        if lay.kv_shared_from >= 0 or lay.layer_scalar != 1.0 or int(lay.rope_layout) != 0:
            raise NotImplementedError(f"rlxc.save: Gemma 4 features cannot be written as {arch}")
        if lay.rope_attn_factor != 1.0 and arch != "phi3":
            raise NotImplementedError("rlxc.save: rope_attn_factor != 1 (YaRN)")
    gemma = arch in _GEMMAS
    full_base = [float(lay.rope_base) for lay in layers if not lay.sliding_window] or [float(l0.rope_base)]
    if arch == "gemma3":
        sw = [float(lay.rope_base) for lay in layers if lay.sliding_window]
        if len(set(full_base)) > 1 or len(set(sw)) > 1:
            raise NotImplementedError("rlxc.save: gemma3 layers of one kind with different rope_base")
        a("rope.freq_base", full_base[0])
        if sw and sw[0] != 10000.0:
            a("rope.freq_base_swa", sw[0])
    else:
        bases = {float(lay.rope_base) for lay in layers}
        if len(bases) > 1:
            raise NotImplementedError(f"rlxc.save: {arch} layers with different rope_base")
        a("rope.freq_base", bases.pop())
    if arch in ("gemma2", "gemma3"):
        windows = {int(lay.sliding_window) for lay in layers if lay.sliding_window}
        if len(windows) > 1:
            raise NotImplementedError("rlxc.save: different sliding windows")
        pattern = [bool(lay.sliding_window) for lay in layers]
        n = 2 if arch == "gemma2" else 6
        if pattern != [(i % n) < n - 1 for i in range(L)]:
            a("attention.sliding_window_pattern", pattern, 9)  # newer llama.cpp reads a per-layer array
        a("attention.sliding_window", windows.pop() if windows else 0)
        if arch == "gemma2":
            a("attn_logit_softcapping", float(l0.attn_softcap))
        big = (arch == "gemma2" and L == 46) or (arch == "gemma3" and L == 62)
        want = (H / l0.num_q_heads) ** -0.5 if big else hd ** -0.5
        if any(abs(lay.attn_scale - want) > 1e-6 * want for lay in layers):
            raise NotImplementedError(f"rlxc.save: attn_scale {l0.attn_scale} differs from what llama.cpp uses "
                                      f"for {arch} ({want})")
    else:
        for lay in layers:
            if lay.sliding_window:
                raise NotImplementedError(f"rlxc.save: llama.cpp runs {arch} without a sliding window")
            if abs(lay.attn_scale - hd ** -0.5) > 1e-6 * hd ** -0.5:
                raise NotImplementedError(f"rlxc.save: attn_scale {lay.attn_scale} != head_dim**-0.5")
            if lay.attn_softcap:
                raise NotImplementedError(f"rlxc.save: attn_softcap on {arch}")
    if model.final_softcap or arch == "gemma2":
        if arch not in ("gemma2", "gemma3"):
            raise NotImplementedError(f"rlxc.save: final logit softcap on {arch}")
        a("final_logit_softcapping", float(model.final_softcap))
    for lay in layers:
        want_norm = 1.0 if gemma else 0.0
        if float(lay.norm_offset) not in (0.0, 1.0) or (float(lay.norm_offset) == 1.0 and not gemma):
            raise NotImplementedError(f"rlxc.save: norm_offset {lay.norm_offset} on {arch}")
        del want_norm
    # tensors
    ff_all = [lay.weight("rope_freq_factors") if lay.weight_type("rope_freq_factors") else None for lay in layers]
    ff = next((x for x in ff_all if x is not None), None)
    if ff is not None:
        if arch == "gemma3":
            vals = {float(v) for x in ff_all if x is not None for v in x}
            if len(vals) != 1 or any(x is not None for x, lay in zip(ff_all, layers) if lay.sliding_window):
                raise NotImplementedError("rlxc.save: gemma3 with RoPE factors other than linear on full layers")
            a("rope.scaling.type", "linear")
            a("rope.scaling.factor", vals.pop())
            ff = None
        elif any(x is None or not np.array_equal(x, ff) for x in ff_all):
            raise NotImplementedError("rlxc.save: layers with different RoPE factors")
    if ff is not None and arch == "phi3":
        w.tensor("rope_factors_short.weight", ff, 0, (ff.size,))
        w.tensor("rope_factors_long.weight", ff, 0, (ff.size,))
        a("rope.scaling.attn_factor", float(l0.rope_attn_factor))
        a("rope.scaling.original_context_length", ctx)
    elif ff is not None:
        w.tensor("rope_freqs.weight", ff, 0, (ff.size,))


def _gemma4_hparams(w: _Writer, a: Any, model: Any, layers: list) -> None:
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
    fixed = dict(norm_type=_RMSNORM, ffn_type=_GATED, activation=_GELU_TANH, sandwich_norm=1, has_qk_norm=1,
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
        if swa[i] and (int(lay.rope_layout) != _PREFIX or lay.weight_type("rope_freq_factors")):
            wrong.append("sliding layer with proportional RoPE or RoPE factors")
        if not swa[i] and int(lay.rope_layout) != _PROPORTIONAL and lay.rotary_dim != lay.head_dim:
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
        # one rope_freqs tensor for all full layers: the rotated pairs' divisors, then _UNROTATED
        angles = int(one("rotary_dim", False)) // 2
        rotated = [lay.weight("rope_freq_factors") if lay.weight_type("rope_freq_factors") else np.ones(angles)
                   for lay, s in zip(layers, swa) if not s]
        if any(not np.array_equal(r, rotated[0]) for r in rotated):
            raise NotImplementedError("rlxc.save: gemma4 full-attention layers with different RoPE factors")
        ff = np.concatenate([rotated[0], np.full(hd_full // 2 - angles, _UNROTATED)]).astype(np.float32)
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
    from .model import QuantMatrix
    emb = ple["embed"]
    if isinstance(emb, QuantMatrix):
        w.tensor("per_layer_token_embd.weight", emb.data, _TYPE_ID[emb.wtype.upper()], (emb.cols, emb.shape[0]))
    else:
        w.tensor("per_layer_token_embd.weight", np.asarray(emb, np.float32), 0, (L * P, len(emb)))
    w.tensor("per_layer_model_proj.weight", np.asarray(ple["proj"], np.float32), 0, (H, L * P))
    w.tensor("per_layer_proj_norm.weight", np.asarray(ple["norm"], np.float32), 0, (P,))


def save(model: Any, path: str | os.PathLike) -> None:
    """Write ``model`` as a GGUF file llama.cpp can load, the stored (quantized) bytes as they are.

    Layouts: llama (with q/k rows permuted back to llama.cpp's interleaved RoPE order), qwen2,
    qwen3, gemma, gemma2, gemma3 (norm weights written as ``offset + w``, which is what llama.cpp
    expects), gemma4 (as llama.cpp's converter writes it, see :func:`_gemma4_hparams`), starcoder2,
    phi3 (separate q/k/v and gate/up tensors). The tokenizer: the GGUF keys
    the model was loaded with, else built from ``model.tokenizer`` (SentencePiece-style or
    byte-level BPE), else a placeholder vocabulary. Raises NotImplementedError when a layer's
    fields cannot be expressed in that architecture's GGUF keys.

    The file is written to a private temporary file in the same directory and renamed over
    ``path`` when complete (see :func:`write_atomically`): a failed save leaves ``path`` as it
    was and no temporary file behind, and a model memory-mapping the old file keeps running.
    """
    path = os.fspath(path)
    arch = getattr(model, "arch", None)
    if arch not in GGUF_ARCHS:
        raise NotImplementedError(f"rlxc.save: architecture {arch!r} cannot be written as GGUF "
                                  f"(supported: {', '.join(GGUF_ARCHS)})")
    layers = list(model.layers)
    L = len(layers)
    if L == 0:
        raise ValueError("rlxc.save: the model has no layers")
    H = int(model.hidden_size)
    w = _Writer()
    w.add("general.architecture", arch)
    w.add("general.name", str(model.name))
    w.add("general.quantization_version", 2)
    ctx = int(model.metadata.get("gguf", {}).get(f"{arch}.context_length", model.max_seq) or model.max_seq)
    a = lambda k, v, t=None: w.add(f"{arch}.{k}", v, t)  # noqa: E731
    a("context_length", ctx)
    a("embedding_length", H)
    a("block_count", L)

    def scalar_or_array(key: str, field: str) -> None:
        v = _uniform(layers, field)
        if isinstance(v, list):
            a(key, [int(x) for x in v], 9)
        else:
            a(key, int(v))

    scalar_or_array("feed_forward_length", "intermediate_size")
    scalar_or_array("attention.head_count", "num_q_heads")
    scalar_or_array("attention.head_count_kv", "num_kv_heads")
    if arch == "gemma4":
        _gemma4_hparams(w, a, model, layers)
    else:
        _hparams(w, a, arch, model, layers, ctx)
    gemma = arch in _GEMMAS

    from .model import QuantMatrix
    emb = model.embed
    if isinstance(emb, QuantMatrix):
        w.tensor("token_embd.weight", emb.data, _TYPE_ID[emb.wtype.upper()], (emb.cols, emb.shape[0]))
    else:
        e = np.ascontiguousarray(emb, np.float32)
        w.tensor("token_embd.weight", e, 0, (e.shape[1], e.shape[0]))
    norm_off = float(model.norm_offset)
    if norm_off and not gemma:
        raise NotImplementedError(f"rlxc.save: final norm offset on {arch}")
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
            w.tensor("output.weight", lm, _TYPE_ID[model.lm_head_type.upper()], (H, model.lm_vocab))
    sqrt_embed = arch in _SQRT_EMBED
    if sqrt_embed and model.embed_scale != 1.0 and abs(model.embed_scale - math.sqrt(H)) > 1e-3 * math.sqrt(H):
        raise NotImplementedError(f"rlxc.save: embed_scale {model.embed_scale} (llama.cpp uses sqrt(hidden))")
    if not sqrt_embed and model.embed_scale != 1.0:
        raise NotImplementedError(f"rlxc.save: embed_scale on {arch}")

    for i, lay in enumerate(layers):
        pre = f"blk.{i}."
        off = float(lay.norm_offset)
        qk_off = float(lay.qk_norm_offset)
        fused: set[str] = set()
        if arch == "phi3":  # llama.cpp's Phi-3 takes fused attn_qkv and ffn_up (gate rows first)
            for name, slots in (("attn_qkv", ("q_proj", "k_proj", "v_proj")), ("ffn_up", ("gate_proj", "up_proj"))):
                got = [_layer_tensor(lay, s) for s in slots]
                if any(x is None for x in got) or len({x[1] for x in got}) != 1:
                    raise NotImplementedError(f"rlxc.save: phi3 layer {i}: {'/'.join(slots)} differ in type")
                data = np.concatenate([x[0] for x in got], axis=0)
                w.tensor(pre + name + ".weight", data, got[0][1], (got[0][2][0], sum(x[2][1] for x in got)))
                bias = [lay.weight(s + ".bias") if lay.weight_type(s + ".bias") else None for s in slots]
                if any(b is not None for b in bias):
                    if any(b is None for b in bias):
                        raise NotImplementedError(f"rlxc.save: phi3 layer {i}: partial biases")
                    bb = np.concatenate(bias).astype(np.float32)
                    w.tensor(pre + name + ".bias", bb, 0, (bb.size,))
                fused.update(slots)
                fused.update(s + ".bias" for s in slots)
        for slot in lay.used_weights():
            if slot in fused:
                continue
            if slot == "rope_freq_factors":
                continue
            got = _layer_tensor(lay, slot)
            if got is None:
                raise ValueError(f"rlxc.save: layer {i} has no {slot}")
            data, tid, shape = got
            name = (_GEMMA4_SLOT_TO_BLK if arch == "gemma4" else _SLOT_TO_BLK).get(slot)
            if name is None:
                raise NotImplementedError(f"rlxc.save: weight {slot} has no GGUF name")
            if slot in ("attn_norm", "ffn_norm", "attn_post_norm", "ffn_post_norm") and off:
                data = data + np.float32(off)
            if slot in ("q_norm", "k_norm") and qk_off:
                data = data + np.float32(qk_off)
            if arch == "llama" and slot in ("q_proj", "k_proj", "q_proj.bias", "k_proj.bias"):
                data = _permute_rows(data, lay.num_q_heads if slot.startswith("q") else lay.num_kv_heads)
            w.tensor(pre + name, data, tid, shape)
        if arch == "gemma4":  # the converter writes every layer's layer_scalar buffer
            w.tensor(pre + _GEMMA4_SCALAR, np.array([lay.layer_scalar], np.float32), 0, (1,))

    _write_tokenizer(w, model)
    w.write(path)


def _write_tokenizer(w: _Writer, model: Any) -> None:
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
