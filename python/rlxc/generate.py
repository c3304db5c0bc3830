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

Every argument is checked when :func:`generate` / :func:`generate_ids` is called (also when
they return an iterator): a number that is NaN, infinite, subnormal or out of its range raises
ValueError; a float, str or bool where an integer is meant (token ids included: ``[1.9]``,
``["3"]``, ``[True]``, a float array) raises TypeError; a token id outside the vocabulary
raises ValueError. Logits containing NaN raise ValueError in :func:`sample`.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from .evaluate import log_softmax

__all__ = ["generate", "generate_ids", "sample", "SamplingParams", "checked_sampling", "token_ids", "TokenLogprob",
           "token_logprob", "Stream"]

_SEED_OBJECTS = (np.random.Generator, np.random.BitGenerator, np.random.SeedSequence)
_NORMAL_MIN = sys.float_info.min  # the smallest positive normal double


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _real(value: Any, name: str) -> float:
    """``value`` as a float; TypeError unless it is a real number (bool is not one here)."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large: {value!r}") from None


def _integer(value: Any, name: str) -> int:
    """``value`` as an int; TypeError unless it is an integer (int or a NumPy integer, not bool)."""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def _count(value: Any, name: str) -> int:
    n = _integer(value, name)
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _flag(value: Any, name: str) -> bool:
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _positive_normal(value: Any, name: str, zero_ok: bool) -> float:
    """A finite float >= the smallest normal double (or 0 when ``zero_ok``)."""
    v = _real(value, name)
    if v == 0.0 and zero_ok:
        return 0.0
    if not (np.isfinite(v) and v >= _NORMAL_MIN):
        low = "0 or a finite number" if zero_ok else "a finite number"
        raise ValueError(f"{name} must be {low} >= {_NORMAL_MIN!r}, got {v!r}")
    return v


def checked_sampling(temperature: Any = 0.0, top_k: Any = 0, top_p: Any = 1.0, min_p: Any = 0.0,
                     repetition_penalty: Any = 1.0, seed: Any = None,
                     names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The sampling arguments checked (see the module docstring) and converted: floats, an int
    ``top_k``, ``seed`` as given. ``names`` renames arguments in the error messages (the
    command line passes its option names)."""
    def nm(key: str) -> str:
        return (names or {}).get(key, key)

    out: dict[str, Any] = {
        "temperature": _positive_normal(temperature, nm("temperature"), zero_ok=True),
        "top_k": _count(top_k, nm("top_k")),
        "top_p": _real(top_p, nm("top_p")),
        "min_p": _real(min_p, nm("min_p")),
        "repetition_penalty": _positive_normal(repetition_penalty, nm("repetition_penalty"), zero_ok=False),
        "seed": seed,
    }
    if not 0 < out["top_p"] <= 1:
        raise ValueError(f"{nm('top_p')} must be in (0, 1], got {out['top_p']!r}")
    if not 0 <= out["min_p"] <= 1:
        raise ValueError(f"{nm('min_p')} must be in [0, 1], got {out['min_p']!r}")
    if seed is not None and not isinstance(seed, _SEED_OBJECTS):
        if _is_bool(seed) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"{nm('seed')} must be None, an integer >= 0 or a numpy.random.Generator, "
                            f"got {type(seed).__name__} {seed!r}")
        if seed < 0:
            raise ValueError(f"{nm('seed')} must be >= 0, got {int(seed)}")
    return out


class SamplingParams:
    """The sampling settings of one generation (see the module docstring); checked here."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, seed: Any = None) -> None:
        v = checked_sampling(temperature, top_k, top_p, min_p, repetition_penalty, seed)
        self.temperature: float = v["temperature"]
        self.top_k: int = v["top_k"]
        self.top_p: float = v["top_p"]
        self.min_p: float = v["min_p"]
        self.repetition_penalty: float = v["repetition_penalty"]
        self.rng = np.random.default_rng(seed)


def token_ids(value: Any, vocab_size: int, what: str = "token ids") -> np.ndarray:
    """``value`` (a sequence / array / torch tensor of ints, any shape) as a flat int64 array,
    each id in ``[0, vocab_size)``. TypeError for anything that is not integers (floats, bools,
    strings); ValueError when empty or out of range. ``what`` starts the messages."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if value is None or isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be integers, got {type(value).__name__}")
    # a list goes in as objects: NumPy would turn [1, True] into ints and [3, 2**63] into floats
    a = (value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{what} are empty")
    if a.dtype.kind == "O":
        for i, x in enumerate(a):
            if _is_bool(x) or not isinstance(x, numbers.Integral):
                raise TypeError(f"{what} must be integers, got {type(x).__name__} {x!r} at position {i}")
            if not 0 <= int(x) < vocab_size:
                raise ValueError(f"{what}: token id {int(x)} at position {i} is out of range [0, {vocab_size})")
    elif a.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got an array of {a.dtype} ({a[0]!r} first)")
    else:
        bad = np.flatnonzero((a < 0) | (a >= vocab_size))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{what}: token id {int(a[i])} at position {i} is out of range [0, {vocab_size})")
    return a.astype(np.int64)


def sample(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = ()) -> int:
    """One token id from ``logits`` [vocab] under ``params`` (``history``: ids for the penalty).
    ValueError when a logit is NaN or every one is -inf; +inf logits are the only candidates."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    z = np.array(logits, dtype=np.float64).reshape(-1)
    if z.size == 0:
        raise ValueError("the logits are empty")
    if np.isnan(z).any():
        raise ValueError(f"the logits contain NaN (at id {int(np.flatnonzero(np.isnan(z))[0])})")
    if params.repetition_penalty != 1.0 and len(history):
        seen = np.unique(np.asarray(history, dtype=np.int64))
        seen = seen[(seen >= 0) & (seen < z.size)]
        v = z[seen]
        with np.errstate(over="ignore", under="ignore"):
            z[seen] = np.where(v > 0, v / params.repetition_penalty, v * params.repetition_penalty)
    top = float(z.max())
    if top == -np.inf:
        raise ValueError("every logit is -inf: no token can be chosen")
    if params.temperature == 0.0:
        return int(np.argmax(z))
    if top == np.inf:  # the +inf logits, equally likely
        z = np.where(z == np.inf, 0.0, -np.inf)
    else:
        with np.errstate(over="ignore", under="ignore"):  # (z - top) <= 0: no inf - inf
            z = (z - top) / params.temperature
    if params.top_k and params.top_k < z.size:
        kth = np.partition(z, -params.top_k)[-params.top_k]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z)  # the best token has exp(0) = 1
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


def _prompt_ids(model: Any, prompt: Any, add_special: bool | None) -> list[int]:
    if isinstance(prompt, str):
        tok = model.tokenizer
        if tok is None:
            raise ValueError("a text prompt needs model.tokenizer (or pass token ids)")
        # special tokens written in the prompt (e.g. "<start_of_turn>") are parsed, as llama.cpp's
        # tools and transformers' tokenizers do
        prompt = tok.encode(prompt, add_special=True if add_special is None else add_special, parse_special=True)
        what = "the prompt's token ids (from model.tokenizer)"
    else:
        what = "prompt token ids"
    return [int(i) for i in token_ids(prompt, model.vocab_size, what)]


class TokenLogprob(NamedTuple):
    """A generated token's log-probability under the model (log softmax of its logits, before
    any sampling transform) and the ``k`` most likely tokens at that step with theirs."""

    id: int
    logprob: float
    top: list[tuple[int, float]]


def token_logprob(logits: np.ndarray, tid: int, k: int) -> TokenLogprob:
    """The TokenLogprob of choosing ``tid`` from ``logits`` (float64 log softmax)."""
    lp = log_softmax(np.asarray(logits).reshape(1, -1))[0]
    top = np.argpartition(-lp, k - 1)[:k] if 0 < k < len(lp) else np.arange(len(lp) if k > 0 else 0)
    top = top[np.argsort(-lp[top], kind="stable")]
    return TokenLogprob(int(tid), float(lp[tid]), [(int(i), float(lp[i])) for i in top])


def generate_ids(model: Any, ids: Sequence[int], max_new_tokens: int, params: SamplingParams,
                 eog: Iterable[int] = (), reset: bool = True, logprobs: int | None = None,
                 record: list[TokenLogprob] | None = None) -> Iterator[int]:
    """New token ids after prefilling ``ids`` (stops at an id in ``eog``, not yielded). The
    arguments are checked here; the cache is reset and prefilled at the first ``next()``.
    With ``logprobs`` = k >= 0, each yielded token's :class:`TokenLogprob` (with the top k) is
    appended to ``record`` as it is yielded."""
    n = _count(max_new_tokens, "max_new_tokens")
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    reset = _flag(reset, "reset")
    history = [int(i) for i in token_ids(ids, model.vocab_size, "prompt token ids")]
    stop_ids = frozenset(_integer(e, "eog ids") for e in eog)
    n_past = 0 if reset else model.n_past
    if model.max_seq - n_past - len(history) < 0:
        raise ValueError(f"the prompt ({len(history)} tokens) does not fit in max_seq={model.max_seq} "
                         f"(n_past={n_past})")
    if logprobs is not None:
        k = _integer(logprobs, "logprobs")
        if k < 0:
            raise ValueError(f"logprobs must be >= 0 (the number of alternatives), got {k}")
        if record is None:
            raise ValueError("logprobs needs a record list to append to")
    return _generate_ids(model, history, n, params, stop_ids, reset, logprobs, record)


def _generate_ids(model: Any, history: list[int], max_new_tokens: int, params: SamplingParams,
                  eog: frozenset[int], reset: bool, logprobs: int | None = None,
                  record: list[TokenLogprob] | None = None) -> Iterator[int]:
    if reset:
        model.reset()
    if max_new_tokens == 0:
        return
    logits = model.prefill(history, logits="last")
    for step in range(max_new_tokens):
        tid = sample(logits, params, history)
        if tid in eog:
            return
        if record is not None and logprobs is not None:
            record.append(token_logprob(logits, tid, int(logprobs)))
        yield tid
        history.append(tid)
        if step + 1 == max_new_tokens:
            return
        if model.n_past >= model.max_seq:
            return  # the cache is full
        logits = model.decode(tid)


def _stream(tok: Any, gen: Iterator[int], stop: list[str]) -> Iterator[str]:
    """The text of ``gen``'s ids, held back while it could be the start of a stop string."""
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
                close = getattr(gen, "close", None)
                if close is not None:
                    close()
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


def _stops(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    elif isinstance(stop, (bytes, bytearray)) or not isinstance(stop, Iterable):
        raise TypeError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
    stops = list(stop)
    for s in stops:
        if not isinstance(s, str):
            raise TypeError(f"stop strings must be str, got {type(s).__name__} {s!r}")
        if not s:
            raise ValueError("stop strings must not be empty")
    return stops


def generate(model: Any, prompt: Any, max_new_tokens: int = 128, *, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0, seed: Any = None,
             stop: Any = None, stream: bool = False, add_special: bool | None = None, reset: bool = True,
             logprobs: int | None = None) -> Any:
    """See :meth:`rlxc.Model.generate`."""
    params = SamplingParams(temperature, top_k, top_p, min_p, repetition_penalty, seed)
    stream = _flag(stream, "stream")
    if add_special is not None:
        _flag(add_special, "add_special")
    stops = _stops(stop)
    tok = model.tokenizer
    if stops and tok is None:
        raise ValueError("stop strings need model.tokenizer")
    ids = _prompt_ids(model, prompt, add_special)
    record: list[TokenLogprob] = []
    gen = generate_ids(model, ids, max_new_tokens, params, tok.eog_ids if tok is not None else (), reset,
                       logprobs, record)
    it: Iterator[Any] = gen if tok is None else _stream(tok, gen, stops)
    if stream:
        return it if logprobs is None else Stream(it, record)
    out = list(it)
    result = "".join(out) if tok is not None else out
    return result if logprobs is None else (result, record)


class Stream(Iterator[Any]):
    """A stream of text pieces (or ids) whose ``logprobs`` list grows with each generated token."""

    def __init__(self, it: Iterator[Any], logprobs: list[TokenLogprob]) -> None:
        self._it = it
        self.logprobs = logprobs

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
