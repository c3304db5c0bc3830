"""Hardening of text generation and chat templates (issue 16, findings 7 and 8), on a tiny random
model built here (no torch, no download).

Finding 7: every argument of ``Model.generate`` / ``Model.stream`` (and of ``rlxc run``, which
calls them) is checked when the call is made, streaming included: a NaN or infinite
repetition penalty or temperature, a subnormal temperature, a float / str / bool where an int
is meant, token ids that are not integers (``[1.9]``, ``["3"]``, ``[True]``, float or bool
arrays) or are out of the vocabulary (``-1``, ``vocab``, ``10**20``) raise ValueError or
TypeError naming the argument, instead of being truncated, parsed or sampled into garbage
(a NaN penalty used to repeat the smallest prompt id).

Finding 8: a chat template is code from the model file; rendering it is bounded in time and in
the size of what it builds, and a template that loops or blows up raises
``rlxc.tokenizer.ChatTemplateError`` (a ValueError naming the template) within seconds.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

import rlxc
from rlxc import cli
from rlxc.generate import SamplingParams, sample
from rlxc.tokenizer import SPMTokenizer

V = 40  # vocabulary of the tiny model
CHAT = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def _tokenizer(chat_template: str | None = CHAT) -> SPMTokenizer:
    toks = ["<unk>", "<s>", "</s>"] + [chr(97 + i) for i in range(26)] + ["\u2581" + chr(97 + i) for i in range(11)]
    return SPMTokenizer(toks, None, [2, 3, 3] + [1] * 37, bos_id=1, eos_id=2, unk_id=0,
                        chat_template=chat_template)


def _model(tokenizer: bool = False) -> rlxc.Model:
    layers = cli.build_demo_layers(64, 1, 128, "f32", seed=0)
    layers[0].sliding_window = 0  # (llama as GGUF has no window)
    rng = np.random.default_rng(0)
    m = rlxc.Model(layers, rng.standard_normal((V, 64)).astype(np.float32), norm_weight=np.ones(64, np.float32),
                   max_seq=64, threads=1, arch="llama")
    if tokenizer:
        m.tokenizer = _tokenizer()
    return m


@pytest.fixture(scope="module")
def model() -> rlxc.Model:
    return _model()


@pytest.fixture(scope="module")
def text_model() -> rlxc.Model:
    return _model(tokenizer=True)


# ----------------------------------------------------------------------------- finding 7: arguments

NAN, INF = float("nan"), float("inf")
SUBNORMAL = 5e-324

BAD_ARGS = [
    (dict(repetition_penalty=NAN), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=INF), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=-INF), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
    (dict(repetition_penalty="1.1"), TypeError, "repetition_penalty"),
    (dict(temperature=NAN), ValueError, "temperature"),
    (dict(temperature=INF), ValueError, "temperature"),
    (dict(temperature=SUBNORMAL), ValueError, "temperature"),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(temperature="0.5"), TypeError, "temperature"),
    (dict(temperature=True), TypeError, "temperature"),
    (dict(temperature=1 + 0j), TypeError, "temperature"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(top_k=2.0), TypeError, "top_k"),
    (dict(top_k="3"), TypeError, "top_k"),
    (dict(top_k=True), TypeError, "top_k"),
    (dict(top_k=-1), ValueError, "top_k"),
    (dict(top_p=NAN), ValueError, "top_p"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_p="0.9"), TypeError, "top_p"),
    (dict(min_p=NAN), ValueError, "min_p"),
    (dict(min_p=-0.1), ValueError, "min_p"),
    (dict(min_p=[0.1]), TypeError, "min_p"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed="3"), TypeError, "seed"),
    (dict(seed=True), TypeError, "seed"),
    (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=2.5), TypeError, "max_new_tokens"),
    (dict(max_new_tokens="3"), TypeError, "max_new_tokens"),
    (dict(max_new_tokens=True), TypeError, "max_new_tokens"),
    (dict(max_new_tokens=NAN), TypeError, "max_new_tokens"),
    (dict(stop=5), TypeError, "stop"),
    (dict(stop=[""]), ValueError, "stop"),
    (dict(stop=[b"x"]), TypeError, "stop"),
    (dict(stop=b"x"), TypeError, "stop"),
    (dict(stream="yes"), TypeError, "stream"),
    (dict(reset=1), TypeError, "reset"),
    (dict(add_special="no"), TypeError, "add_special"),
]


def _id(case: tuple) -> str:
    return ",".join(f"{k}={v!r}" for k, v in case[0].items())


@pytest.mark.parametrize("kw,exc,word", BAD_ARGS, ids=[_id(c) for c in BAD_ARGS])
@pytest.mark.parametrize("how", ["generate", "generate_stream", "stream"])
def test_bad_arguments_raise_at_the_call(text_model, kw, exc, word, how):
    """Raised by the call itself (also when it returns an iterator), naming the argument."""
    kw = dict(kw)
    n = kw.pop("max_new_tokens", 4)
    if how == "stream" and "stream" in kw:
        pytest.skip("stream() sets stream itself")
    with pytest.raises(exc, match=word):
        if how == "generate":
            text_model.generate("abc", n, **kw)
        elif how == "generate_stream":
            text_model.generate("abc", n, stream=True, **kw)
        else:
            text_model.stream("abc", n, **kw)


def test_nan_repetition_penalty_is_refused_not_sampled(model):
    """The reported case: with a NaN penalty, greedy decoding repeated the smallest prompt id."""
    with pytest.raises(ValueError, match="repetition_penalty"):
        model.generate([5, 3, 9], 6, repetition_penalty=NAN)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=NAN)


BAD_PROMPTS = [
    ([1.9], TypeError),
    ([1.0, 2.0], TypeError),
    (["3"], TypeError),
    (["a", "b"], TypeError),
    ([True], TypeError),
    ([1, True], TypeError),
    ([np.bool_(True)], TypeError),
    ([None], TypeError),
    ([10 ** 20], ValueError),
    ([-(10 ** 20)], ValueError),
    ([-1], ValueError),
    ([V], ValueError),
    ([3, 2 ** 63], ValueError),
    (np.array([1.0, 2.0]), TypeError),
    (np.array([1.0, 2.0], np.float32), TypeError),
    (np.array([True, False]), TypeError),
    (np.array(["1", "2"]), TypeError),
    (np.array([1, 2 + 1j]), TypeError),
    (np.array([-1, 2]), ValueError),
    (np.array([2, V], np.uint8), ValueError),
    (np.array([2 ** 64 - 1], np.uint64), ValueError),
    (b"\x01\x02", TypeError),
    ([], ValueError),
    (np.zeros(0, np.int64), ValueError),
    ([[1, 2], [3]], TypeError),
    (1.5, TypeError),
    (None, TypeError),
]


@pytest.mark.parametrize("prompt,exc", BAD_PROMPTS, ids=[repr(p) for p, _ in BAD_PROMPTS])
def test_bad_prompt_ids(model, text_model, prompt, exc):
    for m in (model, text_model):
        with pytest.raises(exc, match="prompt|token id"):
            m.generate(prompt, 3)
        with pytest.raises(exc, match="prompt|token id"):
            m.stream(prompt, 3)
    # the model's own entry points check ids the same way (they used to truncate 1.9 to 1)
    if exc is TypeError and not isinstance(prompt, (bytes, float)) and prompt is not None:
        with pytest.raises(TypeError, match="token id"):
            model.prefill(prompt)
        with pytest.raises(TypeError, match="token id"):
            model.forward(prompt)


def test_decode_checks_its_token_id(model):
    model.reset()
    model.prefill([1, 2])
    for bad, exc in [(1.9, TypeError), ("3", TypeError), (True, TypeError), (V, ValueError), (-1, ValueError),
                     (10 ** 20, ValueError)]:
        with pytest.raises(exc, match="token id"):
            model.decode(bad)
    assert model.n_past == 2
    model.decode(np.int64(3))


def test_good_prompts_still_work(model):
    want = model.generate([1, 2, 3], 4)
    assert len(want) == 4 and all(isinstance(t, int) and 0 <= t < V for t in want)
    for p in ([np.int64(1), np.int32(2), 3], np.array([1, 2, 3], np.int32), np.array([1, 2, 3], np.uint8),
              np.array([[1, 2, 3]]), (1, 2, 3), range(1, 4), np.array([1, 2, 3], dtype=object)):
        assert model.generate(p, 4) == want, p
    assert model.generate([1, 2, 3], np.int64(4)) == want
    assert model.generate([1, 2, 3], 4, temperature=1, top_k=np.int64(3), top_p=np.float32(0.9), seed=np.int64(1)) \
        == model.generate([1, 2, 3], 4, temperature=1.0, top_k=3, top_p=0.9, seed=1)
    rng = np.random.default_rng(5)
    assert len(model.generate([1, 2, 3], 4, temperature=1.0, seed=rng)) == 4  # a Generator is a seed as before
    assert model.generate([1, 2, 3], 0) == []


def test_stream_checks_before_touching_the_cache(model):
    """An argument error from stream() leaves the cache as it was (nothing prefilled or reset)."""
    model.reset()
    model.prefill([1, 2, 3])
    with pytest.raises(ValueError):
        model.stream([1, 2], 4, temperature=NAN, reset=False)
    with pytest.raises(ValueError, match="max_seq"):
        model.stream([1] * 62, 4, reset=False)  # 3 + 62 > max_seq 64
    assert model.n_past == 3


def test_tiny_normal_temperature_is_greedy_not_nan():
    """A tiny (but normal) temperature used to turn the logits into inf - inf = NaN."""
    z = np.array([5.0, 30.0, -20.0, 29.0])
    for t in (1e-307, np.finfo(np.float64).tiny, 1e-30):
        assert all(sample(z, SamplingParams(temperature=t, seed=s)) == 1 for s in range(5))


def test_sample_refuses_nan_logits():
    with pytest.raises(ValueError, match="NaN"):
        sample(np.array([0.0, NAN, 1.0]), SamplingParams())
    with pytest.raises(ValueError, match="NaN"):
        sample(np.array([0.0, NAN, 1.0]), SamplingParams(temperature=1.0, seed=0))
    with pytest.raises(ValueError, match="-inf"):
        sample(np.full(4, -INF), SamplingParams(temperature=1.0, seed=0))
    # +inf logits: only those can be drawn
    z = np.array([0.0, INF, 1.0, INF])
    assert {sample(z, SamplingParams(temperature=1.0, seed=s)) for s in range(40)} == {1, 3}
    assert sample(z, SamplingParams()) == 1
    with pytest.raises(TypeError, match="SamplingParams"):
        sample(z, dict(temperature=1.0))  # type: ignore[arg-type]


def test_penalty_and_filters_unchanged():
    z = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert sample(z, SamplingParams(repetition_penalty=10.0), history=[0]) == 1
    assert {sample(z, SamplingParams(temperature=1.0, top_k=2, seed=s)) for s in range(50)} == {0, 1}
    assert math.isclose(SamplingParams(temperature=np.float32(0.5)).temperature, 0.5)


# ----------------------------------------------------------------------------- finding 7: rlxc run

@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("hardening") / "tiny.gguf"
    rlxc.save(_model(tokenizer=True), path)
    return str(path)


@pytest.mark.parametrize("argv,word", [
    (["--temperature", "nan"], "temperature"),
    (["--temperature", "inf"], "temperature"),
    (["--temperature", "1e-320"], "temperature"),
    (["--repeat-penalty", "nan"], "--repeat-penalty"),
    (["--top-p", "nan"], "--top-p"),
    (["--min-p", "nan"], "--min-p"),
    (["--top-k", "-3"], "--top-k"),
    (["--seed", "-1"], "--seed"),
    (["-n", "-1"], "--max-tokens"),
])
def test_cli_run_refuses_bad_sampling_before_loading(tmp_path, gguf_file, capsys, argv, word):
    # checked before the model is loaded: a missing file is not what is reported
    assert cli.main(["run", str(tmp_path / "missing.gguf"), "--ids", "1 2", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlxc run: error: ") and word in err and err.count("\n") == 1
    assert cli.main(["run", gguf_file, "-p", "abc", *argv]) == 1
    assert word in capsys.readouterr().err


def test_cli_run_still_samples(gguf_file, capsys):
    assert cli.main(["run", gguf_file, "-p", "abc", "-n", "4", "--temperature", "0.8", "--top-k", "5",
                     "--seed", "1"]) == 0
    assert "tokens/s" in capsys.readouterr().err


# ----------------------------------------------------------------------------- finding 8: chat templates

# Each template is rendered in a child process (address space capped at 3 GiB, killed after
# CHILD_TIMEOUT s), so that an unbounded render fails the test instead of hanging or swapping.
CHILD_TIMEOUT = 60
CHILD = r'''
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import rlxc.tokenizer as T
args = json.loads(sys.stdin.read())
if args.get("limit") is not None:
    T.CHAT_TEMPLATE_TIME_LIMIT = args["limit"]
tok = T.Tokenizer()
tok.chat_template = args["template"]
t0 = time.monotonic()
try:
    out = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    res = {"ok": True, "len": len(out)}
except BaseException as e:
    res = {"ok": False, "type": type(e).__name__, "msg": str(e)[:400],
           "chat_error": isinstance(e, getattr(T, "ChatTemplateError", ())), "value_error": isinstance(e, ValueError)}
res["seconds"] = time.monotonic() - t0
print(json.dumps(res))
'''

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
BIG = "{% set s = 'x' * 4000000 %}"
RUNAWAY = {
    # time: loops, recursion
    "nested loops": LOOP,
    "nested ranges of 10**6": "{% for i in range(10**6) %}{% for j in range(10**6) %}{% endfor %}{% endfor %}",
    "loop over a filter": "{% for i in range(100000) %}{% for j in range(100000)|list %}{% endfor %}{% endfor %}",
    "binary recursion": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                        "{{ f(60) }}",
    "endless recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    # size: output, buffers, single operations
    "huge output": "{% for i in range(100000) %}{% for j in range(100000) %}" + "x" * 1000 + "{% endfor %}{% endfor %}",
    "huge macro output": "{% macro m() %}{% for i in range(100000) %}{% for j in range(100000) %}{{ 'y' * 1000 }}"
                         "{% endfor %}{% endfor %}{% endmacro %}{% set r = m() %}{{ r|length }}",
    "string repeat": "{{ 'x' * 10**10 }}",
    "list repeat": "{{ (range(100000)|list) * 100000 }}",
    "big power": "{{ 10 ** (10 ** 10) }}",
    "concat doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                       "{{ ns.s|length }}",
    "plus doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
                     "{{ ns.s|length }}",
    "center filter": "{{ 'x'|center(10**10) }}",
    "indent filter": "{{ 'x\ny'|indent(10**10) }}",
    "tojson indent": "{{ {'a': [1]}|tojson(indent=10**10) }}",
    "str.ljust": "{{ 'x'.ljust(10**10) }}",
    "printf width": "{{ '%10000000000d' % 1 }}",
    "printf star": "{{ '%*d' % (10**10, 1) }}",
    "format filter": "{{ '%10000000000d'|format(1) }}",
    "str.format width": "{{ '{:>10000000000}'.format(1) }}",
    "str.replace product": BIG + "{{ s.replace('', s)|length }}",
    "replace filter product": BIG + "{{ (s|replace('', s))|length }}",
    "str.join product": BIG + "{{ s.join(s)|length }}",
    "join filter product": BIG + "{{ (s|list)|join(s)|length }}",
    "lipsum": "{{ lipsum(10**9) }}",
    "huge source": "{# " + "x" * (4 << 20) + " #}",
}


def _render_in_child(template: str, limit: float | None = 1.0) -> dict:
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps({"template": template, "limit": limit}),
                         capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(RUNAWAY))
def test_runaway_chat_template_raises_quickly(case):
    res = _render_in_child(RUNAWAY[case])
    assert not res["ok"], res
    assert res["chat_error"] and res["value_error"], res
    assert "chat template" in res["msg"], res
    assert res["seconds"] < 10, res


def test_default_time_limit_stops_a_loop():
    res = _render_in_child(LOOP, limit=None)
    assert res["chat_error"] and "took longer than" in res["msg"], res
    assert res["seconds"] < 3 * rlxc.tokenizer.CHAT_TEMPLATE_TIME_LIMIT, res


def test_run_chat_with_a_looping_template_exits_with_one_line(tmp_path):
    """``rlxc run --chat`` on a GGUF whose template loops: one error line naming the file."""
    import subprocess
    import sys
    import tempfile
    m = _model()
    m.tokenizer = _tokenizer(chat_template=LOOP)
    path = tmp_path / "looping.gguf"
    rlxc.save(m, path)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "rlxc", "run", str(path), "--chat", "-p", "abc", "-n", "2"],
                         capture_output=True, text=True, timeout=CHILD_TIMEOUT, cwd=tempfile.gettempdir())
    assert out.returncode == 1, out.stderr
    err = out.stderr.strip()
    assert err.startswith("rlxc run: error: ") and "\n" not in err, err
    assert str(path) in err and "tokenizer.chat_template" in err and "took longer than" in err, err
    assert time.monotonic() - t0 < 3 * rlxc.tokenizer.CHAT_TEMPLATE_TIME_LIMIT + 10


GOOD_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] | trim }}\n"
    "{% else %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endif %}{% endfor %}"
    "{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{{ '%-6s|' % 'ab' }}{{ '{:>4}'.format(7) }}"
    "{{ ', '.join(['a', 'b']) }}{{ 'a-b'.replace('-', '+') }}{{ 'x' * 3 }}{{ 2 ** 10 }}{{ 'q'|center(5) }}"
    "{% for k, v in {'a': 1}.items() %}{{ loop.index }}{{ k }}={{ v }}{% if loop.last %};{% endif %}{% endfor %}"
    "{% set ns = namespace(n=0) %}{% for m in messages if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endfor %}"
    "{{ ns.n }}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def test_ordinary_templates_render_as_before():
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    tok = _tokenizer(chat_template=GOOD_TEMPLATE)
    msgs = [{"role": "system", "content": " be brief "}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "x" * 100000}]
    tools = [{"name": "f", "parameters": {"type": "object"}}]
    got = tok.apply_chat_template(msgs, tools=tools)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: __import__("json").dumps(x, indent=indent, ensure_ascii=False)
    want = env.from_string(GOOD_TEMPLATE).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                                 bos_token="<s>", eos_token="</s>")
    assert got == want
    tok.chat_template = CHAT
    assert tok.apply_chat_template(msgs[1:2], tokenize=True) == tok.encode("hi", add_special=False)
    # the template's own errors are unchanged
    tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
        tok.apply_chat_template(msgs)


def test_chat_template_error_names_the_template(tmp_path):
    from rlxc.tokenizer import ChatTemplateError, load
    m = _model()
    m.tokenizer = _tokenizer(chat_template="{% for i in range(10**6) %}{% endfor %}")
    path = tmp_path / "bad_template.gguf"
    rlxc.save(m, path)
    tok = load(path)
    assert tok is not None
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match=f"{path}: tokenizer.chat_template"):
        tok.apply_chat_template(msgs)
    with pytest.raises(ChatTemplateError, match="chat_template= argument"):
        tok.apply_chat_template(msgs, chat_template="{% for i in range(10**6) %}{% endfor %}")
    tok.chat_template = "{% for i in range(10**6) %}{% endfor %}{{ 'x' }}"  # no longer the file's
    with pytest.raises(ChatTemplateError, match="^tokenizer.chat_template"):
        tok.apply_chat_template(msgs)
