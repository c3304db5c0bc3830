"""Stages, caches, hooks, interventions, patches and the KV cache (issue 13), against transformers.

Every architecture's tiny random model (tests/test_hf_parity.py's) runs in rlxc with every stage
cached, and each stage is compared with the matching transformers value (rlxc.report.hf_stages:
forward hooks on the input norm, o_proj's input and output, the pre-FFN norm's input and output,
down_proj's input, the MLP and the decoder layer, and the eager attention function wrapped for
post-RoPE q, the K/V it attends to and the softmax weights): relative error (max abs error / max
abs value) <= STAGE_TOL in float32. Interventions (steering vectors, head and neuron scales,
activation patching) are checked against the same edit made by a torch hook, in a forward and in
prefill + token-by-token decode.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
rlxc = pytest.importorskip("rlxc")

from rlxc.hf import from_hf  # noqa: E402
from rlxc.interp import LAYER_STAGES, HookError  # noqa: E402
from rlxc.report import compare, hf_stages  # noqa: E402
from test_hf_parity import ARCHS, build, rel_err, token_ids  # noqa: E402

STAGE_TOL = 1e-4   # every stage and the logits vs transformers, float32
T = 16             # tokens (4x the test models' sliding window)


@pytest.fixture(scope="module")
def pairs():
    cache = {}

    def get(arch):
        if arch not in cache:
            hf = build(arch)
            cache[arch] = (hf, from_hf(hf, max_seq=64))
        return cache[arch]
    return get


def _ffn_norm(layer):
    return getattr(layer, "pre_feedforward_layernorm", None) or layer.post_attention_layernorm


def _down(layer):
    """The dense FFN's down projection (Qwen2-MoE: its shared expert's); None for experts only."""
    dense = getattr(layer.mlp, "shared_expert", layer.mlp)
    down = getattr(dense, "down_proj", None) or getattr(dense, "c_proj", None)
    return down if isinstance(down, torch.nn.Module) else None


def _attn_residual_module(layer):
    """The module whose output the layer adds to the residual after attention."""
    return layer.post_attention_layernorm if hasattr(layer, "pre_feedforward_layernorm") else layer.self_attn


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def _compare(cache, ref, names):
    bad = []
    for name in names:
        got = cache[name]
        want = ref[name].reshape(got.shape)
        e = rel_err(got, want)
        if not e <= STAGE_TOL:
            bad.append(f"{name}: {e:.2e}")
    assert not bad, "stages off vs transformers: " + ", ".join(bad)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_stage_matches_transformers(arch, pairs, isa):
    hf, model = pairs(arch)
    ids = token_ids(T, seed=2)
    ref = hf_stages(hf, ids)
    logits, cache = model.run_with_cache(ids)
    names = model.stage_names()
    assert set(cache) == set(names)
    shared = [i for i, l in enumerate(model.layers) if int(l.kv_shared_from) >= 0]
    assert all(f"layers.{i}.k" not in names for i in shared)
    for name in names:
        assert cache[name].shape[0] == T and cache[name].dtype == np.float32, name
    assert cache["layers.0.attn_probs"].shape == (T, int(model.layers[0].num_q_heads), T)
    _compare(cache, ref, names)
    assert rel_err(logits, ref["logits"]) <= STAGE_TOL
    # attention weights: rows sum to 1 over the visible keys, zero past the query and the window
    for i, l in enumerate(model.layers):
        p = cache[f"layers.{i}.attn_probs"]
        np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-5)
        W = int(l.sliding_window)
        for t in range(T):
            assert not p[t, :, t + 1:].any()
            if W:
                assert not p[t, :, :max(0, t - W + 1)].any()


@pytest.mark.parametrize("arch", ["llama", "gemma3", "gemma4_kv", "phi3"])
def test_stages_of_prefill_then_decode(arch, pairs):
    """collect() over a prefill and single-token decodes gives the forward's stages."""
    hf, model = pairs(arch)
    ids = token_ids(T, seed=3)
    ref = hf_stages(hf, ids)
    names = [n for n in model.stage_names() if n.split(".")[-1] in ("q", "k", "attn_probs", "mlp_act", "resid_post")]
    names += ["embed", "final_norm", "logits"]
    model.reset()
    with model.collect(names) as cache:
        model.prefill(ids[:5])
        for t in ids[5:]:
            model.decode(int(t))
    np.testing.assert_array_equal(cache.positions("embed"), np.arange(T))
    assert cache["layers.1.attn_probs"].shape[-1] == T
    _compare(cache, ref, names)
    # outside the context nothing is collected or called back
    model.decode(1)
    assert cache["embed"].shape[0] == T


def _hf_with(hf, ids, hooks):
    handles = [mod.register_forward_pre_hook(fn, with_kwargs=True) if pre else mod.register_forward_hook(fn)
               for mod, pre, fn in hooks]
    try:
        with torch.no_grad():
            return hf(input_ids=torch.as_tensor(ids).reshape(1, -1), use_cache=False).logits[0].double().numpy()
    finally:
        for h in handles:
            h.remove()


def _replace_out(fn):
    """A forward hook applying fn to the first output (a tensor or a tuple's first item)."""
    def hook(m, a, o):
        if isinstance(o, tuple):
            return (fn(o[0]),) + o[1:]
        return fn(o)
    return hook


def _replace_in(fn):
    def hook(m, a, kw):
        if a:
            return (fn(a[0]),) + a[1:], kw
        return a, {**kw, "hidden_states": fn(kw["hidden_states"])}
    return hook


def _interventions(model, hf, rng, ids):
    """(name, apply to rlxc, undo, torch hooks) for each kind of intervention."""
    H, L = model.hidden_size, hf.model.layers
    lay = model.layers
    v_post, v_pre, v_mid = (rng.standard_normal(H).astype(np.float32) for _ in range(3))
    nq, hd = int(lay[1].num_q_heads), int(lay[1].head_dim)
    heads = np.ones(nq, np.float32)
    heads[1] = 0.0
    heads[-1] = 0.5
    I2 = int(lay[2].intermediate_size)
    neurons = (rng.random(I2) > 0.3).astype(np.float32)
    other = token_ids(T, seed=9)
    _, other_cache = model.run_with_cache(other, names=["layers.1.resid_post"])
    patch_pos = np.array([2, 5, 11])
    patch_vals = other_cache["layers.1.resid_post"][patch_pos]
    tv = {k: torch.as_tensor(x) for k, x in dict(post=v_post, pre=v_pre, mid=v_mid, heads=heads, neurons=neurons,
                                                 patch=patch_vals).items()}

    def set_(layer, **kw):
        for k, x in kw.items():
            setattr(layer, k, x)

    def head_fn(x):
        return (x.reshape(*x.shape[:-1], nq, hd) * tv["heads"][:, None]).reshape(x.shape)

    def patch_fn(x):
        x = x.clone()
        x[0, patch_pos] = tv["patch"]
        return x

    neuron = [("neuron_scale", lambda: set_(lay[2], neuron_scale=neurons), lambda: set_(lay[2], neuron_scale=None),
               [(_down(L[2]), True, _replace_in(lambda x: x * tv["neurons"]))])] if I2 else []  # none: experts only
    return neuron + [
        ("steer_resid_post", lambda: set_(lay[1], steer_resid_post=v_post, steer_scale=0.5),
         lambda: set_(lay[1], steer_resid_post=None, steer_scale=1.0),
         [(L[1], False, _replace_out(lambda x: x + 0.5 * tv["post"]))]),
        ("steer_resid_pre", lambda: set_(lay[2], steer_resid_pre=v_pre), lambda: set_(lay[2], steer_resid_pre=None),
         [(L[2], True, _replace_in(lambda x: x + tv["pre"]))]),
        ("steer_resid_mid", lambda: set_(lay[0], steer_resid_mid=v_mid), lambda: set_(lay[0], steer_resid_mid=None),
         [(_attn_residual_module(L[0]), False, _replace_out(lambda x: x + tv["mid"]))]),
        ("head_scale", lambda: set_(lay[1], head_scale=heads), lambda: set_(lay[1], head_scale=None),
         [(L[1].self_attn.o_proj, True, _replace_in(head_fn))]),
        ("patch", lambda: model.patch("layers.1.resid_post", patch_vals, patch_pos), model.clear_patches,
         [(L[1], False, _replace_out(patch_fn))]),
    ]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_interventions_match_torch_hooks(arch, pairs, isa):
    hf, model = pairs(arch)
    ids = token_ids(T, seed=4)
    base = model.forward(ids)
    for name, apply, undo, hooks in _interventions(model, hf, np.random.default_rng(5), ids):
        ref = _hf_with(hf, ids, hooks)
        assert rel_err(ref, base) > 1e-3, f"{name}: the test edit changes nothing"
        apply()
        try:
            got = model.forward(ids)
            assert rel_err(got, ref) <= STAGE_TOL, f"{name}, forward: {rel_err(got, ref):.2e}"
            model.reset()
            rows = [model.prefill(ids[:7])]
            rows += [model.decode(int(t))[None] for t in ids[7:]]
            got = np.concatenate(rows)
            assert rel_err(got, ref) <= STAGE_TOL, f"{name}, prefill + decode: {rel_err(got, ref):.2e}"
        finally:
            undo()
        np.testing.assert_array_equal(model.forward(ids), base)


def test_interventions_in_q8_mode_match_a_hook_doing_the_same(isa):
    """Steering / scales in C equal the same edit made by a Python hook, with q8 activations."""
    hf = build("llama", hidden_size=64, intermediate_size=128)
    model = from_hf(hf, weights="q8_0", max_seq=64)
    assert model.activations == "q8"
    ids = token_ids(T, seed=6)
    rng = np.random.default_rng(7)
    v = rng.standard_normal(model.hidden_size).astype(np.float32)
    neurons = (rng.random(128) > 0.5).astype(np.float32)
    model.layers[1].steer_resid_post = v
    model.layers[2].neuron_scale = neurons
    got = model.forward(ids)
    model.layers[1].steer_resid_post = None
    model.layers[2].neuron_scale = None

    def add(x, pos):
        x += v

    def scale(x, pos):
        return x * neurons
    with model.hooks({"layers.1.resid_post": add, "layers.2.mlp_act": scale}):
        want = model.forward(ids)
    assert rel_err(got, want) <= 1e-6


def test_no_hooks_no_change_and_hooks_see_every_call(pairs):
    hf, model = pairs("qwen3")
    ids = token_ids(T, seed=8)
    base = model.forward(ids)
    seen = []
    with model.hooks({"layers.0.mlp_out": lambda x, pos: seen.append((x.shape, pos.copy()))}):
        np.testing.assert_array_equal(model.forward(ids), base)  # a hook that returns None edits nothing
        model.decode(3)
    assert seen[0][0] == (T, model.hidden_size) and list(seen[0][1]) == list(range(T))
    assert seen[1][0] == (1, model.hidden_size) and list(seen[1][1]) == [T]
    model.forward(ids)
    assert len(seen) == 2  # removed on exit
    with model.collect("logits"):
        pass
    np.testing.assert_array_equal(model.forward(ids), base)


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_kv_cache_edit_equals_transformers_with_edited_cache(arch, pairs):
    hf, model = pairs(arch)
    ids = token_ids(T + 1, seed=10)
    model.reset()
    model.prefill(ids[:T], logits="none")
    k, v = model.kv_cache(1)
    assert k.shape == (int(model.layers[1].num_kv_heads), T, int(model.layers[1].head_dim))
    rng = np.random.default_rng(11)
    dk, dv = rng.standard_normal(k.shape[::2]).astype(np.float32), rng.standard_normal(k.shape[::2]).astype(np.float32)
    k[:, 5] += dk
    v[:, 5] += dv
    got = model.decode(int(ids[T]))
    with torch.no_grad():
        out = hf(input_ids=torch.as_tensor(ids[:T]).reshape(1, -1), use_cache=True)
        cache = out.past_key_values
        cache.layers[1].keys[0, :, 5] += torch.as_tensor(dk)
        cache.layers[1].values[0, :, 5] += torch.as_tensor(dv)
        ref = hf(input_ids=torch.as_tensor(ids[T:]).reshape(1, -1), past_key_values=cache,
                 use_cache=True).logits[0, -1].double().numpy()
    assert rel_err(got, ref) <= STAGE_TOL
    unedited = model.forward(ids)[-1]
    assert rel_err(got, unedited) > 1e-3


def test_save_load_state_and_fork_are_bit_identical(pairs):
    hf, model = pairs("gemma4_kv")
    ids = token_ids(T, seed=12)
    model.reset()
    model.prefill(ids[:10], logits="none")
    state = model.save_state()
    a = [model.decode(int(t)) for t in ids[10:]]
    model.load_state(state)
    assert model.n_past == 10
    b = [model.decode(int(t)) for t in ids[10:]]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    model.load_state(state)
    fork = model.fork()
    assert fork.n_past == 10 and fork.layers[0] is model.layers[0]
    c = [fork.decode(int(t)) for t in ids[10:]]
    assert model.n_past == 10  # the original's cache is its own
    for x, y in zip(a, c):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(model.decode(int(ids[10])), a[0])


def test_bad_input_names_the_stage_and_keeps_the_model_usable(tmp_path):
    model = from_hf(build("llama"), max_seq=64)
    ids = token_ids(T, seed=13)
    base = model.forward(ids)
    with pytest.raises(ValueError, match="steer_resid_post"):
        model.layers[0].steer_resid_post = np.zeros(7, np.float32)
    model.layers[0].steer_resid_post = np.ones(64, np.float32)
    with pytest.raises(ValueError, match=r"layer 0 has interventions set \(steer_resid_post\)"):
        rlxc.save(model, tmp_path / "m.gguf")
    model.layers[0].steer_resid_post = None
    with pytest.raises(ValueError, match="unknown stage 'layers.0.mlp_outt'"):
        model.run_with_cache(ids, names=["layers.0.mlp_outt"])
    with pytest.raises(ValueError, match="4 layers"):
        model.run_with_cache(ids, names=["layers.9.q"])
    with pytest.raises(ValueError, match="layers.1.resid_post"):
        model.patch("layers.1.resid_post", np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="2 rows of values for 3 positions"):
        model.patch("layers.1.resid_post", np.zeros((2, 64), np.float32), [0, 1, 2])
    with pytest.raises(TypeError, match="not callable"):
        with model.hooks({"layers.0.q": 3}):
            pass

    def boom(x, pos):
        raise KeyError("boom")
    with pytest.raises(HookError, match=r"layers\.2\.mlp_out raised KeyError") as info:
        with model.hooks({"layers.2.mlp_out": boom}):
            model.forward(ids)
    assert isinstance(info.value.__cause__, KeyError)
    assert model.n_past == 0  # the failed call left nothing in the cache
    with pytest.raises(HookError, match=r"layers\.1\.q returned shape \(3,\)"):
        with model.hooks({"layers.1.q": lambda x, pos: np.zeros(3)}):
            model.forward(ids)

    def reenter(x, pos):
        model.decode(1)
    with pytest.raises(HookError, match="cannot run, reset"):
        with model.hooks({"embed": reenter}):
            model.forward(ids)
    # attn_probs patches: width is checked when the call runs
    model.patch("layers.0.attn_probs", np.zeros((1, 4, 3), np.float32), [0])
    with pytest.raises(ValueError, match=r"patch of layers\.0\.attn_probs has 12 values per position"):
        model.forward(ids)
    model.clear_patches()
    np.testing.assert_array_equal(model.forward(ids), base)
    # a cache view keeps a re-allocating reset away
    k, v = model.kv_cache(0)
    model.layers[0].num_kv_heads = 4
    for name in ("k_proj", "v_proj"):
        model.layers[0].set_weight(name, np.zeros((64, 64), np.float32))
    with pytest.raises(BufferError, match="kv_cache"):
        model.reset()
    del k, v
    model.reset()
    assert model.n_past == 0


def test_stage_list_and_docs():
    assert LAYER_STAGES == ("resid_pre", "attn_in", "q", "k", "v", "attn_probs", "attn_z", "attn_out", "resid_mid",
                            "mlp_in", "mlp_act", "mlp_out", "resid_post")
    import pathlib
    doc = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    for s in LAYER_STAGES:
        assert f"`layers.i.{s}`" in doc, s
    for s in ("embed", "final_norm", "logits"):
        assert f"`{s}`" in doc, s


def test_compare_by_stage_names_the_first_stage_that_goes_wrong():
    hf = build("gemma3")
    model = from_hf(hf, max_seq=64)
    ids = token_ids(T, seed=14)
    report = compare(hf, model, ids, stages=True)
    assert report.ok, f"\n{report}"
    assert [r.name for r in report.rows] == model.stage_names()
    model.layers[2].attn_scale *= 1.1     # q, k and v stay right; the weights go wrong first
    report = compare(hf, model, ids, stages=True)
    assert report.first_bad == "layers.2.attn_probs", f"\n{report}"
    assert "layers.2.attn_probs" in str(report)
    sub = compare(hf, model, ids, stages=lambda n: n.endswith("resid_post"))
    assert sub.first_bad == "layers.2.resid_post"


def test_interventions_and_caches_apply_in_generate_and_stream(pairs):
    hf, model = pairs("llama")
    prompt = [int(t) for t in token_ids(6, seed=15)]
    plain = model.generate(prompt, 8)
    v = np.random.default_rng(16).standard_normal(model.hidden_size).astype(np.float32) * 3
    model.layers[2].steer_resid_post = v
    try:
        steered = model.generate(prompt, 8)
        streamed = list(model.stream(prompt, 8))
        with model.collect("layers.2.resid_post") as cache:
            again = model.generate(prompt, 8)
    finally:
        model.layers[2].steer_resid_post = None
    assert steered != plain and streamed == steered == again
    # the prompt's prefill and one decode per new token but the last (its logits end the loop)
    assert cache["layers.2.resid_post"].shape == (6 + 8 - 1, model.hidden_size)
    np.testing.assert_array_equal(cache.positions("layers.2.resid_post"), np.arange(13))
    assert model.generate(prompt, 8) == plain
