"""A transformers model run as the base of :func:`rlxc.evaluate.kl_divergence`: the float
reference (``rlxc perplexity MODEL --hf PATH``), with the same calls the engine's models answer
(``reset``, ``prefill``, ``collect`` of each layer's output residual), its KV cache carried
between calls as transformers' own ``DynamicCache``."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace
from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["HFReference"]


class HFReference:
    """A transformers ``...ForCausalLM`` (or the path of a checkpoint folder, loaded in float32
    with eager attention, offline) behind the calls :func:`rlxc.evaluate.kl_divergence` makes of
    its base. ``tokenizer``: what turns texts into ids (an rlxc model's, so both read the same
    ids); ``max_seq``: the longest window it is asked to run (default: the config's
    ``max_position_embeddings``)."""

    def __init__(self, model: Any, tokenizer: Any = None, max_seq: int | None = None) -> None:
        if isinstance(model, (str, os.PathLike)):
            model = _load(os.fspath(model))
        self.hf = model.eval()
        cfg = getattr(model.config, "text_config", None) or model.config
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.layers = [SimpleNamespace(hidden_size=int(cfg.hidden_size)) for _ in self._decoder_layers()]
        self.max_seq: int = max_seq or int(getattr(cfg, "max_position_embeddings", None) or 1 << 20)
        self.tokenizer = tokenizer
        self._cache: Any = None
        self._collected: list[dict[str, list[np.ndarray]]] = []

    def _decoder_layers(self) -> Sequence[Any]:
        return list(self.hf.model.layers)

    def reset(self) -> None:
        """Forget the sequence (a new, empty cache at the next call)."""
        self._cache = None

    def prefill(self, ids: Any, logits: str = "last") -> np.ndarray | None:
        """Append ids to the sequence; logits "all" (float32 [T, vocab]), "last" ([vocab]) or "none"."""
        import torch
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self.hf.config)
        x = torch.as_tensor(np.asarray(ids, dtype=np.int64)).reshape(1, -1)
        hooks = []
        if self._collected:
            for i, layer in enumerate(self._decoder_layers()):
                hooks.append(layer.register_forward_hook(self._keep(f"layers.{i}.resid_post")))
        try:
            with torch.no_grad():
                out = self.hf(input_ids=x, past_key_values=self._cache, use_cache=True)
        finally:
            for h in hooks:
                h.remove()
        self._cache = out.past_key_values
        if logits == "none":
            return None
        y: np.ndarray = out.logits[0].float().numpy()
        return y if logits == "all" else y[-1]

    def _keep(self, name: str) -> Any:
        def hook(module: Any, args: Any, out: Any) -> None:
            t = out[0] if isinstance(out, tuple) else out
            for c in self._collected:
                c.setdefault(name, []).append(t[0].detach().float().numpy())
        return hook

    @contextlib.contextmanager
    def collect(self, names: Sequence[str]) -> Iterator[dict[str, np.ndarray]]:
        """``with ref.collect(["layers.3.resid_post", ...]) as cache``: each named layer output of
        every call inside it, rows in order (``cache[name]`` float32 [T, hidden] afterwards)."""
        parts: dict[str, list[np.ndarray]] = {}
        out: dict[str, np.ndarray] = {}
        self._collected.append(parts)
        try:
            yield out
        finally:
            self._collected.remove(parts)
            out.update({k: np.concatenate(v) for k, v in parts.items() if k in set(names)})

    def __repr__(self) -> str:
        return f"HFReference({type(self.hf).__name__}, {len(self.layers)} layers, vocabulary {self.vocab_size})"


def _load(path: str) -> Any:
    if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"{path} is not a Hugging Face checkpoint folder (no config.json)")
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                local_files_only=True)
