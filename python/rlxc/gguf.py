"""The GGUF file format (llama.cpp's): a validating reader and a writer. No rlxc imports.

:class:`GGUFFile` memory-maps a file (or, with ``mmap=False``, reads it into owned memory),
parses the header without copying the arrays into per-element objects and checks every
tensor's offset and size against the file before any pointer is handed out. Metadata values are
read type-checked through :func:`gguf_meta`: the file is untrusted, and a value of another type
raises a ValueError naming the key. :class:`GGUFWriter` writes GGUF v3 (metadata, tensor infos,
aligned data, the bytes as given) through :func:`rlxc._files.write_atomically`.

The GGML type table here is the format's (every type a file may hold, with its block size);
:mod:`rlxc.wtypes` has the ones the engine runs, and dequantizes them.
"""

from __future__ import annotations

import mmap as _mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import numpy as np

from ._files import read_owned, write_atomically

__all__ = ["GGML_TYPES", "TYPE_ID", "GGUF_MAGIC", "TensorInfo", "GGUFFile", "read_gguf", "gguf_meta", "meta_value",
           "GGUFWriter"]

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
#: GGUF type name ("Q4_K") -> GGML type id
TYPE_ID = {v[0]: k for k, v in GGML_TYPES.items()}


def type_name(type_id: int) -> str:
    """The GGUF name of a GGML type id ("Q4_K"), or "type <id>" for one the table lacks."""
    return GGML_TYPES[type_id][0] if type_id in GGML_TYPES else f"type {type_id}"


GGUF_MAGIC = b"GGUF"
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
        """rlxc's lower-case name of the type ("q4_k")."""
        return self.type_name.lower()

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
    """A GGUF file, memory-mapped read-only (or with ``mmap=False`` read into owned memory) and
    validated.

    ``metadata``: key -> value (ints, floats, bools, str; arrays as lists, numeric arrays as
    NumPy arrays). ``tensors``: name -> :class:`TensorInfo` in file order. ``raw(name)``:
    uint8 ``[rows, row_bytes]`` view of the stored bytes; ``f32(name)``: float32 view (F32 only);
    ``read(name)``: a copy of the stored bytes; ``array(name)``: float32 copy (dequantized: F32
    here, every type rlxc knows in the subclass :class:`rlxc.gguf_model.GGUFFile`). Views keep
    the mapping alive.
    """

    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    version: int
    alignment: int
    data_offset: int

    def __init__(self, path: str | os.PathLike[str], mmap: bool = True) -> None:
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
            self._mm = read_owned(self.path, size)
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
        if mm[:4] != GGUF_MAGIC:
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

    def read(self, name: str) -> np.ndarray:
        """uint8 ``[rows, row_bytes]`` copy of the stored bytes, read with pread (mapped file) or
        from the owned copy: reading small tensors through the mapping would make the large
        page-cache folios around them resident."""
        t = self.info(name)
        if self._file is None:
            buf = bytearray(self._mm[t.offset:t.offset + t.nbytes])
        else:
            buf = bytearray(t.nbytes)
            if os.preadv(self._file.fileno(), [buf], t.offset) != t.nbytes:
                raise ValueError(f"{self.path}: tensor {name!r} ends past the end of the file (truncated after "
                                 "opening?)")
        return np.frombuffer(buf, np.uint8).reshape(t.rows, t.row_bytes)

    def array(self, name: str) -> np.ndarray:
        """float32 copy of a tensor (dequantized), ``[rows, cols]`` or ``[cols]``."""
        t = self.info(name)
        out = self._dequantize(self.read(name), t)
        return out.reshape(-1) if len(t.shape) == 1 else out

    def _dequantize(self, data: np.ndarray, t: TensorInfo) -> np.ndarray:
        """float32 ``[rows, cols]`` of stored rows: F32 here; every other type needs a dequantizer,
        which :class:`rlxc.gguf_model.GGUFFile` (what ``rlxc.loaders.read_gguf`` gives) adds."""
        if t.type_id != 0:
            raise NotImplementedError(f"{self.path}: tensor {t.name!r} is {t.type_name}; this reader dequantizes F32 "
                                      "only (rlxc.loaders.read_gguf's reader dequantizes every type rlxc knows)")
        return data.view("<f4").astype(np.float32)

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, v{self.version}, {len(self.tensors)} tensors, "
                f"{len(self.metadata)} keys, arch {self.metadata.get('general.architecture')!r})")




def read_gguf(path: str | os.PathLike[str], mmap: bool = True) -> GGUFFile:
    """Parse and validate a GGUF file (memory-mapped, or with ``mmap=False`` read into owned
    memory); see :class:`GGUFFile`."""
    return GGUFFile(path, mmap)


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
REQUIRED = object()


def gguf_meta(md: Mapping[str, Any], key: str, kind: type, default: Any = REQUIRED, source: str = "GGUF",
              array: bool = False) -> Any:
    """Metadata ``md[key]`` checked to be a ``kind`` (int, float, str or bool; with ``array``, an
    array of them), or ``default`` when the key is absent (ValueError when there is none).

    The file is untrusted: a value of another type (a string, a bool or an array where a number
    is expected, ...) raises a ValueError naming the key here, rather than a TypeError where it is
    used or, worse, being taken as something else (``int("32")``)."""
    if key not in md:
        if default is REQUIRED:
            raise ValueError(f"{source}: GGUF metadata lacks {key!r}")
        return default
    return meta_value(md[key], kind, key, source, array)


def meta_value(v: Any, kind: type, key: str, source: str, array: bool = False) -> Any:
    """``v`` (the value of metadata ``key``) checked as :func:`gguf_meta` checks it."""
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



# ============================================================================ writing

class GGUFWriter:
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

    def write(self, path: str | os.PathLike[str]) -> None:
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

        def body(f: BinaryIO) -> None:
            f.write(head)
            for name, shape, tid, data in self.tensors:
                f.write(data.reshape(-1).view(np.uint8).data)
                f.write(b"\0" * ((-data.nbytes) % a))

        write_atomically(path, body)


