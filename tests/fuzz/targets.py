"""What the fuzzer runs on one input file, and which outcomes are clean.

A GGUF goes through ``rlxc.load`` (tokenizer included) and, if it loads, a forward pass of a few
tokens (the C engine on the memory-mapped weights) and a tokenizer round trip. A safetensors
file goes through ``rlxc.load`` of a checkpoint folder (a fixed tiny llama config.json) and a
forward pass; a folder archive (config.json, tokenizer and generation files) through ``rlxc.load``
with its tokenizer, a forward pass and the tokenizer. rlxc.load documents ValueError for corrupt files and NotImplementedError for what
it cannot run: those are clean; any other exception, a crash, a sanitizer report or a hang is a
finding.
"""

from __future__ import annotations

import json
import os

CLEAN = (ValueError, NotImplementedError)
_rlxc = None


def _import():
    global _rlxc
    if _rlxc is None:
        import rlxc
        _rlxc = rlxc
    return _rlxc


def exercise(model) -> None:
    """Use a loaded model: the engine over its (possibly in-place) weights, then the tokenizer."""
    import numpy as np
    V = int(model.vocab_size)
    ids = [i % V for i in (0, 1, 2)]
    out = model.forward(ids)
    assert out.shape[0] == len(ids)
    np.asarray(out).sum()
    tok = model.tokenizer
    if tok is not None:
        enc = tok.encode("ab c")
        tok.decode([i for i in enc if 0 <= i < V])


def run_gguf(path: str, weights=None) -> None:
    rlxc = _import()
    model = rlxc.load(path, weights=weights, max_seq=16)
    exercise(model)


def prepare_folder(folder: str) -> None:
    from formats import HF_CONFIG
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(HF_CONFIG, f)


def run_safetensors(folder: str, weights="f32") -> None:
    rlxc = _import()
    model = rlxc.load(folder, weights=weights, max_seq=16, tokenizer=False)
    exercise(model)


def run_hf(archive: bytes, folder: str, weights="f32") -> None:
    """A Hugging Face folder (an :class:`formats.HFFolder` archive unpacked into ``folder``)
    through rlxc.load, tokenizer and generation config included, then the model and tokenizer."""
    from formats import write_folder
    rlxc = _import()
    os.makedirs(folder, exist_ok=True)
    write_folder(archive, folder)
    model = rlxc.load(folder, weights=weights, max_seq=16)
    exercise(model)
    tok = model.tokenizer
    if tok is not None:
        sorted(tok.eog_ids), tok.bos_id, tok.eos_id


def warm_up() -> None:
    """Import everything a target may import, so forked children do not pay for it: HF folders
    go through transformers.AutoConfig, whose per-architecture modules load lazily."""
    import tempfile
    from formats import st_seeds
    rlxc = _import()
    try:
        import transformers  # noqa: F401
    except ImportError:  # pragma: no cover
        return
    with tempfile.TemporaryDirectory() as d:
        prepare_folder(d)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(st_seeds()["llama_f32"].to_bytes())
        rlxc.load(d, weights="f32", max_seq=16, tokenizer=False)  # no forward: no OpenMP in the parent
    with tempfile.TemporaryDirectory() as d:
        from formats import hf_seeds, write_folder
        write_folder(hf_seeds()["llama_tok"].to_bytes(), d)
        rlxc.load(d, weights="f32", max_seq=16)  # and the tokenizers package
