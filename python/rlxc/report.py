"""Layer-by-layer comparison of an rlxc.Model with the transformers model it came from.

    import rlxc
    report = rlxc.compare(hf_model, rlxc_model, input_ids, tol=1e-4)
    print(report)            # text table; in Jupyter the report renders as HTML
    report.ok, report.first_bad

Rows: the (scaled) embeddings, the raw output of every decoder layer (captured from HF with
forward hooks, so the last layer is compared before the final norm too), the final-norm output
and the logits. Per row: max abs error, max abs reference value, their ratio (the "relative
error" checked against ``tol``) and the cosine similarity of the flattened tensors.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["compare", "Report", "Row", "errors"]


@dataclass
class Row:
    """Errors of one compared tensor."""
    name: str
    max_abs_err: float
    max_abs_ref: float
    rel_err: float
    cosine: float
    bad: bool = False


def errors(name: str, got: np.ndarray, ref: np.ndarray, tol: float) -> Row:
    """Row for ``got`` vs ``ref``: rel = max|got-ref| / max|ref|; bad iff rel > tol (or not finite)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"{name}: shape {got.shape} vs reference {ref.shape}")
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    mref = float(np.max(np.abs(ref))) if ref.size else 0.0
    rel = err / mref if mref > 0 else (0.0 if err == 0 else float("inf"))
    a, b = got.ravel(), ref.ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cos = float(a @ b / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    bad = not np.isfinite(rel) or rel > tol or not np.all(np.isfinite(got))
    return Row(name, err, mref, rel, cos, bad)


@dataclass
class Report:
    """Result of :func:`compare`: ``rows`` in run order, ``tol``, ``first_bad`` (name or None)."""
    rows: list[Row]
    tol: float
    n_tokens: int = 0
    title: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def first_bad(self) -> str | None:
        """Name of the first row whose relative error exceeds tol, or None."""
        for r in self.rows:
            if r.bad:
                return r.name
        return None

    @property
    def ok(self) -> bool:
        """True when every row is within tol."""
        return self.first_bad is None

    @property
    def max_rel_err(self) -> float:
        """Largest relative error over all rows."""
        return max((r.rel_err for r in self.rows), default=0.0)

    def row(self, name: str) -> Row:
        """The row called ``name`` (e.g. "layer 3", "logits")."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def __str__(self) -> str:
        head = f"{'':2}{'tensor':<12}{'max abs err':>13}{'max abs ref':>13}{'rel err':>11}{'cosine':>13}"
        lines = [f"{self.title} ({self.n_tokens} tokens, tol {self.tol:g})".strip(), head]
        first = self.first_bad
        for r in self.rows:
            mark = ">>" if r.name == first else ("! " if r.bad else "  ")
            lines.append(f"{mark}{r.name:<12}{r.max_abs_err:>13.3e}{r.max_abs_ref:>13.3e}"
                         f"{r.rel_err:>11.2e}{r.cosine:>13.9f}")
        lines.append("all within tol" if first is None else f"first over tol: {first}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Report {self.title}: max rel err {self.max_rel_err:.2e}, first_bad={self.first_bad}>"

    def _repr_html_(self) -> str:
        first = self.first_bad
        out = [f"<div><b>{html.escape(self.title)}</b> ({self.n_tokens} tokens, tol {self.tol:g})",
               "<table><thead><tr><th>tensor</th><th>max abs err</th><th>max abs ref</th>"
               "<th>rel err</th><th>cosine</th></tr></thead><tbody>"]
        for r in self.rows:
            style = ""
            if r.bad:
                style = ' style="background:#fbb;font-weight:bold"' if r.name == first else \
                    ' style="background:#fdd"'
            out.append(f"<tr{style}><td>{html.escape(r.name)}</td><td>{r.max_abs_err:.3e}</td>"
                       f"<td>{r.max_abs_ref:.3e}</td><td>{r.rel_err:.2e}</td><td>{r.cosine:.9f}</td></tr>")
        out.append("</tbody></table>")
        out.append("<p>all within tol</p>" if first is None else
                   f"<p>first over tol: <b>{html.escape(first)}</b></p>")
        out.append("</div>")
        return "".join(out)


def hf_trace(hf_model: Any, input_ids: Any) -> dict[str, np.ndarray]:
    """Run a transformers causal LM once (no cache) and collect embeddings, every decoder
    layer's raw output, the final-norm output and the logits (batch 1, float64 copies)."""
    import torch

    ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64).reshape(1, -1))
    layers = hf_model.model.layers
    captured: dict[int, np.ndarray] = {}
    hooks = []

    def make_hook(i: int):
        def hook(_mod, _args, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            captured[i] = t.detach().to(torch.float64).cpu().numpy()[0].copy()
        return hook

    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_hook(make_hook(i)))
    try:
        with torch.no_grad():
            out = hf_model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    hs = out.hidden_states
    return {
        "embeddings": hs[0][0].to(torch.float64).numpy(),
        "layers": np.stack([captured[i] for i in range(len(layers))]),
        "final_norm": hs[-1][0].to(torch.float64).numpy(),
        "logits": out.logits[0].to(torch.float64).numpy(),
    }


def compare(hf_model: Any, rlxc_model: Any, input_ids: Any, tol: float = 1e-4) -> Report:
    """Run both models on ``input_ids`` (1-D) from an empty cache and compare every stage.

    Returns a :class:`Report` (``print`` it, or display it in Jupyter). ``tol`` bounds the
    relative error max|rlxc - hf| / max|hf| of each row; the first row over it is flagged.
    The rlxc model's cache is left holding ``input_ids``.
    """
    ref = hf_trace(hf_model, input_ids)
    got = rlxc_model.trace(input_ids)
    rows = [errors("embeddings", got["embeddings"], ref["embeddings"], tol)]
    for i in range(ref["layers"].shape[0]):
        rows.append(errors(f"layer {i}", got["layers"][i], ref["layers"][i], tol))
    rows.append(errors("final_norm", got["final_norm"], ref["final_norm"], tol))
    rows.append(errors("logits", got["logits"], ref["logits"], tol))
    title = f"{type(hf_model).__name__} vs {getattr(rlxc_model, 'name', 'rlxc')}"
    return Report(rows, tol, n_tokens=int(np.asarray(input_ids).size), title=title)
