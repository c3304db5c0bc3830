"""Regression tests of the C engine's hardening (issue 16, findings 1, 2 and 4).

Each case that crashed the interpreter before its fix runs in a child process, so that a crash
fails the test instead of killing pytest. The big-index cases use np.zeros (and, in the C kernel
test, MAP_NORESERVE mappings): pages that are never written cost no memory, and reading them
maps the kernel's shared zero page, so multi-GiB operands cost seconds and a few MiB of RSS.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlxc

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZED = bool(os.environ.get("RLXC_SANITIZED"))
# Under ASan every load is checked against shadow memory (1/8 of the address range the arrays
# span) and its allocator does not hand out lazily mapped zeros the same way: the multi-GiB
# operands would take minutes and GiBs there. These cases run in the plain test run only.
no_huge_under_asan = pytest.mark.skipif(SANITIZED, reason="multi-GiB lazily mapped operands: too slow and too "
                                                          "large under ASan's shadow checks")


def run_child(code: str, timeout: float = 300) -> str:
    """Runs code in a fresh interpreter; a crash or a failed assertion there fails the test."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


# ---------------------------------------------------------------- finding 1: ple_dim summed in int

# 1000 layers, every one borrowing the same lazily mapped zero matrices (set_weight_view copies
# nothing), so the layers are complete and a call reaches the engine's per-layer-input code.
PLE_LAYERS = """
import numpy as np, rlxc
H, L, P = 64, 1000, {P}
shared = {{}}

def zeros_f16(rows, cols):
    if (rows, cols) not in shared:
        shared[rows, cols] = np.zeros((rows, 2 * cols), np.uint8)
    return shared[rows, cols]

def complete(layer):
    for name in layer.used_weights():
        shape = layer.weight_shape(name)
        if len(shape) == 1:
            layer.set_weight(name, np.ones(shape, np.float32))
        else:
            layer.set_weight_view(name, zeros_f16(*shape), shape[1], "f16")

layers = [rlxc.Layer(hidden_size=H, ple_dim={P0}) for _ in range(L)]
for layer in layers:
    complete(layer)
x = np.zeros(H, np.float32)

def wrong_ples_raise(pipe, pos):
    for ple in (None, np.zeros(704, np.float32)):
        try:
            pipe.decode_token(x, pos, ple)
        except ValueError as e:
            assert "ple" in str(e), e
        else:
            raise SystemExit("decode_token accepted a ple of the wrong size")
"""


@pytest.mark.parametrize("P, stride", [(4294968, 4294968000), (2147484, 2147484000)],
                         ids=["sum-wraps-to-704", "sum-wraps-negative"])
def test_ple_stride_over_2_31_is_exact_and_calls_with_a_wrong_ple_raise(P, stride):
    # Before the fix the int sum wrapped: to 704 (decode_token with 704 floats read ~17 GB past
    # them: SIGSEGV) or below 0 (ple=None was accepted and the engine dereferenced NULL).
    out = run_child(PLE_LAYERS.format(P=P, P0=P) + f"""
pipe = rlxc.Pipeline(layers, 4)
assert pipe.ple_stride == {stride}, pipe.ple_stride
wrong_ples_raise(pipe, 0)
assert pipe.n_past == 0
print("ok")
""")
    assert out.strip().endswith("ok")


def test_ple_dim_edited_after_creation_past_2_31_raises():
    # The layers are borrowed: ple_dim set after the Pipeline was made must be summed exactly too.
    out = run_child(PLE_LAYERS.format(P=4294968, P0=0) + """
pipe = rlxc.Pipeline(layers, 4)
pipe.decode_token(x, 0)
for layer in layers:
    layer.ple_dim = P
    complete(layer)
assert pipe.ple_stride == 1000 * P, pipe.ple_stride
wrong_ples_raise(pipe, 1)
assert pipe.n_past == 1
print("ok")
""")
    assert out.strip().endswith("ok")


# ---------------------------------------- finding 2: element offsets of the kernels in int

SIMD_ISAS = [i for i in rlxc.cpu_info()["available_isas"] if i != "scalar"]


@no_huge_under_asan
@pytest.mark.skipif(not SIMD_ISAS, reason="no SIMD kernels on this machine")
@pytest.mark.parametrize("wtype", ["f16", "bf16", "f32"])
def test_matmul_rows_past_2_31_elements(wtype):
    # The reproducer, with the fewest rows and columns that cross: a 4-row tile's last
    # row starts at element 3 * K > 2^31 (int: negative, SIGSEGV). Two products per row, one in
    # the vector body and one in the K % 8 tail, make every output a known integer.
    out = run_child(f"""
import numpy as np, rlxc
K = 2**31 // 3 + 1
x = np.zeros(K, np.float32)
x[[K - 40, K - 1]] = [10, 1]
v = np.arange(1, 5, dtype=np.float32)[:, None]  # row n holds n + 1 twice; the rest stays unmapped zeros
bits = {{"f32": v, "f16": v.astype(np.float16).view(np.uint16), "bf16": (v.view(np.uint32) >> 16).astype(np.uint16)}}
w = np.zeros((4, K), bits["{wtype}"].dtype)
w[:, [K - 40, K - 1]] = bits["{wtype}"]
b = w if "{wtype}" == "f32" else w.view(np.uint8)
for isa in {SIMD_ISAS!r}:
    rlxc.set_isa(isa)
    y = rlxc.ops.matmul(x, b, wtype="{wtype}")
    assert y.tolist() == [11.0, 22.0, 33.0, 44.0], (isa, y)
print("ok")
""")
    assert out.strip() == "ok"


@no_huge_under_asan
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the C kernel test")
def test_kernel_offsets_past_2_31_in_c():
    # Every ISA's products with ldy, row lengths and token strides past 2^31 elements, and the
    # AVX-512 interleaved GEMMs' 32-bit gather offsets (which wrapped silently): tests/test_kernels.c --big.
    out_dir = os.path.join(HERE, "..", "build", "kernel_test_big")
    env = dict(os.environ, OUT=out_dir)
    r = subprocess.run(["bash", os.path.join(HERE, "build_kernel_test.sh"), "--no-run"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([os.path.join(out_dir, "test_kernels"), "--big"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    assert "all kernels passed" in r.stdout and " FAIL " not in r.stdout


# ------------------------------------------------- finding 4: Pipeline.__init__ and its iterable

def small_layers(n=2):
    layers = []
    for _ in range(n):
        layer = rlxc.Layer(hidden_size=64)
        for name in layer.used_weights():
            layer.set_weight(name, np.full(layer.weight_shape(name), 0.01, np.float32))
        layers.append(layer)
    return layers


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError, TypeError, MemoryError])
def test_exception_from_the_layers_iterable_propagates(exc):
    layers = small_layers()

    def gen():
        yield layers[0]
        raise exc("from the iterable")

    with pytest.raises(exc, match="from the iterable"):
        rlxc.Pipeline(gen(), 8)
    pipe = rlxc.Pipeline.__new__(rlxc.Pipeline)
    with pytest.raises(exc, match="from the iterable"):
        pipe.__init__(gen(), 8)
    with pytest.raises(RuntimeError, match="not initialized"):
        pipe.n_past
    pipe.__init__(layers, 8)  # the failed call left the object as new
    assert pipe.n_past == 0


def test_not_iterable_layers_raise_type_error():
    with pytest.raises(TypeError, match="layers must be"):
        rlxc.Pipeline(42, 8)
    with pytest.raises(TypeError, match=r"layers\[1\] must be an rlxc.Layer"):
        rlxc.Pipeline([small_layers(1)[0], "x"], 8)


def test_reentering_init_from_the_layers_iterable_is_safe():
    layers = small_layers()
    pipe = rlxc.Pipeline.__new__(rlxc.Pipeline)

    def gen():
        yield layers[0]
        pipe.__init__(layers[:1], 16)  # completes: the object is now initialized
        yield layers[1]

    with pytest.raises(RuntimeError, match="already initialized"):
        pipe.__init__(gen(), 8)
    # the inner call's pipeline stands, whole
    assert pipe.max_seq == 16 and len(pipe.layers) == 1 and pipe.layers[0] is layers[0]
    out = pipe.prefill(np.ones((2, 64), np.float32))
    assert out.shape == (2, 64) and pipe.n_past == 2


def test_reentering_init_does_not_leak_the_pipeline():
    # Before the fix every re-entered __init__ leaked a whole pipeline: 20 x a 100 MiB KV cache.
    # The cache is calloc'ed (mapped, not touched), so the leak shows in the address space size.
    out = run_child("""
import numpy as np, rlxc
layer = rlxc.Layer(hidden_size=64)  # 4 KV heads of 16: 512 bytes of cache per position
for name in layer.used_weights():
    layer.set_weight(name, np.zeros(layer.weight_shape(name), np.float32))
MAX_SEQ = 100 << 11  # 100 MiB of cache

def vm_size():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * 4096

def reentered():
    pipe = rlxc.Pipeline.__new__(rlxc.Pipeline)
    def gen():
        pipe.__init__([layer], MAX_SEQ)
        yield layer
    try:
        pipe.__init__(gen(), MAX_SEQ)
    except RuntimeError:
        pass
    assert pipe.max_seq == MAX_SEQ

reentered()
before = vm_size()
for _ in range(20):
    reentered()
grown = vm_size() - before
assert grown < 500 << 20, f"address space grew by {grown >> 20} MiB over 20 re-entered __init__ calls"
print("ok", grown >> 20)
""")
    assert out.startswith("ok")


# ------------------------------------------------------- the engine's table of weight types

def test_weight_types_describe_every_type_the_engine_takes(isa):
    types = rlxc._rlxc.weight_types()
    assert [t["name"] for t in types] == ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k",
                                          "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"]
    assert {t["name"]: t["ggml_type"] for t in types} == {"f32": 0, "f16": 1, "bf16": 30, "q4_0": 2, "q4_1": 3,
                                                           "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13,
                                                           "q6_k": 14, "iq4_nl": 20, "iq4_xs": 23}
    for t in types:
        assert set(t) == {"name", "ggml_type", "block_size", "block_bytes", "runs", "from_floats"}
        assert t["runs"] is True  # every table, scalar included, has every type's products
        cols = 2 * 256
        layer = rlxc.Layer(hidden_size=cols)
        rows = layer.weight_shape("q_proj")[0]
        raw = np.zeros((rows, cols // t["block_size"] * t["block_bytes"]), np.uint8)
        layer.set_weight_raw("q_proj", raw, cols, t["name"])  # the row size the table gives is the engine's
        assert layer.weight_type("q_proj") == t["name"]
        w = np.ones((rows, cols), np.float32)
        if t["from_floats"]:
            layer.set_weight("q_proj", w, t["name"])
        else:
            with pytest.raises(ValueError, match="cannot quantize floats"):
                layer.set_weight("q_proj", w, t["name"])
        x = np.ones(cols, np.float32)
        assert rlxc.ops.matmul(x, raw if t["name"] != "f32" else raw.view(np.float32), wtype=t["name"]).shape == (rows,)
