"""Mixture-of-experts layers in the engine (issue 14), against the NumPy reference.

The reference (tests/reference.py, float64) routes each token by itself: softmax over every
expert, the k most probable, renormalised, times expert_scale; the engine groups the tokens by
expert. Shapes include tails: hidden / expert widths that are no multiple of the 16-row SIMD
tiles or of the repacked groups (so an expert's rows straddle them), T of 1 (decode), odd and
larger than one tile, and thread counts that do not divide anything. Weights are f32 (1e-4
relative, as every f32 layer test) or q8_0 / q4_0 with f32 activations (the dequantized weights,
1e-4) and q8 activations (the reference rounds the experts' inputs as the engine does).
"""

from __future__ import annotations

import numpy as np
import pytest

import reference as ref
import rlxc

TOL = 1e-4

# (hidden, expert width, experts, used, dense width): tails of 16-row tiles and 32-blocks
SHAPES = [(64, 32, 8, 2, 0), (96, 48, 6, 3, 64), (64, 64, 16, 4, 0), (40, 24, 5, 5, 0)]


def moe_layer(rng, H, EI, E, k, I, dtype="f32", optional=(), **fields):
    layer = rlxc.Layer(hidden_size=H, head_dim=8, num_q_heads=4, num_kv_heads=2, intermediate_size=I,
                       num_experts=E, num_experts_used=k, expert_intermediate_size=EI, moe_norm_topk=True, **fields)
    w = ref.random_weights(ref.fields_of(layer), rng, scale=0.2)
    w["router"] = rng.normal(0, 1.0, (E, H)).astype(np.float32)  # spread probabilities: no near-ties
    for name in optional:
        n = E if name == "expert_scale" else H
        w[name] = (rng.uniform(0.5, 1.5, n) if name != "shared_gate" else rng.normal(0, 0.3, n)).astype(np.float32)
    for name, arr in w.items():
        quant = dtype != "f32" and name in ("gate_exps", "up_exps", "down_exps", "gate_proj", "up_proj",
                                           "down_proj") and arr.shape[1] % (256 if dtype == "q4_k" else 32) == 0
        layer.set_weight(name, arr, dtype if quant else "f32")
    return layer


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


def run_both(layers, x, threads, act="f32"):
    pipe = rlxc.Pipeline(layers, max_seq=x.shape[0] + 4, threads=threads)
    pipe.activations = act
    return pipe.prefill(x), ref.ref_pipeline(layers, x, quant_act=act == "q8")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("T", [1, 7, 37])
def test_moe_layer_matches_reference(shape, T, isa):
    rng = np.random.default_rng(sum(shape) + T)
    H, EI, E, k, I = shape
    layers = [moe_layer(rng, H, EI, E, k, I), moe_layer(rng, H, EI, E, k, I, activation=rlxc.Activation.GELU_TANH)]
    x = rng.normal(0, 1, (T, H)).astype(np.float32)
    for threads in (1, 3):
        got, want = run_both(layers, x, threads)
        assert rel_err(got, want) <= TOL, threads


@pytest.mark.parametrize("optional", [("shared_gate",), ("router_norm", "moe_norm", "dense_post_norm",
                                                        "moe_post_norm", "expert_scale")])
def test_moe_optional_parts(optional, isa):
    """Qwen2-MoE's gated shared expert; Gemma 4's router norm, expert norms and per-expert scale
    (with sandwich norms, as Gemma 4 has them)."""
    rng = np.random.default_rng(5)
    extra = dict(sandwich_norm=True) if "moe_norm" in optional else {}
    layer = moe_layer(rng, 64, 32, 8, 2, 96, optional=optional, **extra)
    x = rng.normal(0, 1, (9, 64)).astype(np.float32)
    got, want = run_both([layer], x, 2)
    assert rel_err(got, want) <= TOL
    for name in optional:  # each part changes the output: the test would see it missing
        saved = layer.weight(name)
        layer.clear_weight(name)
        assert rel_err(rlxc.Pipeline([layer], 16, threads=2).prefill(x), want) > 1e-3, name
        layer.set_weight(name, saved)


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("act", ["f32", "q8"])
def test_moe_quantized_experts(dtype, act, isa):
    rng = np.random.default_rng(11)
    # expert width 64 and 32: repacked 16-row groups whole per expert; hidden 96 too (q4_k: hidden
    # 256, its gate / up experts repacked, down f32)
    H = 256 if dtype == "q4_k" else 96
    layers = [moe_layer(rng, H, 64, 6, 2, 0, dtype), moe_layer(rng, H, 32, 4, 3, 64, dtype)]
    assert layers[0].weight_type("gate_exps") == dtype
    x = rng.normal(0, 1, (21, H)).astype(np.float32)
    for threads in (1, 2):
        got, want = run_both(layers, x, threads, act)
        # q8: the reference rounds the activations too; where float32 vs float64 flips a Q8
        # rounding the rows differ by ~1e-3
        assert rel_err(got, want) <= (TOL if act == "f32" else 5e-3)


def test_prefill_then_decode_equals_one_prefill(isa):
    rng = np.random.default_rng(3)
    layers = [moe_layer(rng, 64, 32, 8, 2, 0), moe_layer(rng, 64, 32, 8, 2, 64, optional=("shared_gate",))]
    x = rng.normal(0, 1, (12, 64)).astype(np.float32)
    whole = rlxc.Pipeline(layers, 16, threads=2).prefill(x)
    pipe = rlxc.Pipeline(layers, 16, threads=2)
    parts = [pipe.prefill(x[:5])] + [pipe.decode_token(x[t], t)[None] for t in range(5, 12)]
    assert rel_err(np.concatenate(parts), whole) <= TOL


def test_decode_reads_only_the_routed_experts(isa):
    """NaN in every expert that no token of a call chose leaves the output finite and unchanged:
    the engine never touches their rows (decode: one token's experts; prefill: the union). The
    attention adds nothing (o_proj 0), so the router's input is ffn_norm(x), known here."""
    rng = np.random.default_rng(8)
    H, EI, E, k = 64, 32, 16, 2
    layer = moe_layer(rng, H, EI, E, k, 0)
    layer.set_weight("o_proj", np.zeros(layer.weight_shape("o_proj"), np.float32))
    x = rng.normal(0, 1, (6, H)).astype(np.float32)
    mlp_in = ref.rmsnorm(x.astype(np.float64), layer.weight("ffn_norm"), float(layer.eps))
    z = mlp_in @ layer.weight("router").T.astype(np.float64)
    for T in (1, 6):
        used = {int(e) for row in z[:T] for e in np.argsort(-row, kind="stable")[:k]}
        assert len(used) < E
        poisoned = rlxc.Layer(**ref.fields_of(layer))
        for name, w in ref.weights_of(layer).items():
            per = {"gate_exps": EI, "up_exps": EI, "down_exps": H}.get(name)
            for e in set(range(E)) - used if per else ():
                w[e * per:(e + 1) * per] = np.nan
            if per:  # set_weight refuses NaN; the raw bytes of f32 rows do not
                poisoned.set_weight_raw(name, w.view(np.uint8), w.shape[1], "f32")
            else:
                poisoned.set_weight(name, w)
        got = rlxc.Pipeline([poisoned], 8, threads=2).prefill(x[:T])
        assert np.isfinite(got).all()
        np.testing.assert_array_equal(got, rlxc.Pipeline([layer], 8, threads=2).prefill(x[:T]))


def test_moe_fields_are_checked():
    with pytest.raises(ValueError, match="num_experts_used"):
        rlxc.Layer(num_experts=4, num_experts_used=5, expert_intermediate_size=32)
    with pytest.raises(ValueError, match="expert_intermediate_size"):
        rlxc.Layer(num_experts=4, num_experts_used=2)
    with pytest.raises(ValueError, match="intermediate_size"):
        rlxc.Layer(intermediate_size=0)
    with pytest.raises(ValueError, match="GATED"):
        rlxc.Layer(num_experts=4, num_experts_used=2, expert_intermediate_size=8, ffn_type=rlxc.FfnType.STANDARD)
    layer = rlxc.Layer(num_experts=4, num_experts_used=2, expert_intermediate_size=32, intermediate_size=0)
    assert set(layer.used_weights()) >= {"router", "gate_exps", "up_exps", "down_exps"}
    assert "up_proj" not in layer.used_weights()
    assert layer.weight_shape("down_exps") == (4 * 64, 32)
    with pytest.raises(ValueError, match="gate_exps"):
        layer.set_weight("gate_exps", np.zeros((32, 64), np.float32))  # one expert's rows, not four
    for name, w in ref.random_weights(ref.fields_of(layer), np.random.default_rng(0)).items():
        if name != "router":
            layer.set_weight(name, w)
    with pytest.raises(ValueError, match="router"):
        rlxc.Pipeline([layer], 8).prefill(np.zeros((1, 64), np.float32))


def test_moe_nan_router_does_not_crash():
    rng = np.random.default_rng(1)
    layer = moe_layer(rng, 64, 32, 8, 3, 0)
    w = np.full((8, 64), np.nan, np.float32)
    layer.set_weight_raw("router", w.view(np.uint8), 64, "f32")
    out = rlxc.Pipeline([layer], 8, threads=2).prefill(rng.normal(0, 1, (3, 64)).astype(np.float32))
    assert out.shape == (3, 64)
