#!/usr/bin/env bash
# Packaging check: build the sdist and the wheel (python -m build makes the wheel FROM the sdist,
# so a source missing from MANIFEST.in fails here), install the wheel with --no-deps into a fresh
# venv with only numpy and tqdm beside it (plus pytest, and gguf which tests/reference.py uses),
# and run it from outside the source tree: `rlxc info`, the demo, and tests/test_layer.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m pip install -q build
python -m build --outdir "$work/dist" "$root"
ls -l "$work/dist"
python -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q --no-deps "$work"/dist/rlxc-*.whl
"$py" -m pip install -q numpy tqdm pytest gguf   # gguf: tests/reference.py quantizes with it
mkdir "$work/t"
cp "$root/tests/test_layer.py" "$root/tests/reference.py" "$root/tests/conftest.py" "$work/t/"
cd "$work"
"$work/venv/bin/rlxc" info
"$py" -c "import os, rlxc; p = os.path.realpath(rlxc.__file__); assert p.startswith(os.path.realpath('$work/venv')), p; print('rlxc imported from', p)"
"$py" -m rlxc --hidden 128 --layers 2 --prompt 16 --tokens 4 --threads 1
"$py" -m pytest -q -p no:cacheprovider "$work/t/test_layer.py"
