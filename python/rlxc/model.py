"""rlxc.Model: a decoder-only LM around an rlxc.Pipeline.

The Model owns the token embedding, the list of rlxc.Layer objects (editable: the pipeline borrows
them, so a changed field takes effect on the next call), the final norm, the lm_head (quantized
like the layer matrices) and the final logit softcap. A prefill or a decoded token is one call into
the C engine (:class:`rlxc._rlxc.Engine`), which runs the whole path, embedding lookup, Gemma 4
per-layer inputs (PLE), the layers, final norm, lm_head and softcap, in one thread team with the
GIL released. The NumPy pieces (:meth:`Model.embed_tokens`, :meth:`Model.per_layer_inputs`,
:meth:`Model.final_norm`, :meth:`Model.logits`) compute the same stages for inspection.

Embedding tables and the lm_head may also be kept as stored (a :class:`QuantMatrix`: GGUF bytes of
any weight type, e.g. memory-mapped from the file by :func:`rlxc.load`): the embedding rows that a
call looks up are dequantized one by one, and a tied lm_head multiplies the quantized table in
place. ``model.tokenizer`` (set by :func:`rlxc.load`) turns text into ids for :meth:`Model.generate`.
"""

from __future__ import annotations

import copy
import html
from typing import Any, Iterable, Literal, Mapping, Sequence, cast

import numpy as np

from . import archs, evaluate, interp, ops
from ._layer import Layer, Pipeline
from ._rlxc import Engine
from .generate import generate, token_ids
from .wtypes import dequantize

__all__ = ["Model", "MATRIX_SLOTS", "QuantMatrix", "WEIGHT_FORMATS"]

#: Weight slots that hold matrices (the ones quantized to q4_0/q8_0 when in-dim % 32 == 0). The
#: router ("router") is a matrix too but stays float32, as llama.cpp keeps ffn_gate_inp.
MATRIX_SLOTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "ple_gate", "ple_proj", "gate_exps", "up_exps", "down_exps")

#: the formats rlxc quantizes float matrices to (``weights=``; ``rlxc quantize --type``)
WEIGHT_FORMATS = ("f32", "q4_0", "q4_1", "q5_1", "q8_0", "q4_k", "q5_k")
_ACTIVATIONS: dict[str, Literal["q8", "f32"]] = {"q8": "q8", "f32": "f32"}


def _gguf_arch(model_type: Any) -> str | None:
    """The GGUF architecture of a transformers model_type (what rlxc.save writes), or None."""
    arch = archs.by_hf(model_type)
    return arch.gguf if arch is not None else None


def matrix_wtype(weights: str, shape: Sequence[int]) -> str:
    """Storage type of a matrix of ``shape`` [out, in] under the requested format: the K-quants
    need rows of whole 256-blocks, else q5_1 (llama.cpp's fallback for q5_k); f32 for rows that
    are no multiple of 32."""
    if weights == "f32" or len(shape) != 2 or shape[1] % 32:
        return "f32"
    if weights in ("q4_k", "q5_k") and shape[1] % 256:
        return "q5_1"
    return weights


class QuantMatrix:
    """A ``[rows, cols]`` matrix kept as stored: uint8 ``data[rows, row_bytes]`` of GGUF blocks of
    ``wtype`` (``rlxc.loaders.RLXC_WTYPES``: "f32", "q4_0", "q4_k", "iq4_xs", ...), never expanded.

    ``m[ids]`` dequantizes just those rows (float32 ``[len(ids), cols]``; an int gives one row),
    so an embedding lookup costs a row, not the table. ``np.asarray(m)`` is not supported on
    purpose (use :meth:`dequantize` for the whole table).
    """

    __slots__ = ("data", "wtype", "cols")

    def __init__(self, data: np.ndarray, wtype: str, cols: int) -> None:
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
            raise TypeError("QuantMatrix data must be a 2-D uint8 numpy array [rows, row_bytes]")
        self.data = data
        self.wtype = str(wtype)
        self.cols = int(cols)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), self.cols)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __getitem__(self, ids: Any) -> np.ndarray:
        if isinstance(ids, (int, np.integer)):
            return np.asarray(dequantize(self.data[int(ids)][None, :], self.wtype, self.cols)[0], np.float32)
        rows = self.data[np.asarray(ids).reshape(-1)] if not isinstance(ids, slice) else self.data[ids]
        out = dequantize(np.ascontiguousarray(rows), self.wtype, self.cols)
        if not isinstance(ids, slice):
            out = out.reshape(*np.shape(ids), self.cols)
        return out

    def dequantize(self) -> np.ndarray:
        """The whole matrix as float32 ``[rows, cols]`` (a copy)."""
        return dequantize(self.data, self.wtype, self.cols)

    def __repr__(self) -> str:
        return f"QuantMatrix({self.shape[0]}x{self.cols}, {self.wtype}, {self.nbytes / 1e6:.1f} MB)"


#: Model attributes the C engine reads: assigning one rebuilds the engine at the next call.
_ENGINE_PARTS = frozenset({"embed", "embed_scale", "norm_type", "norm_weight", "norm_bias", "norm_eps", "norm_offset",
                           "final_softcap", "ple", "_lm", "lm_head_type", "_pipe"})


def _engine_matrix(m: np.ndarray | QuantMatrix) -> tuple[np.ndarray, str]:
    """A matrix as the Engine takes it: float32 [rows, cols], or uint8 GGUF rows and their type."""
    if isinstance(m, QuantMatrix):
        if m.wtype == "f32":
            return np.ascontiguousarray(m.data).view(np.float32), "f32"
        return np.ascontiguousarray(m.data), m.wtype
    return np.ascontiguousarray(m, dtype=np.float32), "f32"


#: Bytes per K or V value of each KV-cache type (q8_0: 34 bytes per block of 32).
KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}


def _check_kv_type(value: object) -> None:
    if value not in KV_TYPE_BYTES:
        raise ValueError(f"kv_type must be one of {', '.join(map(repr, KV_TYPE_BYTES))}, got {value!r}")


class Model:
    """A causal LM on the rlxc engine.

    Build one with :func:`rlxc.from_hf` (or :meth:`from_parts`). ``layers`` is a list of
    ``rlxc.Layer``; fields and weights may be edited between calls (call :meth:`reset` after
    changing a K/V shape: head_dim, num_kv_heads or kv_shared_from). The model-level parts
    (``embed``, ``embed_scale``, ``norm_weight``, ``final_softcap``, ``ple``, ...) may be assigned
    or edited in place too; after changing an entry of the ``ple`` dict, call :meth:`reset`.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _ENGINE_PARTS:
            object.__setattr__(self, "_engine", None)
        elif name == "threads" and value is not None:
            pipe = getattr(self, "_pipe", None)
            if pipe is not None:
                pipe.threads = value

    def __init__(self, layers: Sequence[Any], embed: np.ndarray | QuantMatrix, *,
                 lm_head: np.ndarray | QuantMatrix | None = None,
                 weights: str = "f32", embed_scale: float = 1.0, norm_type: int = 0,
                 norm_weight: np.ndarray | None = None, norm_bias: np.ndarray | None = None,
                 norm_eps: float = 1e-6, norm_offset: float = 0.0, final_softcap: float = 0.0,
                 ple: Mapping[str, Any] | None = None, max_seq: int = 2048,
                 threads: int | None = None, activations: str = "q8", name: str = "rlxc.Model",
                 layer_wtypes: Sequence[Mapping[str, str]] | None = None, arch: str | None = None,
                 tokenizer: Any = None, metadata: Mapping[str, Any] | None = None, kv_type: str = "f32",
                 kv_ring: bool = True, ubatch: int = 512) -> None:
        """
        Args:
            layers: rlxc.Layer objects with weights set.
            embed: float32 [vocab, hidden] token embedding (also the lm_head when ``lm_head`` is None),
                or a :class:`QuantMatrix` kept as stored (rows dequantized per lookup).
            lm_head: float32 [vocab, hidden], a :class:`QuantMatrix` used in place, or None (tied
                to ``embed``; a QuantMatrix embedding is then multiplied in place, in its own type).
            weights: storage format of the lm_head (:data:`WEIGHT_FORMATS`; f32 if hidden % 32).
            embed_scale: the embedding is multiplied by it (Gemma: sqrt(hidden) in the weight dtype).
            norm_type, norm_weight, norm_bias, norm_eps, norm_offset: the final norm
                (RMSNorm weight ``offset + w``, or LayerNorm with optional bias).
            final_softcap: ``cap * tanh(logits / cap)`` when > 0.
            ple: Gemma 4 per-layer-embedding tables (see :func:`rlxc.hf.model_parts`) or None.
            max_seq: KV-cache length. threads: engine threads (None = engine default).
            activations: how block-quantized weights (every type but f32 / f16 / bf16) meet the
                activations, see :attr:`activations`.
            name: shown by repr. layer_wtypes: per layer, slot -> format (for display only).
            arch: the GGUF architecture name (used by :func:`rlxc.save`), e.g. "llama", "gemma3".
            tokenizer: an :class:`rlxc.tokenizer.Tokenizer` (or None). metadata: loader facts
                (source path, GGUF keys, ...), kept as ``model.metadata``.
            kv_type, kv_ring, ubatch: how the KV cache is kept (:attr:`kv_type`, :attr:`kv_ring`,
                :attr:`ubatch`).
        """
        if weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, got {weights!r}")
        self.layers: list[Any] = list(layers)
        self.embed: np.ndarray | QuantMatrix
        if isinstance(embed, QuantMatrix):
            self.embed = embed
        else:
            self.embed = np.ascontiguousarray(embed, dtype=np.float32)
        self.vocab_size, self.hidden_size = self.embed.shape
        self.embed_scale = float(embed_scale)
        self.norm_type = int(norm_type)
        self.norm_weight = None if norm_weight is None else np.ascontiguousarray(norm_weight, np.float32)
        self.norm_bias = None if norm_bias is None else np.ascontiguousarray(norm_bias, np.float32)
        self.norm_eps = float(norm_eps)
        self.norm_offset = float(norm_offset)
        self.final_softcap = float(final_softcap or 0.0)
        self.ple = dict(ple) if ple else None
        self.max_seq = int(max_seq)
        self.threads = threads
        self.name = name
        self.weights = weights
        self.tied = lm_head is None
        self.arch = arch
        self.tokenizer: Any = tokenizer
        self.metadata: dict[str, Any] = dict(metadata or {})
        #: the GGUF file a model loaded from one reads its weights from (kept alive here; its
        #: tokenizer keys are what rlxc.save writes back)
        self._gguf: Any = None
        if lm_head is None and isinstance(self.embed, QuantMatrix):
            lm_head = self.embed
        self.lm_head_type: str
        self._lm: np.ndarray
        self.lm_vocab: int
        if isinstance(lm_head, QuantMatrix):
            if lm_head.cols != self.hidden_size:
                raise ValueError(f"lm_head is {lm_head.shape}, hidden size is {self.hidden_size}")
            self.lm_head_type = lm_head.wtype
            self._lm = (lm_head.data.view(np.float32).reshape(lm_head.shape) if lm_head.wtype == "f32"
                        else lm_head.data)
            self.lm_vocab = lm_head.shape[0]
        else:
            head = np.ascontiguousarray(self.embed if lm_head is None else lm_head, dtype=np.float32)
            if head.shape[1] != self.hidden_size:
                raise ValueError(f"lm_head is {head.shape}, hidden size is {self.hidden_size}")
            self.lm_head_type = matrix_wtype(weights, head.shape)
            self._lm = head if self.lm_head_type == "f32" else getattr(ops, f"quantize_{self.lm_head_type}")(head)
            self.lm_vocab = head.shape[0]
        self._layer_wtypes = [dict(w) for w in layer_wtypes] if layer_wtypes else None
        self._engine: Engine | None = None
        self._engine_ple: tuple[Any, ...] | None = None
        self._pipe: Pipeline | None = None
        self._pipe_layers: tuple[int, ...] = ()
        self._activations: Literal["q8", "f32"] = "q8"
        self.activations = activations
        self._taps = interp.Taps(self)
        _check_kv_type(kv_type)
        if not isinstance(ubatch, (int, np.integer)) or isinstance(ubatch, bool) or ubatch < 1:
            raise ValueError(f"ubatch must be an int >= 1, got {ubatch!r}")
        self._kv: dict[str, Any] = {"kv_type": kv_type, "kv_ring": bool(kv_ring), "ubatch": int(ubatch), "seqs": 1}

    @property
    def activations(self) -> str:
        """How block-quantized weights meet the activations, in every layer and the lm_head.

        ``"q8"`` (default): activations are rounded to 8-bit blocks (Q8_0 per 32, Q8_K per 256)
        and multiplied in integers, as llama.cpp does: fastest, logits within ~1e-2 of the
        float computation. ``"f32"``: weight rows are dequantized 48 at a time and multiplied
        with float32 activations, as transformers does on the dequantized weights (~1e-6).
        Float weights (f32, f16, bf16) always take float32 activations. Settable any time.
        """
        return self._activations

    @activations.setter
    def activations(self, value: str) -> None:
        if value not in _ACTIVATIONS:
            raise ValueError(f"activations must be 'q8' or 'f32', got {value!r}")
        self._activations = _ACTIVATIONS[value]
        if self._pipe is not None:
            self._pipe.activations = self._activations

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_parts(cls, layer_specs: Iterable[tuple[Mapping[str, Any], Mapping[str, np.ndarray]]],
                   parts: Mapping[str, Any], weights: str = "f32", threads: int | None = None,
                   max_seq: int = 2048, name: str = "rlxc.Model", activations: str = "q8") -> "Model":
        """Build from ``(fields, weights)`` per layer and the model-level ``parts`` dict of
        :func:`rlxc.hf.model_parts`. Matrices go to ``weights`` format when in-dim % 32 == 0."""
        if weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, got {weights!r}")
        layers, wtypes = [], []
        for fields, ws in layer_specs:
            layer = Layer(**dict(fields))
            types: dict[str, str] = {}
            for slot, arr in ws.items():
                arr = np.ascontiguousarray(arr, dtype=np.float32)
                t = matrix_wtype(weights, arr.shape) if slot in MATRIX_SLOTS else "f32"
                layer.set_weight(slot, arr, dtype=t)
                types[slot] = t
            layers.append(layer)
            wtypes.append(types)
        return cls(layers, parts["embed"], lm_head=parts.get("lm_head"), weights=weights,
                   embed_scale=parts.get("embed_scale", 1.0), norm_type=parts.get("norm_type", 0),
                   norm_weight=parts.get("norm_weight"), norm_bias=parts.get("norm_bias"),
                   norm_eps=parts.get("norm_eps", 1e-6), norm_offset=parts.get("norm_offset", 0.0),
                   final_softcap=parts.get("final_softcap", 0.0), ple=parts.get("ple"),
                   max_seq=max_seq, threads=threads, activations=activations, name=name, layer_wtypes=wtypes,
                   arch=parts.get("arch") or _gguf_arch(parts.get("model_type")))

    # ------------------------------------------------------------------ pipeline
    @property
    def pipeline(self) -> Any:
        """The rlxc.Pipeline over ``self.layers`` (rebuilt when the list's members changed
        while the cache is empty)."""
        ids = tuple(id(l) for l in self.layers)
        if self._pipe is None or ids != self._pipe_layers:
            if self._pipe is not None and self._pipe.n_past:
                raise RuntimeError("model.layers was changed with tokens in the cache: call reset()")
            self._pipe = Pipeline(self.layers, self.max_seq, threads=self.threads)
            self._pipe.activations = self._activations
            self._apply_kv(self._pipe)
            self._pipe_layers = ids
        return self._pipe

    def _apply_kv(self, pipe: Pipeline) -> None:
        for name, value in self._kv.items():
            setattr(pipe, name, value)
        pipe.reset()  # re-allocates the caches under the settings

    def _set_kv(self, name: str, value: Any) -> None:
        old = dict(self._kv)
        self._kv[name] = value
        if self._pipe is not None:
            try:
                self._apply_kv(self._pipe)
            except Exception:
                self._kv = old
                self._apply_kv(self._pipe)
                raise

    @property
    def kv_type(self) -> str:
        """How the KV cache stores K and V: ``"f32"`` (exact), ``"f16"`` (half the memory,
        llama.cpp's default; ~1e-3 relative on the attention output), ``"bf16"`` (half, with
        f32's range and 8 bits of mantissa) or ``"q8_0"`` (blocks of 32 int8 with an f16 scale,
        8.5 bits a value as llama.cpp's ``-ctk q8_0 -ctv q8_0``; head_dim a multiple of 32).
        Setting it empties the cache; :meth:`kv_cache` views show bf16 as its uint16 bits and
        q8_0 as the bytes of each row's blocks."""
        return cast(str, self._kv["kv_type"])

    @kv_type.setter
    def kv_type(self, value: str) -> None:
        _check_kv_type(value)
        for i, l in enumerate(self.layers):
            if value == "q8_0" and int(l.kv_shared_from) < 0 and int(l.head_dim) % 32:
                raise ValueError(f"kv_type q8_0 stores K/V in blocks of 32: layer {i}'s head_dim {int(l.head_dim)} "
                                 "is not a multiple of 32 (use f16)")
        self._set_kv("kv_type", value)

    @property
    def kv_ring(self) -> bool:
        """Windowed layers keep only their last ``sliding_window - 1 + ubatch`` positions (a ring)
        where that takes less memory than ``max_seq`` positions (default True); False keeps every
        position.
        A windowed layer can then rewind (decode at pos < n_past) at most ``ubatch`` tokens.
        Setting it empties the cache."""
        return cast(bool, self._kv["kv_ring"])

    @kv_ring.setter
    def kv_ring(self, value: bool) -> None:
        self._set_kv("kv_ring", bool(value))

    @property
    def ubatch(self) -> int:
        """The most tokens one pass of the engine runs (default 512): a longer prefill runs in
        passes (hooks and caches see each pass). Setting it empties the cache."""
        return cast(int, self._kv["ubatch"])

    @ubatch.setter
    def ubatch(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"ubatch must be an int >= 1, got {value!r}")
        self._set_kv("ubatch", int(value))

    @property
    def sequences(self) -> int:
        """Independent sequences, each with its own KV cache (default 1): what
        :meth:`decode_batch` and :meth:`prefill_batch` run side by side. Setting it empties every
        cache (memory: :meth:`kv_memory` times this)."""
        return cast(int, self._kv["seqs"])

    @sequences.setter
    def sequences(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 1 <= value <= 4096:
            raise ValueError(f"sequences must be an int in [1, 4096], got {value!r}")
        self._set_kv("seqs", int(value))

    @property
    def sequence(self) -> int:
        """The active sequence (default 0): the one :meth:`prefill`, :meth:`decode`,
        :meth:`generate`, :attr:`n_past` and :meth:`kv_cache` act on. Switching keeps every
        sequence's cache."""
        return int(self.pipeline.seq)

    @sequence.setter
    def sequence(self, value: int) -> None:
        self.pipeline.seq = value

    def decode_batch(self, tokens: Any, seqs: Any = None) -> np.ndarray:
        """One token for each of several sequences in one pass (each weight row read once for
        all): ``tokens[b]`` is appended to sequence ``seqs[b]`` (default ``b``; distinct) at its
        own length. Returns float32 [B, vocab]. Hooks, collected stages and patches do not run
        in a batch (ValueError)."""
        toks = token_ids(tokens, self.vocab_size, "tokens")
        s = np.arange(len(toks)) if seqs is None else np.asarray(seqs)
        if s.ndim != 1 or s.dtype.kind not in "iu" or len(s) != len(toks):
            raise ValueError(f"seqs must be {len(toks)} sequence numbers, got {s!r}")
        if len(toks) > self.sequences:
            raise ValueError(f"a batch of {len(toks)} needs as many sequences: the model has {self.sequences} "
                             f"(set model.sequences)")
        return np.asarray(self.engine.decode_batch(s.astype(np.int64), toks))

    def prefill_batch(self, prompts: Sequence[Any], logits: str = "last") -> list[np.ndarray | None]:
        """Prompt b into sequence b from empty (``model.sequences`` grows to ``len(prompts)`` if
        needed, which empties every cache), each as :meth:`prefill` with ``logits``; the active
        sequence is left as it was. Then :meth:`decode_batch` continues them side by side."""
        prompts = list(prompts)
        if not prompts:
            raise ValueError("prefill_batch needs at least one prompt")
        ids = [self._ids(p) for p in prompts]
        if len(ids) > self.sequences:
            self.sequences = len(ids)
        pipe, active = self.pipeline, self.sequence
        out = []
        try:
            for b, x in enumerate(ids):
                pipe.seq = b
                pipe.set_n_past(0)
                out.append(self.prefill(x, logits=logits))
        finally:
            pipe.seq = active
        return out

    def kv_memory(self) -> dict[str, int]:
        """KV-cache bytes of one sequence: ``per_token`` (each position of the layers that keep
        every position), ``windowed`` (the rings of windowed layers, fixed); ``at_max_seq``
        (everything at ``max_seq`` tokens, every sequence: what is reserved; pages fill as
        positions do)."""
        elem = KV_TYPE_BYTES[self.kv_type]
        per_token = windowed = 0
        for l in self.layers:
            if int(l.kv_shared_from) >= 0:
                continue
            row = int(2 * int(l.num_kv_heads) * int(l.head_dim) * elem)
            W = int(l.sliding_window)
            if self.kv_ring and W > 0 and 2 * W - 2 + self.ubatch < self.max_seq:
                windowed += (2 * W - 2 + self.ubatch) * row  # cells W - 1 + ubatch, W - 1 of them mirrored
            else:
                per_token += row
        return {"per_token": per_token, "windowed": windowed,
                "at_max_seq": (per_token * self.max_seq + windowed) * self.sequences}

    @property
    def n_past(self) -> int:
        """Tokens in the KV cache."""
        return 0 if self._pipe is None else int(self._pipe.n_past)

    @property
    def engine(self) -> Engine:
        """The :class:`rlxc._rlxc.Engine` that runs the whole model over :attr:`pipeline` (rebuilt
        after a model-level part was assigned, or the pipeline was)."""
        pipe = self.pipeline
        if self._engine is not None and self._engine.pipeline is pipe:
            return self._engine
        kw: dict[str, Any] = {}
        kw["embed"], kw["embed_type"] = _engine_matrix(self.embed)
        kw["lm_head"] = np.ascontiguousarray(self._lm, np.float32 if self.lm_head_type == "f32" else np.uint8)
        kw["lm_head_type"] = self.lm_head_type
        if self.ple is not None:
            p = self.ple
            kw["ple_embed"], kw["ple_embed_type"] = _engine_matrix(p["embed"])
            kw["ple_proj"], kw["ple_proj_type"] = _engine_matrix(p["proj"])
            kw.update(ple_norm=np.ascontiguousarray(p["norm"], np.float32), ple_embed_scale=float(p["embed_scale"]),
                      ple_proj_scale=float(p["proj_scale"]), ple_input_scale=float(p["input_scale"]),
                      ple_eps=float(p["eps"]))
        engine = Engine(pipe, embed_scale=self.embed_scale, norm_type=self.norm_type, norm_weight=self.norm_weight,
                        norm_bias=self.norm_bias, norm_eps=self.norm_eps, norm_offset=self.norm_offset,
                        final_softcap=self.final_softcap, **kw)
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_engine_ple", self._ple_parts())
        self._taps.apply(engine)
        return engine

    def _ple_parts(self) -> tuple[Any, ...]:
        """The ``ple`` dict's entries, to tell in :meth:`reset` whether one was replaced."""
        return () if self.ple is None else tuple(self.ple.items())

    def reset(self) -> None:
        """Empty the KV cache (and pick up layer list changes, K/V shape edits and edits of the
        ``ple`` dict)."""
        ids = tuple(id(l) for l in self.layers)
        if self._pipe is not None and ids == self._pipe_layers:
            self._pipe.reset()
            # the engine over the same pipeline stays (and with it the lm_head's packed copy,
            # which costs a pass over the matrix to rebuild) unless a ple entry was replaced
            old, new = self._engine_ple, self._ple_parts()
            if old is None or len(old) != len(new) or any(
                    k1 != k2 or v1 is not v2 for (k1, v1), (k2, v2) in zip(old, new)):
                self._engine = None
        else:
            self._engine = None
            self._pipe = None
            self.pipeline  # noqa: B018 - builds it

    # ------------------------------------------------------------------ pieces
    def _ids(self, input_ids: Any) -> np.ndarray:
        """int64 [T]: TypeError unless integers (no floats, bools, strings), ValueError when
        empty or out of [0, vocab_size)."""
        return token_ids(input_ids, self.vocab_size, "token ids")

    def embed_tokens(self, ids: np.ndarray) -> np.ndarray:
        """float32 [T, hidden]: embedding rows times ``embed_scale``."""
        x = self.embed[ids]
        if self.embed_scale != 1.0:
            x = x * np.float32(self.embed_scale)
        return np.ascontiguousarray(x, dtype=np.float32)

    def per_layer_inputs(self, ids: np.ndarray, x: np.ndarray) -> np.ndarray | None:
        """Gemma 4 PLE, float32 [T, n_layers * ple_dim] (None when the model has none)::

            tok  = E_ple[ids] * sqrt(P)
            proj = RMSNorm_P((x @ W_proj^T) * hidden**-0.5)      # per layer slice of P
            ple  = (proj + tok) * 2**-0.5
        """
        p = self.ple
        if p is None:
            return None
        T, L, P = len(ids), p["num_layers"], p["dim"]
        tok = p["embed"][ids].reshape(T, L, P) * np.float32(p["embed_scale"])
        proj = (x @ p["proj"].T) * np.float32(p["proj_scale"])
        proj = proj.reshape(T, L, P)
        ms = np.mean(proj.astype(np.float32) ** 2, axis=-1, keepdims=True)
        proj = proj / np.sqrt(ms + np.float32(p["eps"])) * p["norm"]
        ple = (proj + tok) * np.float32(p["input_scale"])
        return np.ascontiguousarray(ple.reshape(T, L * P), dtype=np.float32)

    def final_norm(self, h: np.ndarray) -> np.ndarray:
        """The model's final norm of h [T, hidden] (or [hidden])."""
        h = np.ascontiguousarray(h, dtype=np.float32)
        if self.norm_weight is None:
            return h
        if self.norm_type == 1:
            return np.asarray(ops.layernorm(h, self.norm_weight, self.norm_bias, self.norm_eps), np.float32)
        return np.asarray(ops.rmsnorm(h, self.norm_weight, self.norm_eps, offset=self.norm_offset),
                          np.float32)

    @property
    def _threads(self) -> int | None:
        if self.threads is not None:
            return int(self.threads)
        return int(self._pipe.threads) if self._pipe is not None else None

    def logits(self, h_normed: np.ndarray) -> np.ndarray:
        """lm_head (+ final softcap) of already-normed hidden states (on ``self.threads``)."""
        wtype: Any = self.lm_head_type  # (a str from the file; the C call checks it)
        z = np.asarray(ops.matmul(np.ascontiguousarray(h_normed, np.float32), self._lm,
                                  wtype=wtype, threads=self._threads, activations=self._activations),
                       dtype=np.float32)
        if self.final_softcap > 0:
            z = np.asarray(ops.softcap(z, self.final_softcap), dtype=np.float32)
        return z

    # ------------------------------------------------------------------ running
    def prefill(self, input_ids: Any, logits: str = "all") -> np.ndarray | None:
        """Run tokens at positions n_past.. (appending to the cache).

        ``logits="all"``: float32 [T, vocab] (the default); ``"last"``: float32 [vocab] of the
        last token only (the final norm and lm_head run on one row: what generation needs);
        ``"none"``: only fill the cache, return None."""
        if logits not in ("all", "last", "none"):
            raise ValueError(f"logits must be 'all', 'last' or 'none', got {logits!r}")
        ids = self._ids(input_ids)
        out = self.engine.prefill(ids, logits=logits)
        return None if out is None else np.asarray(out)

    def decode(self, token_id: int, pos: int | None = None) -> np.ndarray:
        """One token at position ``pos`` (default n_past; a smaller pos rewinds the cache to it,
        within what windowed layers keep: see :attr:`kv_ring`); float32 [vocab] logits."""
        ids = token_ids([token_id], self.vocab_size, "the token id")
        if ids.size != 1:
            raise ValueError(f"decode takes one token id, got {ids.size}")
        engine = self.engine
        return np.asarray(engine.decode(int(ids[0]), engine.pipeline.n_past if pos is None else pos))

    def forward(self, input_ids: Any) -> np.ndarray:
        """reset() then prefill(input_ids)."""
        self.reset()
        return cast(np.ndarray, self.prefill(input_ids))

    def trace(self, input_ids: Any) -> dict[str, np.ndarray]:
        """reset() and run input_ids keeping every intermediate:
        ``embeddings`` [T, H], ``layers`` [n_layers, T, H] (each layer's raw output),
        ``final_norm`` [T, H], ``logits`` [T, vocab]."""
        self.reset()
        ids = self._ids(input_ids)
        logits, x, per, normed = self.engine.prefill(ids, logits="all", trace=True)
        return {"embeddings": x, "layers": per, "final_norm": normed, "logits": logits}

    def hidden_states(self, input_ids: Any) -> list[np.ndarray]:
        """Like transformers' ``output_hidden_states=True`` (5.17): n_layers + 1 arrays
        [T, hidden]: the (scaled) embeddings, the outputs of layers 0 .. n-2, and the LAST
        entry is the final-norm output of layer n-1 (not its raw output). Resets the cache."""
        t = self.trace(input_ids)
        return [t["embeddings"], *list(t["layers"][:-1]), t["final_norm"]]

    # ------------------------------------------------------------------ stages, hooks, KV cache
    def stage_names(self) -> list[str]:
        """Every stage a token passes, in order: ``embed``, ``layers.{i}.{stage}`` for each stage of
        :data:`rlxc.interp.LAYER_STAGES` (no k / v in layers that read another's K/V),
        ``final_norm``, ``logits``. The README's stage table says what each holds."""
        return interp.stage_names(self)

    def collect(self, names: Any = None) -> Any:
        """Context manager: ``with model.collect(["layers.3.resid_post"]) as cache: ...`` keeps
        the named stages (a list, one name, a predicate over names, or None for all) of every
        prefill / decode / generate call inside it, in an :class:`rlxc.interp.ActivationCache`
        (stage -> float32 [tokens, ...])."""
        return self._taps.collecting(names)

    def run_with_cache(self, input_ids: Any, names: Any = None, reset: bool = True
                       ) -> tuple[np.ndarray, interp.ActivationCache]:
        """Run ``input_ids`` (after :meth:`reset` unless ``reset=False``) keeping the named stages
        (see :meth:`collect`; None: all of them, attention weights included).
        Returns ``(logits [T, vocab], cache)``; only the asked-for stages are copied."""
        if reset:
            self.reset()
        with self.collect(names) as cache:
            logits = self.prefill(input_ids, logits="all")
        return cast(np.ndarray, logits), cache

    def hooks(self, hooks: Mapping[str, Any]) -> Any:
        """Context manager: ``with model.hooks({"layers.3.mlp_out": fn}):`` calls ``fn(values,
        positions)`` at that stage in every call inside it (prefill, decode, generate, stream);
        ``values`` is float32 [T, ...] (the stage's shape) and ``positions`` the tokens' positions.
        ``fn`` may edit ``values`` in place or return a replacement of the same shape. Raising, or
        returning another shape, fails the call with :class:`rlxc.interp.HookError` naming the
        stage; the KV cache keeps what it had. A hook may not run or reset this model."""
        return self._taps.hooked(hooks)

    def patch(self, name: str, values: Any, positions: Any = None) -> None:
        """Activation patching, in C: from now on, stage ``name`` at ``positions`` (default
        0 .. len(values) - 1) takes ``values`` [len(positions), ...] (e.g. rows of another prompt's
        :meth:`run_with_cache`) in every call that runs those positions. A later patch of the same
        stage replaces this one; :meth:`clear_patches` removes all."""
        self._taps.set_patch(name, values, positions)

    def clear_patches(self) -> None:
        """Remove every :meth:`patch`."""
        self._taps.clear_patches()

    def kv_cache(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``layer``'s cached (k, v): writable views [num_kv_heads, n_past, head_dim] in the
        cache's :attr:`kv_type` (float32 / float16; bf16 as uint16 bits, q8_0 as [.., .., row
        bytes] uint8 blocks), K after k-norm and RoPE. Editing them changes what the next tokens
        attend to. A layer that reads another's K/V returns that layer's arrays."""
        return cast(tuple[np.ndarray, np.ndarray], self.pipeline.kv_cache(layer))

    def save_state(self) -> interp.ModelState:
        """A copy of the KV cache and n_past (:meth:`load_state` restores it bit for bit)."""
        return interp.save_state(self)

    def load_state(self, state: interp.ModelState) -> None:
        """Restore a :meth:`save_state` (of this model or one with the same K/V shapes)."""
        interp.load_state(self, state)

    def fork(self) -> "Model":
        """A second Model over the same layers and weights (shared, not copied) with its own KV
        cache holding a copy of this one's: branch a prompt prefix without recomputing it. Hooks,
        caches and patches are not carried over."""
        state = self.save_state()
        new = copy.copy(self)
        for name, value in (("layers", list(self.layers)), ("ple", dict(self.ple) if self.ple else None),
                            ("metadata", dict(self.metadata)), ("_kv", dict(self._kv)), ("_pipe", None),
                            ("_engine", None), ("_engine_ple", None), ("_pipe_layers", ())):
            object.__setattr__(new, name, value)
        object.__setattr__(new, "_taps", interp.Taps(new))
        new.load_state(state)
        return new

    # ------------------------------------------------------------------ text
    def generate(self, prompt: Any, max_new_tokens: int = 128, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 seed: int | None = None, stop: Any = None, stream: bool = False,
                 add_special: bool | None = None, reset: bool = True, logprobs: int | None = None) -> Any:
        """Continue ``prompt`` (text, needing ``model.tokenizer``, or token ids). In a text prompt the
        special tokens written out (e.g. ``<start_of_turn>``) are parsed; ``add_special`` (default
        True) adds the tokenizer's BOS.

        Greedy when ``temperature == 0``; otherwise samples after repetition_penalty,
        temperature, top_k, top_p and min_p (in that order) with ``numpy.random.default_rng(seed)``.
        Stops after ``max_new_tokens``, at an end-of-generation token (EOS, end-of-turn; not
        included) or when the text produced contains a ``stop`` string (cut before it).
        Returns the new text (a text prompt, or ids with a tokenizer attached) or the list of
        new token ids (ids and no tokenizer). With ``stream=True`` returns an iterator over the
        text pieces (or ids) as they come. ``reset=False`` continues after what is in the cache.
        Every argument is checked by the call itself, streaming included: ValueError for a NaN,
        infinite, subnormal or out-of-range number or token id, TypeError for a float, str or
        bool where an integer is meant (see :mod:`rlxc.generate`).

        ``logprobs=k`` (k >= 0) also gives each generated token's log-probability under the model
        (log softmax of its logits, before temperature and the other sampling transforms) and
        the k most likely tokens at that step: a :class:`rlxc.generate.TokenLogprob` per token
        (``id``, ``logprob``, ``top`` [(id, logprob)]). Then the call returns ``(output,
        logprobs)``, or with ``stream=True`` an iterator whose ``logprobs`` list grows as tokens
        come (tokens whose text a stop string cut are in it too).
        """
        return generate(self, prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                        top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty, seed=seed, stop=stop,
                        stream=stream, add_special=add_special, reset=reset, logprobs=logprobs)

    def stream(self, prompt: Any, max_new_tokens: int = 128, **kw: Any) -> Any:
        """``generate(..., stream=True)``: an iterator over text pieces (or ids) as they come."""
        return self.generate(prompt, max_new_tokens, stream=True, **kw)

    def logprobs(self, ids: Any) -> np.ndarray:
        """log p(ids[i + 1] | ids[:i + 1]) for every i < len(ids) - 1, float64, from an empty
        cache (:func:`rlxc.evaluate.logprobs`)."""
        return evaluate.logprobs(self, ids)

    def score(self, inputs: Sequence[Any], batch: int | None = None) -> list[np.ndarray]:
        """Per-token log-probabilities of several texts (tokenized with BOS) or token-id lists,
        each from an empty cache: ``out[k][i] = log p(ids[i + 1] | ids[:i + 1])``, float64
        (:func:`rlxc.evaluate.score`)."""
        return evaluate.score(self, inputs, batch)

    def perplexity(self, text: Any, ctx: int = 512, *, windows: int | None = None, batch: int | None = None,
                   progress: Any = False) -> evaluate.Perplexity:
        """Perplexity of a text (or token ids) over windows of ``ctx`` tokens, scoring each
        window's second half as llama.cpp's llama-perplexity does (:func:`rlxc.evaluate.perplexity`)."""
        return evaluate.perplexity(self, text, ctx, windows=windows, batch=batch, progress=progress)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """``model.tokenizer.encode`` (raises if the model has no tokenizer)."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer (attach one: model.tokenizer = rlxc.tokenizer.load(...))")
        return [int(i) for i in self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)]

    def detokenize(self, ids: Any) -> str:
        """``model.tokenizer.decode``."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer")
        return str(self.tokenizer.decode(list(np.asarray(ids).reshape(-1))))

    # ------------------------------------------------------------------ display
    def _wtypes(self, i: int) -> dict[str, str]:
        layer = self.layers[i]
        get = getattr(layer, "weight_type", None)
        if get is not None:
            out = {}
            for s in MATRIX_SLOTS:
                try:
                    t = get(s)
                except Exception:
                    t = None
                if t is not None:
                    out[s] = str(t)
            if out:
                return out
        if self._layer_wtypes and i < len(self._layer_wtypes):
            return {k: v for k, v in self._layer_wtypes[i].items() if k in MATRIX_SLOTS}
        return {}

    def layer_table(self) -> list[dict[str, Any]]:
        """One dict per layer: attention type, window, head_dim, heads, rope, dense FFN width, experts
        (``"8 of 128 x 768"``, or ``""``), weight formats."""
        rows = []
        for i, l in enumerate(self.layers):
            W = int(l.sliding_window)
            src = int(l.kv_shared_from)
            attn = f"sliding {W}" if W > 0 else "full"
            if src >= 0:
                attn += f", K/V of layer {src}"
            layout = int(l.rope_layout)
            rd = int(l.rotary_dim)
            rope = f"{float(l.rope_base):g}"
            if rd != int(l.head_dim) or layout == 1:
                rope += f" ({'proportional' if layout == 1 else 'prefix'} {rd})"
            types = self._wtypes(i)
            fmts = sorted(set(types.values()))
            rows.append(dict(layer=i, attention=attn, window=W, head_dim=int(l.head_dim),
                             q_heads=int(l.num_q_heads), kv_heads=int(l.num_kv_heads), rope=rope,
                             ffn=int(l.intermediate_size),
                             experts=(f"{int(l.num_experts_used)} of {int(l.num_experts)} x "
                                      f"{int(l.expert_intermediate_size)}" if int(l.num_experts) else ""),
                             ple=int(l.ple_dim),
                             weights="/".join(fmts) if fmts else "?",
                             memory=f"{int(getattr(l, 'nbytes', 0)) / 1e6:.2f} MB"))
        return rows

    def __repr__(self) -> str:
        head = "tied" if self.tied else "untied"
        extra = []
        if self.final_softcap:
            extra.append(f"final_softcap={self.final_softcap:g}")
        if self.ple:
            extra.append(f"ple_dim={self.ple['dim']}")
        return (f"<rlxc.Model {self.name}: {len(self.layers)} layers, hidden {self.hidden_size}, "
                f"vocab {self.vocab_size}, weights {self.weights}, lm_head {self.lm_head_type} ({head}), "
                f"activations {self.activations}"
                + (", " + ", ".join(extra) if extra else "")
                + f", max_seq {self.max_seq} (KV {self.kv_type} {self.kv_memory()['at_max_seq'] / 1e6:.1f} MB)"
                + f", n_past {self.n_past}>")

    def _repr_html_(self) -> str:
        cols = ["layer", "attention", "window", "head_dim", "q_heads", "kv_heads", "rope", "ffn", "experts", "ple",
                "weights", "memory"]
        rows = self.layer_table()
        th = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        return (f"<div><b>{html.escape(repr(self))}</b><table><thead><tr>{th}</tr></thead>"
                f"<tbody>{body}</tbody></table></div>")
