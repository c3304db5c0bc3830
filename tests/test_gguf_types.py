"""GGUF files in the weight types issue 14 adds (Q4_1, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS), made by the
newest llama.cpp's own llama-quantize (tests/data/make_quantized.sh): each runs in place from the memory
map and, with
f32 activations, matches transformers run on the dequantized weights to 1e-4; with q8
activations it stays close (top-1 and KL against the f32 run) and within llama.cpp's own numerics
of llama.cpp's logits of the same file."""

from __future__ import annotations

import os

import numpy as np
import pytest

rlxc = pytest.importorskip("rlxc")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc import ops  # noqa: E402
from test_hf_parity import build, hf_logits, rel_err, token_ids  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")
SLOTS = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
         "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
         "down_proj": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


#: file -> (its layers' matrix types, the build() arguments of the Llama it was made from)
FILES = {
    "tiny-llama-q4_1.gguf": ({"q4_1"}, dict(hidden_size=64, intermediate_size=96)),
    "tiny-llama-q5_1.gguf": ({"q5_1"}, dict(hidden_size=64, intermediate_size=96)),
    "tiny-llama-q5_k_m.gguf": ({"q5_k", "q6_k"},
                               dict(hidden_size=256, intermediate_size=512, head_dim=64, num_hidden_layers=1)),
    "tiny-llama-iq4_xs.gguf": ({"iq4_xs", "iq4_nl"},
                               dict(hidden_size=256, intermediate_size=544, head_dim=64, num_hidden_layers=1)),
    **{f"tiny-llama-{mix}.gguf": (types, dict(hidden_size=256, intermediate_size=512, head_dim=64, num_hidden_layers=2))
       for mix, types in [("q4_k_s", {"q4_k", "q5_k"}), ("q3_k_m", {"q3_k", "q4_k", "q5_k"}),
                          ("q2_k", {"q2_k", "q3_k"})]},
}


def hf_on_dequantized(m, arch_kw):
    """The Llama the file was made from, its matrices replaced by the file's, dequantized."""
    hf = build("llama", **arch_kw)
    sd = hf.state_dict()
    with torch.no_grad():
        for i, layer in enumerate(m.layers):
            for slot, name in SLOTS.items():
                sd[f"model.layers.{i}.{name}.weight"].copy_(torch.from_numpy(np.asarray(layer.weight(slot))))
        sd["model.embed_tokens.weight"].copy_(torch.from_numpy(np.asarray(m.embed)))
        sd["lm_head.weight"].copy_(torch.from_numpy(ops.dequantize(m._lm, m.lm_head_type, m.hidden_size)))
    return hf


@pytest.mark.parametrize("name", list(FILES))
def test_llama_quantize_file_runs_in_place_and_matches_transformers(name, isa):
    path = os.path.join(DATA, name)
    wtypes, arch_kw = FILES[name]
    m = rlxc.load(path, activations="f32", kv_type="f32")
    assert {layer.weight_type(s) for layer in m.layers for s in SLOTS if "norm" not in s} == wtypes
    import gguf
    stored = {t.name: t for t in gguf.GGUFReader(path).tensors}["blk.0.ffn_down.weight"]
    np.testing.assert_array_equal(m.layers[0].weight_raw("down_proj"), stored.data)  # the file's own blocks
    ids = token_ids(40, seed=7) % m.vocab_size
    ref = hf_logits(hf_on_dequantized(m, arch_kw), ids)
    got = m.forward(ids)
    assert rel_err(got, ref) <= 1e-4
    # prefill then decode: the same
    m.reset()
    first = np.asarray(m.prefill(ids[:30], logits="all")).reshape(30, -1)
    rest = np.stack([np.asarray(m.decode(int(t))).reshape(-1) for t in ids[30:]])
    assert rel_err(np.concatenate([first, rest]), ref) <= 1e-4
    # 8-bit activations: llama.cpp's numerics, close to the float run
    q8 = rlxc.load(path)
    lp = q8.forward(ids).astype(np.float64)
    lf = got.astype(np.float64)
    pa = np.exp(lf - lf.max(1, keepdims=True))
    pa /= pa.sum(1, keepdims=True)
    kl = np.sum(pa * (np.log(pa) - (lp - lp.max(1, keepdims=True) - np.log(np.exp(lp - lp.max(1, keepdims=True))
                                                                             .sum(1, keepdims=True)))), 1)
    # (8-bit activation rounding: 0.005 nats per token on Gemma 3 270M; these tiny random models ~1e-3).
    # Their logits are flat (median top-2 gap 0.1-0.6), so the rounding may swap near ties: the top
    # token may differ only where the float run's top-2 gap is below 0.25 (Q2_K's largest: 0.18).
    top2 = np.sort(lf, 1)[:, -2:]
    swapped = lp.argmax(1) != lf.argmax(1)
    assert kl.mean() < 5e-3 and np.all(top2[swapped, 1] - top2[swapped, 0] < 0.25) and swapped.mean() <= 0.15


#: the tokens make_quantized.sh and make_moe.sh ran llama.cpp on
TOKENS = np.array([1, 5, 9, 33, 70, 2, 88, 100, 3, 4, 17, 99, 120, 7, 6, 50])


def assert_within_llama_cpp_numerics(base: str) -> None:
    """rlxc with 8-bit activations on BASE.gguf against llama.cpp's own logits of the file (its C
    API, f32 KV cache: BASE.logits, and BASE.fa.logits with flash attention): at most twice as far
    from them as llama.cpp's flash-attention run is from its plain one, with the same top token
    except at near ties (a top-2 gap under twice the largest difference of llama.cpp's two runs),
    one such swap at most."""
    ref = np.fromfile(base + ".logits", np.float32).reshape(len(TOKENS), -1)
    fa = np.fromfile(base + ".fa.logits", np.float32).reshape(len(TOKENS), -1)
    got = rlxc.load(base + ".gguf").forward(TOKENS)
    assert rel_err(got, ref) <= 2 * rel_err(fa, ref), (rel_err(got, ref), rel_err(fa, ref))
    top2 = np.sort(ref, 1)[:, -2:]
    swapped = got.argmax(1) != ref.argmax(1)
    assert np.all(top2[swapped, 1] - top2[swapped, 0] < 2 * np.abs(fa - ref).max()) and swapped.sum() <= 1


@pytest.mark.parametrize("name", list(FILES))
def test_llama_quantize_file_q8_is_within_llama_cpp_numerics(name, isa):
    """The files of make_quantized.sh (measured swaps at gaps 0.001 - 0.056, one per file at most)."""
    assert_within_llama_cpp_numerics(os.path.join(DATA, name[:-len(".gguf")]))


# ---- Q4_K / Q5_K from floats ----

GGUF_TO_HF = {"attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj"}


@pytest.mark.parametrize("name,wtype", [("tiny-llama-q5_k_m.gguf", "q5_k"), ("tiny-llama-q4_k_s.gguf", "q4_k")])
def test_k_quantizers_err_like_llama_quantize(name, wtype):
    """rlxc's Q4_K / Q5_K quantizers on the float weights llama-quantize quantized for the file (the
    same random Llama): the same search for scales, so nearly the same error (measured: RMS
    0.2-0.7 % above llama.cpp's, 86-89 % of the bytes identical; the float order differs), and
    blocks the gguf package decodes."""
    import gguf
    from gguf import GGMLQuantizationType as G
    qtype = {"q4_k": G.Q4_K, "q5_k": G.Q5_K}[wtype]
    sd = build("llama", **FILES[name][1]).state_dict()
    ours_sq = theirs_sq = 0.0
    matrices = 0
    for t in gguf.GGUFReader(os.path.join(DATA, name)).tensors:
        parts = t.name.split(".")
        if t.tensor_type != qtype or parts[0] != "blk" or parts[2] not in GGUF_TO_HF:
            continue
        w = sd[f"model.layers.{parts[1]}.{GGUF_TO_HF[parts[2]]}.weight"].numpy().astype(np.float32)
        theirs = gguf.quants.dequantize(t.data, qtype).reshape(w.shape)
        b = getattr(ops, f"quantize_{wtype}")(w)
        ours = gguf.quants.dequantize(b, qtype)
        np.testing.assert_array_equal(ours, ops.dequantize(b, wtype, w.shape[1]))
        e_ours, e_theirs = np.sum((ours - w) ** 2), np.sum((theirs - w) ** 2)
        assert np.sqrt(e_ours / e_theirs) < 1.02, t.name
        ours_sq, theirs_sq, matrices = ours_sq + e_ours, theirs_sq + e_theirs, matrices + 1
    assert matrices >= 3 and np.sqrt(ours_sq / theirs_sq) < 1.01


@pytest.mark.parametrize("weights", ["q4_k", "q5_k"])
def test_from_hf_k_quant_weights_match_transformers_on_dequantized(weights, isa, tmp_path):
    """weights="q4_k" / "q5_k": every matrix quantized from floats (down_proj's rows of 544 are
    no whole 256-blocks: q5_1, llama.cpp's fallback), then f32 activations agree with transformers on
    the dequantized weights to 1e-4, and a saved GGUF loads back with the same bytes."""
    arch_kw = dict(hidden_size=256, intermediate_size=544, head_dim=64, num_hidden_layers=1)
    m = rlxc.from_hf(build("llama", **arch_kw), weights=weights, activations="f32")
    assert {m.layers[0].weight_type(s) for s in ("q_proj", "up_proj", "down_proj")} == {weights, "q5_1"}
    assert m.layers[0].weight_type("down_proj") == "q5_1"
    ids = token_ids(24, seed=3) % m.vocab_size
    assert rel_err(m.forward(ids), hf_logits(hf_on_dequantized(m, arch_kw), ids)) <= 1e-4
    rlxc.save(m, str(tmp_path / "m.gguf"))
    back = rlxc.load(str(tmp_path / "m.gguf"))
    for s in ("q_proj", "up_proj", "down_proj"):
        np.testing.assert_array_equal(back.layers[0].weight_raw(s), m.layers[0].weight_raw(s))
