"""Stages, caches, hooks, patches and the KV cache of an :class:`rlxc.Model`.

Every point a token passes has a name, the same in Python, in the C engine (``rlxc._rlxc.STAGES``)
and in the README's table ("Stages, hooks and interventions"): ``embed``, then per layer ``layers.{i}.resid_pre``, ``.attn_in``, ``.q``,
``.k``, ``.v``, ``.attn_probs``, ``.attn_z``, ``.attn_out``, ``.resid_mid``, ``.mlp_in``,
``.mlp_act``, ``.mlp_out``, ``.resid_post``, then ``final_norm`` and ``logits``. A stage's values
for T tokens are a float32 array ``[T, *stage_shape]`` (:meth:`StageSpec.shape`).

The engine visits a stage only when something asked for it (a cache, a hook or a patch): one test
of a bit per stage otherwise. Caches and hooks run Python at their stages (the GIL is taken there
and nowhere else); patches, steering vectors and head / neuron scales run in C.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from . import _rlxc

if TYPE_CHECKING:
    from .model import Model

__all__ = ["STAGES", "LAYER_STAGES", "MODEL_STAGES", "ActivationCache", "HookError", "ModelState", "StageSpec",
           "parse_stage"]

#: Every stage in the engine's order (a stage's bit in the engine's masks is ``1 << index``).
STAGES: tuple[str, ...] = tuple(_rlxc.STAGES)
#: The model's own stages (layer -1).
MODEL_STAGES: tuple[str, ...] = ("embed", "final_norm", "logits")
#: The stages of each layer, in the order a token passes them.
LAYER_STAGES: tuple[str, ...] = tuple(s for s in STAGES if s not in MODEL_STAGES)

_NAME = re.compile(r"^layers\.(\d+)\.([a-z_]+)$")


class HookError(RuntimeError):
    """A Python hook raised or returned an array of the wrong shape; names the stage. The model
    stays usable: the failed call left nothing in the KV cache."""


@dataclass(frozen=True)
class StageSpec:
    """One stage: ``layer`` (-1 for embed / final_norm / logits), ``stage`` (the short name)."""

    layer: int
    stage: str

    @property
    def name(self) -> str:
        return self.stage if self.layer < 0 else f"layers.{self.layer}.{self.stage}"

    def shape(self, model: "Model", width: int | None = None) -> tuple[int, ...]:
        """Values per token: () dims after T. attn_probs needs ``width`` (heads * keys) to know
        its key count."""
        if self.layer < 0:
            return (model.lm_vocab,) if self.stage == "logits" else (model.hidden_size,)
        l = model.layers[self.layer]
        if self.stage in ("q", "attn_z"):
            return (int(l.num_q_heads), int(l.head_dim))
        if self.stage in ("k", "v"):
            return (int(l.num_kv_heads), int(l.head_dim))
        if self.stage == "attn_probs":
            nq = int(l.num_q_heads)
            return (nq, (width if width is not None else nq) // nq)
        if self.stage == "mlp_act":
            return (int(l.intermediate_size),)
        return (model.hidden_size,)


def parse_stage(name: str, n_layers: int) -> StageSpec:
    """``"layers.3.mlp_out"`` / ``"logits"`` -> StageSpec; ValueError for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"a stage name must be a str, got {type(name).__name__}")
    if name in MODEL_STAGES:
        return StageSpec(-1, name)
    m = _NAME.match(name)
    if not m or m.group(2) not in LAYER_STAGES:
        raise ValueError(f"unknown stage {name!r}: use one of {', '.join(MODEL_STAGES)} or layers.<i>.<stage> with "
                         f"<stage> in {', '.join(LAYER_STAGES)}")
    i = int(m.group(1))
    if i >= n_layers:
        raise ValueError(f"unknown stage {name!r}: the model has {n_layers} layers")
    return StageSpec(i, m.group(2))


def _absent(layer: Any, stage: str) -> str | None:
    """Why the layer has no such stage, or None."""
    if stage in ("k", "v") and int(layer.kv_shared_from) >= 0:
        return f"reads layer {int(layer.kv_shared_from)}'s K/V and has no k / v stage of its own"
    if stage == "mlp_act" and int(layer.intermediate_size) == 0:
        return "has experts only: mlp_act is a dense FFN's"
    return None


def stage_names(model: "Model") -> list[str]:
    """Every stage of the model in forward order (no k / v for layers that read another's K/V, no
    mlp_act for layers of experts without a dense FFN)."""
    out = ["embed"]
    for i, l in enumerate(model.layers):
        out += [f"layers.{i}.{s}" for s in LAYER_STAGES if _absent(l, s) is None]
    return out + ["final_norm", "logits"]


def select(model: "Model", names: Iterable[str] | Callable[[str], bool] | str | None) -> list[StageSpec]:
    """Stage specs from a list of names, one name, a predicate over names, or None (all)."""
    every = stage_names(model)
    if names is None:
        chosen = every
    elif callable(names):
        chosen = [n for n in every if names(n)]
    elif isinstance(names, str):
        chosen = [names]
    else:
        chosen = list(names)
    specs = [parse_stage(n, len(model.layers)) for n in chosen]
    for s in specs:
        if s.layer >= 0 and (why := _absent(model.layers[s.layer], s.stage)) is not None:
            raise ValueError(f"{s.name}: layer {s.layer} {why}")
    return specs


class ActivationCache(Mapping[str, np.ndarray]):
    """Stage name -> float32 ``[T, ...]`` over every token the model ran while collecting (a
    prefill's tokens, then each decoded token, in order). ``attn_probs`` rows are padded with
    zeros to the last call's key count, so they stack like the rest."""

    def __init__(self, names: Iterable[str]) -> None:
        self._parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        self._positions: dict[str, list[np.ndarray]] = {n: [] for n in self._parts}

    def _add(self, name: str, values: np.ndarray, positions: np.ndarray) -> None:
        self._parts[name].append(values.copy())
        self._positions[name].append(positions)

    def __getitem__(self, name: str) -> np.ndarray:
        parts = self._parts[name]
        if not parts:
            raise KeyError(f"{name!r} was asked for but no call reached it")
        if name.endswith("attn_probs"):
            keys = max(p.shape[-1] for p in parts)
            parts = [np.pad(p, ((0, 0), (0, 0), (0, keys - p.shape[-1]))) for p in parts]
        return np.concatenate(parts, axis=0)

    def positions(self, name: str) -> np.ndarray:
        """The token position of each row of ``self[name]``."""
        return np.concatenate(self._positions[name]) if self._positions[name] else np.zeros(0, np.int64)

    def __iter__(self) -> Iterator[str]:
        return (n for n, p in self._parts.items() if p)

    def __len__(self) -> int:
        return sum(1 for p in self._parts.values() if p)

    def __repr__(self) -> str:
        items = ", ".join(f"{n}: {tuple(self[n].shape)}" for n in self)
        return f"ActivationCache({items})"


@dataclass
class ModelState:
    """What :meth:`Model.save_state` keeps: the tokens' count and each own cache's K/V rows."""

    n_past: int
    kv: list[tuple[np.ndarray, np.ndarray] | None]  # per layer; None for layers that read another's
    shapes: list[tuple[int, int, int]]  # (kv_shared_from, num_kv_heads, head_dim) per layer

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for e in self.kv if e is not None for k, v in [e])

    def __repr__(self) -> str:
        return f"ModelState(n_past={self.n_past}, {len(self.kv)} layers, {self.nbytes / 1e6:.2f} MB)"


class Taps:
    """A model's caches, hooks and patches, and the engine configuration they make."""

    def __init__(self, model: "Model") -> None:
        self._model = weakref.ref(model)  # the model holds its Taps: no reference cycle
        self.hooks: dict[StageSpec, list[Callable[..., Any]]] = {}
        self.caches: list[tuple[ActivationCache, list[StageSpec]]] = []
        self.patches: dict[StageSpec, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def model(self) -> "Model":
        m = self._model()
        if m is None:
            raise ReferenceError("the model of these taps is gone")
        return m

    # -- engine configuration
    def masks(self) -> list[int] | None:
        specs = set(self.hooks)
        for _, ss in self.caches:
            specs.update(ss)
        if not specs:
            return None
        L = len(self.model.layers)
        masks = [0] * (L + 1)
        for s in specs:
            masks[L if s.layer < 0 else s.layer] |= 1 << STAGES.index(s.stage)
        return masks

    def apply(self, engine: Any) -> None:
        masks = self.masks()
        engine.set_hooks(masks, None if masks is None else self.dispatch)
        engine.set_patches([(s.layer, s.stage, pos, vals) for s, (pos, vals) in self.patches.items()])

    def changed(self) -> None:
        engine = self.model._engine
        if engine is not None:
            self.apply(engine)

    # -- the callback the engine makes at a hooked or cached stage
    def dispatch(self, layer: int, stage: str, values: np.ndarray, pos0: int) -> None:
        spec = StageSpec(layer, stage)
        T, width = values.shape
        shape = spec.shape(self.model, width)
        arr = values.reshape(T, *shape)
        positions = np.arange(pos0, pos0 + T)
        for cache, ss in self.caches:
            if spec in ss:
                cache._add(spec.name, arr, positions)
        for fn in self.hooks.get(spec, ()):
            try:
                out = fn(arr, positions)
            except Exception as e:
                raise HookError(f"the hook at {spec.name} raised {type(e).__name__}: {e}") from e
            if out is not None:
                out = np.asarray(out, dtype=np.float32)
                if out.shape != arr.shape:
                    raise HookError(f"the hook at {spec.name} returned shape {out.shape}, the stage is {arr.shape} "
                                    f"([T, *{shape}])")
                arr[...] = out

    # -- public pieces, used by Model
    @contextlib.contextmanager
    def hooked(self, hooks: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
        added = []
        for name, fn in hooks.items():
            if not callable(fn):
                raise TypeError(f"the hook for {name!r} is not callable")
            spec = select(self.model, [name])[0]
            added.append((spec, fn))
        for spec, fn in added:
            self.hooks.setdefault(spec, []).append(fn)
        self.changed()
        try:
            yield
        finally:
            for spec, fn in added:
                fns = self.hooks.get(spec, [])
                if fn in fns:
                    fns.remove(fn)
                if not fns:
                    self.hooks.pop(spec, None)
            self.changed()

    @contextlib.contextmanager
    def collecting(self, names: Any) -> Iterator[ActivationCache]:
        specs = select(self.model, names)
        cache = ActivationCache(s.name for s in specs)
        entry = (cache, specs)
        self.caches.append(entry)
        self.changed()
        try:
            yield cache
        finally:
            self.caches.remove(entry)
            self.changed()

    def set_patch(self, name: str, values: Any, positions: Any = None) -> None:
        spec = select(self.model, [name])[0]
        vals = np.asarray(values, dtype=np.float32)
        if vals.ndim == 0:
            raise ValueError(f"patch of {name}: values must be [positions, *stage shape], got a scalar")
        pos = np.arange(vals.shape[0]) if positions is None else np.asarray(positions).reshape(-1)
        if pos.dtype.kind not in "iu":
            raise TypeError(f"patch of {name}: positions must be integers")
        if spec.stage != "attn_probs":
            shape = spec.shape(self.model)
            if vals.shape[1:] != shape and vals.reshape(len(vals), -1).shape[1] != int(np.prod(shape)):
                raise ValueError(f"patch of {name}: values are {vals.shape}, the stage needs [{len(pos)}, *{shape}]")
        if vals.shape[0] != len(pos):
            raise ValueError(f"patch of {name}: {vals.shape[0]} rows of values for {len(pos)} positions")
        if not np.all(np.isfinite(vals)):
            raise ValueError(f"patch of {name}: values must be finite")
        self.patches[spec] = (pos.astype(np.int32), np.ascontiguousarray(vals.reshape(len(pos), -1)))
        self.changed()

    def clear_patches(self) -> None:
        self.patches.clear()
        self.changed()


def save_state(model: "Model") -> ModelState:
    pipe = model.pipeline
    kv: list[tuple[np.ndarray, np.ndarray] | None] = []
    shapes = []
    for i, l in enumerate(model.layers):
        src = int(l.kv_shared_from)
        shapes.append((src, int(l.num_kv_heads), int(l.head_dim)))
        if src >= 0:
            kv.append(None)
            continue
        k, v = pipe.kv_cache(i)
        kv.append((k.copy(), v.copy()))
        del k, v
    return ModelState(int(pipe.n_past), kv, shapes)


def load_state(model: "Model", state: ModelState) -> None:
    if not isinstance(state, ModelState):
        raise TypeError(f"load_state takes a ModelState (from save_state), got {type(state).__name__}")
    shapes = [(int(l.kv_shared_from), int(l.num_kv_heads), int(l.head_dim)) for l in model.layers]
    if shapes != state.shapes:
        raise ValueError("the state was saved from layers of other K/V shapes (kv_shared_from, num_kv_heads, head_dim)")
    if state.n_past > model.max_seq:
        raise ValueError(f"the state holds {state.n_past} tokens, the model's cache {model.max_seq}")
    model.reset()
    pipe = model.pipeline
    pipe.set_n_past(state.n_past)
    for i, e in enumerate(state.kv):
        if e is None:
            continue
        k, v = pipe.kv_cache(i)
        k[...] = e[0]
        v[...] = e[1]
        del k, v
