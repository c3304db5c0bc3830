"""Whole layers and stacks of them against the NumPy reference layer (tests/reference.py),
over the field combinations that change the computation; prefill against decode."""

import sys

import numpy as np
import pytest

import rlxc
import reference as ref

F32_TOL = 1e-5  # relative: max |rlxc - numpy float64| / max |numpy|



def make_layer(fields, rng, dtype="f32", freq_factors=False):
    layer = rlxc.Layer(**fields)
    weights = ref.random_weights(ref.fields_of(layer), rng, freq_factors=freq_factors)
    layer.set_weights(weights, dtype)
    return layer


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


# Every field combination that matters, one axis at a time on top of a base, plus a few
# layers that turn many on together.
BASE = dict(hidden_size=64, intermediate_size=96, head_dim=16, num_q_heads=4, num_kv_heads=2)
VARIANTS = {
    "llama": {},
    "layernorm_bias": dict(norm_type=rlxc.NormType.LAYERNORM, input_norm_bias=True, post_attn_norm_bias=True),
    "layernorm_nobias": dict(norm_type=rlxc.NormType.LAYERNORM),
    "standard_gelu": dict(ffn_type=rlxc.FfnType.STANDARD, activation=rlxc.Activation.GELU_TANH, ffn_up_bias=True,
                          ffn_down_bias=True),
    "gated_gelu_bias": dict(activation=rlxc.Activation.GELU_TANH, ffn_up_bias=True, ffn_down_bias=True),
    "partial_rope": dict(rotary_dim=8),
    "no_rope": dict(rotary_dim=0),
    "proportional_rope": dict(rotary_dim=4, rope_layout=rlxc.RopeLayout.PROPORTIONAL, rope_base=1e6),
    "window": dict(sliding_window=3),
    "window1": dict(sliding_window=1),
    "v_norm": dict(has_v_norm=True),
    "layer_scalar": dict(layer_scalar=0.37),
    "qkv_o_bias": dict(qkv_bias=True, o_bias=True),
    "qk_norm_offset0": dict(has_qk_norm=True, qk_norm_offset=0.0),
    "qk_norm_offset1": dict(has_qk_norm=True, qk_norm_offset=1.0),
    "gemma_norms": dict(norm_offset=1.0, sandwich_norm=True, activation=rlxc.Activation.GELU_TANH),
    "softcap": dict(attn_softcap=0.5, attn_scale=0.4),
    "odd_head_dim": dict(head_dim=9, num_q_heads=6, num_kv_heads=3, rotary_dim=6),
    "mqa_wide_heads": dict(head_dim=40, num_q_heads=3, num_kv_heads=1),
    "v_from_k": dict(v_from_k=True, has_v_norm=True, has_qk_norm=True),
    "ple": dict(ple_dim=8),
    "gemma4_full": dict(head_dim=32, num_kv_heads=1, rotary_dim=8, rope_layout=rlxc.RopeLayout.PROPORTIONAL,
                        has_qk_norm=True, has_v_norm=True, sandwich_norm=True, attn_scale=1.0, layer_scalar=0.5,
                        activation=rlxc.Activation.GELU_TANH, v_from_k=True, ple_dim=4),
    "starcoder2": dict(norm_type=rlxc.NormType.LAYERNORM, input_norm_bias=True, post_attn_norm_bias=True,
                       ffn_type=rlxc.FfnType.STANDARD, activation=rlxc.Activation.GELU_TANH, ffn_up_bias=True,
                       ffn_down_bias=True, qkv_bias=True, o_bias=True, sliding_window=5),
}


def run_both(layers, T, rng, threads=None):
    H = layers[0].hidden_size
    x = (rng.standard_normal((T, H))).astype(np.float32)
    stride = sum(layer.ple_dim for layer in layers)
    ple = rng.standard_normal((T, stride)).astype(np.float32) if stride else None
    pipe = rlxc.Pipeline(layers, max_seq=T + 4, threads=threads)
    out, per = pipe.prefill(x, ple, layer_outputs=True)
    want, want_per = ref.ref_pipeline(layers, x, ple, layer_outputs=True)
    return pipe, x, ple, out, per, want, want_per


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("T", [1, 11])
def test_layer_matches_numpy(isa, name, T):
    rng = np.random.default_rng(abs(hash(name)) % 2**32 + T)
    layer = make_layer({**BASE, **VARIANTS[name]}, rng, freq_factors=name == "partial_rope")
    _, _, _, out, per, want, want_per = run_both([layer], T, rng)
    assert rel_err(out, want) < F32_TOL
    assert rel_err(per[0], want_per[0]) < F32_TOL


@pytest.mark.parametrize("name", ["llama", "window", "gemma4_full", "starcoder2", "odd_head_dim", "softcap"])
def test_prefill_equals_successive_decode(isa, name):
    rng = np.random.default_rng(7)
    layers = [make_layer({**BASE, **VARIANTS[name]}, rng), make_layer({**BASE, **VARIANTS[name]}, rng)]
    T = 13
    pipe, x, ple, out, _, _, _ = run_both(layers, T, rng)
    pipe.reset()
    steps = np.stack([pipe.decode_token(x[t], t, None if ple is None else ple[t]) for t in range(T)])
    assert pipe.n_past == T
    np.testing.assert_allclose(steps, out, rtol=0, atol=1e-5 * np.abs(out).max())
    # a split prefill continues from the cache exactly like one prefill
    pipe.reset()
    a = pipe.prefill(x[:5], None if ple is None else ple[:5])
    b = pipe.prefill(x[5:], None if ple is None else ple[5:])
    np.testing.assert_allclose(np.concatenate([a, b]), out, rtol=0, atol=1e-5 * np.abs(out).max())


def test_heterogeneous_stack_with_kv_sharing(isa):
    """Adjacent layers differ in every field, head_dim and kv heads included; later layers
    read earlier layers' caches."""
    rng = np.random.default_rng(3)
    specs = [
        {**BASE, **VARIANTS["window"], "head_dim": 8, "num_kv_heads": 4, "rotary_dim": 8},
        {**BASE, **VARIANTS["gemma4_full"]},
        {**BASE, **VARIANTS["starcoder2"], "intermediate_size": 40},
        {**BASE, "head_dim": 8, "num_kv_heads": 4, "rotary_dim": 8, "kv_shared_from": 0, "sliding_window": 2},
        {**BASE, **VARIANTS["gemma4_full"], "v_from_k": False, "kv_shared_from": 1, "intermediate_size": 192},
    ]
    layers = [make_layer(s, rng) for s in specs]
    _, x, ple, out, per, want, want_per = run_both(layers, 17, rng, threads=2)
    for i in range(len(layers)):
        assert rel_err(per[i], want_per[i]) < F32_TOL, i


@pytest.mark.parametrize("dtype", ["q4_0", "q8_0"])
def test_quantized_layer_close_to_f32_on_dequantized_weights(isa, dtype):
    rng = np.random.default_rng(11)
    fields = {**BASE, "hidden_size": 128, "intermediate_size": 256, "num_q_heads": 8}
    qlayer = make_layer(fields, rng, dtype)
    flayer = rlxc.Layer(**qlayer.fields())
    flayer.set_weights(qlayer.weights)  # the dequantized values, stored f32
    x = rng.standard_normal((9, 128)).astype(np.float32)
    q = rlxc.Pipeline([qlayer], 16).prefill(x)
    f = rlxc.Pipeline([flayer], 16).prefill(x)
    nmse = float(np.mean((q - f) ** 2) / np.mean(f ** 2))
    assert nmse < 1e-3, nmse
    # and it is the integer path: equal to the reference that rounds activations to Q8_0
    want = ref.ref_pipeline([qlayer], x)
    assert rel_err(q, want) < 1e-4


def test_editing_a_field_changes_only_that_layer():
    rng = np.random.default_rng(5)
    layers = [make_layer({**BASE, **VARIANTS["llama"]}, rng) for _ in range(3)]
    x = rng.standard_normal((9, 64)).astype(np.float32)
    pipe = rlxc.Pipeline(layers, 16)
    _, before = pipe.prefill(x, layer_outputs=True)
    layers[1].sliding_window = 2
    pipe.reset()
    _, after = pipe.prefill(x, layer_outputs=True)
    np.testing.assert_array_equal(after[0], before[0])
    assert rel_err(after[1], before[1]) > 1e-3
    assert rel_err(after[1], ref.ref_pipeline(layers, x, layer_outputs=True)[1][1]) < F32_TOL


def test_threads_give_the_same_result():
    rng = np.random.default_rng(9)
    layers = [make_layer({**BASE, "hidden_size": 96, "intermediate_size": 160}, rng, "q4_0") for _ in range(2)]
    x = rng.standard_normal((7, 96)).astype(np.float32)
    one = rlxc.Pipeline(layers, 8, threads=1).prefill(x)
    two = rlxc.Pipeline(layers, 8, threads=2).prefill(x)
    np.testing.assert_array_equal(one, two)


# ---- fields: defaults, validation on write ----

def test_default_layer_is_llama_style_and_runs():
    layer = rlxc.Layer()
    assert layer.norm_type is rlxc.NormType.RMSNORM and layer.ffn_type is rlxc.FfnType.GATED
    assert layer.activation is rlxc.Activation.SILU and layer.sliding_window == 0
    assert layer.attn_scale == pytest.approx(layer.head_dim ** -0.5)
    assert set(rlxc.Layer.FIELDS) >= {
        "eps", "attn_scale", "head_dim", "num_q_heads", "num_kv_heads", "rope_base", "rotary_dim", "sliding_window",
        "has_v_norm", "layer_scalar", "norm_type", "ffn_type", "activation", "qk_norm_offset", "input_norm_bias",
        "post_attn_norm_bias", "ffn_up_bias", "ffn_down_bias"}
    rng = np.random.default_rng(0)
    layer.set_weights(ref.random_weights(ref.fields_of(layer), rng))
    rlxc.Pipeline([layer], 4).decode_token(np.ones(64, np.float32), 0)
    assert "head_dim=16" in repr(layer) and "rlxc.Pipeline" in repr(rlxc.Pipeline([layer], 4))


def test_head_dim_keyword_sets_consistent_scale_and_rotary():
    layer = rlxc.Layer(head_dim=64)
    assert layer.rotary_dim == 64 and layer.attn_scale == pytest.approx(0.125)
    assert rlxc.Layer(head_dim=64, rotary_dim=16, attn_scale=1.0).rotary_dim == 16


@pytest.mark.parametrize("field,value,exc,words", [
    ("rotary_dim", 7, ValueError, "rotary_dim"),
    ("rotary_dim", 18, ValueError, "head_dim"),
    ("num_kv_heads", 3, ValueError, "multiple"),
    ("num_q_heads", 0, ValueError, "num_q_heads"),
    ("eps", -1.0, ValueError, "eps"),
    ("eps", float("nan"), ValueError, "eps"),
    ("sliding_window", -2, ValueError, "sliding_window"),
    ("head_dim", 1.5, TypeError, "head_dim"),
    ("norm_type", 7, ValueError, "norm_type"),
    ("input_norm_bias", True, ValueError, "LAYERNORM"),
    ("has_v_norm", 3, TypeError, "has_v_norm"),
    ("head_dim", 2**40, ValueError, "head_dim"),
])
def test_invalid_field_writes_raise_and_leave_the_layer_unchanged(field, value, exc, words):
    layer = rlxc.Layer()
    before = layer.fields()
    with pytest.raises(exc, match=words):
        setattr(layer, field, value)
    assert layer.fields() == before


def test_unknown_keyword_is_rejected():
    with pytest.raises(TypeError, match="unknown field 'head_dims'"):
        rlxc.Layer(head_dims=4)
    with pytest.raises(ValueError, match="multiple"):
        rlxc.Layer(num_q_heads=4, num_kv_heads=3)


def test_every_field_round_trips():
    layer = rlxc.Layer()
    for f in rlxc.Layer.FIELDS:
        v = getattr(layer, f)
        setattr(layer, f, v)
        assert getattr(layer, f) == v


def test_weight_validation_messages():
    layer = rlxc.Layer()
    with pytest.raises(ValueError, match=r"q_proj.*\(64, 64\)"):
        layer.set_weight("q_proj", np.zeros((64, 32), np.float32))
    with pytest.raises(TypeError, match="float32"):
        layer.set_weight("q_proj", np.zeros((64, 64)))
    with pytest.raises(ValueError, match="contiguous"):
        layer.set_weight("q_proj", np.zeros((64, 128), np.float32)[:, ::2])
    with pytest.raises(KeyError, match="unknown weight"):
        layer.set_weight("q_projection", np.zeros((64, 64), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        layer.set_weight("attn_norm", np.full(64, np.nan, np.float32))
    with pytest.raises(ValueError, match="vector"):
        layer.set_weight("attn_norm", np.zeros(64, np.float32), "q4_0")
    lay = rlxc.Layer(hidden_size=48, head_dim=12, num_q_heads=4, num_kv_heads=4)
    with pytest.raises(ValueError, match="multiple of 32"):
        lay.set_weight("q_proj", np.zeros((48, 48), np.float32), "q4_0")
    # HF names resolve per layer: post_attention_layernorm is the pre-FFN norm here
    layer.set_weight("model.layers.0.post_attention_layernorm.weight", np.ones(64, np.float32))
    assert layer.weight_type("ffn_norm") == "f32"
    layer.sandwich_norm = True
    layer.set_weight("post_attention_layernorm.weight", np.ones(64, np.float32))
    assert layer.weight_type("attn_post_norm") == "f32"


def test_pipeline_argument_errors():
    rng = np.random.default_rng(0)
    layer = make_layer(BASE, rng)
    pipe = rlxc.Pipeline([layer], 8)
    x = np.zeros((3, 64), np.float32)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        pipe.prefill(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"shape \(T, 64\)"):
        pipe.prefill(np.zeros((3, 65), np.float32))
    with pytest.raises(ValueError, match="x must be 2-D"):
        pipe.prefill(np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        pipe.prefill(np.zeros((3, 128), np.float32)[:, ::2])
    with pytest.raises(TypeError, match="numpy.ndarray"):
        pipe.prefill([[0.0] * 64])
    with pytest.raises(ValueError, match="NaN"):
        pipe.prefill(np.full((1, 64), np.inf, np.float32))
    with pytest.raises(ValueError, match="pos must be in"):
        pipe.decode_token(np.zeros(64, np.float32), 8)
    with pytest.raises(ValueError, match="pos"):
        pipe.decode_token(np.zeros(64, np.float32), 2)  # past the cached tokens
    with pytest.raises(ValueError, match="pos must be in"):
        pipe.decode_token(np.zeros(64, np.float32), -1)
    pipe.prefill(np.zeros((6, 64), np.float32))
    with pytest.raises(ValueError, match="max_seq"):
        pipe.prefill(np.zeros((3, 64), np.float32))
    with pytest.raises(ValueError, match="ple must be None"):
        pipe.decode_token(np.zeros(64, np.float32), 0, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="max_seq"):
        rlxc.Pipeline([layer], 0)
    with pytest.raises(TypeError, match="rlxc.Layer"):
        rlxc.Pipeline([layer, "x"], 4)
    with pytest.raises(ValueError, match="between 1 and"):
        rlxc.Pipeline([], 4)


def test_inconsistent_layers_raise_at_run_time():
    rng = np.random.default_rng(0)
    a, b = make_layer(BASE, rng), make_layer(BASE, rng)
    pipe = rlxc.Pipeline([a, b], 8)
    b.clear_weight("o_proj")
    with pytest.raises(ValueError, match="layer 1: weight 'o_proj' is required"):
        pipe.prefill(np.zeros((2, 64), np.float32))
    b.set_weights(ref.random_weights(ref.fields_of(b), rng))
    b.num_kv_heads = 4  # cache shape changes: weights and cache no longer fit
    with pytest.raises(ValueError, match="k_proj"):
        pipe.prefill(np.zeros((2, 64), np.float32))
    b.set_weights(ref.random_weights(ref.fields_of(b), rng))
    with pytest.raises(ValueError, match="reset"):
        pipe.prefill(np.zeros((2, 64), np.float32))
    pipe.reset()
    pipe.prefill(np.zeros((2, 64), np.float32))
    b.kv_shared_from = 1
    with pytest.raises(ValueError, match="earlier layer"):
        pipe.prefill(np.zeros((1, 64), np.float32))


def test_raw_and_view_weights_hold_the_exact_bytes_and_their_owner():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    b = rlxc.ops.quantize_q4_0(w)
    copied, viewed = rlxc.Layer(), rlxc.Layer()
    copied.set_weight_raw("q_proj", b, 64, "q4_0")
    base = sys.getrefcount(b)
    viewed.set_weight_view("q_proj", b, 64, "q4_0")
    assert sys.getrefcount(b) == base + 1          # the layer keeps the owner alive
    np.testing.assert_array_equal(viewed.weight_raw("q_proj"), b)
    np.testing.assert_array_equal(copied.weight("q_proj"), rlxc.ops.dequantize(b, "q4_0", 64))
    viewed.set_weight("q_proj", w)                 # replacing the slot releases the view
    assert sys.getrefcount(b) == base
    with pytest.raises(ValueError, match="bytes per row"):
        viewed.set_weight_view("q_proj", b[:, :-1].copy(), 64, "q4_0")
    with pytest.raises(TypeError, match="uint8"):
        viewed.set_weight_view("q_proj", w, 64, "q4_0")


def test_switching_between_own_and_shared_kv_requires_reset():
    rng = np.random.default_rng(6)
    a, b = make_layer(BASE, rng), make_layer(BASE, rng)
    pipe = rlxc.Pipeline([a, b], 8)
    pipe.prefill(np.ones((2, 64), np.float32))
    b.kv_shared_from = 0        # b's own cache would now miss the positions it skips
    with pytest.raises(ValueError, match="reset"):
        pipe.prefill(np.ones((1, 64), np.float32))
    pipe.reset()
    pipe.prefill(np.ones((2, 64), np.float32))
    b.kv_shared_from = -1
    with pytest.raises(ValueError, match="reset"):
        pipe.prefill(np.ones((1, 64), np.float32))
