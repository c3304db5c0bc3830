"""The whole model in one C engine (issue 12): rlxc.Model makes one call into C per prefill and per
decoded token (rlxc._rlxc.Engine), with one thread team per call.

- results are bit-identical on 1, 2, 3 and 7 threads (prefill and decode, both activation modes,
  every ISA), for models with every model-level part: Gemma 4 per-layer inputs, final softcap,
  quantized untied and tied lm_heads;
- the engine agrees with the NumPy pieces it replaced (embed_tokens, per_layer_inputs,
  final_norm, logits, run over Pipeline.prefill): embeddings bit-exact, logits to 1e-5 relative;
- model-level parts assigned or edited in place take effect at the next call;
- the Engine refuses bad arguments with clear exceptions and keeps its arrays alive.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import rlxc  # noqa: E402
from rlxc._rlxc import Engine, Pipeline  # noqa: E402
from test_hf_parity import build, token_ids  # noqa: E402

THREADS = (1, 2, 3, 7)
ARCH_CASES = [("gemma4_ple", "q4_0"), ("gemma2", "q8_0"), ("llama", "f32"), ("gemma4_kv", "q4_0"), ("qwen3_moe", "q8_0"),
              ("gemma4_moe", "q4_0")]


def run(model, ids, n_prompt: int) -> np.ndarray:
    """Prefill n_prompt tokens (every logit), then decode the rest one by one: [T, vocab]."""
    model.reset()
    out = [model.prefill(ids[:n_prompt])]
    out += [model.decode(int(t))[None] for t in ids[n_prompt:]]
    return np.concatenate(out)


@pytest.mark.parametrize("activations", ["q8", "f32"])
@pytest.mark.parametrize("arch,weights", ARCH_CASES)
def test_bit_identical_on_1_2_3_7_threads(arch, weights, activations, isa):
    model = rlxc.from_hf(build(arch), weights=weights, max_seq=64, activations=activations)
    ids = token_ids(24)          # 12 prefilled (the GEMM paths), 12 decoded (the matvecs)
    ref = None
    for t in THREADS:
        model.threads = t
        assert model.pipeline.threads == t
        got = run(model, ids, 12)
        if ref is None:
            ref = got
        else:
            np.testing.assert_array_equal(got, ref, err_msg=f"{t} threads vs 1")


@pytest.mark.parametrize("arch,weights", ARCH_CASES)
def test_engine_matches_the_numpy_pieces(arch, weights):
    model = rlxc.from_hf(build(arch), weights=weights, max_seq=64)
    ids = token_ids(10)
    tr = model.trace(ids)
    # the pieces: NumPy embedding / PLE / final norm / lm_head around Pipeline.prefill
    x = model.embed_tokens(ids)
    np.testing.assert_array_equal(tr["embeddings"], x)
    model.reset()
    pipe = model.pipeline
    out, per = pipe.prefill(x, ple=model.per_layer_inputs(ids, x), layer_outputs=True)
    if model.ple is None:        # the same stages on the same inputs: the same bits
        np.testing.assert_array_equal(tr["layers"], per)
    assert float(np.max(np.abs(tr["layers"] - per))) <= 1e-5 * float(np.max(np.abs(per)))
    normed = model.final_norm(out)
    logits = model.logits(normed)
    scale = float(np.max(np.abs(logits)))
    # PLE's projection is a NumPy (BLAS) product in the pieces, the engine's own f32 GEMM in C
    assert float(np.max(np.abs(tr["logits"] - logits))) <= 1e-5 * scale
    assert float(np.max(np.abs(tr["final_norm"] - normed))) <= 1e-5 * float(np.max(np.abs(normed)))
    assert tr["layers"].shape == (len(model.layers), len(ids), model.hidden_size)
    # last / none
    model.reset()
    last = model.prefill(ids, logits="last")
    np.testing.assert_allclose(last, tr["logits"][-1], rtol=0, atol=1e-5 * scale)
    model.reset()
    assert model.prefill(ids, logits="none") is None and model.n_past == len(ids)


def test_parts_assigned_or_edited_take_effect():
    model = rlxc.from_hf(build("gemma2"), weights="f32", max_seq=32)
    ids = token_ids(6)
    base = model.forward(ids)
    model.final_softcap = 0.5
    capped = model.forward(ids)
    assert float(np.max(np.abs(capped))) <= 0.5 and not np.array_equal(capped, base)
    model.final_softcap = 10.0
    np.testing.assert_array_equal(model.forward(ids), base)
    model.norm_weight *= 2.0                     # in place: the engine reads the same array
    assert not np.array_equal(model.forward(ids), base)
    model.norm_weight /= 2.0
    np.testing.assert_array_equal(model.forward(ids), base)
    model.embed_scale = model.embed_scale * 1.5
    assert not np.array_equal(model.forward(ids), base)


def test_engine_refuses_bad_arguments():
    model = rlxc.from_hf(build("llama"), weights="q4_0", max_seq=16)
    pipe, H, V = model.pipeline, model.hidden_size, model.vocab_size
    emb = np.zeros((V, H), np.float32)
    with pytest.raises(TypeError, match="Pipeline"):
        Engine(object(), emb)
    with pytest.raises(TypeError, match="embed"):
        Engine(pipe, emb.astype(np.float64))
    with pytest.raises(TypeError, match="embed"):
        Engine(pipe, emb[:, ::2])
    with pytest.raises(ValueError, match="embed_type must be one of"):
        Engine(pipe, emb, embed_type="q9")
    with pytest.raises(ValueError, match="whole q4_0 blocks"):
        Engine(pipe, np.zeros((V, 17), np.uint8), embed_type="q4_0")
    with pytest.raises(ValueError, match="go together"):
        Engine(pipe, emb, ple_norm=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="finite"):
        Engine(pipe, emb, final_softcap=float("nan"))
    e = Engine(pipe, np.zeros((V, H + 1), np.float32))   # shapes are checked against the layers per call
    with pytest.raises(ValueError, match="embedding"):
        e.prefill(np.array([1, 2]))
    e = Engine(pipe, emb)
    with pytest.raises(TypeError, match="integers"):
        e.prefill(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="1-D"):
        e.prefill(np.array([[1, 2]]))
    with pytest.raises(ValueError, match="vocabulary"):
        e.prefill(np.array([1, V]))
    with pytest.raises(ValueError, match="logits"):
        e.prefill(np.array([1]), logits="some")
    with pytest.raises(ValueError, match="max_seq"):
        e.prefill(np.arange(17) % V)
    with pytest.raises(ValueError, match="past"):
        e.decode(1, 3)
    with pytest.raises(ValueError, match="token"):
        e.decode(V, 0)
    assert pipe.n_past == 0                      # nothing above ran
    assert e.decode(1, 0).shape == (V,) and pipe.n_past == 1


def test_engine_keeps_its_arrays_and_frees_them():
    model = rlxc.from_hf(build("llama"), weights="f32", max_seq=16)
    emb = np.random.default_rng(0).standard_normal((model.vocab_size, model.hidden_size)).astype(np.float32)
    before = sys.getrefcount(emb)
    e = Engine(model.pipeline, emb, lm_head=emb)
    assert sys.getrefcount(emb) == before + 2
    for _ in range(200):
        e.decode(3, 0)
    assert sys.getrefcount(emb) == before + 2
    del e
    gc.collect()
    assert sys.getrefcount(emb) == before


def test_one_thread_team_per_call_is_fork_safe():
    """A child forked after the parent ran the engine on several threads runs it on one, with the
    same logits (GNU OpenMP's pool does not survive fork)."""
    import os
    model = rlxc.from_hf(build("gemma3"), weights="q4_0", max_seq=32, threads=2)
    ids = token_ids(8)
    want = model.forward(ids)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            ok = np.array_equal(model.forward(ids), want)
        except BaseException:
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"


@pytest.mark.skipif(bool(__import__("os").environ.get("RLXC_SANITIZED")), reason="RSS is meaningless under ASan")
def test_memory_flat_over_5000_model_decodes_and_50_engines():
    from test_robustness import rss_kb
    model = rlxc.from_hf(build("gemma4_ple"), weights="q4_0", max_seq=64, threads=2)
    ids = token_ids(8)
    for i in range(300):  # warm up the allocator and the scratch
        if model.n_past >= 60:
            model.reset()
        model.decode(int(ids[i % 8]))
    gc.collect()
    start = rss_kb()
    for i in range(5000):
        if model.n_past >= 60:
            model.reset()
        model.decode(int(ids[i % 8]))
    gc.collect()
    grown = rss_kb() - start
    assert grown < 512, f"RSS grew by {grown} kB over 5,000 decodes"
    norm = model.norm_weight
    model.reset()
    refs = sys.getrefcount(norm)
    start = rss_kb()
    for _ in range(50):  # engines rebuilt (a model part assigned) and dropped
        model.final_softcap = model.final_softcap
        model.prefill(ids[:3], logits="last")
        model.reset()
    gc.collect()
    grown = rss_kb() - start
    assert grown < 1024, f"RSS grew by {grown} kB over 50 engines"
    assert sys.getrefcount(norm) == refs, "dropped engines kept their arrays"


def test_reset_keeps_the_engine_unless_a_ple_entry_was_replaced():
    """reset() empties the cache over the same engine (its lm_head's packed copy survives); a
    replaced ``ple`` entry is picked up by a new engine."""
    model = rlxc.from_hf(build("gemma4_ple"), weights="q4_0", max_seq=32)
    ids = token_ids(4)
    before = model.prefill(ids, logits="last")
    engine = model.engine
    model.reset()
    assert model.engine is engine
    np.testing.assert_array_equal(model.prefill(ids, logits="last"), before)
    model.ple["embed_scale"] = model.ple["embed_scale"] * 2  # (proj_scale would be normed away)
    model.reset()
    assert model.engine is not engine
    assert not np.allclose(model.prefill(ids, logits="last"), before)


def _amx_in_a_plain_process() -> bool:
    """Whether a process without pytest's faulthandler signal stack gets the AMX tiles (Linux
    refuses them to a process whose signal stack is too small for their signal frame)."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import rlxc; print(rlxc.cpu_info()['amx'])"], capture_output=True,
                       text=True, timeout=120)
    return r.stdout.strip() == "True"


@pytest.mark.parametrize("weights", ["q4_0", "q8_0"])
def test_amx_gemms_bit_identical_with_avx512(weights, tmp_path):
    """On an AMX CPU, prefill logits of 40 tokens (two full tile groups and a last one of 8) are the
    same bit for bit with the tiles as with RLXC_AMX=0; skipped where AMX is not usable."""
    import os
    import subprocess
    if "avx512" not in rlxc.cpu_info()["available_isas"] or not _amx_in_a_plain_process():
        pytest.skip("AMX tiles are not usable here")
    code = ("import sys; import numpy as np, rlxc; sys.path.insert(0, sys.argv[2]); "
            "from test_hf_parity import build, token_ids; "
            f"m = rlxc.from_hf(build('llama'), weights='{weights}', max_seq=64); "
            "np.save(sys.argv[1], m.prefill(token_ids(40))); print(rlxc.cpu_info()['amx'])")
    tests = os.path.dirname(os.path.abspath(__file__))
    got = {}
    for amx in ("1", "0"):
        out = str(tmp_path / f"amx{amx}.npy")
        env = dict(os.environ, RLXC_ISA="avx512", RLXC_AMX=amx)
        r = subprocess.run([sys.executable, "-c", code, out, tests], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.strip() == ("True" if amx == "1" else "False")
        got[amx] = np.load(out)
    np.testing.assert_array_equal(got["1"], got["0"])
