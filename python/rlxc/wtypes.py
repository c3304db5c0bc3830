"""rlxc's weight types: the engine's table of them, their GGML ids and block sizes, dequantizing.

The table comes from the C engine (``rlxc._rlxc.weight_types()``: name, GGML type id, block
size and bytes, whether the active kernel table multiplies the type, whether ``set_weight``
quantizes float32 to it). GGML types the engine does not know (iq2_*, iq3_*, tq*, mxfp4, ...) are
described by the GGUF format's table (:data:`rlxc.gguf.GGML_TYPES`) and dequantized with the
``gguf`` package's reference code, for ``rlxc.load(weights="q8_0")`` to convert them.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt

from . import _rlxc
from .gguf import GGML_TYPES, TYPE_ID

__all__ = ["RLXC_WTYPES", "engine_wtypes", "wtype_of", "type_id", "row_bytes", "dequantize", "f16_to_f32",
           "bf16_to_f32"]

#: the weight types the engine knows by name, in the engine's order (which of them the active
#: kernels run: :func:`engine_wtypes`)
RLXC_WTYPES: tuple[str, ...] = tuple(t["name"] for t in _rlxc.weight_types())


def engine_wtypes() -> frozenset[str]:
    """The weight types the active kernel table multiplies (``rlxc.set_isa`` may change it)."""
    return frozenset(t["name"] for t in _rlxc.weight_types() if t["runs"])


def wtype_of(type_id: int) -> str:
    """rlxc's lower-case name of a GGML type ("Q4_K" -> "q4_k")."""
    return GGML_TYPES[type_id][0].lower()


def type_id(wtype: str) -> int:
    """The GGML type id of a weight type ("q4_k" -> 12)."""
    try:
        return TYPE_ID[wtype.upper()]
    except KeyError:
        raise ValueError(f"unknown weight type {wtype!r}") from None


def row_bytes(wtype: str, cols: int) -> int:
    """Bytes of one row of ``cols`` elements of ``wtype``."""
    name, block, size = GGML_TYPES[type_id(wtype)]
    if cols % block:
        raise ValueError(f"{cols} columns of {wtype} are not a whole number of {block}-element blocks")
    return cols // block * size


def f16_to_f32(raw: npt.NDArray[np.generic]) -> npt.NDArray[np.float32]:
    """IEEE half bits (uint16 or bytes) -> float32."""
    return raw.view("<f2").astype(np.float32)


def bf16_to_f32(raw: npt.NDArray[np.generic]) -> npt.NDArray[np.float32]:
    """bfloat16 bits (uint16 or bytes) -> float32, exactly (the bits are the top half of an f32)."""
    u = raw.view("<u2").astype(np.uint32) << 16
    return u.view(np.float32)


def dequantize(data: npt.NDArray[np.uint8], wtype: str, cols: int) -> npt.NDArray[np.float32]:
    """float32 ``[rows, cols]`` of GGUF rows ``data`` (uint8 ``[rows, row_bytes]``) of ``wtype``.

    f32/f16/bf16 in NumPy, the engine's other types with ``rlxc.ops.dequantize`` (bit-exact with
    ``gguf.quants.dequantize``), any other GGML type with the ``gguf`` package's reference
    dequantizers; NotImplementedError when there is none."""
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
        return f16_to_f32(data).reshape(rows, cols)
    if wtype == "bf16":
        return bf16_to_f32(data).reshape(rows, cols)
    if wtype in RLXC_WTYPES:
        engine_type = cast(Any, wtype)  # one of the engine's names: RLXC_WTYPES is its table
        return np.asarray(_rlxc.dequantize(data, engine_type, cols), np.float32).reshape(rows, cols)
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:  # pragma: no cover - gguf is a test dependency
        raise NotImplementedError(f"dequantizing {wtype} needs the gguf package") from None
    try:
        out = quants.dequantize(data, GGMLQuantizationType[wtype.upper()])
    except NotImplementedError:
        raise NotImplementedError(f"no dequantizer for GGML type {wtype.upper()}") from None
    return np.asarray(out, np.float32).reshape(rows, cols)
