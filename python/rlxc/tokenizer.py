"""Tokenizers for real models: from a GGUF file's ``tokenizer.ggml.*`` metadata or a Hugging Face
folder's tokenizer files, with the chat template when there is one. No network.

* GGUF ``tokenizer.ggml.model == "llama"`` (SentencePiece-style: tokens, scores, token types):
  :class:`SPMTokenizer`, a re-implementation of llama.cpp's SPM tokenizer (``llama-vocab.cpp``):
  special / user-defined tokens are split off first (longest first, user-defined tokens always,
  control tokens only with ``parse_special=True``), then each text fragment has its spaces
  escaped to ``▁`` and is merged bigram by bigram, highest score first (ties: leftmost), with
  ``<0xXX>`` byte fallback. Its ids equal ``llama_cpp.Llama(...).tokenize``.
* GGUF ``"gpt2"`` (byte-level BPE with merges): built with the ``tokenizers`` package, with the
  pre-tokenizer regex llama.cpp uses for ``tokenizer.ggml.pre`` (llama3, qwen2, gpt2 and
  similar; an unknown one falls back to GPT-2's with a warning).
* A folder with ``tokenizer.json``: :class:`HFTokenizer` over ``tokenizers`` plus
  ``tokenizer_config.json`` (special tokens, BOS/EOS, chat template) and ``generation_config.json``
  (EOS ids).

Every tokenizer has ``encode``, ``decode``, ``bos_id``, ``eos_id``, ``eog_ids`` (ids that end a
generation), ``chat_template`` and ``apply_chat_template``, and ``decoder()`` for streaming text.
"""

from __future__ import annotations

import array
import codecs
import datetime
import functools
import heapq
import json
import os
import re
import time
import warnings
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from ._files import read_json_object
from .gguf import gguf_meta, read_gguf

__all__ = ["Tokenizer", "SPMTokenizer", "BPETokenizer", "HFTokenizer", "from_gguf_metadata", "from_folder", "load",
           "StreamDecoder", "Decoder", "ChatTemplateError", "CHAT_TEMPLATE_TIME_LIMIT", "CHAT_TEMPLATE_MAX_CHARS",
           "CHAT_TEMPLATE_MAX_SOURCE"]

# llama.cpp token types (gguf TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# attribute bits (llama_token_attr)
A_UNDEFINED, A_UNKNOWN, A_UNUSED, A_NORMAL, A_CONTROL, A_USER_DEFINED, A_BYTE = 0, 1, 2, 4, 8, 16, 32
A_LSTRIP, A_RSTRIP = 128, 256
_TYPE_ATTR = {0: A_UNDEFINED, NORMAL: A_NORMAL, UNKNOWN: A_UNKNOWN, CONTROL: A_CONTROL, USER_DEFINED: A_USER_DEFINED,
              UNUSED: A_UNUSED, BYTE: A_BYTE}
# token texts llama.cpp treats as end-of-generation (and forces to CONTROL)
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
              "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "<|return|>", "<|call|>", "<|calls|>",
              "<|flush|>")
_C_SPACE = " \t\n\v\f\r"


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", errors="surrogateescape")


def _per_token(values: Any, n: int, fill: float, dtype: Any, what: str) -> np.ndarray:
    """One value per token (``fill`` for each when ``values`` is None), as a 1-D array: a shorter
    one would be indexed past its end when a token it lacks is met."""
    a = np.full(n, fill, dtype) if values is None else np.asarray(values, dtype)
    if a.shape != (n,):
        raise ValueError(f"tokenizer: {a.size} {what} for {n} tokens")
    return a


class Decoder(Protocol):
    """What :meth:`Tokenizer.decoder` returns: ``push(id) -> str`` as ids come, ``flush() -> str``."""

    def push(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


class StreamDecoder:
    """Turns token ids into text pieces as they come, holding back incomplete UTF-8 sequences."""

    def __init__(self, tok: "Tokenizer", skip_special: bool = True) -> None:
        self.tok = tok
        self.skip_special = skip_special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._first = True

    def push(self, token_id: int) -> str:
        b = self.tok.token_bytes(int(token_id), special=not self.skip_special)
        if self._first and b:
            b = self.tok._strip_first(b)
            self._first = False
        return self._dec.decode(b)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class Tokenizer:
    """Common interface: see the module docstring."""

    vocab_size: int = 0
    bos_id: int | None = None
    eos_id: int | None = None
    eog_ids: frozenset[int] = frozenset()
    add_bos: bool = False
    add_eos: bool = False
    chat_template: str | None = None
    #: (template, where it came from) as loaded, e.g. ("{% for ...", "model.gguf: tokenizer.chat_template")
    chat_template_origin: tuple[str, str] | None = None
    bos_token: str = ""
    eos_token: str = ""

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        raise NotImplementedError

    def __call__(self, text: str, **kw: Any) -> list[int]:
        return self.encode(text, **kw)

    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        """The bytes token ``token_id`` stands for (b"" for control tokens unless ``special``)."""
        raise NotImplementedError

    def _strip_first(self, b: bytes) -> bytes:
        return b

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        d = StreamDecoder(self, skip_special)
        return "".join(d.push(i) for i in ids) + d.flush()

    def decoder(self, skip_special: bool = True) -> Decoder:
        """A :class:`StreamDecoder` (``push(id) -> str``, ``flush() -> str``)."""
        return StreamDecoder(self, skip_special)

    def is_eog(self, token_id: int) -> bool:
        return int(token_id) in self.eog_ids

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            tokenize: bool = False, chat_template: str | None = None, **kw: Any) -> Any:
        """Render ``messages`` ([{"role": ..., "content": ...}]) with the model's chat template (Jinja,
        sandboxed, as transformers renders it). ``tokenize=True`` returns ids (the template
        writes the BOS itself, so none is added, and special tokens in it are parsed)."""
        tmpl = chat_template or self.chat_template
        if not tmpl:
            raise ValueError("this tokenizer has no chat template (tokenizer.chat_template / chat_template in "
                             "tokenizer_config.json); pass chat_template=")
        if chat_template:
            origin = "the chat_template= argument"
        elif self.chat_template_origin is not None and self.chat_template_origin[0] == tmpl:
            origin = self.chat_template_origin[1]
        else:
            origin = "tokenizer.chat_template"
        variables = dict(kw, messages=list(messages), add_generation_prompt=add_generation_prompt,
                         bos_token=self.bos_token, eos_token=self.eos_token)
        text = _render_chat(tmpl, origin, variables)
        if not tokenize:
            return text
        return self.encode(text, add_special=False, parse_special=True)


# ============================================================================ chat templates

#: A chat template is code shipped with the model file, rendered in a Jinja sandbox with bounds:
#: it may run for CHAT_TEMPLATE_TIME_LIMIT seconds, write CHAT_TEMPLATE_MAX_CHARS characters in
#: all (its output, macro and ``set`` blocks included) and build no string, list or number
#: larger than that; its source may be CHAT_TEMPLATE_MAX_SOURCE characters long. Past a bound,
#: :class:`ChatTemplateError`.
CHAT_TEMPLATE_TIME_LIMIT = 5.0
CHAT_TEMPLATE_MAX_CHARS = 1 << 24
CHAT_TEMPLATE_MAX_SOURCE = 1 << 20


class ChatTemplateError(ValueError):
    """A chat template went past a bound of :data:`CHAT_TEMPLATE_TIME_LIMIT` /
    :data:`CHAT_TEMPLATE_MAX_CHARS` (or failed with a recursion, memory or overflow error);
    the message starts with the template's origin (the file and key it came from)."""


# str methods whose int arguments are the length of what they build
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
# filters whose int arguments are widths / indents (tojson: indent)
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "tojson"})
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_SPEC = re.compile(r"\{[^{}]*:([^{}]*)\}")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")
_DIGITS = re.compile(r"\d+")
_MAX_INT_BITS = 1 << 16  # no chat template needs a larger number


class _Budget:
    """The bounds of one render: a deadline and the characters written so far."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.seconds = float(CHAT_TEMPLATE_TIME_LIMIT)
        self.max_chars = int(CHAT_TEMPLATE_MAX_CHARS)
        self.deadline = time.monotonic() + self.seconds
        self.written = 0

    def fail(self, what: str) -> ChatTemplateError:
        return ChatTemplateError(f"{self.origin}: chat template stopped: {what}")

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise self.fail(f"rendering took longer than {self.seconds:g} s "
                            "(rlxc.tokenizer.CHAT_TEMPLATE_TIME_LIMIT): the template loops or recurses too much")

    def need(self, n: int, what: str) -> None:
        """Refuse to build ``what`` of ``n`` characters / items."""
        if n > self.max_chars:
            raise self.fail(f"{what} would be {n} long, over rlxc.tokenizer.CHAT_TEMPLATE_MAX_CHARS "
                            f"({self.max_chars})")

    def size(self, value: Any, what: str) -> Any:
        if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
            self.need(len(value), what)
        elif isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise self.fail(f"{what} is an integer of {value.bit_length()} bits, over {_MAX_INT_BITS}")
        return value

    def ints(self, values: Iterable[Any], what: str) -> None:
        for v in values:
            if isinstance(v, int) and not isinstance(v, bool):
                self.need(abs(v), what)

    def format_string(self, fmt: str, args: Iterable[Any], printf: bool) -> None:
        """The widths / precisions written in a %- or str.format string, and those it takes from
        ``args`` (``*``, a nested ``{}`` field), checked before it is formatted."""
        if printf:
            specs = [g for m in _PRINTF_SPEC.finditer(fmt) for g in m.groups() if g]
            from_args = "*" in specs
        else:
            plain = fmt.replace("{{", "").replace("}}", "")
            specs = _FORMAT_SPEC.findall(plain)
            from_args = _NESTED_FIELD.search(plain) is not None
        self.ints([int(d) for s in specs for d in _DIGITS.findall(s)], "a formatted field")
        if from_args:
            values = [v for a in args for v in (a.values() if isinstance(a, Mapping) else (a,))]
            self.ints(values, "a formatted field")

    def binop(self, op: str, left: Any, right: Any) -> None:
        if op == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and hasattr(seq, "__len__"):
                    self.need(len(seq) * max(n, 0), f"the result of {op}")
        elif op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if left.bit_length() * right > 2 * _MAX_INT_BITS:
                raise self.fail(f"{left} ** {right} would be an integer over {_MAX_INT_BITS} bits")
        elif op == "%" and isinstance(left, str):
            self.format_string(left, right if isinstance(right, tuple) else (right,), printf=True)

    def method(self, fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Sizes that one call of a str method would build, checked before it runs."""
        fn = getattr(fn, "__wrapped__", fn)  # (the sandbox wraps str.format)
        s, name = getattr(fn, "__self__", None), getattr(fn, "__name__", "")
        if not isinstance(s, str):
            return
        if name in _WIDTH_METHODS:
            self.ints([*args, *kwargs.values()], f"the result of str.{name}")
        elif name in ("format", "format_map"):
            self.format_string(s, [*args, kwargs], printf=False)
        elif name == "replace" and len(args) >= 2:
            self.replace(s, args[0], args[1])
        elif name == "join" and args:
            self.join(s, args[0])

    def replace(self, s: Any, old: Any, new: Any) -> None:
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            count = s.count(old) if old else len(s) + 1
            self.need(len(s) + count * (len(new) - len(old)), "the result of replace")

    def join(self, sep: Any, items: Any) -> None:
        if isinstance(sep, str) and hasattr(items, "__len__"):
            self.need(len(sep) * max(len(items) - 1, 0), "the result of join")


def _chat_environment(budget: _Budget) -> Any:
    """A Jinja ImmutableSandboxedEnvironment (as transformers renders chat templates) that checks
    ``budget`` at every loop iteration, call, filter, operator and write."""
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from jinja2.visitor import NodeTransformer
    except ImportError:  # pragma: no cover
        raise ImportError("chat templates need the jinja2 package") from None

    def env_call(name: str, *args: Any) -> Any:
        return nodes.Call(nodes.EnvironmentAttribute(name), list(args), [], None, None)

    class Bound(NodeTransformer):
        """Routes loops, ``~`` and writes through the environment's checks."""

        def visit_For(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.iter = env_call("bounded_iter", node.iter)
            return node

        def visit_Concat(self, node: Any) -> Any:
            visited: Any = self.generic_visit(node)
            return env_call("bounded_concat", *visited.nodes)

        def visit_Output(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.nodes = [env_call("bounded_write", n) for n in node.nodes]
            return node

    class Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%", "+"})

        def __init__(self) -> None:
            super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            self.filters["tojson"] = _tojson
            self.filters = {k: self._bounded_filter(k, f) for k, f in self.filters.items()}
            self.globals["raise_exception"] = _raise_exception
            self.globals["strftime_now"] = _strftime_now
            self.globals["lipsum"] = self._lipsum

        def _bounded_filter(self, name: str, f: Any) -> Any:
            pass_arg = getattr(f, "jinja_pass_arg", None)

            @functools.wraps(f)
            def bounded(*args: Any, **kw: Any) -> Any:
                budget.tick()
                a = args[1:] if pass_arg is not None else args  # (value, args...)
                if name in _WIDTH_FILTERS:
                    budget.ints([*a[1:], *kw.values()], f"the result of the {name} filter")
                elif name == "format" and a and isinstance(a[0], str):
                    budget.format_string(a[0], a[1:], printf=True)
                elif name == "replace" and len(a) >= 3:
                    budget.replace(a[0], a[1], a[2])
                elif name == "join" and a:
                    items = a[0] if hasattr(a[0], "__len__") else list(a[0])
                    budget.join(a[1] if len(a) > 1 else kw.get("d", ""), items)
                    args = (*args[: len(args) - len(a)], items, *a[1:])
                return budget.size(f(*args, **kw), f"the result of the {name} filter")
            return bounded

        def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
            budget.need(n * max, "lipsum()")
            return jinja2.utils.generate_lorem_ipsum(n, html, min, max)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            budget.tick()
            budget.method(__obj, args, kwargs)
            return budget.size(super().call(__context, __obj, *args, **kwargs), "the result of a call")

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            budget.tick()
            budget.binop(operator, left, right)
            return budget.size(super().call_binop(context, operator, left, right), f"the result of {operator}")

        def bounded_iter(self, iterable: Any) -> Iterator[Any]:
            for x in iterable:
                budget.tick()
                yield x

        def bounded_concat(self, *parts: Any) -> str:
            budget.need(sum(len(p) for p in parts if isinstance(p, str)), "the result of ~")
            out = "".join(map(str, parts))
            budget.size(out, "the result of ~")
            return out

        def bounded_write(self, value: Any) -> Any:
            budget.tick()
            budget.written += len(value) if isinstance(value, str) else len(str(value))
            if budget.written > budget.max_chars:
                raise budget.fail(f"the template wrote more than {budget.max_chars} characters "
                                  "(rlxc.tokenizer.CHAT_TEMPLATE_MAX_CHARS)")
            return value

        def bound_tree(self, tree: Any) -> Any:
            """The parsed template with its loops, ``~`` and writes routed through the checks."""
            return Bound().visit(tree)

    return Env()


def _tojson(x: Any, indent: Any = None, ensure_ascii: bool = False, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)


def _raise_exception(msg: str) -> None:
    import jinja2
    raise jinja2.exceptions.TemplateError(msg)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _render_chat(template: str, origin: str, variables: Mapping[str, Any]) -> str:
    """``template`` rendered with ``variables`` under the bounds above; ``origin`` names it in errors."""
    budget = _Budget(origin)
    if len(template) > CHAT_TEMPLATE_MAX_SOURCE:
        raise budget.fail(f"the template is {len(template)} characters long, over "
                          f"rlxc.tokenizer.CHAT_TEMPLATE_MAX_SOURCE ({CHAT_TEMPLATE_MAX_SOURCE})")
    try:
        env = _chat_environment(budget)
        tree = env.bound_tree(env.parse(template))
        compiled = env.template_class.from_code(env, env.compile(tree), env.make_globals(None), None)
        return str(compiled.render(**variables))
    except (RecursionError, MemoryError, OverflowError) as e:
        raise budget.fail(f"rendering failed: {type(e).__name__}: {e}") from e


# ============================================================================ llama.cpp SPM

def _with_special_ids(md: dict[str, Any], chat_template: str | None, **ids: int | None) -> dict[str, Any]:
    """GGUF metadata for the special token ids that are set, and the chat template if any."""
    for key, v in ids.items():
        if v is not None:
            md[f"tokenizer.ggml.{key}_token_id"] = (int(v), 4, None)
    if chat_template:
        md["tokenizer.chat_template"] = (chat_template, 8, None)
    return md


class SPMTokenizer(Tokenizer):
    """llama.cpp's SentencePiece-style ("llama") tokenizer over GGUF tokens / scores / types."""

    def __init__(self, tokens: Sequence[str], scores: Sequence[float] | None, types: Sequence[int] | None, *,
                 bos_id: int | None = None, eos_id: int | None = None, unk_id: int | None = None,
                 eot_id: int | None = None, eom_id: int | None = None, add_bos: bool = True, add_eos: bool = False,
                 add_space_prefix: bool = True, chat_template: str | None = None, model_name: str = "",
                 pad_id: int | None = None) -> None:
        n = len(tokens)
        self.vocab_size = n
        # compact storage (a 262k vocabulary costs ~30 MB of Python objects, mostly the strings)
        self.tokens = tokens if isinstance(tokens, list) and all(tokens) else [
            t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self.scores = array.array("f", _per_token(scores, n, 0.0, "<f4", "scores").tobytes())
        type_ids = _per_token(types, n, NORMAL, np.int64, "token types")
        lut = np.zeros(8, np.uint16)  # type -> attribute bits; other types (clipped to 0 or 7) have none
        for k, v in _TYPE_ATTR.items():
            lut[k] = v
        self.attrs = array.array("H", lut[np.clip(type_ids, 0, lut.size - 1)].tobytes())
        self.token_to_id: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            self.token_to_id[t] = i  # the last duplicate wins, as in llama.cpp
        self.bos_id, self.eos_id, self.unk_id, self.pad_id = bos_id, eos_id, unk_id, pad_id
        self.add_bos, self.add_eos, self.add_space_prefix = bool(add_bos), bool(add_eos), bool(add_space_prefix)
        self.chat_template = chat_template
        eog = {x for x in (eos_id, eot_id, eom_id) if x is not None and 0 <= x < n}
        for t in _EOG_TEXTS:
            e = self.token_to_id.get(t)
            if e is not None:
                eog.add(e)
                if not self.attrs[e] & A_CONTROL:
                    self.attrs[e] = A_CONTROL
        self.eog_ids = frozenset(eog)
        special = [i for i, a in enumerate(self.attrs) if a & (A_CONTROL | A_USER_DEFINED | A_UNKNOWN)]
        if any(k in model_name.lower() for k in ("phi-3", "phi3")):  # llama.cpp's Phi-3 attribute hack
            for i in special:
                self.attrs[i] |= A_RSTRIP
            for t, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
                j = self.token_to_id.get(t)
                if j is not None:
                    self.attrs[j] = (self.attrs[j] | A_RSTRIP) if on else (self.attrs[j] & ~A_RSTRIP)
        # longest first (llama.cpp sorts by byte length; ties keep id order here)
        self._special = sorted(special, key=lambda i: -len(_utf8(self.tokens[i])))
        self.bos_token = self.tokens[bos_id] if bos_id is not None and 0 <= bos_id < n else ""
        self.eos_token = self.tokens[eos_id] if eos_id is not None and 0 <= eos_id < n else ""
        self._byte_ids: dict[int, int] = {}
        for b in range(256):
            bid = self.token_to_id.get(f"<0x{b:02X}>")
            if bid is None:
                bid = self.token_to_id.get(chr(b)) if b < 128 else None
            if bid is not None:
                self._byte_ids[b] = bid

    # ------------------------------------------------------------------ encode
    def _partition(self, text: str, parse_special: bool) -> list[Any]:
        frags: list[Any] = [text]  # str = raw text, int = token id
        for sid in self._special:
            a = self.attrs[sid]
            if not parse_special and a & (A_CONTROL | A_UNKNOWN):
                continue
            st = self.tokens[sid]
            if st not in text:
                continue
            out: list[Any] = []
            for fr in frags:
                if isinstance(fr, int) or st not in fr:
                    out.append(fr)
                    continue
                pos = 0
                while True:
                    m = fr.find(st, pos)
                    if m < 0:
                        break
                    left = fr[pos:m]
                    if a & A_LSTRIP:
                        left = left.rstrip(_C_SPACE)
                    if left:
                        out.append(left)
                    out.append(sid)
                    pos = m + len(st)
                    if a & A_RSTRIP:
                        while pos < len(fr) and fr[pos] in _C_SPACE:
                            pos += 1
                rest = fr[pos:]
                if rest:
                    out.append(rest)
            frags = out
        return frags

    def _spm(self, text: str, out: list[int]) -> None:
        n = len(text)
        if n == 0:
            return
        # symbols: start, length (chars), prev, next
        start = list(range(n))
        length = [1] * n
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap: list[tuple[float, int, int, int]] = []
        rev_merge: dict[str, tuple[int, int]] = {}
        t2i, scores = self.token_to_id, self.scores

        def try_add(left: int, right: int) -> None:
            if left == -1 or right == -1:
                return
            s = text[start[left]:start[left] + length[left] + length[right]]
            tid = t2i.get(s)
            if tid is None:
                return
            heapq.heappush(heap, (-scores[tid], left, right, len(s)))
            rev_merge[s] = (left, right)

        for i in range(1, n):
            try_add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if length[left] == 0 or length[right] == 0 or length[left] + length[right] != size:
                continue
            length[left] += length[right]
            length[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            try_add(prev[left], left)
            try_add(left, nxt[left])

        def resegment(i: int) -> None:
            s = text[start[i]:start[i] + length[i]]
            tid = t2i.get(s)
            if tid is not None:
                out.append(tid)
                return
            p = rev_merge.get(s)
            if p is None:
                for b in _utf8(s):
                    bid = self._byte_ids.get(b)
                    if bid is None:
                        raise ValueError(f"tokenizer: no token for byte 0x{b:02X} (and no byte fallback)")
                    out.append(bid)
                return
            resegment(p[0])
            resegment(p[1])

        i = 0
        while i != -1:
            resegment(i)
            i = nxt[i]

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` as llama.cpp's ``llama_tokenize(text, add_special, parse_special)``."""
        out: list[int] = []
        is_prev_special = True
        if add_special and self.add_bos and self.bos_id is not None:
            out.append(self.bos_id)
        for fr in self._partition(text, parse_special):
            if isinstance(fr, int):
                out.append(fr)
                is_prev_special = True
                continue
            s = (" " if self.add_space_prefix and is_prev_special else "") + fr
            self._spm(s.replace(" ", "\u2581"), out)
            is_prev_special = False
        if add_special and self.add_eos and self.eos_id is not None:
            out.append(self.eos_id)
        return out

    # ------------------------------------------------------------------ decode
    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} out of range [0, {self.vocab_size})")
        a = self.attrs[token_id]
        if not special and a & (A_UNKNOWN | A_CONTROL):
            return b""
        t = self.tokens[token_id]
        if a & (A_UNKNOWN | A_CONTROL | A_USER_DEFINED):
            return _utf8(t)
        if a & A_NORMAL:
            return _utf8(t.replace("\u2581", " "))
        if a & A_BYTE:
            return bytes([int(t[3:5], 16)]) if t.startswith("<0x") else _utf8(t)
        return b""

    def _strip_first(self, b: bytes) -> bytes:
        return b[1:] if self.add_space_prefix and b.startswith(b" ") else b

    def gguf_metadata(self) -> dict[str, tuple[Any, int, int | None]]:
        """The ``tokenizer.ggml.*`` keys that rebuild this tokenizer: key -> (value, type, elem type)."""
        inv = {v: k for k, v in _TYPE_ATTR.items()}
        md: dict[str, tuple[Any, int, int | None]] = {
            "tokenizer.ggml.model": ("llama", 8, None),
            "tokenizer.ggml.tokens": (self.tokens, 9, 8),
            "tokenizer.ggml.scores": (np.asarray(self.scores, np.float32), 9, 6),
            "tokenizer.ggml.token_type": (np.array([inv.get(a & 0x7F, NORMAL) for a in self.attrs], np.int32), 9, 5),
            "tokenizer.ggml.add_bos_token": (self.add_bos, 7, None),
            "tokenizer.ggml.add_eos_token": (self.add_eos, 7, None),
            "tokenizer.ggml.add_space_prefix": (self.add_space_prefix, 7, None),
        }
        return _with_special_ids(md, self.chat_template, bos=self.bos_id, eos=self.eos_id, unknown=self.unk_id,
                                 padding=self.pad_id)

    def __repr__(self) -> str:
        return (f"SPMTokenizer({self.vocab_size} tokens, bos={self.bos_id}, eos={self.eos_id}, "
                f"eog={sorted(self.eog_ids)}, chat_template={'yes' if self.chat_template else 'no'})")


# ============================================================================ byte-level BPE (tokenizers)

_GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_RE = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
              r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2_RE = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
             r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_PRE_RE = {"llama3": [_LLAMA3_RE], "llama-v3": [_LLAMA3_RE], "llama-bpe": [_LLAMA3_RE], "smaug-bpe": [_LLAMA3_RE],
           "qwen2": [_QWEN2_RE], "deepseek-r1-qwen": [_QWEN2_RE], "default": [_GPT2_RE], "gpt2": [_GPT2_RE],
           "gpt-2": [_GPT2_RE], "phi-2": [_GPT2_RE], "stablelm2": [_GPT2_RE], "olmo": [_GPT2_RE],
           "starcoder": [r"\p{N}", _GPT2_RE], "refact": [r"\p{N}", _GPT2_RE], "smollm": [r"\p{N}", _GPT2_RE]}


class BPETokenizer(Tokenizer):
    """Byte-level BPE (GGUF ``"gpt2"`` tokenizers) on the ``tokenizers`` package."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], types: Sequence[int] | None, pre: str, *,
                 bos_id: int | None = None, eos_id: int | None = None, eot_id: int | None = None,
                 eom_id: int | None = None, add_bos: bool = False, add_eos: bool = False,
                 chat_template: str | None = None, pad_id: int | None = None, unk_id: int | None = None) -> None:
        from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as _T

        self.tokens = list(tokens)
        n = self.vocab_size = len(self.tokens)
        types = _per_token(types, n, NORMAL, np.int64, "token types").tolist()
        self.types = types
        self.merges = list(merges)
        self.pre = pre or "default"
        vocab = {t: i for i, t in enumerate(self.tokens)}
        mlist = []
        for k, m in enumerate(self.merges):
            # checked here: tokenizers' BPE panics on some merges of tokens it does not have
            if not isinstance(m, str) or " " not in m:
                raise ValueError(f"tokenizer: merge {k} {m!r:.60} is not two tokens separated by a space")
            a, _, b = m.partition(" ")
            if a not in vocab or b not in vocab or a + b not in vocab:
                part = next(p for p in (a, b, a + b) if p not in vocab)
                raise ValueError(f"tokenizer: merge {k} {m!r:.60} needs {part!r:.60}, which is not in the vocabulary")
            mlist.append((a, b))
        ignore = self.pre in ("llama3", "llama-v3", "llama-bpe")
        pats = _PRE_RE.get(self.pre)
        if pats is None:
            warnings.warn(f"tokenizer.ggml.pre={self.pre!r} is not known to rlxc: using GPT-2's pre-tokenizer "
                          "(ids may differ from llama.cpp's)", stacklevel=3)
            pats = [_GPT2_RE]
        added = [AddedToken(self.tokens[i], special=types[i] == CONTROL, normalized=False)
                 for i in range(n) if types[i] in (CONTROL, USER_DEFINED)]
        try:
            t = _T(models.BPE(vocab=vocab, merges=mlist, ignore_merges=ignore))
            t.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in pats]
                + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            t.decoder = decoders.ByteLevel()
            if added:
                t.add_tokens(added)
        except BaseException as e:
            # tokenizers raises Exception for what it checks and panics on what it does not: pyo3 raises
            # a Rust panic as PanicException, a BaseException (let KeyboardInterrupt and the like through)
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise
            raise ValueError(f"tokenizer: the tokenizers library rejects this vocabulary ({type(e).__name__}: "
                             f"{e})") from None
        self._tk = t
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = bos_id, eos_id, pad_id, unk_id
        self.add_bos, self.add_eos = bool(add_bos), bool(add_eos)
        self.chat_template = chat_template
        eog = {x for x in (eos_id, eot_id, eom_id) if x is not None and 0 <= x < n}
        eog |= {vocab[t] for t in _EOG_TEXTS if t in vocab}
        self.eog_ids = frozenset(eog)
        self.bos_token = self.tokens[bos_id] if bos_id is not None and 0 <= bos_id < n else ""
        self.eos_token = self.tokens[eos_id] if eos_id is not None and 0 <= eos_id < n else ""
        self._u2b = {c: b for b, c in _bytes_to_unicode().items()}

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        self._tk.encode_special_tokens = not parse_special
        ids = self._tk.encode(text, add_special_tokens=False).ids
        if add_special and self.add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_special and self.add_eos and self.eos_id is not None:
            ids = ids + [self.eos_id]
        return ids

    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} out of range [0, {self.vocab_size})")
        ty = self.types[token_id]
        t = self.tokens[token_id]
        if ty == CONTROL:
            return _utf8(t) if special else b""
        if ty == USER_DEFINED:
            return _utf8(t)
        try:
            return bytes(self._u2b[c] for c in t)
        except KeyError:
            return _utf8(t)

    def gguf_metadata(self) -> dict[str, tuple[Any, int, int | None]]:
        md: dict[str, tuple[Any, int, int | None]] = {
            "tokenizer.ggml.model": ("gpt2", 8, None), "tokenizer.ggml.pre": (self.pre, 8, None),
            "tokenizer.ggml.tokens": (self.tokens, 9, 8),
            "tokenizer.ggml.token_type": (np.asarray(self.types, np.int32), 9, 5),
            "tokenizer.ggml.merges": (self.merges, 9, 8),
            "tokenizer.ggml.add_bos_token": (self.add_bos, 7, None),
        }
        return _with_special_ids(md, self.chat_template, bos=self.bos_id, eos=self.eos_id, padding=self.pad_id)

    def __repr__(self) -> str:
        return f"BPETokenizer({self.vocab_size} tokens, pre={self.pre!r}, bos={self.bos_id}, eos={self.eos_id})"


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# ============================================================================ HF folder

class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizer.json`` (``tokenizers``) with tokenizer_config / generation_config."""

    def __init__(self, folder: str) -> None:
        from tokenizers import Tokenizer as _T

        path = os.path.join(folder, "tokenizer.json")
        if not os.path.exists(path):
            if os.path.exists(os.path.join(folder, "tokenizer.model")):
                raise NotImplementedError(f"{folder}: only tokenizer.json is supported (found a SentencePiece "
                                          "tokenizer.model without tokenizer.json)")
            raise FileNotFoundError(f"{folder}: no tokenizer.json")
        try:
            self._tk = _T.from_file(path)
        except Exception as e:  # tokenizers raises its own Exception type
            raise ValueError(f"{path}: cannot be read ({e})") from None
        self.vocab_size = self._tk.get_vocab_size(with_added_tokens=True)
        cfg_path, gen_path, mcfg_path = (os.path.join(folder, n) for n in
                                         ("tokenizer_config.json", "generation_config.json", "config.json"))
        cfg, gen, mcfg = _read_json(cfg_path), _read_json(gen_path), _read_json(mcfg_path)
        self.bos_token = _token_text(cfg, "bos_token", cfg_path) or ""
        self.eos_token = _token_text(cfg, "eos_token", cfg_path) or ""
        self.bos_id = (self._tk.token_to_id(self.bos_token) if self.bos_token
                       else _token_id(mcfg, "bos_token_id", mcfg_path))
        self.eos_id = self._tk.token_to_id(self.eos_token) if self.eos_token else None
        eos = (_token_ids(gen, "eos_token_id", gen_path) if "eos_token_id" in gen
               else _token_ids(mcfg, "eos_token_id", mcfg_path))
        eog: set[int] = set(eos)
        if self.eos_id is None and eog:
            self.eos_id = min(eog)
        if self.eos_id is not None:
            eog.add(self.eos_id)
        for t in _EOG_TEXTS:
            i = self._tk.token_to_id(t)
            if i is not None:
                eog.add(i)
        self.eog_ids = frozenset(int(x) for x in eog if x is not None)
        probe = self._tk.encode("a", add_special_tokens=True).ids
        self.add_bos = bool(self.bos_id is not None and probe and probe[0] == self.bos_id)
        self.add_eos = bool(self.eos_id is not None and probe and probe[-1] == self.eos_id and len(probe) > 1)
        tmpl = _chat_template(cfg, cfg_path)
        origin = f"{cfg_path}: chat_template"
        jpath = os.path.join(folder, "chat_template.jinja")
        if tmpl is None and os.path.exists(jpath):
            try:
                with open(jpath, encoding="utf-8") as f:
                    tmpl = f.read()
            except UnicodeDecodeError as e:
                raise ValueError(f"{jpath}: not UTF-8 text ({e})") from None
            origin = jpath
        self.chat_template = tmpl
        _with_origin(self, origin)
        self._special = {i for i, t in self._tk.get_added_tokens_decoder().items() if t.special}

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        self._tk.encode_special_tokens = not parse_special
        return self._tk.encode(text, add_special_tokens=add_special).ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        if token_id in self._special and not special:
            return b""
        return _utf8(self._tk.decode([int(token_id)], skip_special_tokens=not special))

    def decoder(self, skip_special: bool = True) -> Decoder:
        return _PrefixDecoder(self, skip_special)

    def __repr__(self) -> str:
        return f"HFTokenizer({self.vocab_size} tokens, bos={self.bos_id}, eos={self.eos_id}, eog={sorted(self.eog_ids)})"


class _PrefixDecoder:
    """Streaming for tokenizers whose pieces depend on context: decode all, emit the new suffix
    once it no longer ends in an incomplete character."""

    def __init__(self, tok: HFTokenizer, skip_special: bool) -> None:
        self.tok, self.skip, self.sent = tok, skip_special, 0
        self.ids: list[int] = []

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = self.tok.decode(self.ids, self.skip)
        if text.endswith("\ufffd"):
            return ""
        new = text[self.sent:]
        self.sent = len(text)
        return new

    def flush(self) -> str:
        text = self.tok.decode(self.ids, self.skip)
        new = text[self.sent:]
        self.sent = len(text)
        return new


def _read_json(path: str) -> dict[str, Any]:
    """A JSON object file of a Hugging Face folder ({} when the file is absent)."""
    return read_json_object(path, missing_ok=True)


# The fields of a folder's JSON files that the tokenizer reads: a value of another type raises a
# ValueError naming the file and the field (as rlxc.loaders.gguf_meta does for GGUF metadata)
# instead of a TypeError later, or being taken for something else (1.5 as token 1).

def _bad_field(path: str, key: str, v: Any, want: str) -> ValueError:
    return ValueError(f"{path}: field {key!r} is {type(v).__name__} {v!r:.60}, expected {want}")


def _is_id(x: Any) -> bool:
    return type(x) is int and x >= 0  # type(): JSON true / false load as bools, which are ints


def _token_id(d: Mapping[str, Any], key: str, path: str) -> int | None:
    """``d[key]``: None or a token id (an int >= 0)."""
    v = d.get(key)
    if v is None or _is_id(v):
        return v
    raise _bad_field(path, key, v, "a token id (an integer >= 0)")


def _token_ids(d: Mapping[str, Any], key: str, path: str) -> list[int]:
    """``d[key]``: absent / None (no ids), a token id or a list of token ids."""
    v = d.get(key)
    if v is None:
        return []
    if _is_id(v):
        return [v]
    if isinstance(v, list) and all(_is_id(x) for x in v):
        return list(v)
    raise _bad_field(path, key, v, "a token id or a list of token ids (integers >= 0)")


def _token_text(d: Mapping[str, Any], key: str, path: str) -> str | None:
    """A special token of tokenizer_config.json: None, its text, or an object with its "content"."""
    v = d.get(key)
    if isinstance(v, dict):
        v, key = v.get("content"), key + ".content"
    if v is None or isinstance(v, str):
        return v
    raise _bad_field(path, key, v, "a string or an object with a string 'content'")


def _chat_template(d: Mapping[str, Any], path: str) -> str | None:
    """tokenizer_config.json's chat_template: a string, or named templates ([{"name", "template"}],
    of which "default" is used)."""
    v = d.get("chat_template")
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                   and isinstance(t.get("template"), str) for t in v):
        return next((t["template"] for t in v if t["name"] == "default"), None)
    raise _bad_field(path, "chat_template", v, 'a string or a list of {"name": ..., "template": ...} objects')


# ============================================================================ factories

def from_gguf_metadata(md: Mapping[str, Any], source: str = "GGUF") -> Tokenizer | None:
    """The tokenizer described by a GGUF file's metadata (None when it has none); ``source`` (the
    file) starts error messages. Every value is type-checked (:func:`rlxc.loaders.gguf_meta`)."""
    def get(key: str, kind: type, default: Any = None, array: bool = False) -> Any:
        return gguf_meta(md, key, kind, default, source, array)

    kind = get("tokenizer.ggml.model", str)
    if kind is None or kind in ("none", "no_vocab"):
        return None
    tokens = get("tokenizer.ggml.tokens", str, array=True)
    if tokens is None:
        raise ValueError(f"{source}: GGUF tokenizer metadata lacks tokenizer.ggml.tokens")
    common = dict(bos_id=get("tokenizer.ggml.bos_token_id", int), eos_id=get("tokenizer.ggml.eos_token_id", int),
                  eot_id=get("tokenizer.ggml.eot_token_id", int), eom_id=get("tokenizer.ggml.eom_token_id", int),
                  chat_template=get("tokenizer.chat_template", str), pad_id=get("tokenizer.ggml.padding_token_id", int),
                  unk_id=get("tokenizer.ggml.unknown_token_id", int))
    types = get("tokenizer.ggml.token_type", int, array=True)
    tok: Tokenizer
    if kind == "llama":
        tok = SPMTokenizer(tokens, get("tokenizer.ggml.scores", float, array=True), types,
                            add_bos=get("tokenizer.ggml.add_bos_token", bool, True),
                            add_eos=get("tokenizer.ggml.add_eos_token", bool, False),
                            add_space_prefix=get("tokenizer.ggml.add_space_prefix", bool, True),
                            model_name=get("general.name", str, ""), **common)
    elif kind == "gpt2":
        merges = get("tokenizer.ggml.merges", str, array=True)
        if merges is None:
            raise ValueError(f"{source}: GGUF gpt2 tokenizer lacks tokenizer.ggml.merges")
        tok = BPETokenizer(tokens, merges, types, get("tokenizer.ggml.pre", str, "default"),
                           add_bos=get("tokenizer.ggml.add_bos_token", bool, False),
                           add_eos=get("tokenizer.ggml.add_eos_token", bool, False), **common)
    else:
        raise NotImplementedError(f"{source}: GGUF tokenizer model {kind!r} is not supported (supported: llama, "
                                  "gpt2)")
    return _with_origin(tok, f"{source}: tokenizer.chat_template")


def _with_origin(tok: Tokenizer, origin: str) -> Tokenizer:
    """``tok`` with its loaded chat template's origin recorded (for error messages)."""
    if tok.chat_template:
        tok.chat_template_origin = (tok.chat_template, origin)
    return tok


def from_folder(folder: str) -> Tokenizer:
    """The tokenizer of a Hugging Face checkpoint folder (``tokenizer.json``)."""
    return HFTokenizer(folder)


def load(path: str | os.PathLike[str]) -> Tokenizer | None:
    """A tokenizer from a GGUF file (its metadata only) or a Hugging Face folder."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return from_folder(p)
    return from_gguf_metadata(read_gguf(p).metadata, p)
