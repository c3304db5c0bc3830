"""NEON kernels on any Linux host: tests/build_kernel_test_neon.sh cross-builds rlxc for aarch64
and runs the C kernel and model tests under qemu-user (dotprod table, plain table by HWCAP,
plain table forced), plus the checks of setup.py's per-machine kernel directories and of the
baseline ISA.

Skipped only when the cross toolchain, qemu or arm64 SLEEF is not installed; the script says
which (exit status 77) and the apt line that installs it."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_kernel_test_neon.sh")
SKIP = 77


def test_neon_kernels_under_qemu(tmp_path):
    import pytest

    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / "neon"))
    env.pop("RLXC_NEON_NODOT", None)
    proc = subprocess.run(["bash", SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600)
    if proc.returncode == SKIP:
        pytest.skip(proc.stdout.strip().replace("\n", "; "))
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, "build_kernel_test_neon.sh failed:\n" + "\n".join(lines[-60:])
    assert lines[-1] == "neon kernel test: all runs passed"
    # Each of the two kernel runs and the two model runs printed its own verdict.
    assert sum(line == "all kernels passed" for line in lines) == 2
    assert sum(line == "all model checks passed" for line in lines) == 2
