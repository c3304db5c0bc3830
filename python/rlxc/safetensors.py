"""The safetensors format, and checkpoint folders of (possibly sharded) safetensors files.

:class:`SafetensorsFile` memory-maps a file (or, with ``mmap=False``, reads it into owned memory)
and checks every header field (the header is untrusted JSON: any value may be of any type or
size); ``tensor(name)`` is a float32 copy (bf16 widened exactly, without torch).
:class:`Checkpoint` is every tensor of a folder's shards (``model.safetensors.index.json``).
"""

from __future__ import annotations

import json
import math
import mmap as _mmap
import os
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from ._files import read_owned
from .wtypes import bf16_to_f32

__all__ = ["SafetensorsFile", "read_safetensors", "Checkpoint"]

_ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8), "I64": ("<i8", 8),
              "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("<i1", 1), "U8": ("<u1", 1), "BOOL": ("?", 1)}


class SafetensorsFile:
    """A .safetensors file, memory-mapped (or with ``mmap=False`` read into owned memory) and
    validated; ``tensor(name)`` -> float32 array (a copy)."""

    _mm: _mmap.mmap

    def __init__(self, path: str | os.PathLike[str], mmap: bool = True) -> None:
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
            if mmap:
                self._mm = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
        if not mmap:
            self._mm = read_owned(self.path, size)
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
        for name, entry in header.items():
            dtype, shape, b, count = self._entry(name, entry, size - base)
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

    def tensor(self, name: str) -> npt.NDArray[np.float32]:
        """float32 array (bf16 converted exactly by bit shifting; f16/f64 cast)."""
        dtype, shape, off, count = self.entries[name]
        np_dt, _ = _ST_DTYPES[dtype]
        a = np.frombuffer(self._mm, np_dt, count, off).reshape(shape)
        if dtype == "BF16":
            return bf16_to_f32(np.ascontiguousarray(a)).reshape(shape)
        return a.astype(np.float32)


def read_safetensors(path: str | os.PathLike[str], mmap: bool = True) -> SafetensorsFile:
    """Parse and validate a .safetensors file; see :class:`SafetensorsFile`."""
    return SafetensorsFile(path, mmap)


class Checkpoint:
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
            if os.path.basename(fn) != fn or fn in ("", ".", ".."):
                raise ValueError(f"{index}: corrupt index (shard {fn!r} is not a file name in the folder)")
            p = os.path.join(folder, fn)
            if not os.path.exists(p):
                raise ValueError(f"{folder}: shard {fn} named by the index is missing")
            st = SafetensorsFile(p, mmap)
            for k in st.keys():
                self.where[k] = st

    def __contains__(self, k: str) -> bool:
        return k in self.where

    def get(self, k: str) -> npt.NDArray[np.float32]:
        """Tensor ``k`` as float32 (a copy); ValueError when the checkpoint lacks it."""
        if k not in self.where:
            raise ValueError(f"{self.folder}: checkpoint lacks tensor {k!r}")
        return self.where[k].tensor(k)
