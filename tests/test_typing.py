"""Typing: the C module's stubs (python/rlxc/_rlxc.pyi) agree with the built module
(``python -m mypy.stubtest rlxc._rlxc``, allowlist: tests/stubtest_allowlist.txt, each entry with
its reason), the example scripts pass ``mypy --strict`` against the package's annotations, and
the installed package itself passes ``mypy --strict -p rlxc`` (settings: pyproject.toml's
``[tool.mypy]``). Skipped when mypy is not installed (it is in the ``test`` extra)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy, or pip install '.[test]')")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _mypy(args: list[str], cache: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # run outside the source tree so that the installed rlxc (wheel or editable) is what is checked
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    env["MYPY_CACHE_DIR"] = cache
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(cache), env=env)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("mypy")
    return str(d / ".mypy_cache")


def test_stubtest_c_module(cache):
    out = _mypy(["mypy.stubtest", "rlxc._rlxc", "--allowlist", os.path.join(HERE, "stubtest_allowlist.txt")],
                cache)
    assert out.returncode == 0, out.stdout + out.stderr


def test_examples_mypy_strict(cache):
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
    assert files, "no example scripts"
    # --follow-imports=silent: the examples are held to --strict; rlxc's own modules are read for
    # their annotations (py.typed, _rlxc.pyi) but not re-checked here
    out = _mypy(["mypy", "--strict", "--follow-imports=silent", "--no-error-summary", *files], cache)
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_mypy_strict(cache):
    """``mypy --strict`` over the rlxc package as installed (what ``import rlxc`` finds, run from
    outside the source tree): every module, the C module's stubs included."""
    out = _mypy(["mypy", "--strict", "--config-file", os.path.join(ROOT, "pyproject.toml"), "-p", "rlxc"], cache,
                timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
