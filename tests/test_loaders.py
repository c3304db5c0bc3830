"""Loaders on tiny files (issue 6): Hugging Face folders (safetensors, bf16, sharded) through
rlxc.load match rlxc.from_hf; rlxc.save -> rlxc.load round trips; llama.cpp runs what rlxc.save
writes (when llama-cpp-python is installed); corrupt / truncated / unsupported files raise
ValueError / NotImplementedError; the GGUF reader agrees with the gguf package; tokenizers,
generation and Model.prefill(logits=...)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import rlxc  # noqa: E402
import test_hf_parity as P  # noqa: E402  (tiny model builders)
from rlxc import loaders  # noqa: E402
from rlxc.generate import SamplingParams, sample  # noqa: E402
from rlxc.tokenizer import SPMTokenizer  # noqa: E402

T = 16
# every config feature llama.cpp can express for the architecture (no sliding window on
# llama/qwen2/starcoder2/phi3; llama.cpp derives the Gemma 2/3 attention scale from head_dim)
SAVE_ARCHS = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", dict(use_sliding_window=False, layer_types=None)),
    # llama.cpp's qwen3 takes q/k/v biases but no o_proj bias (test_save_refuses_a_bias_llama_cpp_drops)
    "qwen3": ("qwen3", dict(use_sliding_window=False, layer_types=None, attention_bias=False)),
    "gemma": ("gemma", {}),
    "gemma2": ("gemma2", dict(query_pre_attn_scalar=16)),
    "gemma3": ("gemma3", dict(query_pre_attn_scalar=16)),
    "starcoder2": ("starcoder2", dict(sliding_window=None)),
    "phi3": ("phi3", dict(sliding_window=None)),
    # mixture of experts, every layer (as llama.cpp runs these architectures)
    "qwen3_moe": ("qwen3_moe", dict(mlp_only_layers=[], use_sliding_window=False, attention_bias=False)),
    "mixtral": ("mixtral", dict(sliding_window=None)),
    "qwen2_moe": ("qwen2_moe", dict(use_sliding_window=False, layer_types=None, norm_topk_prob=False)),
    "gemma4_moe": ("gemma4_moe", {}),
}


def ids(n: int = T, seed: int = 0) -> np.ndarray:
    return P.token_ids(n, seed)


# ----------------------------------------------------------------------------- HF folders

HF_ARCHS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "starcoder2", "phi3",
            "gemma4_ple", "gemma4_kv",
            # experts as the hub keeps them (one tensor per expert: Qwen's mlp.experts.E.*, Mixtral's
            # block_sparse_moe.experts.E.w1/w2/w3) and as transformers stacks them (Gemma 4)
            "qwen3_moe", "mixtral", "qwen2_moe", "gemma4_moe"]


@pytest.mark.parametrize("arch", HF_ARCHS)
def test_hf_folder_matches_from_hf(arch, tmp_path):
    hf = P.build(arch)
    hf.save_pretrained(tmp_path)
    assert any(f.endswith(".safetensors") for f in os.listdir(tmp_path))
    x = ids()
    for wtype in ("q4_0", "f32"):
        got = rlxc.load(tmp_path, weights=wtype, kv_type="f32")  # (load's default for q4_0 is f16 K/V)
        ref = rlxc.from_hf(hf, weights=wtype)
        assert got.tokenizer is None  # the tiny folders have no tokenizer files
        assert [l.fields() for l in got.layers] == [l.fields() for l in ref.layers]
        np.testing.assert_array_equal(got.forward(x), ref.forward(x))


def test_hf_folder_missing_expert(tmp_path):
    from safetensors.numpy import load_file, save_file
    P.build("qwen3_moe").save_pretrained(tmp_path)
    st = tmp_path / "model.safetensors"
    tensors = load_file(st)
    del tensors["model.layers.1.mlp.experts.5.up_proj.weight"]
    save_file(tensors, st, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="layer 1: the experts' up matrices are for experts"):
        rlxc.load(tmp_path)


def test_hf_folder_bf16_sharded(tmp_path):
    """bf16 safetensors (no torch in the loader: bits shifted into float32) in several shards."""
    hf = P.build("gemma3")
    hf.to(torch.bfloat16).save_pretrained(tmp_path, max_shard_size="40KB")
    files = os.listdir(tmp_path)
    assert "model.safetensors.index.json" in files and sum(f.endswith(".safetensors") for f in files) > 2
    ref = rlxc.from_hf(hf.float(), weights="q8_0")
    got = rlxc.load(tmp_path, weights="q8_0", kv_type="f32")
    np.testing.assert_array_equal(got.forward(ids()), ref.forward(ids()))


def hf_config_context(folder) -> int:
    import json
    with open(os.path.join(folder, "config.json")) as f:
        return int(json.load(f)["max_position_embeddings"])


def test_hf_folder_default_is_q4_0_and_progress(tmp_path, capsys):
    P.build("llama").save_pretrained(tmp_path)
    m = rlxc.load(tmp_path)
    assert m.weights == "q4_0" and m.layers[0].weight_type("q_proj") == "q4_0"
    assert m.kv_type == "f16" and m.max_seq == hf_config_context(tmp_path)  # quantized, q8: f16 K/V, its own context
    assert m.layers[0].weight_type("attn_norm") == "f32"


def test_hf_folder_errors(tmp_path):
    hf = P.build("llama")
    hf.save_pretrained(tmp_path)
    st = tmp_path / "model.safetensors"
    data = st.read_bytes()
    # truncated data
    st.write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match="truncated"):
        rlxc.load(tmp_path)
    # header length beyond the file
    st.write_bytes((10 ** 9).to_bytes(8, "little") + data[8:100])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        rlxc.load(tmp_path)
    # not JSON
    n = int.from_bytes(data[:8], "little")
    st.write_bytes(data[:8] + b"{" * n + data[8 + n:])
    with pytest.raises(ValueError, match="corrupt safetensors header"):
        rlxc.load(tmp_path)
    # unsupported dtype
    header = json.loads(data[8:8 + n])
    k = next(k for k in header if k != "__metadata__")
    header[k]["dtype"] = "F8_E4M3"
    hb = json.dumps(header).encode()
    st.write_bytes(len(hb).to_bytes(8, "little") + hb + data[8 + n:])
    with pytest.raises((NotImplementedError, ValueError)):
        rlxc.load(tmp_path)
    # unknown model type
    st.write_bytes(data)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba"}))
    with pytest.raises(NotImplementedError, match="mamba"):
        rlxc.load(tmp_path)
    for bad in ("{not json", "[1, 2]", "[" * 100_000 + "]" * 100_000):  # the last: RecursionError in json
        (tmp_path / "config.json").write_text(bad)
        with pytest.raises(ValueError, match="JSON"):
            rlxc.load(tmp_path)
    (tmp_path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    with pytest.raises(ValueError, match="JSON"):
        rlxc.load(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError):
        rlxc.load(empty)


# ----------------------------------------------------------------------------- save / load GGUF

def saved(arch: str, tmp_path, wtype: str = "q8_0", **kw):
    name, over = SAVE_ARCHS[arch]
    hf = P.build(name, **{**over, **kw})
    model = rlxc.from_hf(hf, weights=wtype)
    path = tmp_path / f"{arch}.gguf"
    rlxc.save(model, path)
    return hf, model, path


@pytest.mark.parametrize("arch", list(SAVE_ARCHS))
def test_save_load_round_trip(arch, tmp_path):
    hf, model, path = saved(arch, tmp_path)
    back = rlxc.load(path, kv_type=model.kv_type)
    assert back.arch == loaders.read_gguf(path).metadata["general.architecture"]
    for a, b in zip(model.layers, back.layers):
        for s in a.used_weights():
            ta = a.weight_type(s)
            assert b.weight_type(s) == ta, s
            if ta != "f32":  # the quantized bytes are written and used as they are
                np.testing.assert_array_equal(a.weight_raw(s), b.weight_raw(s))
    x = ids()
    # Gemma norms are stored as 1 + w: float rounding only
    np.testing.assert_allclose(back.forward(x), model.forward(x), rtol=0, atol=2e-5 * np.abs(model.forward(x)).max())
    # and a second save of the loaded model gives the same file contents
    rlxc.save(back, tmp_path / "again.gguf")
    g1, g2 = loaders.read_gguf(path), loaders.read_gguf(tmp_path / "again.gguf")
    assert list(g1.tensors) == list(g2.tensors)
    for n in g1.tensors:
        np.testing.assert_array_equal(g1.raw(n), g2.raw(n))


@pytest.mark.parametrize("arch,over,match", [
    ("qwen3", dict(use_sliding_window=False, layer_types=None, attention_bias=True), "o_proj.bias"),
    ("qwen3_moe", dict(use_sliding_window=False), "experts on some layers"),  # mlp_only_layers=[2]
    ("qwen2_moe", dict(use_sliding_window=False, layer_types=None, norm_topk_prob=True), "moe_norm_topk"),
])
def test_save_refuses_what_llama_cpp_would_not_run(arch, over, match, tmp_path):
    """A file llama.cpp cannot load (an extra bias tensor) or would run differently (experts on
    every layer, renormalisation hard-coded per architecture) is not written."""
    model = rlxc.from_hf(P.build(arch, **over))
    with pytest.raises(NotImplementedError, match=match):
        rlxc.save(model, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_save_reader_matches_gguf_package(tmp_path):
    _, _, path = saved("gemma3", tmp_path)
    ours = loaders.read_gguf(path)
    ref = gguf.GGUFReader(path)
    assert [t.name for t in ref.tensors] == list(ours.tensors)
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.type_name == t.tensor_type.name
        assert list(mine.shape) == [int(d) for d in t.shape]
        assert mine.offset == t.data_offset and mine.nbytes == t.n_bytes
        np.testing.assert_array_equal(ours.raw(t.name).reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1))
    for k, f in ref.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        mv = ours.metadata[k]
        if isinstance(mv, np.ndarray):
            np.testing.assert_array_equal(mv, np.asarray(v))
        elif isinstance(v, float):
            assert abs(mv - v) <= 1e-7 * abs(v)
        else:
            assert mv == v, k
    for tid, (name, block, size) in loaders.GGML_TYPES.items():
        qt = gguf.GGMLQuantizationType(tid)
        assert qt.name == name and gguf.GGML_QUANT_SIZES[qt] == (block, size)


def test_save_refuses_what_llama_cpp_cannot_express(tmp_path):
    hf = P.build("mistral")  # sliding window on every layer: llama.cpp's llama has none
    with pytest.raises(NotImplementedError, match="sliding window"):
        rlxc.save(rlxc.from_hf(hf), tmp_path / "x.gguf")
    hf = P.build("gemma2")  # query_pre_attn_scalar 24 != head_dim 16
    with pytest.raises(NotImplementedError, match="attn_scale"):
        rlxc.save(rlxc.from_hf(hf), tmp_path / "x.gguf")


def test_llama_gguf_qk_rows_are_unpermuted(tmp_path):
    """The file holds llama.cpp's interleaved-RoPE row order; the loaded layer holds HF's."""
    hf, model, path = saved("llama", tmp_path)
    g = loaders.read_gguf(path)
    l0 = model.layers[0]
    stored = g.raw("blk.0.attn_q.weight")
    assert not np.array_equal(stored, l0.weight_raw("q_proj"))
    np.testing.assert_array_equal(loaders._unpermute_rows(stored, l0.num_q_heads), l0.weight_raw("q_proj"))
    np.testing.assert_array_equal(loaders._unpermute_rows(g.raw("blk.0.attn_k.weight"), l0.num_kv_heads),
                                  l0.weight_raw("k_proj"))


# ----------------------------------------------------------------------------- llama.cpp runs rlxc.save's files

def _llama_cpp_logits(path, tokens, threads=1):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_batch=64, n_threads=threads, logits_all=True, verbose=False)
    llm.eval([int(t) for t in tokens])
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


@pytest.mark.parametrize("arch,kw", [("llama", {}), ("gemma3", dict(num_hidden_layers=6, layer_types=None,
                                                                      rope_local_base_freq=10000.0))])
def test_llama_cpp_loads_saved_gguf(arch, kw, tmp_path):
    """llama.cpp runs the files rlxc.save writes (llama: q/k rows permuted for its interleaved
    RoPE; gemma3: norms as 1 + w, its own sliding pattern (every 6th layer full), local base 1e4).

    f32 weights: llama.cpp vs rlxc max rel err measured 2.6e-4 (llama) / 4.0e-4 (gemma3), from
    llama.cpp's f16 K/V cache (rlxc vs HF: 4e-7). q8_0: both round activations to Q8_0 but not
    identically; measured 1.7e-2 / 2.2e-2, as large as either one's distance from HF float
    (2.3e-2), so that bound is a noise bound, not a mapping check.
    """
    x = ids()
    for wtype, bound in (("f32", 2e-3), ("q8_0", 5e-2)):
        hf, model, path = saved(arch, tmp_path, wtype=wtype, **kw)
        ref = model.forward(x).astype(np.float64)
        got = _llama_cpp_logits(path, x)
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        assert rel < bound, (wtype, rel)
        if wtype == "f32":
            assert (got.argmax(-1) == ref.argmax(-1)).all()


# ----------------------------------------------------------------------------- corrupt / unsupported GGUF

def test_gguf_truncated_and_corrupt(tmp_path):
    _, _, path = saved("llama", tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "bad.gguf"
    g = loaders.read_gguf(path)
    cuts = [0, 3, 10, 23, 40, 200, 1000, g.data_offset - 5, g.data_offset + 10, len(data) - 1]
    for cut in cuts:
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError):
            rlxc.load(bad)
    bad.write_bytes(b"GGUX" + data[4:])
    with pytest.raises(ValueError, match="not a GGUF"):
        rlxc.load(bad)
    bad.write_bytes(data[:4] + (7).to_bytes(4, "little") + data[8:])
    with pytest.raises(ValueError, match="version"):
        rlxc.load(bad)
    bad.write_bytes(data[:8] + (2 ** 62).to_bytes(8, "little") + data[16:])
    with pytest.raises(ValueError, match="corrupt"):
        rlxc.load(bad)


def test_gguf_fuzzed_headers_raise_cleanly(tmp_path):
    """Random byte flips in the header: a clear exception or a model, never a crash."""
    _, _, path = saved("llama", tmp_path)
    data = bytearray(path.read_bytes())
    g = loaders.read_gguf(path)
    rng = np.random.default_rng(0)
    bad = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "error": 0}
    for trial in range(150):
        d = bytearray(data)
        for pos in rng.integers(4, g.data_offset, size=3):
            d[pos] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(d))
        try:
            m = rlxc.load(bad)
            m.forward([0, 1, 2])
            outcomes["ok"] += 1
        except (ValueError, NotImplementedError, IndexError):
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def write_tiny_gguf(path, arch="llama", q_type="F32", extra=None, H=64):
    """A one-layer llama-shaped GGUF written by hand (q_proj in ``q_type``)."""
    rng = np.random.default_rng(0)
    F, V = 128, 32
    w = loaders._Writer()
    w.add("general.architecture", arch)
    for k, v in dict(context_length=64, embedding_length=H, block_count=1, feed_forward_length=F,
                     **{"attention.head_count": 4, "attention.head_count_kv": 2,
                        "attention.layer_norm_rms_epsilon": 1e-5}).items():
        w.add(f"{arch}.{k}", v)

    def t(name, shape, qt="F32"):
        arr = (rng.standard_normal(shape[::-1]) * 0.1).astype(np.float32)
        tid = gguf.GGMLQuantizationType[qt]
        if qt == "IQ2_XXS":  # no quantizer in gguf: random codes under a small fp16 scale per 256 (at byte 0)
            data = rng.integers(0, 256, (arr.size // 256, 66), dtype=np.uint8)
            data[:, :2] = np.full((len(data), 1), 0.01, np.float16).view(np.uint8)
            data = data.reshape(shape[1], -1)
        else:
            data = arr if qt == "F32" else gguf.quants.quantize(arr, tid)
        w.tensor(name, data, int(tid), shape)

    t("token_embd.weight", (H, V))
    t("output_norm.weight", (H,))
    for n, shape in (("attn_norm", (H,)), ("attn_q", (H, H)), ("attn_k", (H, H // 2)), ("attn_v", (H, H // 2)),
                     ("attn_output", (H, H)), ("ffn_norm", (H,)), ("ffn_gate", (H, F)), ("ffn_up", (H, F)),
                     ("ffn_down", (F, H))):
        t(f"blk.0.{n}.weight", shape, q_type if n == "attn_q" else "F32")
    for name, shape in (extra or {}).items():
        t(name, shape)
    w.write(str(path))


def test_gguf_unsupported_arch_tensor_type_and_tensor(tmp_path):
    p = tmp_path / "t.gguf"
    write_tiny_gguf(p)
    m = rlxc.load(p)
    assert m.layers[0].weight_type("q_proj") == "f32" and m.tokenizer is None
    write_tiny_gguf(p, arch="mamba")
    with pytest.raises(NotImplementedError, match="mamba"):
        rlxc.load(p)
    write_tiny_gguf(p, q_type="IQ2_XXS", H=256)
    with pytest.raises(NotImplementedError, match="IQ2_XXS"):
        rlxc.load(p)
    m = rlxc.load(p, weights="q8_0")  # converted at load (gguf's reference dequantizer)
    assert m.layers[0].weight_type("q_proj") == "q8_0"
    assert np.isfinite(m.forward([1, 2, 3])).all()
    write_tiny_gguf(p, extra={"blk.0.ffn_gate_exps.weight": (64, 8)})
    with pytest.raises(NotImplementedError, match="ffn_gate_exps"):
        rlxc.load(p)


def test_gguf_in_place_views_keep_the_mapping_alive(tmp_path):
    import gc
    _, model, path = saved("qwen3", tmp_path)
    m = rlxc.load(path)
    want = m.forward(ids())
    g = m._gguf
    del m._gguf, g
    gc.collect()
    np.testing.assert_array_equal(m.forward(ids()), want)  # the layers still hold the views


# ----------------------------------------------------------------------------- tokenizers

def tiny_spm():
    toks = ["<unk>", "<s>", "</s>", "<start>", "\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "abc", "  "]
    toks += [f"<0x{i:02X}>" for i in range(256)]
    scores = [0, 0, 0, 0, -1, -2, -2, -2, -1.5, -1, -0.5, -3, 0] + [0] * 256
    types = [2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4] + [6] * 256
    return SPMTokenizer(toks, scores, types, bos_id=1, eos_id=2, unk_id=0, add_space_prefix=True)


def test_spm_tokenizer_merges_by_score():
    tok = tiny_spm()
    # " ab" -> "▁ab" (highest score), bytes for "é", the user-defined "  " split off first
    assert tok.encode("ab", add_special=False) == [tok.token_to_id["\u2581ab"]]
    e = tok.encode("abc", add_special=False)
    assert [tok.tokens[i] for i in e] == ["\u2581ab", "c"]
    assert tok.encode("é", add_special=False)[1:] == [tok.token_to_id["<0xC3>"], tok.token_to_id["<0xA9>"]]
    assert tok.encode("a  b", add_special=False)[1] == tok.token_to_id["  "]
    assert tok.encode("x<start>a", parse_special=True)[0] == 1
    assert tok.token_to_id["<start>"] in tok.encode("<start>a", parse_special=True)
    assert tok.token_to_id["<start>"] not in tok.encode("<start>a", parse_special=False)
    for s in ["ab abc", "é ü 🤖", "a b\nc"]:  # (after "  " llama.cpp adds a prefix space again)
        assert tok.decode(tok.encode(s)) == s
    d = tok.decoder()
    assert "".join(d.push(i) for i in tok.encode("é🤖", add_special=False)) + d.flush() == "é🤖"
    md = tok.gguf_metadata()
    assert md["tokenizer.ggml.model"][0] == "llama" and len(md["tokenizer.ggml.tokens"][0]) == tok.vocab_size


def test_hf_tokenizer_folder_and_chat_template(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(["hello world, the quick brown fox"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.save(str(tmp_path / "tokenizer.json"))
    tmpl = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}<|im_end|>{% endfor %}" \
           "{% if add_generation_prompt %}<s>assistant: {% endif %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(bos_token="<s>", eos_token="</s>",
                                                                    chat_template=tmpl)))
    tok = rlxc.tokenizer.load(tmp_path)
    assert tok.eos_id == 2 and tok.eog_ids >= {2, 3}
    s = "hello quick fox"
    assert tok.decode(tok.encode(s)) == s
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<s>user: hi<|im_end|><s>assistant: "
    chat_ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True)
    assert 3 in chat_ids and chat_ids.count(1) == 2


# ----------------------------------------------------------------------------- generation

class _Tok:
    """A stand-in tokenizer: token i is the character chr(65 + i % 26)."""
    eog_ids = frozenset()

    def decoder(self):
        class D:
            def push(self, i):
                return chr(65 + i % 26)

            def flush(self):
                return ""
        return D()

    def encode(self, text, add_special=True, parse_special=False):
        return [ord(c) - 65 for c in text]


def test_prefill_logits_last_and_none():
    m = rlxc.from_hf(P.build("gemma3"), weights="q8_0")
    x = ids()
    full = m.forward(x)
    m.reset()
    tol = 1e-5 * np.abs(full).max()  # the lm_head kernels for 1 row and for many may round differently
    np.testing.assert_allclose(m.prefill(x, logits="last"), full[-1], rtol=0, atol=tol)
    m.reset()
    assert m.prefill(x[:5], logits="none") is None and m.n_past == 5
    np.testing.assert_allclose(m.prefill(x[5:]), full[5:], rtol=0, atol=tol)
    with pytest.raises(ValueError):
        m.prefill(x, logits="some")


def test_generate_greedy_sampling_stop_stream():
    m = rlxc.from_hf(P.build("llama"), weights="q8_0")
    prompt = list(ids(6))
    out = m.generate(prompt, 12)
    assert isinstance(out, list) and len(out) == 12
    # greedy == argmax loop
    m.reset()
    z, want = m.prefill(prompt, logits="last"), []
    for _ in range(12):
        want.append(int(np.argmax(z)))
        z = m.decode(want[-1])
    assert out == want
    assert list(m.generate(prompt, 12, stream=True)) == want
    a = m.generate(prompt, 12, temperature=1.0, top_k=20, top_p=0.9, min_p=0.05, seed=3)
    b = m.generate(prompt, 12, temperature=1.0, top_k=20, top_p=0.9, min_p=0.05, seed=3)
    assert a == b
    # EOS stops (not included); text + stop strings with a stand-in tokenizer
    m.tokenizer = _Tok()
    m.tokenizer.eog_ids = frozenset({want[3]}) if want[3] not in want[:3] else frozenset()
    text = m.generate(prompt, 12)
    full = "".join(chr(65 + i % 26) for i in want)
    if m.tokenizer.eog_ids:
        assert text == full[:3]
    m.tokenizer.eog_ids = frozenset()
    assert m.generate(prompt, 12) == full
    assert "".join(m.generate(prompt, 12, stream=True)) == full
    stop = full[5:7]
    assert m.generate(prompt, 12, stop=[stop]) == full[:full.find(stop)]
    with pytest.raises(ValueError):
        m.generate(prompt, 4, temperature=-1)


def test_sample_filters():
    z = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert sample(z, SamplingParams()) == 0
    draws = {sample(z, SamplingParams(temperature=1.0, top_k=2, seed=s)) for s in range(50)}
    assert draws == {0, 1}
    draws = {sample(z, SamplingParams(temperature=1.0, top_p=0.5, seed=s)) for s in range(50)}
    assert draws == {0}
    draws = {sample(z, SamplingParams(temperature=1.0, min_p=0.5, seed=s)) for s in range(50)}
    assert draws == {0, 1}
    # repetition penalty turns the greedy choice
    assert sample(np.array([2.0, 1.9]), SamplingParams(repetition_penalty=1.5), history=[0]) == 1


def test_bpe_tokenizer_from_gguf_keys_matches_tokenizers(tmp_path):
    """A GGUF "gpt2" tokenizer (tokens + merges + types, pre 'gpt2') encodes like the byte-level
    BPE it came from, and survives rlxc.save -> rlxc.load."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from rlxc.tokenizer import BPETokenizer
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    corpus = ["Hello world, the quick brown fox jumps over the lazy dog 123 4567!", "naïve café ünïcode 🤖"] * 30
    t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=128 + 256, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(t.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    types = [3 if s == "<|endoftext|>" else 1 for s in tokens]
    tok = BPETokenizer(tokens, merges, types, "gpt2", eos_id=tokens.index("<|endoftext|>"))
    for s in ["Hello world, the quick brown fox", "  spaces\n\nand 12345 numbers", "naïve café 🤖 ünïcode"]:
        assert tok.encode(s) == t.encode(s).ids, s
        assert tok.decode(tok.encode(s)) == s
    assert tok.eog_ids == {tok.eos_id}
    # through a GGUF file
    hf = P.build("qwen2", vocab_size=len(tokens), use_sliding_window=False, layer_types=None)
    m = rlxc.from_hf(hf, weights="q8_0")
    m.tokenizer = tok
    rlxc.save(m, tmp_path / "bpe.gguf")
    back = rlxc.load(tmp_path / "bpe.gguf")
    assert isinstance(back.tokenizer, BPETokenizer)
    assert back.tokenizer.encode("Hello world 🤖") == tok.encode("Hello world 🤖")
