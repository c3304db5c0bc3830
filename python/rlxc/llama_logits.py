"""llama.cpp's log-probability files, read and written: the ``--kl-divergence-base`` files of
``llama-perplexity``, so that rlxc and llama.cpp compare on the same tokens in either direction.

Layout (little-endian): ``b"_logits_"``, int32 ``n_ctx``, int32 ``n_vocab``, int32 ``n_chunk``,
int32 ``tokens[n_chunk * n_ctx]`` (the text as tokenized; a window's first token becomes BOS only
when it runs), then for each window ``n_ctx - 1 - n_ctx // 2`` rows (the scored second half) of
``nv = 2 * ((n_vocab + 1) // 2) + 4`` uint16: two float32 ``scale, min_log_prob`` in the first
four, then for every vocabulary entry ``q`` with ``log p ~= scale * q + min_log_prob``; ``q``
spans the 16 nats below the largest logit, anything lower is stored as ``q = 0``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .evaluate import (Divergence, Perplexity, _check_batch, _KLStats, _log_softmax_rows, _logit_rows,
                       _progress_bar, _result, _token_ids, _window, _windows, log_softmax, window_bos,
                       window_count)

MAGIC = b"_logits_"
#: llama-perplexity leaves base log-probabilities at or below this out of the KL sum.
KL_CUTOFF = -16.0


def row_len(n_vocab: int) -> int:
    """uint16 entries per stored row."""
    return 2 * ((n_vocab + 1) // 2) + 4


def pack_logprobs(logits: np.ndarray) -> np.ndarray:
    """Rows of logits [n, vocab] as the file stores them, uint16 [n, row_len(vocab)], with
    llama.cpp's float32 arithmetic."""
    x = np.asarray(logits, dtype=np.float32)
    n, vocab = x.shape
    mx = x.max(axis=1)
    mn = np.maximum(x.min(axis=1), mx - np.float32(16))
    lse = np.log(np.exp(x - mx[:, None]).astype(np.float64).sum(axis=1)).astype(np.float32)
    header = np.stack([(mx - mn) / np.float32(65535), (mn - mx) - lse], axis=1).astype(np.float32)
    scale = header[:, 0]
    inv = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    q = np.where(x > mn[:, None], np.rint(inv[:, None] * (x - mn[:, None])), 0)
    out = np.zeros((n, row_len(vocab)), dtype=np.uint16)
    out[:, :4] = header.view(np.uint16)
    out[:, 4:4 + vocab] = np.clip(q, 0, 65535).astype(np.uint16)
    return out


def unpack_logprobs(rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """Stored rows back to log-probabilities, float64 [n, n_vocab]."""
    r = np.ascontiguousarray(rows)
    header = r[:, :4].copy().view(np.float32)
    lp = header[:, :1] * r[:, 4:4 + n_vocab].astype(np.float32) + header[:, 1:2]
    return lp.astype(np.float64)


@dataclass
class LogitsFile:
    """A llama-perplexity log-probability file, memory-mapped."""

    path: str
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray   #: int32 [n_chunk * n_ctx], as tokenized
    rows: np.ndarray     #: uint16 [n_chunk, n_ctx - 1 - n_ctx // 2, row_len(n_vocab)]

    def logprobs(self, window: int) -> np.ndarray:
        """float64 [n_ctx - 1 - n_ctx // 2, n_vocab]: the stored log-probabilities of a window."""
        return unpack_logprobs(self.rows[window], self.n_vocab)

    def __repr__(self) -> str:
        return (f"LogitsFile({self.path!r}: {self.n_chunk} windows of {self.n_ctx} tokens, "
                f"vocabulary {self.n_vocab})")


def read_logits_file(path: str | os.PathLike[str]) -> LogitsFile:
    """Open a ``llama-perplexity --kl-divergence-base`` file (or one :func:`save_logits` wrote).
    Raises ValueError when it is not one or is cut short."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:8] != MAGIC:
        raise ValueError(f"{path} is not a llama-perplexity log-probability file (no '_logits_' header)")
    n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(head, dtype="<i4", offset=8))
    if n_ctx < 4 or n_vocab < 1 or n_chunk < 1:
        raise ValueError(f"{path}: bad header (n_ctx={n_ctx}, n_vocab={n_vocab}, n_chunk={n_chunk})")
    scored = n_ctx - 1 - n_ctx // 2
    tok_bytes = 4 * n_chunk * n_ctx
    need = 20 + tok_bytes + 2 * n_chunk * scored * row_len(n_vocab)
    if size < need:
        raise ValueError(f"{path} is cut short: {n_chunk} windows of {n_ctx} tokens over {n_vocab} need "
                         f"{need} bytes, the file has {size}")
    tokens = np.memmap(path, dtype="<i4", mode="r", offset=20, shape=(n_chunk * n_ctx,))
    rows = np.memmap(path, dtype="<u2", mode="r", offset=20 + tok_bytes, shape=(n_chunk, scored, row_len(n_vocab)))
    return LogitsFile(path, n_ctx, n_vocab, n_chunk, np.asarray(tokens), np.asarray(rows))


def save_logits(model: Any, text: str | Sequence[int] | np.ndarray, path: str | os.PathLike[str], ctx: int = 512, *,
                windows: int | None = None, batch: int | None = None,
                progress: Callable[[int], Any] | bool = False) -> Perplexity:
    """:func:`rlxc.evaluate.perplexity` that also writes every scored token's distribution to
    ``path`` in llama-perplexity's format (what its ``--kl-divergence-base FILE`` writes):
    ``llama-perplexity --kl-divergence --kl-divergence-base FILE`` or :func:`kl_divergence_file`
    then measure another model or engine against it."""
    batch = _check_batch(batch)
    ids, n, bos = _windows(model, text, ctx, windows)
    first = ctx // 2
    bar = _progress_bar(progress, n)
    nll = []
    t0 = time.perf_counter()
    tmp = os.fspath(path) + ".part"
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            f.write(np.asarray([ctx, model.vocab_size, n], dtype="<i4").tobytes())
            f.write(np.asarray(ids[:n * ctx], dtype="<i4").tobytes())
            for w in range(n):
                window = _window(ids, w, ctx, bos)
                out = []
                for a, b, logits in _logit_rows(model, window, first, batch):
                    f.write(pack_logprobs(logits).astype("<u2").tobytes())
                    out.append(-log_softmax(logits)[np.arange(b - a), window[a + 1:b + 1]])
                nll.append(np.concatenate(out))
                if bar is not None:
                    bar.update(1)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        if bar is not None and progress is True:
            bar.close()
    return _result(nll, n, int(ctx), time.perf_counter() - t0)


def kl_divergence_file(model: Any, path: str | os.PathLike[str], *, windows: int | None = None,
                       batch: int | None = None, progress: Callable[[int], Any] | bool = False) -> Divergence:
    """KL(base || model) against the distributions stored in a llama-perplexity log-probability
    file (``llama-perplexity --kl-divergence-base FILE`` of llama.cpp, or :func:`save_logits`),
    on the file's own tokens and windows, with llama-perplexity's conventions: each window's
    first token becomes BOS where the model's tokenizer adds one, base log-probabilities at or
    below -16 add nothing to the KL sum; perplexities and top-1 agreement as in
    :func:`rlxc.evaluate.kl_divergence` (no per-layer drift: the file holds logits only). The
    file floors each log-probability at 16 nats under the row's top, so a base perplexity read
    from it is low where next tokens often fall further (far-off models)."""
    batch = _check_batch(batch)
    f = read_logits_file(path)
    if f.n_vocab != model.vocab_size:
        raise ValueError(f"the vocabularies differ: {f.path} has {f.n_vocab} tokens, the model {model.vocab_size}")
    if f.n_ctx > model.max_seq:
        raise ValueError(f"{f.path} has windows of {f.n_ctx} tokens: more than the model's max_seq={model.max_seq}")
    n = window_count(windows, f.n_chunk)
    ids = _token_ids(model, f.tokens, f"the tokens of {f.path}")
    bos, ctx, first = window_bos(model), f.n_ctx, f.n_ctx // 2
    stats = _KLStats(cutoff=KL_CUTOFF)
    bar = _progress_bar(progress, n)
    t0 = time.perf_counter()
    try:
        for w in range(n):
            window = _window(ids, w, ctx, bos)
            base = f.logprobs(w)
            for a, b, lp in _log_softmax_rows(model, window, first, batch):
                stats.add(base[a - first:b - first], lp, window[a + 1:b + 1])
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None and progress is True:
            bar.close()
    return stats.result(n, ctx, time.perf_counter() - t0, [])


__all__ = ["KL_CUTOFF", "LogitsFile", "kl_divergence_file", "pack_logprobs", "read_logits_file", "row_len",
           "save_logits", "unpack_logprobs"]
