"""Every kernel, through rlxc.ops, against NumPy written for the test, on every ISA this
machine runs (scalar always). Shapes include tails: sizes that are not multiples of the
vector width, the 32-weight block or the row tile."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

import rlxc
from rlxc import ops

import reference as ref



def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- quantization: byte-identical with the gguf package ----

@pytest.mark.parametrize("shape", [(1, 32), (3, 64), (17, 96), (64, 256)])
@pytest.mark.parametrize("kind", ["q4_0", "q8_0", "q4_1", "q5_1"])
def test_quantize_matches_gguf_bytes(shape, kind):
    rng = np.random.default_rng(1)
    w = rand(rng, *shape)
    w[0, :32] = 0.0                       # an all-zero block: scale 0, id 0
    if shape[1] >= 64:
        w[-1, 32:64] = np.float32(0.5)    # ties: the first value of largest magnitude wins
        w[-1, 40] = np.float32(-0.5)
    qt = GGMLQuantizationType[kind.upper()]
    ours = getattr(ops, f"quantize_{kind}")(w)
    theirs = quants.quantize(w, qt)
    assert ours.dtype == np.uint8 and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ops.dequantize(ours, kind, shape[1]), quants.dequantize(theirs, qt))


def test_quantize_extreme_values_match_gguf():
    rng = np.random.default_rng(2)
    w = rand(rng, 8, 64) * np.float32(1e4)
    w[1] *= np.float32(1e-9)              # scales that are fp16 subnormals
    w[2] *= np.float32(6.0)               # near the fp16 maximum
    for kind, qt in (("q4_0", GGMLQuantizationType.Q4_0), ("q8_0", GGMLQuantizationType.Q8_0)):
        np.testing.assert_array_equal(getattr(ops, f"quantize_{kind}")(w), quants.quantize(w, qt))


# ---- matrix products ----

@pytest.mark.parametrize("N,K,T", [(1, 7, 1), (13, 33, 1), (37, 100, 3), (64, 64, 8), (100, 257, 17)])
def test_matmul_f32(isa, N, K, T):
    rng = np.random.default_rng(N * K + T)
    w, x = rand(rng, N, K), rand(rng, T, K)
    y = ops.matmul(x, w)
    bound = np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64)
    assert np.all(np.abs(y - x.astype(np.float64) @ w.T.astype(np.float64)) <= 1e-5 * bound + 1e-30)
    np.testing.assert_allclose(ops.matmul(x[0], w), y[0], rtol=1e-5, atol=1e-5 * bound[0].max())


def q_dot_emulation(x, wbytes, kind):
    """The integer dot product emulated in NumPy: x rounded to Q8_0 per 32, per block
    sum_j qw*qx exactly in integers, scaled by both fp16 block scales, summed in float64.
    Returns (result, sum of |block terms|) for a tolerance relative to the terms."""
    T, K = x.shape
    nb = K // 32
    xq = quants.quantize(x, GGMLQuantizationType.Q8_0).reshape(T, nb, 34)
    dx = xq[..., :2].copy().view(np.float16).astype(np.float64)[..., 0]            # [T, nb]
    qx = xq[..., 2:].view(np.int8).astype(np.int64)                                 # [T, nb, 32]
    N = wbytes.shape[0]
    if kind == "q4_0":
        wb = wbytes.reshape(N, nb, 18)
        dw = wb[..., :2].copy().view(np.float16).astype(np.float64)[..., 0]
        nib = wb[..., 2:]
        qw = np.concatenate([nib & 0x0F, nib >> 4], axis=-1).astype(np.int64) - 8
    else:
        wb = wbytes.reshape(N, nb, 34)
        dw = wb[..., :2].copy().view(np.float16).astype(np.float64)[..., 0]
        qw = wb[..., 2:].view(np.int8).astype(np.int64)
    sumi = np.einsum("nbj,tbj->tnb", qw, qx)                                         # exact integers
    terms = sumi * dw[None] * dx[:, None, :]
    return terms.sum(-1), np.abs(terms).sum(-1)


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
@pytest.mark.parametrize("N,K,T", [(1, 32, 1), (5, 64, 1), (33, 96, 2), (67, 320, 7), (128, 256, 33)])
def test_matmul_quantized_equals_integer_dot_emulation(isa, kind, N, K, T):
    rng = np.random.default_rng(N + K + T)
    w, x = rand(rng, N, K), rand(rng, T, K)
    wb = getattr(ops, f"quantize_{kind}")(w)
    y = ops.matmul(x, wb, kind)
    want, mag = q_dot_emulation(x, wb, kind)
    # float rounding only: the integer part is exact, the float sum order may differ per ISA
    assert np.all(np.abs(y - want) <= 1e-6 * mag + 1e-30), np.max(np.abs(y - want) / mag)
    np.testing.assert_array_equal(ops.matmul(x, wb, kind, threads=2), y)


# ---- norms ----

@pytest.mark.parametrize("n", [1, 7, 16, 33, 100, 2048])
def test_rmsnorm(isa, n):
    rng = np.random.default_rng(n)
    x, w = rand(rng, 3, n), rand(rng, n)
    for offset in (0.0, 1.0):
        want = ref.rmsnorm(x.astype(np.float64), w.astype(np.float64), 1e-6, offset)
        np.testing.assert_allclose(ops.rmsnorm(x, w, 1e-6, offset), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    want = ref.rmsnorm(x.astype(np.float64), None, 1e-5)  # v-norm: no weight
    np.testing.assert_allclose(ops.rmsnorm(x, None, 1e-5), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [2, 9, 64, 129])
def test_layernorm(isa, n):
    rng = np.random.default_rng(n)
    x, w, b = rand(rng, 4, n) + 3.0, rand(rng, n), rand(rng, n)
    for bias in (b, None):
        want = ref.layernorm(x.astype(np.float64), w.astype(np.float64), None if bias is None else bias.astype(np.float64), 1e-5)
        np.testing.assert_allclose(ops.layernorm(x, w, bias, 1e-5), want, rtol=1e-5, atol=1e-5)


# ---- RoPE ----

@pytest.mark.parametrize("hd,rd,prop", [(16, 16, False), (16, 8, False), (10, 4, False), (32, 8, True),
                                        (64, 64, True), (18, 0, False)])
@pytest.mark.parametrize("pos", [0, 1, 37])
def test_rope(isa, hd, rd, prop, pos):
    rng = np.random.default_rng(hd + rd + pos)
    x = rand(rng, 3, hd)
    ff = rng.uniform(0.5, 4, rd // 2).astype(np.float32) if rd and pos == 37 else None
    f = dict(rotary_dim=rd, head_dim=hd, rope_layout=ref.PROPORTIONAL if prop else ref.PREFIX, rope_base=500.0,
             rope_attn_factor=1.25)
    cos, sin = ref.rope_cos_sin(f, np.array([pos]), ff)
    want = ref.apply_rope(x[None].astype(np.float64), f, cos, sin)[0]
    got = ops.rope(x, pos, rd, 500.0, prop, ff, 1.25)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- attention ----

def np_attention(q, k, v, pos, window, scale, cap):
    nq, hd = q.shape
    group = nq // k.shape[0]
    out = np.zeros_like(q, dtype=np.float64)
    start = max(0, pos - window + 1) if window else 0
    for h in range(nq):
        kk = k[h // group, start:pos + 1].astype(np.float64)
        s = scale * (kk @ q[h].astype(np.float64))
        if cap:
            s = cap * np.tanh(s / cap)
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v[h // group, start:pos + 1]
    return out


@pytest.mark.parametrize("nq,nkv,hd", [(4, 4, 16), (8, 2, 7), (6, 3, 64), (2, 1, 33)])
@pytest.mark.parametrize("pos,window", [(0, 0), (5, 0), (40, 4), (40, 1), (299, 17), (299, 300)])
@pytest.mark.parametrize("cap", [0.0, 2.0])
def test_attention(isa, nq, nkv, hd, pos, window, cap):
    rng = np.random.default_rng(nq * hd + pos + window)
    S = 300
    q, k, v = rand(rng, nq, hd), rand(rng, nkv, S, hd), rand(rng, nkv, S, hd)
    want = np_attention(q, k, v, pos, window, hd ** -0.5 * 1.7, cap)
    got = ops.attention(q, k, v, pos, window, hd ** -0.5 * 1.7, cap)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if window:  # keys outside the window must not matter
        k2 = k.copy()
        k2[:, : max(0, pos - window + 1)] = 1e3
        np.testing.assert_array_equal(ops.attention(q, k2, v, pos, window, hd ** -0.5 * 1.7, cap), got)


# ---- elementwise ----

@pytest.mark.parametrize("n", [1, 7, 8, 9, 31, 1000])
def test_activations(isa, n):
    rng = np.random.default_rng(n)
    x = rand(rng, n, scale=4.0)
    x[: min(n, 4)] = np.array([0.0, -30.0, 30.0, 88.0], dtype=np.float32)[: min(n, 4)]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(ops.silu(x), ref.silu(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.gelu_tanh(x), ref.gelu_tanh(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.softcap(x, 3.0), ref.softcap(x64, 3.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.scale(x, 0.37), x64 * np.float32(0.37), rtol=1e-6, atol=0)


def test_activations_stay_finite_at_extremes(isa):
    x = np.array([-1e4, -100, -88.7, 88.7, 100, 1e4], dtype=np.float32)
    for f in (ops.silu, ops.gelu_tanh):
        y = f(x)
        assert np.all(np.isfinite(y))
        np.testing.assert_allclose(y[x > 0], x[x > 0], rtol=1e-6)
        np.testing.assert_allclose(y[x < 0], 0.0, atol=1e-6)
