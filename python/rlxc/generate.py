"""Text generation on an :class:`rlxc.Model`: greedy or sampled decoding, streaming, stop strings.

``model.generate(prompt, max_new_tokens, temperature=0, ...)`` is :func:`generate`;
:func:`generate_ids` is the token-level loop underneath (an iterator of new ids).

Sampling (``temperature > 0``) applies, in this order: repetition penalty (over the prompt and
the tokens generated so far: a positive logit is divided by the penalty, a negative one
multiplied, as in transformers and llama.cpp), temperature, top-k, top-p (nucleus, keeping the
smallest set whose probability reaches ``top_p``), min-p (dropping tokens whose probability is
below ``min_p`` times the best one), then one draw from ``numpy.random.default_rng(seed)``.
``temperature == 0`` is greedy (argmax after the repetition penalty; ties: the lowest id).
The prompt is prefilled with ``logits="last"`` so no ``[T, vocab]`` logits are computed.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["generate", "generate_ids", "sample", "SamplingParams"]


class SamplingParams:
    """The sampling settings of one generation (see the module docstring)."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, seed: int | None = None) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if not 0 <= min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {min_p}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
        self.temperature, self.top_k, self.top_p, self.min_p = float(temperature), int(top_k), float(top_p), float(min_p)
        self.repetition_penalty = float(repetition_penalty)
        self.rng = np.random.default_rng(seed)


def sample(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = ()) -> int:
    """One token id from ``logits`` [vocab] under ``params`` (``history``: ids for the penalty)."""
    z = np.asarray(logits, dtype=np.float64).copy()
    if params.repetition_penalty != 1.0 and len(history):
        seen = np.unique(np.asarray(history, dtype=np.int64))
        seen = seen[(seen >= 0) & (seen < z.size)]
        v = z[seen]
        z[seen] = np.where(v > 0, v / params.repetition_penalty, v * params.repetition_penalty)
    if params.temperature == 0.0:
        return int(np.argmax(z))
    z = z / params.temperature
    if params.top_k and params.top_k < z.size:
        kth = np.partition(z, -params.top_k)[-params.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z = z - np.max(z)
    p = np.exp(z)
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        c = np.cumsum(p[order])
        keep = order[: int(np.searchsorted(c, params.top_p) + 1)]
        mask = np.zeros_like(p, dtype=bool)
        mask[keep] = True
        p = np.where(mask, p, 0.0)
    if params.min_p > 0.0:
        p = np.where(p >= params.min_p * p.max(), p, 0.0)
    p /= p.sum()
    return int(params.rng.choice(p.size, p=p))


def _prompt_ids(model: Any, prompt: Any, add_special: bool | None) -> tuple[list[int], bool]:
    """(ids, prompt_was_text)."""
    if isinstance(prompt, str):
        tok = model.tokenizer
        if tok is None:
            raise ValueError("a text prompt needs model.tokenizer (or pass token ids)")
        # special tokens written in the prompt (e.g. "<start_of_turn>") are parsed, as llama.cpp's
        # tools and transformers' tokenizers do
        return tok.encode(prompt, add_special=True if add_special is None else add_special, parse_special=True), True
    ids = np.asarray(prompt.detach().cpu().numpy() if hasattr(prompt, "detach") else prompt).reshape(-1)
    if ids.size == 0:
        raise ValueError("empty prompt")
    return [int(i) for i in ids], False


def generate_ids(model: Any, ids: Sequence[int], max_new_tokens: int, params: SamplingParams,
                 eog: Iterable[int] = (), reset: bool = True) -> Iterator[int]:
    """New token ids after prefilling ``ids`` (stops at an id in ``eog``, not yielded)."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    eog = frozenset(int(e) for e in eog)
    if reset:
        model.reset()
    history = list(ids)
    room = model.max_seq - model.n_past - len(history)
    if room < 0:
        raise ValueError(f"the prompt ({len(history)} tokens) does not fit in max_seq={model.max_seq} "
                         f"(n_past={model.n_past})")
    if max_new_tokens == 0:
        return
    logits = model.prefill(history, logits="last")
    for step in range(max_new_tokens):
        tid = sample(logits, params, history)
        if tid in eog:
            return
        yield tid
        history.append(tid)
        if step + 1 == max_new_tokens:
            return
        if model.n_past >= model.max_seq:
            return  # the cache is full
        logits = model.decode(tid)


def _stream(model: Any, ids: list[int], max_new_tokens: int, params: SamplingParams, stop: list[str],
            text: bool, reset: bool) -> Iterator[Any]:
    tok = model.tokenizer
    eog = tok.eog_ids if tok is not None else ()
    gen = generate_ids(model, ids, max_new_tokens, params, eog, reset)
    if not text:
        yield from gen
        return
    dec = tok.decoder()
    held = ""  # text not yet emitted because it could be the start of a stop string
    keep = max((len(s) for s in stop), default=0) - 1
    for tid in gen:
        held += dec.push(tid)
        if stop:
            cut = min((held.find(s) for s in stop if s in held), default=-1)
            if cut >= 0:
                if held[:cut]:
                    yield held[:cut]
                gen.close()
                return
            if keep > 0 and len(held) > keep:
                out, held = held[:-keep], held[-keep:]
                yield out
            elif keep <= 0 and held:
                yield held
                held = ""
        elif held:
            yield held
            held = ""
    held += dec.flush()
    if stop:
        cut = min((held.find(s) for s in stop if s in held), default=-1)
        if cut >= 0:
            held = held[:cut]
    if held:
        yield held


def generate(model: Any, prompt: Any, max_new_tokens: int = 128, *, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int | None = None,
             stop: Any = None, stream: bool = False, add_special: bool | None = None, reset: bool = True) -> Any:
    """See :meth:`rlxc.Model.generate`."""
    params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty, seed)
    ids, was_text = _prompt_ids(model, prompt, add_special)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if any(not isinstance(s, str) or not s for s in stops):
        raise ValueError("stop must be a non-empty string or a list of them")
    text = model.tokenizer is not None
    if stops and not text:
        raise ValueError("stop strings need model.tokenizer")
    it = _stream(model, ids, int(max_new_tokens), params, stops, text, reset)
    if stream:
        return it
    out = list(it)
    return "".join(out) if text else out
