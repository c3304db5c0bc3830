"""Threads, fork, reference counts and memory: rlxc lives inside people's processes."""

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import rlxc
from rlxc import ops
import reference as ref


def small_stack(seed=0, n=2, dtype="f32", hidden=64):
    rng = np.random.default_rng(seed)
    layers = []
    for i in range(n):
        layer = rlxc.Layer(hidden_size=hidden, intermediate_size=2 * hidden, head_dim=16, num_q_heads=hidden // 16,
                           num_kv_heads=hidden // 32, sliding_window=3 if i % 2 else 0)
        layer.set_weights(ref.random_weights(ref.fields_of(layer), rng), dtype)
        layers.append(layer)
    return layers


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def test_refcounts_unchanged_after_10000_calls():
    pipe = rlxc.Pipeline(small_stack(), max_seq=4)
    layer = pipe.layers[0]
    x = np.ones(64, np.float32)
    w = np.ones((8, 64), np.float32)
    before = (sys.getrefcount(x), sys.getrefcount(w), sys.getrefcount(pipe), sys.getrefcount(layer))
    for i in range(10_000):
        y = pipe.decode_token(x, i % 4)
        ops.matmul(x, w)
        ops.rmsnorm(x, None)
        layer.weight("q_proj")
    assert sys.getrefcount(y) == 2  # the name y and getrefcount's argument
    assert (sys.getrefcount(x), sys.getrefcount(w), sys.getrefcount(pipe), sys.getrefcount(layer)) == before
    for i in range(1000):  # error paths release what they took too
        with pytest.raises(ValueError):
            pipe.decode_token(x, 99)
        with pytest.raises(TypeError):
            ops.matmul(x.astype(np.float64), w)
    assert (sys.getrefcount(x), sys.getrefcount(w)) == before[:2]


def test_memory_flat_over_10000_decodes_and_100_pipelines():
    layers = small_stack(dtype="q4_0")
    pipe = rlxc.Pipeline(layers, max_seq=64)
    x = np.ones(64, np.float32)
    for i in range(500):  # warm up allocator and scratch
        pipe.decode_token(x, i % 64)
    gc.collect()
    start = rss_kb()
    for i in range(10_000):
        pipe.decode_token(x, i % 64)
    grown = rss_kb() - start
    assert grown < 512, f"RSS grew by {grown} kB over 10,000 decode calls"
    for _ in range(10):  # warm-up of create/destroy
        rlxc.Pipeline(small_stack(dtype="q4_0"), 512).prefill(np.ones((3, 64), np.float32))
    gc.collect()
    start = rss_kb()
    for _ in range(100):  # 100 models created and dropped
        rlxc.Pipeline(small_stack(dtype="q4_0"), 512).prefill(np.ones((3, 64), np.float32))
    gc.collect()
    grown = rss_kb() - start
    assert grown < 2048, f"RSS grew by {grown} kB over 100 create/destroy cycles"


def test_one_pipeline_from_many_threads_is_serialized():
    """decode_token at pos 0 depends only on its input, so with calls serialized by the
    pipeline's lock every thread must get exactly the single-threaded answer."""
    pipe = rlxc.Pipeline(small_stack(hidden=256, n=3), max_seq=8, threads=2)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(6)]
    want = [pipe.decode_token(x, 0) for x in xs]
    bad = []

    def work(i):
        for _ in range(100):
            if not np.array_equal(pipe.decode_token(xs[i], 0), want[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_models_in_parallel_threads_equal_sequential():
    rng = np.random.default_rng(2)
    pipes = [rlxc.Pipeline(small_stack(seed=s, dtype="q4_0", hidden=128), max_seq=40, threads=1) for s in range(4)]
    xs = [rng.standard_normal((7, 128)).astype(np.float32) for _ in pipes]
    want = [p.prefill(x) for p, x in zip(pipes, xs)]
    for p in pipes:
        p.reset()
    got = [None] * len(pipes)

    def work(i):
        out = pipes[i].prefill(xs[i])
        for t in range(20):
            out = pipes[i].decode_token(out[-1] if out.ndim == 2 else out, 7 + t)
        got[i] = out

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pipes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, p in enumerate(pipes):
        p.reset()
        out = p.prefill(xs[i])
        np.testing.assert_array_equal(out, want[i])
        for t in range(20):
            out = p.decode_token(out[-1] if out.ndim == 2 else out, 7 + t)
        np.testing.assert_array_equal(got[i], out)


def test_layer_edits_wait_for_a_running_pipeline():
    """Fields are frozen while a pipeline computes with the layer: an edit from another
    thread either lands between calls or raises, never mid-call."""
    layers = small_stack(dtype="q4_0", hidden=256, n=4)
    pipe = rlxc.Pipeline(layers, max_seq=600, threads=1)
    x = np.ones((512, 256), np.float32)
    seen = []

    def edit():
        for _ in range(200):
            try:
                layers[1].sliding_window = 5
                seen.append("ok")
            except RuntimeError as e:
                assert "in use" in str(e)
                seen.append("busy")

    t = threading.Thread(target=edit)
    t.start()
    pipe.prefill(x)
    t.join()
    assert set(seen) <= {"ok", "busy"} and len(seen) == 200


def test_fork_child_can_use_rlxc():
    code = textwrap.dedent("""
        import os, sys, numpy as np
        sys.path.insert(0, %r)
        from test_robustness import small_stack
        import rlxc
        pipe = rlxc.Pipeline(small_stack(hidden=256), 16, threads=2)
        x = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
        a = pipe.prefill(x)          # the parent has run OpenMP threads
        pid = os.fork()
        if pid == 0:
            pipe.reset()
            b = pipe.prefill(x)      # would hang in GNU OpenMP without the fork guard
            os._exit(0 if np.array_equal(a, b) else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """ % os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_fork_while_another_thread_grows_the_scratch():
    """A thread keeps growing the pipeline's scratch (ever longer prefills) while the main thread
    forks: each child, which inherits whatever state the scratch pointers were in, must still run
    the pipeline and get the right answer (ensure_scratch publishes new buffers before freeing
    the old). The window is a few instructions wide, so this samples it 60 times per run."""
    code = textwrap.dedent("""
        import os, sys, threading, numpy as np
        sys.path.insert(0, %r)
        from test_robustness import small_stack
        import rlxc
        pipe = rlxc.Pipeline(small_stack(hidden=128), 512, threads=1)
        x = np.random.default_rng(0).standard_normal((4, 128)).astype(np.float32)
        want = pipe.prefill(x)
        stop = False
        growing = [pipe]
        def grow():
            while not stop:
                growing[0] = fresh = rlxc.Pipeline(pipe.layers, 512, threads=1)
                for T in range(8, 512, 24):
                    fresh.prefill(np.zeros((T, 128), np.float32))
                    fresh.reset()
        t = threading.Thread(target=grow)
        t.start()
        bad = 0
        for _ in range(60):
            pid = os.fork()
            if pid == 0:  # the pipeline the thread was growing, in whatever state fork found it
                child = growing[0]
                child.reset()
                os._exit(0 if np.array_equal(child.prefill(x), want) else 3)
            _, status = os.waitpid(pid, 0)
            bad += os.waitstatus_to_exitcode(status) != 0
        stop = True
        t.join()
        sys.exit(bad)
    """ % os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], timeout=300, capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])


def test_field_conversion_callbacks_cannot_resurrect_freed_weights():
    """Setting a field converts the value first: user code in __float__/__bool__ that
    replaces weights or re-inits the layer must not leave dangling pointers behind."""
    layer = rlxc.Layer()
    layer.set_weight("q_proj", np.zeros((64, 64), np.float32))

    class Sneaky(int):
        def __float__(self):
            layer.set_weight("q_proj", np.ones((64, 64), np.float32))
            return 1e-5

    class Reinit(int):
        def __bool__(self):
            layer.__init__()
            return True

    layer.eps = Sneaky(1)
    assert layer.weight("q_proj").max() == 1.0 and layer.eps == pytest.approx(1e-5)
    layer.qkv_bias = Reinit(1)
    assert layer.qkv_bias and layer.weight_type("q_proj") is None


def test_cycles_through_borrowed_weights_are_collected():
    import weakref

    class Owner(np.ndarray):
        pass

    data = ops.quantize_q4_0(np.ones((64, 64), np.float32)).view(Owner)
    layer = rlxc.Layer()
    data.layer = layer                     # owner -> layer -> owner
    layer.set_weight_view("q_proj", data, 64, "q4_0")
    ref = weakref.ref(layer)
    del layer, data
    gc.collect()
    assert ref() is None


def test_misaligned_rows_are_rejected_not_read():
    buf = np.zeros(16 * 128 + 1, np.uint8)
    rows = buf[1:].reshape(16, 128)
    with pytest.raises(ValueError, match="aligned"):
        ops.dequantize(rows, "f16", 64)
    with pytest.raises(ValueError, match="aligned"):
        ops.matmul(np.ones(64, np.float32), rows, "f16")


def test_hooks_patches_and_kv_views_leak_nothing():
    """Hooks (the GIL taken inside the engine's thread team), caches, patches, failing hooks and
    kv_cache views, many times over: reference counts come back and memory stays flat."""
    rng = np.random.default_rng(3)
    model = rlxc.Model(small_stack(dtype="q8_0"), rng.standard_normal((40, 64)).astype(np.float32), max_seq=16,
                       threads=2)
    vals = rng.standard_normal((1, 64)).astype(np.float32)
    seen = []

    def hook(x, pos):
        seen.append(float(x.sum()))
        return x * 1.0

    def boom(x, pos):
        raise ValueError("boom")

    def cycle(i):
        model.reset()
        with model.hooks({"layers.0.mlp_out": hook}), model.collect(["layers.1.resid_post", "logits"]) as c:
            model.patch("layers.1.resid_mid", vals, [1])
            model.prefill([1, 2, 3])
            model.decode(4)
            assert c["logits"].shape == (4, 40)
        model.clear_patches()
        k, v = model.kv_cache(1)
        k[0, 0, 0] += 1.0
        del k, v
        with pytest.raises(rlxc.interp.HookError):
            with model.hooks({"layers.1.attn_probs": boom}):
                model.decode(5)

    for i in range(50):  # warm-up
        cycle(i)
    gc.collect()
    before = (sys.getrefcount(hook), sys.getrefcount(boom), sys.getrefcount(vals), sys.getrefcount(model))
    start = rss_kb()
    for i in range(1000):
        cycle(i)
    gc.collect()
    assert (sys.getrefcount(hook), sys.getrefcount(boom), sys.getrefcount(vals), sys.getrefcount(model)) == before
    assert len(seen) == 2 * 1050
    if not os.environ.get("RLXC_SANITIZED"):  # ASan's quarantine holds freed memory
        grown = rss_kb() - start
        assert grown < 1024, f"RSS grew by {grown} kB over 1000 hooked calls"
