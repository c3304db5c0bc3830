"""Layer-by-layer comparison of an rlxc.Model with the transformers model it came from.

    import rlxc
    report = rlxc.compare(hf_model, rlxc_model, input_ids, tol=1e-4)
    print(report)            # text table; in Jupyter the report renders as HTML
    report.ok, report.first_bad

Rows (``stages=True``: every named stage of :mod:`rlxc.interp` instead): the (scaled) embeddings, the raw output of every decoder layer (captured from HF with
forward hooks, so the last layer is compared before the final norm too), the final-norm output
and the logits. Per row: max abs error, max abs reference value, their ratio (the "relative
error" checked against ``tol``) and the cosine similarity of the flattened tensors.

``report.plot()`` draws the per-row errors with matplotlib (an optional dependency). For a
checkpoint on disk, :func:`hf_reference` builds the transformers model that holds the same
weights (a Hugging Face folder as it is; a GGUF file from its dequantized tensors), which is
what ``rlxc compare MODEL`` runs.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import loaders

__all__ = ["compare", "Report", "Row", "errors", "hf_reference", "hf_stages"]


@dataclass
class Row:
    """Errors of one compared tensor (``name`` e.g. "embeddings", "layer 3", "logits").

    ``max_abs_err`` = max|rlxc - hf|, ``max_abs_ref`` = max|hf|, ``rel_err`` their ratio,
    ``cosine`` the cosine similarity of the flattened tensors, ``bad`` rel_err > tol (or
    non-finite values)."""
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
    """Result of :func:`compare`: ``rows`` in run order, ``tol``, ``first_bad`` (name or None).

    ``print(report)`` gives a text table; Jupyter renders it as HTML (rows over tol shaded,
    the first one in bold); :meth:`plot` draws the errors per row; :meth:`row` looks one up.
    ``n_tokens`` is the length of the compared input, ``title`` names the two models and
    ``extra`` holds whatever the caller wants to keep with the report.
    """
    rows: list[Row]
    tol: float
    n_tokens: int = 0
    title: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

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
        w = max([12] + [len(r.name) + 1 for r in self.rows])
        head = f"{'':2}{'tensor':<{w}}{'max abs err':>13}{'max abs ref':>13}{'rel err':>11}{'cosine':>13}"
        lines = [f"{self.title} ({self.n_tokens} tokens, tol {self.tol:g})".strip(), head]
        first = self.first_bad
        for r in self.rows:
            mark = ">>" if r.name == first else ("! " if r.bad else "  ")
            lines.append(f"{mark}{r.name:<{w}}{r.max_abs_err:>13.3e}{r.max_abs_ref:>13.3e}"
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

    def plot(self, ax: Any = None, metric: str = "rel_err", title: str | None = None) -> Any:
        """Draw the error of every row (embeddings, each layer, final norm, logits) on a log
        scale, with the ``tol`` line and the first row over it marked; returns the matplotlib
        ``Axes``. ``metric``: "rel_err" (default), "max_abs_err" or "1-cosine". ``ax``: draw
        into these axes instead of a new figure.

        Needs matplotlib (``pip install matplotlib`` or ``pip install 'rlxc[plot]'``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("Report.plot() needs matplotlib, which is not installed: "
                              "pip install matplotlib (or pip install 'rlxc[plot]')") from e
        getters = {"rel_err": lambda r: r.rel_err, "max_abs_err": lambda r: r.max_abs_err,
                   "1-cosine": lambda r: 1.0 - r.cosine}
        if metric not in getters:
            raise ValueError(f"metric must be one of {sorted(getters)}, got {metric!r}")
        vals = np.array([getters[metric](r) for r in self.rows], dtype=np.float64)
        finite_pos = vals[np.isfinite(vals) & (vals > 0)]
        floor = (float(finite_pos.min()) if finite_pos.size else 1e-12) / 10
        if metric == "rel_err" and self.tol > 0:
            floor = min(floor, self.tol / 10)
        shown = np.where(np.isfinite(vals), np.maximum(vals, floor), np.nan)
        if ax is None:
            _, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(self.rows) + 2), 3.5))
        x = np.arange(len(self.rows))
        ax.plot(x, shown, "-", color="tab:blue", lw=1, zorder=1)
        exact = vals == 0
        ok = ~exact & ~np.array([r.bad for r in self.rows])
        bad = np.array([r.bad for r in self.rows])
        ax.scatter(x[ok], shown[ok], color="tab:blue", s=18, zorder=2, label="within tol")
        if exact.any():
            ax.scatter(x[exact], shown[exact], facecolors="none", edgecolors="tab:blue", s=18, zorder=2,
                       label="exact (0)")
        if bad.any():
            ax.scatter(x[bad], shown[bad], color="tab:red", s=22, zorder=3, label="over tol")
        if metric == "rel_err":
            ax.axhline(self.tol, color="tab:red", ls="--", lw=1, label=f"tol {self.tol:g}")
        first = self.first_bad
        if first is not None:
            i = [r.name for r in self.rows].index(first)
            ax.axvline(i, color="tab:red", ls=":", lw=1)
            ax.annotate(f"first over tol: {first}", (i, shown[i] if np.isfinite(shown[i]) else floor),
                        textcoords="offset points", xytext=(4, 6), fontsize=8, color="tab:red")
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([r.name.replace("layer ", "") for r in self.rows], rotation=90, fontsize=7)
        ax.set_xlabel("row (embeddings, layer index, final norm, logits)")
        ax.set_ylabel({"rel_err": "max|err| / max|ref|", "max_abs_err": "max |err|",
                       "1-cosine": "1 - cosine"}[metric])
        ax.set_title(title if title is not None else f"{self.title} ({self.n_tokens} tokens)", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        ax.grid(True, which="major", axis="y", alpha=0.3)
        return ax


def hf_trace(hf_model: Any, input_ids: Any) -> dict[str, np.ndarray]:
    """Run a transformers causal LM once (no cache) and collect embeddings, every decoder
    layer's raw output, the final-norm output and the logits (batch 1, float64 copies)."""
    import torch

    ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64).reshape(1, -1))
    layers = hf_model.model.layers
    captured: dict[int, np.ndarray] = {}
    hooks: list[Any] = []

    def make_hook(i: int) -> Callable[[Any, Any, Any], None]:
        def hook(_mod: Any, _args: Any, out: Any) -> None:
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


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, tuple) else x


def hf_stages(hf_model: Any, input_ids: Any) -> dict[str, np.ndarray]:
    """transformers' value of every rlxc stage (see :mod:`rlxc.interp`), float64 ``[T, ...]``,
    from one forward of a transformers causal LM built with ``attn_implementation="eager"``.

    Module hooks give the decoder layer's input and output (resid_pre, resid_post), the input
    norm (attn_in), o_proj's input and output (attn_z, attn_out), the pre-FFN norm's input and
    output (resid_mid, mlp_in), the dense down_proj's input (mlp_act; Qwen2-MoE's shared expert's,
    none for a layer of experts only), the MLP (mlp_out; Gemma 4 with experts: the sum before
    post_feedforward_layernorm) and the final norm; the eager attention function, wrapped for the call, gives q (after q-norm and RoPE), the
    K/V it attends to (k, v; a KV-sharing layer's are its donor's) and the softmax weights
    (attn_probs, over all T keys)."""
    import sys

    import torch

    out: dict[str, np.ndarray] = {}

    def put(name: str, t: Any) -> None:
        out[name] = t.detach().double().numpy()

    layers = hf_model.model.layers
    mod = sys.modules[type(layers[0].self_attn).__module__]
    orig = getattr(mod, "eager_attention_forward")

    def attention(module: Any, query: Any, key: Any, value: Any, mask: Any, *a: Any, **kw: Any) -> Any:
        o, w = orig(module, query, key, value, mask, *a, **kw)
        p = f"layers.{module.layer_idx}."
        for name, t in (("q", query), ("k", key), ("v", value), ("attn_probs", w)):
            put(p + name, t[0].transpose(0, 1))
        return o, w

    def out_hook(name: str) -> Callable[..., None]:
        return lambda m, a, o: put(name, _first(o)[0])

    def in_hook(name: str) -> Callable[..., None]:
        def hook(m: Any, a: Any, kw: Any) -> None:
            x = a[0] if a else kw["hidden_states"]
            put(name, x[0] if x.dim() == 3 else x)  # experts see the tokens flattened, [T, ...]
        return hook

    handles = []
    for i, layer in enumerate(layers):
        p = f"layers.{i}."
        ffn_norm = getattr(layer, "pre_feedforward_layernorm", None) or layer.post_attention_layernorm
        # the dense FFN (Qwen2-MoE's shared expert), None for a layer of experts only
        dense = getattr(layer.mlp, "shared_expert", layer.mlp)
        down = getattr(dense, "down_proj", None) or getattr(dense, "c_proj", None)
        if not isinstance(down, torch.nn.Module):  # stacked experts' parameter, not a dense down_proj
            down = None
        handles += [
            layer.register_forward_pre_hook(in_hook(p + "resid_pre"), with_kwargs=True),
            layer.input_layernorm.register_forward_hook(out_hook(p + "attn_in")),
            layer.self_attn.o_proj.register_forward_pre_hook(in_hook(p + "attn_z"), with_kwargs=True),
            layer.self_attn.o_proj.register_forward_hook(out_hook(p + "attn_out")),
            ffn_norm.register_forward_pre_hook(in_hook(p + "resid_mid"), with_kwargs=True),
            ffn_norm.register_forward_hook(out_hook(p + "mlp_in")),
            layer.register_forward_hook(out_hook(p + "resid_post")),
        ]
        if down is not None:
            handles.append(down.register_forward_pre_hook(in_hook(p + "mlp_act"), with_kwargs=True))
        if getattr(layer, "enable_moe_block", False):  # Gemma 4: the MLP's and the experts' sum, before its norm
            handles.append(layer.post_feedforward_layernorm.register_forward_pre_hook(in_hook(p + "mlp_out"),
                                                                                    with_kwargs=True))
        else:
            handles.append(layer.mlp.register_forward_hook(out_hook(p + "mlp_out")))
    handles.append(hf_model.model.norm.register_forward_hook(out_hook("final_norm")))
    setattr(mod, "eager_attention_forward", attention)
    try:
        with torch.no_grad():
            ids = torch.as_tensor(np.asarray(input_ids)).reshape(1, -1)
            logits = hf_model(input_ids=ids, use_cache=False, output_attentions=True).logits
    finally:
        setattr(mod, "eager_attention_forward", orig)
        for h in handles:
            h.remove()
    put("logits", logits[0])
    out["embed"] = out["layers.0.resid_pre"]
    return out


def compare(hf_model: Any, rlxc_model: Any, input_ids: Any, tol: float = 1e-4, stages: Any = False) -> Report:
    """Run both models on ``input_ids`` (1-D) from an empty cache and compare every stage.

    Returns a :class:`Report` (``print`` it, or display it in Jupyter). ``tol`` bounds the
    relative error max|rlxc - hf| / max|hf| of each row; the first row over it is flagged.
    By default the rows are the embeddings, each layer's output, the final norm and the logits.
    ``stages=True`` compares every stage a token passes instead (``embed``,
    ``layers.{i}.attn_in`` ... ``layers.{i}.resid_post``, ``final_norm``, ``logits``; see
    :func:`hf_stages`), so the first row over tol names the stage that goes wrong; a list of
    stage names or a predicate picks some. The rlxc model's cache is left holding ``input_ids``.
    """
    title = f"{type(hf_model).__name__} vs {getattr(rlxc_model, 'name', 'rlxc')}"
    n = int(np.asarray(input_ids).size)
    if stages is not False:
        ref_s = hf_stages(hf_model, input_ids)
        _, cache = rlxc_model.run_with_cache(input_ids, names=None if stages is True else stages)
        names = [s for s in rlxc_model.stage_names() if s in cache]
        rows = [errors(s, cache[s], ref_s[s].reshape(cache[s].shape), tol) for s in names]
        return Report(rows, tol, n_tokens=n, title=title)
    ref = hf_trace(hf_model, input_ids)
    got = rlxc_model.trace(input_ids)
    rows = [errors("embeddings", got["embeddings"], ref["embeddings"], tol)]
    for i in range(ref["layers"].shape[0]):
        rows.append(errors(f"layer {i}", got["layers"][i], ref["layers"][i], tol))
    rows.append(errors("final_norm", got["final_norm"], ref["final_norm"], tol))
    rows.append(errors("logits", got["logits"], ref["logits"], tol))
    return Report(rows, tol, n_tokens=n, title=title)


def hf_reference(path: Any, threads: int | None = None) -> Any:
    """The transformers causal LM (float32, eager attention, eval mode) that holds the same
    weights as ``rlxc.load(path)``: the reference :func:`compare` runs against.

    * a Hugging Face checkpoint folder: ``AutoModelForCausalLM.from_pretrained`` (its weights
      as stored, in float32);
    * a GGUF file: the transformers config of :func:`rlxc.loaders.gguf_hf_config` over the
      file's tensors dequantized to float32 (:func:`rlxc.loaders.gguf_hf_state_dict`: llama
      q/k rows put back in HF order, Gemma norms minus the 1 llama.cpp's converter adds). With
      ``rlxc.load(path, weights="f32")`` the two run the same network; with the weights as
      stored, rlxc also rounds activations to 8 bits the way llama.cpp does.

    Needs ``torch`` and ``transformers`` (``pip install 'rlxc[hf]'``). ``threads`` sets
    torch's thread count when given. Raises NotImplementedError for a GGUF that has no
    transformers equivalent.
    """
    import os

    try:
        import torch
        import transformers
    except ImportError as e:
        raise ImportError(f"comparing with transformers needs torch and transformers ({e.name} is missing): "
                          "pip install 'rlxc[hf]'") from e
    if threads:
        torch.set_num_threads(int(threads))
    p = os.fspath(path)
    if os.path.isdir(p) and not os.path.exists(os.path.join(p, "config.json")):
        ggufs = sorted(x for x in os.listdir(p) if x.endswith(".gguf"))
        if len(ggufs) != 1:
            raise ValueError(f"{p}: neither a Hugging Face checkpoint folder (no config.json) nor a folder with "
                             "one GGUF file")
        p = os.path.join(p, ggufs[0])
    if os.path.isdir(p):
        hf: Any = transformers.AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32,
                                                                    attn_implementation="eager")
        return hf.eval()
    if not os.path.exists(p):
        raise FileNotFoundError(p)

    g = loaders.read_gguf(p)
    cls_name, model_name, kw = loaders.gguf_hf_config(g)
    cfg = getattr(transformers, cls_name)(**kw, attn_implementation="eager")
    sd = loaders.gguf_hf_state_dict(g)
    with torch.device("meta"):  # no random init of weights that are overwritten anyway
        hf = getattr(transformers, model_name)(cfg)
    res = hf.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False, assign=True)
    missing = set(res.missing_keys) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    if missing or res.unexpected_keys:
        raise NotImplementedError(f"{p}: the GGUF tensors do not fill {model_name} "
                                  f"(missing {sorted(missing)[:4]}, unexpected {sorted(res.unexpected_keys)[:4]})")
    # buffers computed at construction stayed on the meta device: build them for real
    inner = hf.model
    if hasattr(inner, "rotary_emb"):
        inner.rotary_emb = type(inner.rotary_emb)(config=cfg)
    emb = inner.embed_tokens
    if getattr(emb, "embed_scale", None) is not None and getattr(emb.embed_scale, "is_meta", False):
        emb.embed_scale = torch.tensor(cfg.hidden_size ** 0.5)
    if cfg.tie_word_embeddings:
        hf.tie_weights()
    still = [n for n, t in list(hf.named_parameters()) + list(hf.named_buffers()) if t.is_meta]
    if still:
        raise NotImplementedError(f"{p}: cannot build {model_name} from the GGUF tensors ({', '.join(still[:4])} "
                                  "left uninitialised)")
    return hf.eval()
