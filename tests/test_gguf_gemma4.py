"""Gemma 4 GGUF files (issue 6): rlxc.load and rlxc.save against transformers and llama.cpp.

The files are written here the way llama.cpp's convert_hf_to_gguf.py (class Gemma4Model) writes
them, from tiny random transformers 5.17 Gemma 4 text models (tests/test_hf_parity.py's
variants): tensor names from the gguf package's GEMMA4 name map, norms as they are (Gemma 4's
converter adds no 1), the ``*_swa`` keys for the sliding layers, a per-layer
sliding_window_pattern, head_count_kv / feed_forward_length arrays, shared_kv_layers, and a
rope_freqs tensor of 1 for the rotated pairs of the full-attention layers and 1e30 for the
others. Nothing of rlxc's writes these files, so they check the loader's mapping independently.

* rlxc.load(path, activations="f32") matches HF within F32_TOL (1e-4 relative) on the logits,
  for a forward and for prefill + decode, and yields the same layer fields as rlxc.from_hf;
* a Q8_0 file (the converter's --outtype q8_0: matrices Q8_0, F16 where the input width is not
  a multiple of 32, norms F32) is used in place: f32 activations match HF run on the file's
  dequantized weights within F32_TOL; 8-bit activations stay within test_hf_parity's bounds;
* llama.cpp (llama-cpp-python, skipped when it is not installed) loads every file and its
  logits are close to HF's: this shows the files are what llama.cpp expects;
* rlxc.save writes Gemma 4 files that rlxc.load reads back unchanged and llama.cpp runs;
* what llama.cpp would run differently raises NotImplementedError; a malformed file ValueError.

Every variant has a final logit softcap: llama.cpp caps Gemma 4 logits at 30 when the file has no
final_logit_softcapping key, and the converter writes the key only when the config has a cap,
so a model without one cannot be converted faithfully (test_absent_softcap_is_llama_cpps_30).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import rlxc  # noqa: E402
import test_hf_parity as P  # noqa: E402  (tiny model builders, tolerances)
from rlxc import loaders  # noqa: E402

T = P.T
VARIANTS = {  # test_hf_parity's Gemma 4 variants, each with a final softcap (see the module doc)
    "gemma4_ple": dict(final_logit_softcapping=30.0),   # per-layer embeddings
    "gemma4_kv": {},                                     # k_eq_v, KV sharing, double-wide MLP, cap 30
    "gemma4_hetero": dict(final_logit_softcapping=30.0),  # head_dim 32 / 1 kv head on full layers
}
# llama.cpp vs HF, measured on these files (1 thread): f32 <= 5.8e-4 (its K/V cache is f16);
# Q8_0 vs HF on the dequantized weights <= 1.5e-2 (llama.cpp rounds activations to Q8_0 too)
LLAMA_CPP_F32_BOUND = 2e-3


def build(variant: str, **over):
    return P.build(variant, **{**VARIANTS[variant], **over})


# ----------------------------------------------------------------------------- the converter's file

def write_gguf(hf, path, outtype: str = "f32") -> None:
    """``hf`` (a Gemma4ForCausalLM) as convert_hf_to_gguf.py writes it (--outtype f32 or q8_0),
    with a placeholder vocabulary (the tiny models have no tokenizer)."""
    c = hf.config
    L = c.num_hidden_layers
    arch = gguf.MODEL_ARCH.GEMMA4
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    swa = [t == "sliding_attention" for t in c.layer_types]
    lcs = [c.per_layer_config[i] if c.is_heterogeneous else c for i in range(L)]
    (hd_swa,) = {lcs[i].head_dim for i in range(L) if swa[i]}
    (hd_full,) = {lcs[i].head_dim for i in range(L) if not swa[i]}
    rp = c.rope_parameters
    first_shared = L - c.num_kv_shared_layers
    w.add_block_count(L)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    if c.use_double_wide_mlp:
        w.add_feed_forward_length([c.intermediate_size * (2 if i >= first_shared else 1) for i in range(L)])
    else:
        w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    kv_heads = [lc.num_key_value_heads for lc in lcs]
    w.add_head_count_kv(kv_heads[0] if len(set(kv_heads)) == 1 else kv_heads)
    w.add_rope_freq_base(rp["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rp["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    if c.final_logit_softcapping:
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    w.add_sliding_window(c.sliding_window)
    w.add_shared_kv_layers(c.num_kv_shared_layers)
    w.add_embedding_length_per_layer_input(c.hidden_size_per_layer_input or 0)
    w.add_sliding_window_pattern(swa)
    w.add_rope_dimension_count(hd_full)  # full layers: the whole head, rope_freqs picks the pairs
    w.add_rope_dimension_count_swa(hd_swa)
    V = c.vocab_size
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"<t{i}>" for i in range(3, V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [1] * (V - 3))
    w.add_add_bos_token(False)
    # proportional RoPE: ggml rotates pairs (k, k + head_dim/2) at pos * base**(-2k/head_dim) /
    # rope_freqs[k]; 1e30 leaves a pair unrotated
    n_rot = int(hd_full * rp["full_attention"]["partial_rotary_factor"] / 2)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), np.float32))
    names = gguf.get_tensor_name_map(arch, L)
    for name, t in hf.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if name.endswith("layer_scalar"):
            name += ".weight"
        new = names.get_name(name, try_suffixes=(".weight",))
        data = t.detach().float().numpy()
        if outtype == "f32" or data.ndim == 1 or new.endswith("_norm.weight"):
            w.add_tensor(new, data)
        else:
            try:
                q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
                w.add_tensor(new, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            except gguf.QuantError:  # input width not a multiple of 32: the converter falls back to F16
                w.add_tensor(new, data.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_with_file_weights(hf, path):
    """A copy of ``hf`` holding the file's tensors, dequantized by the gguf package."""
    reader = gguf.GGUFReader(str(path))
    data = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, hf.config.num_hidden_layers)
    m = copy.deepcopy(hf)
    with torch.no_grad():
        for name, t in m.state_dict().items():
            if name == "lm_head.weight" and hf.config.tie_word_embeddings:
                continue
            key = names.get_name(name + (".weight" if name.endswith("layer_scalar") else ""), try_suffixes=(".weight",))
            t.copy_(torch.from_numpy(np.array(data[key], np.float32)).reshape(t.shape))
    return m


def rewrite(src, dst, drop=(), keys=None, tensors=None) -> None:
    """``src`` with metadata keys dropped / added and tensors added (F32), for the error tests."""
    g = loaders.read_gguf(src)
    w = loaders._Writer()
    for k, v in {**{k: v for k, v in g.metadata.items() if k not in drop}, **(keys or {})}.items():
        w.add(k, v)
    for name, info in g.tensors.items():
        w.tensor(name, g.raw(name), info.type_id, info.shape)
    for name, arr in (tensors or {}).items():
        w.tensor(name, np.asarray(arr, np.float32), 0, tuple(reversed(np.shape(arr))))
    w.write(str(dst))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(hf model, f32 file, q8_0 file) per variant, built once."""
    cache = {}

    def get(variant):
        if variant not in cache:
            hf = build(variant)
            d = tmp_path_factory.mktemp(variant)
            write_gguf(hf, d / "f32.gguf")
            write_gguf(hf, d / "q8_0.gguf", "q8_0")
            cache[variant] = (hf, d / "f32.gguf", d / "q8_0.gguf")
        return cache[variant]
    return get


# ----------------------------------------------------------------------------- rlxc.load vs HF

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fields_are_from_hfs(variant, files):
    hf, path, _ = files(variant)
    got, ref = rlxc.load(path), rlxc.from_hf(hf)
    assert got.arch == "gemma4" and got.final_softcap == ref.final_softcap
    assert [l.fields() for l in got.layers] == [l.fields() for l in ref.layers]
    assert got.embed_scale == ref.embed_scale
    if ref.ple is None:
        assert got.ple is None
    else:
        for k in ("embed_scale", "proj_scale", "eps", "input_scale", "num_layers", "dim"):
            assert got.ple[k] == pytest.approx(ref.ple[k], rel=1e-7), k


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_f32_file_matches_hf(variant, files):
    hf, path, _ = files(variant)
    model = rlxc.load(path, activations="f32")
    assert model.layers[0].weight_type("q_proj") == "f32"
    x = P.token_ids(T, seed=1)
    ref = P.hf_logits(hf, x)
    assert P.rel_err(model.forward(x), ref) <= P.F32_TOL
    model.reset()
    half = T // 2
    got = [model.prefill(x[:half])] + [model.decode(int(t))[None] for t in x[half:]]
    assert P.rel_err(np.concatenate(got), ref) <= P.F32_TOL


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_q8_0_file_in_place(variant, files):
    hf, _, path = files(variant)
    model = rlxc.load(path, activations="f32")
    types = {model.layers[0].weight_type(s) for s in ("q_proj", "o_proj", "down_proj")}
    assert types == {"q8_0"}  # used as stored
    if model.ple is not None:
        assert model.layers[0].weight_type("ple_proj") == "f16"  # input width 16: the converter's F16
    x = P.token_ids(T, seed=3)
    deq = P.hf_logits(hf_with_file_weights(hf, path), x)
    assert P.rel_err(model.forward(x), deq) <= P.F32_TOL
    model.reset()
    got = [model.prefill(x[:T // 2])] + [model.decode(int(t))[None] for t in x[T // 2:]]
    assert P.rel_err(np.concatenate(got), deq) <= P.F32_TOL


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_q8_0_activations_within_parity_bounds(variant, tmp_path):
    """8-bit activations (the default): test_hf_parity's Q8_0 bounds, on its quantization models."""
    hf = build(variant, seed=2, std=0.07, tie_word_embeddings=True)
    write_gguf(hf, tmp_path / "q.gguf", "q8_0")
    model = rlxc.load(tmp_path / "q.gguf")
    x = P.token_ids(P.QT, seed=2)
    got = model.forward(x)
    assert P.rel_err(got, P.hf_logits(hf_with_file_weights(hf, tmp_path / "q.gguf"), x)) <= P.QDEQ_BOUND["q8_0"]
    ref = P.hf_logits(hf, x)
    assert float(np.mean(got.argmax(-1) == ref.argmax(-1))) >= P.TOP1_MIN
    assert float(P.kl(ref, got).mean()) <= P.KL_MAX["q8_0"]


# ----------------------------------------------------------------------------- rlxc.save

@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_save_round_trip(variant, wtype, tmp_path):
    model = rlxc.from_hf(build(variant), weights=wtype)
    rlxc.save(model, tmp_path / "s.gguf")
    back = rlxc.load(tmp_path / "s.gguf", kv_type=model.kv_type)  # (load keeps a quantized model's K/V in f16)
    assert [l.fields() for l in back.layers] == [l.fields() for l in model.layers]
    x = P.token_ids(T)
    np.testing.assert_array_equal(back.forward(x), model.forward(x))


def test_save_refuses_what_llama_cpp_runs_differently(tmp_path):
    model = rlxc.from_hf(build("gemma4_kv"))
    model.layers[1].attn_scale = 0.5
    with pytest.raises(NotImplementedError, match="attn_scale"):
        rlxc.save(model, tmp_path / "x.gguf")
    model = rlxc.from_hf(build("gemma4_ple"))
    model.layers[2].sliding_window = 2  # sliding layers 0 and 2 disagree on the window
    with pytest.raises(NotImplementedError, match="sliding_window"):
        rlxc.save(model, tmp_path / "x.gguf")


# ----------------------------------------------------------------------------- unsupported / malformed

# layers S, F, F, S, S, F with the last two sharing K/V: transformers takes layer 4's from layer 3
# (the last sliding one before), llama.cpp from layer 4 - 2 = 2, a full-attention layer
_BAD_SHARING = dict(num_hidden_layers=6, num_kv_shared_layers=2, layer_types=[
    "sliding_attention", "full_attention", "full_attention", "sliding_attention", "sliding_attention",
    "full_attention"])


def test_unsupported_raise_not_implemented(tmp_path, files):
    _, path, _ = files("gemma4_kv")
    bad = tmp_path / "bad.gguf"
    for keys, tensors, match in (({"gemma4.expert_count": 4, "gemma4.expert_used_count": 2, "gemma4.expert_gating_func": 2}, None,
                                  "expert_gating_func"),
                                 ({"gemma4.rope.scaling.type": "linear", "gemma4.rope.scaling.factor": 2.0},
                                  None, "rope scaling"),
                                 (None, {"blk.0.attn_q.bias": np.zeros(64)}, "attn_q.bias")):
        rewrite(path, bad, keys=keys, tensors=tensors)
        with pytest.raises(NotImplementedError, match=match):
            rlxc.load(bad)
    hf = build("gemma4_kv", **_BAD_SHARING)
    write_gguf(hf, bad)
    with pytest.raises(NotImplementedError, match="share the K/V"):
        rlxc.load(bad)
    with pytest.raises(NotImplementedError, match="kv_shared_from"):
        rlxc.save(rlxc.from_hf(hf), tmp_path / "x.gguf")
    with pytest.raises(NotImplementedError, match="gemma4"):
        loaders.gguf_hf_config(loaders.read_gguf(path))


def test_malformed_raise_value_error(tmp_path, files):
    _, path, _ = files("gemma4_kv")
    bad = tmp_path / "bad.gguf"
    for drop, match in ((("gemma4.attention.sliding_window_pattern",), "sliding_window_pattern"),
                        (("gemma4.attention.key_length_swa",), "key_length_swa"),
                        (("gemma4.embedding_length_per_layer_input",), "embedding_length_per_layer_input")):
        rewrite(path, bad, drop=drop)
        with pytest.raises(ValueError, match=match):
            rlxc.load(bad)
    g = loaders.read_gguf(path)
    w = loaders._Writer()  # the file without its rope_freqs tensor
    for k, v in g.metadata.items():
        w.add(k, v)
    for name, info in g.tensors.items():
        if name != "rope_freqs.weight":
            w.tensor(name, g.raw(name), info.type_id, info.shape)
    w.write(str(bad))
    with pytest.raises(ValueError, match="rope_freqs"):
        rlxc.load(bad)


def test_absent_softcap_is_llama_cpps_30(tmp_path):
    hf = P.build("gemma4_ple")  # no final softcap: the converter writes no key
    write_gguf(hf, tmp_path / "nocap.gguf")
    assert "gemma4.final_logit_softcapping" not in loaders.read_gguf(tmp_path / "nocap.gguf").metadata
    assert rlxc.load(tmp_path / "nocap.gguf").final_softcap == 30.0


# ----------------------------------------------------------------------------- llama.cpp

def llama_cpp_logits(path, tokens) -> np.ndarray:
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_batch=64, n_threads=1, logits_all=True, verbose=False)
    llm.eval([int(t) for t in tokens])
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    del llm
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_llama_cpp_runs_the_files(variant, files):
    hf, path, qpath = files(variant)
    x = P.token_ids(T)
    ref = P.hf_logits(hf, x)
    got = llama_cpp_logits(path, x)
    assert P.rel_err(got, ref) <= LLAMA_CPP_F32_BOUND
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    deq = P.hf_logits(hf_with_file_weights(hf, qpath), x)
    got = llama_cpp_logits(qpath, x)
    assert P.rel_err(got, deq) <= P.QDEQ_BOUND["q8_0"]
    assert float(np.mean(got.argmax(-1) == deq.argmax(-1))) >= P.TOP1_MIN


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_llama_cpp_runs_saved_files(variant, tmp_path):
    hf = build(variant)
    rlxc.save(rlxc.from_hf(hf), tmp_path / "s.gguf")
    x = P.token_ids(T)
    assert P.rel_err(llama_cpp_logits(tmp_path / "s.gguf", x), P.hf_logits(hf, x)) <= LLAMA_CPP_F32_BOUND


def test_llama_cpp_caps_a_file_without_the_key_at_30(tmp_path):
    """The other side of test_absent_softcap_is_llama_cpps_30: llama.cpp agrees with rlxc, not HF."""
    hf = P.build("gemma4_ple")
    write_gguf(hf, tmp_path / "nocap.gguf")
    x = P.token_ids(T)
    got = llama_cpp_logits(tmp_path / "nocap.gguf", x)
    assert P.rel_err(got, rlxc.load(tmp_path / "nocap.gguf").forward(x)) <= LLAMA_CPP_F32_BOUND
    assert P.rel_err(got, P.hf_logits(hf, x)) > 10 * LLAMA_CPP_F32_BOUND
