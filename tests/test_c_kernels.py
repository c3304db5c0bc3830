"""The C test programs: tests/test_kernels.c (every kernel of every ISA this CPU runs against the
scalar reference, on random shapes with tails) and tests/test_model.c (a whole model through the
engine's C API), without Python in between."""

import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the C kernel test")
def test_every_kernel_matches_scalar_in_c():
    r = subprocess.run(["bash", os.path.join(HERE, "build_kernel_test.sh")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "all kernels passed" in r.stdout
    assert " FAIL " not in r.stdout
    assert r.stdout.count("PASS") >= 16, "expected at least the scalar table to run"
    # tests/test_model.c: the whole-model engine from C (threads 1/2/3/7 identical, prefill == decode)
    assert "all model checks passed" in r.stdout
