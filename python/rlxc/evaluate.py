"""Measuring a model over text: per-token log-probabilities and perplexity.

:func:`perplexity` follows llama.cpp's ``llama-perplexity`` so that the two numbers compare:
the whole text is tokenized once (with the tokenizer's BOS), cut into non-overlapping windows
of ``ctx`` tokens (the tail that does not fill a window is dropped), each window's first token
replaced by BOS where the tokenizer adds one, the window run from an empty cache, and only its
second half scored: the log-probability of token ``i + 1`` given tokens ``0..i`` for
``ctx // 2 <= i < ctx - 1``. Perplexity is exp of the mean negative log-likelihood over every
scored token; log-softmax is taken in float64.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, cast

import numpy as np

#: Rows of logits asked from the engine at once (a Gemma vocabulary of 262144 makes 64 rows 64 MiB).
LOGIT_ROWS = 64


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax of each row of logits [n, vocab], in float64."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    return cast(np.ndarray, x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True))))


def log_softmax_at(logits: np.ndarray, targets: Sequence[int] | np.ndarray) -> np.ndarray:
    """log softmax(logits[i])[targets[i]] for each row, in float64."""
    x = np.asarray(logits)
    t = np.asarray(targets, dtype=np.int64)
    if x.ndim != 2 or t.shape != (x.shape[0],):
        raise ValueError(f"logits must be [n, vocab] and targets [n], got {x.shape} and {t.shape}")
    return log_softmax(x)[np.arange(len(t)), t]


def _token_ids(model: Any, ids: Any, what: str) -> np.ndarray:
    a = np.asarray(ids)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D sequence of token ids, got shape {a.shape} dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= model.vocab_size):
        raise ValueError(f"{what} must be in [0, {model.vocab_size}), got ids {int(a.min())}..{int(a.max())}")
    return a.astype(np.int64)


def _check_batch(batch: Any) -> int | None:
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be an int >= 1 (tokens per engine call), got {batch!r}")
    return int(batch)


def _prefill_in(model: Any, ids: np.ndarray, batch: int | None) -> None:
    """Prefill ids with no logits, at most ``batch`` tokens per engine call."""
    step = batch or max(len(ids), 1)
    for a in range(0, len(ids), step):
        model.prefill(ids[a:a + step], logits="none")


def _logit_rows(model: Any, ids: np.ndarray, first: int, batch: int | None,
                rows: int = LOGIT_ROWS) -> Iterator[tuple[int, int, np.ndarray]]:
    """From an empty cache: yields (a, b, the logits after ids[a:b], float32 [b - a, vocab]) for
    first <= a < b <= len(ids) - 1, covering every position from first on (``rows`` at a time,
    fewer when ``batch`` is smaller)."""
    n = len(ids)
    model.reset()
    _prefill_in(model, ids[:first], batch)
    step = min(rows, batch or rows)
    for a in range(first, n - 1, step):
        b = min(a + step, n - 1)
        yield a, b, np.asarray(model.prefill(ids[a:b], logits="all")).reshape(b - a, -1)


def _log_softmax_rows(model: Any, ids: np.ndarray, first: int, batch: int | None,
                      rows: int = LOGIT_ROWS) -> Iterator[tuple[int, int, np.ndarray]]:
    """:func:`_logit_rows` with each row's log softmax (float64)."""
    for a, b, x in _logit_rows(model, ids, first, batch, rows):
        yield a, b, log_softmax(x)


def score_from(model: Any, ids: np.ndarray, first: int, batch: int | None = None) -> np.ndarray:
    """From an empty cache: log p(ids[i + 1] | ids[:i + 1]) for first <= i < len(ids) - 1, at most
    ``batch`` tokens per engine call (None: the first ``first`` at once)."""
    out = [lp[np.arange(b - a), ids[a + 1:b + 1]] for a, b, lp in _log_softmax_rows(model, ids, first, batch)]
    return np.concatenate(out) if out else np.zeros(0)


def _scorable(model: Any, ids: Any, what: str) -> np.ndarray:
    a = _token_ids(model, ids, what)
    if len(a) < 2:
        raise ValueError(f"{what} needs at least 2 token ids, got {len(a)}")
    if len(a) - 1 > model.max_seq:
        raise ValueError(f"{what}: {len(a)} ids do not fit in max_seq={model.max_seq}")
    return a


def logprobs(model: Any, ids: Any) -> np.ndarray:
    """log p(ids[i + 1] | ids[:i + 1]) for every i < len(ids) - 1 (float64), from an empty cache
    (the model's cache holds ``ids[:-1]`` afterwards)."""
    return score_from(model, _scorable(model, ids, "logprobs"), 0)


@dataclass
class Perplexity:
    """The result of :func:`perplexity`."""

    ppl: float          #: exp(mean negative log-likelihood)
    nll: float          #: mean negative log-likelihood (nats per token)
    stderr: float       #: standard error of ``nll`` (as llama-perplexity's "+/-" is of the mean)
    tokens: int         #: tokens scored
    windows: int        #: windows run
    ctx: int            #: tokens per window
    seconds: float      #: wall time of the windows
    per_window: list[float] = field(default_factory=list)  #: each window's mean NLL

    @property
    def ppl_stderr(self) -> float:
        """The perplexity's standard error (llama-perplexity's ``+/-``): ppl * stderr(nll)."""
        return self.ppl * self.stderr

    @property
    def tokens_per_s(self) -> float:
        """Tokens run (windows x ctx) per second."""
        return self.windows * self.ctx / self.seconds if self.seconds > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {"ppl": self.ppl, "ppl_stderr": self.ppl_stderr, "nll": self.nll, "nll_stderr": self.stderr,
                "tokens": self.tokens, "windows": self.windows, "ctx": self.ctx, "seconds": self.seconds,
                "tokens_per_s": self.tokens_per_s, "per_window_nll": self.per_window}

    def __repr__(self) -> str:
        return (f"Perplexity(ppl={self.ppl:.4f} +/- {self.ppl_stderr:.4f}, {self.tokens} tokens scored in "
                f"{self.windows} windows of {self.ctx}, {self.tokens_per_s:.1f} tokens/s)")


def _windows(model: Any, text: Any, ctx: Any, windows: int | None) -> tuple[np.ndarray, int, int | None]:
    """The text's token ids, how many windows of ctx to run, and the BOS id a window starts with."""
    if isinstance(ctx, bool) or not isinstance(ctx, (int, np.integer)) or ctx < 4:
        raise ValueError(f"ctx must be an int >= 4, got {ctx!r}")
    if ctx > model.max_seq:
        raise ValueError(f"ctx={ctx} exceeds the model's max_seq={model.max_seq}")
    if isinstance(text, str):
        if not text:
            raise ValueError("the text is empty")
        if model.tokenizer is None:
            raise ValueError("a text needs model.tokenizer (or pass token ids)")
        ids = np.asarray(model.tokenizer.encode(text), dtype=np.int64)
    else:
        if np.size(text) == 0:
            raise ValueError("the text is empty")
        ids = _token_ids(model, text, "text ids")
    if len(ids) < 2 * ctx:
        raise ValueError(f"the text has {len(ids)} tokens: perplexity with ctx={ctx} needs at least {2 * ctx} "
                         f"(two windows)")
    return ids, window_count(windows, len(ids) // int(ctx)), window_bos(model)


def window_count(windows: int | None, available: int) -> int:
    """How many of ``available`` windows to run: all, or at most ``windows`` (>= 1)."""
    if windows is None:
        return available
    if isinstance(windows, bool) or int(windows) < 1:
        raise ValueError(f"windows must be >= 1, got {windows!r}")
    return min(int(windows), available)


def window_bos(model: Any) -> int | None:
    """The BOS id each window starts with: the tokenizer's, where it adds one."""
    tok = model.tokenizer
    return int(tok.bos_id) if tok is not None and getattr(tok, "add_bos", False) and tok.bos_id is not None else None


def _window(ids: np.ndarray, w: int, ctx: int, bos: int | None) -> np.ndarray:
    window = ids[w * ctx:(w + 1) * ctx].copy()
    if bos is not None:
        window[0] = bos
    return window


def _progress_bar(progress: Any, n: int) -> Any:
    if progress is True:
        from tqdm import tqdm

        return tqdm(total=n, desc="perplexity", unit="window", leave=False)
    return progress(n) if callable(progress) else None


def perplexity(model: Any, text: str | Sequence[int] | np.ndarray, ctx: int = 512, *, windows: int | None = None,
               batch: int | None = None, progress: Callable[[int], Any] | bool = False) -> Perplexity:
    """Perplexity of ``text`` (a string, tokenized with the model's tokenizer, or token ids)
    with llama-perplexity's conventions (module docstring). ``windows`` caps the number of
    windows; ``batch`` caps the tokens per engine call (llama-perplexity's ``-b``: it changes
    the numbers only through float rounding, as the kernels follow a call's token count; with
    8-bit activations a sensitive model amplifies that, e.g. Gemma 3 270M's logits move by up
    to ~1); ``progress`` True shows a tqdm bar (or pass a callable taking the window count and
    returning a bar with ``update()``).

    Raises ValueError for an empty text, one shorter than two windows (llama-perplexity's
    minimum), ``ctx`` < 4 or beyond ``model.max_seq``, ``batch`` < 1."""
    batch = _check_batch(batch)
    ids, n, bos = _windows(model, text, ctx, windows)
    bar = _progress_bar(progress, n)
    first = ctx // 2
    nll: list[np.ndarray] = []
    t0 = time.perf_counter()
    try:
        for w in range(n):
            nll.append(-score_from(model, _window(ids, w, ctx, bos), first, batch))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and progress is True:
            bar.close()
    return _result(nll, n, int(ctx), time.perf_counter() - t0)


def _result(nll: list[np.ndarray], windows: int, ctx: int, seconds: float) -> Perplexity:
    """Perplexity from each window's per-token negative log-likelihoods, in window order."""
    allv = np.concatenate(nll)
    mean = float(allv.mean())
    sd = float(math.sqrt(max(float((allv ** 2).mean()) - mean * mean, 0.0) / (len(allv) - 1)))
    return Perplexity(ppl=math.exp(mean), nll=mean, stderr=sd, tokens=len(allv), windows=windows, ctx=ctx,
                      seconds=seconds, per_window=[float(v.mean()) for v in nll])


def _score_windows(path: str, load: dict[str, Any], windows: list[np.ndarray], first: int,
                   batch: int | None) -> list[np.ndarray]:
    """A Ray task: load the model (memory-mapped) and score its windows."""
    from . import loaders

    m = loaders.load(path, **load)
    return [-score_from(m, w, first, batch) for w in windows]


def perplexity_ray(path: str, text: str | Sequence[int] | np.ndarray, ctx: int = 512, *, address: str | None = None,
                   workers: int | None = None, windows: int | None = None, batch: int | None = None,
                   **load: Any) -> Perplexity:
    """:func:`perplexity` with the windows shared over a Ray cluster (``pip install 'rlxc[ray]'``).

    ``path`` (a GGUF file or HF folder) must be readable at that path on every node: each task
    loads it with ``rlxc.load(path, **load)`` (memory-mapped, ``max_seq=ctx`` unless given) and
    scores a contiguous share of the windows; the shares come back in window order, so the
    numbers are those of one machine (the engine's results do not depend on its thread count).
    ``address``: the cluster's (``ray.init(address=...)``; None starts or joins a local one
    unless Ray is already initialized); ``workers``: how many tasks (default: the cluster's
    CPUs, at most one per window)."""
    import ray

    from . import loaders

    batch = _check_batch(batch)
    load = {"max_seq": ctx, **load}
    local = loaders.load(path, **load)  # the tokenizer and the checks, here
    ids, n, bos = _windows(local, text, ctx, windows)
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    if workers is None:
        workers = int(getattr(ray, "cluster_resources")().get("CPU", 1))  # untyped in Ray
    workers = max(1, min(int(workers), n))
    wins = [_window(ids, w, ctx, bos) for w in range(n)]
    task = ray.remote(num_cpus=1)(_score_windows)
    cuts = np.linspace(0, n, workers + 1).astype(int)
    t0 = time.perf_counter()
    futures = [task.remote(path, load, wins[a:b], ctx // 2, batch) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    nll = [v for part in ray.get(futures) for v in part]
    return _result(nll, n, int(ctx), time.perf_counter() - t0)


@dataclass
class Divergence:
    """The result of :func:`kl_divergence`: how far ``other``'s next-token distributions are
    from ``base``'s over the scored tokens, and where in the layers the two runs part."""

    kl: float                 #: mean KL(base || other), nats per token
    kl_stderr: float          #: its standard error
    kl_quantiles: dict[str, float]  #: "median", "p90", "p99", "max" of the per-token KL
    top1: float               #: fraction of scored tokens where both pick the same most likely token
    ppl_base: float
    ppl_other: float
    tokens: int
    windows: int
    ctx: int
    seconds: float
    #: per layer: "rel_err" = ||other - base|| / ||base|| of its output residual over every
    #: position run, "cosine" = the mean over positions of their cosine similarity
    drift: list[dict[str, float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kl": self.kl, "kl_stderr": self.kl_stderr, **{f"kl_{k}": v for k, v in self.kl_quantiles.items()},
                "top1": self.top1, "ppl_base": self.ppl_base, "ppl_other": self.ppl_other, "tokens": self.tokens,
                "windows": self.windows, "ctx": self.ctx, "seconds": self.seconds, "drift": self.drift}

    def table(self) -> str:
        """The per-layer drift as text, one row per layer."""
        rows = [f"{'layer':>5} {'rel_err':>10} {'cosine':>10}"]
        rows += [f"{d['layer']:>5} {d['rel_err']:>10.3e} {d['cosine']:>10.6f}" for d in self.drift]
        return "\n".join(rows)

    def plot(self, ax: Any = None) -> Any:
        """The per-layer relative error on a log axis (matplotlib)."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(7, 3))[1]
        ax.semilogy([d["layer"] for d in self.drift], [d["rel_err"] for d in self.drift], "o-")
        ax.set_xlabel("layer")
        ax.set_ylabel("residual rel. error vs base")
        ax.set_title(f"KL {self.kl:.4g} nats/token, top-1 agreement {100 * self.top1:.2f} %")
        return ax

    def __repr__(self) -> str:
        q = self.kl_quantiles
        return (f"Divergence(kl={self.kl:.6f} +/- {self.kl_stderr:.6f} (median {q['median']:.3g}, p99 {q['p99']:.3g}, "
                f"max {q['max']:.3g}), top1={100 * self.top1:.2f} %, ppl {self.ppl_base:.4f} -> {self.ppl_other:.4f}, "
                f"{self.tokens} tokens)")


class _KLStats:
    """Per-token sums of a comparison of two next-token distributions, in window order."""

    def __init__(self, cutoff: float | None = None) -> None:
        self.cutoff = cutoff  # base log-probabilities at or below it add nothing (llama-perplexity: -16)
        self.kl: list[np.ndarray] = []
        self.nll_base: list[np.ndarray] = []
        self.nll_other: list[np.ndarray] = []
        self.agree: list[np.ndarray] = []

    def add(self, base: np.ndarray, other: np.ndarray, targets: np.ndarray) -> None:
        """Rows of log-probabilities [n, vocab] of both and the n tokens that came next."""
        terms = np.exp(base) * (base - other)
        if self.cutoff is not None:
            terms = np.where(base > self.cutoff, terms, 0.0)
        self.kl.append(terms.sum(axis=1))
        t = np.arange(len(targets)), targets
        self.nll_base.append(-base[t])
        self.nll_other.append(-other[t])
        self.agree.append(base.argmax(axis=1) == other.argmax(axis=1))

    def result(self, windows: int, ctx: int, seconds: float, drift: list[dict[str, float]]) -> Divergence:
        kl = np.concatenate(self.kl)
        q = np.quantile(kl, [0.5, 0.9, 0.99])
        return Divergence(
            kl=float(kl.mean()), kl_stderr=float(kl.std(ddof=1) / math.sqrt(len(kl))),
            kl_quantiles={"median": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "max": float(kl.max())},
            top1=float(np.concatenate(self.agree).mean()),
            ppl_base=math.exp(float(np.concatenate(self.nll_base).mean())),
            ppl_other=math.exp(float(np.concatenate(self.nll_other).mean())), tokens=len(kl), windows=windows,
            ctx=int(ctx), seconds=seconds, drift=drift)


class _Drift:
    """Per layer, the residual stream of one run against another's over every position."""

    def __init__(self, layers: int) -> None:
        self.sq_diff = np.zeros(layers)
        self.sq_base = np.zeros(layers)
        self.cos_sum = np.zeros(layers)
        self.positions = 0
        self.names = [f"layers.{i}.resid_post" for i in range(layers)]

    def add(self, base: Any, other: Any) -> None:
        """The two runs' collected stages over the same positions."""
        for i, name in enumerate(self.names):
            xa, xb = np.asarray(base[name], np.float64), np.asarray(other[name], np.float64)
            xa, xb = xa.reshape(len(xa), -1), xb.reshape(len(xb), -1)
            self.sq_diff[i] += float(np.sum((xb - xa) ** 2))
            self.sq_base[i] += float(np.sum(xa ** 2))
            den = np.linalg.norm(xa, axis=1) * np.linalg.norm(xb, axis=1)
            self.cos_sum[i] += float(np.sum(np.sum(xa * xb, axis=1) / np.where(den > 0, den, 1.0)))
        self.positions += len(np.asarray(base[self.names[0]])) if self.names else 0

    def rows(self) -> list[dict[str, float]]:
        return [{"layer": i, "rel_err": float(np.sqrt(self.sq_diff[i] / self.sq_base[i])) if self.sq_base[i] else 0.0,
                 "cosine": float(self.cos_sum[i] / self.positions) if self.positions else 0.0}
                for i in range(len(self.names))]


def kl_divergence(base: Any, other: Any, text: str | Sequence[int] | np.ndarray, ctx: int = 512, *,
                  windows: int | None = None, drift: bool = True, batch: int | None = None,
                  progress: Callable[[int], Any] | bool = False) -> Divergence:
    """KL(base || other) of the next-token distributions over the tokens :func:`perplexity`
    scores (same windows, text tokenized with ``base``'s tokenizer), top-1 agreement, both
    perplexities, and with ``drift`` each layer's output residual of ``other`` against
    ``base`` over every position run (models with the same layer count and width). ``other``
    must be another model object: ``base.fork()`` gives the same weights under other settings
    (``activations``, ``kv_type``); ``base`` may be a transformers model
    (:class:`rlxc.hf_reference.HFReference`)."""
    if other is base:
        raise ValueError("kl_divergence needs two model objects: use base.fork() for the same weights")
    if base.vocab_size != other.vocab_size:
        raise ValueError(f"the models' vocabularies differ: {base.vocab_size} vs {other.vocab_size} tokens")
    if ctx > getattr(other, "max_seq", ctx):
        raise ValueError(f"ctx={ctx} exceeds the other model's max_seq={other.max_seq}")
    batch = _check_batch(batch)
    ids, n, bos = _windows(base, text, ctx, windows)
    layers = len(base.layers)
    if drift and (len(other.layers) != layers or
                  any(int(a.hidden_size) != int(b.hidden_size) for a, b in zip(base.layers, other.layers))):
        drift = False
    res = _Drift(layers if drift else 0)
    stats = _KLStats()
    bar = _progress_bar(progress, n)
    first, rows = ctx // 2, LOGIT_ROWS // 2
    t0 = time.perf_counter()
    try:
        for w in range(n):
            window = _window(ids, w, ctx, bos)
            collect = (lambda m: m.collect(res.names)) if drift else (lambda m: contextlib.nullcontext({}))
            with collect(base) as ca, collect(other) as cb:
                for (a, b, la), (_, _, lb) in zip(_log_softmax_rows(base, window, first, batch, rows),
                                                  _log_softmax_rows(other, window, first, batch, rows)):
                    stats.add(la, lb, window[a + 1:b + 1])
            if drift:
                res.add(ca, cb)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and progress is True:
            bar.close()
    return stats.result(n, int(ctx), time.perf_counter() - t0, res.rows() if drift else [])


def score(model: Any, inputs: Sequence[Any], batch: int | None = None) -> list[np.ndarray]:
    """For each input (a text, tokenized with the model's tokenizer and its BOS, or a list of
    token ids), from an empty cache: log p(ids[i + 1] | ids[:i + 1]) for every i, float64."""
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TypeError("score takes a list of texts or of token-id lists")
    batch = _check_batch(batch)
    out = []
    for k, x in enumerate(inputs):
        if isinstance(x, str):
            if model.tokenizer is None:
                raise ValueError("texts need model.tokenizer (or pass token ids)")
            x = model.tokenizer.encode(x)
        out.append(score_from(model, _scorable(model, x, f"inputs[{k}]"), 0, batch))
    return out
