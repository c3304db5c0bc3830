"""Batched decoding against the newest llama.cpp's `llama-batched-bench` on the same GGUF (default
Gemma 3 270M Q4_K_M), K/V f16 on both sides, flash attention on for llama.cpp: B sequences, each
prefilled with --npp random tokens, then --ntg tokens decoded for all B side by side; the
number is text-generation tokens per second summed over the B sequences (llama-batched-bench's
S_TG). Engines alternate within each run; medians of --runs.

    python benchmarks/batch_vs_llama.py --threads 2 --batches 1 2 4 8 16 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from long_context import model_path  # noqa: E402
from vs_llama_bench import build_llama_cpp, host  # noqa: E402


def llama_tg(binary: str, path: str, threads: int, npp: int, ntg: int, batches: list[int]) -> dict[int, float]:
    ctx = max(batches) * (npp + ntg) + 64
    out = subprocess.run([binary, "-m", path, "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", str(npp), "-ntg",
                          str(ntg), "-npl", ",".join(map(str, batches)), "-t", str(threads), "-fa", "on", "-ctk", "f16",
                          "-ctv", "f16", "--output-format", "jsonl"], capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {int(r["pl"]): float(r["speed_tg"]) for r in rows}


def rlxc_tg(m, B: int, npp: int, ntg: int, rng: np.random.Generator) -> float:
    m.sequences = max(B, 1)
    m.prefill_batch([rng.integers(3, m.vocab_size, npp) for _ in range(B)], logits="none")
    tokens = rng.integers(3, m.vocab_size, (ntg, B))
    t0 = time.perf_counter()
    for row in tokens:
        m.decode_batch(row)
    return B * ntg / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import rlxc

    path = model_path(args.model)
    binary = os.path.join(os.path.dirname(build_llama_cpp()), "llama-batched-bench")
    m = rlxc.load(path, max_seq=args.npp + args.ntg, threads=args.threads, kv_type="f16")
    rng = np.random.default_rng(0)
    rlxc_tg(m, 1, 16, 4, rng)  # warm-up: packed weights, scratch
    ours: dict[int, list[float]] = {b: [] for b in args.batches}
    theirs: dict[int, list[float]] = {b: [] for b in args.batches}
    for _ in range(args.runs):
        for b, v in llama_tg(binary, path, args.threads, args.npp, args.ntg, args.batches).items():
            theirs[b].append(v)
        for b in args.batches:
            ours[b].append(rlxc_tg(m, b, args.npp, args.ntg, rng))
    print(f"# {host()}; {os.path.basename(path)}; {args.threads} threads; prompts of {args.npp}, {args.ntg} tokens "
          f"decoded per sequence; K/V f16; medians of {args.runs} runs")
    print("| B | llama.cpp S_TG tok/s | rlxc tok/s | rlxc / llama.cpp | rlxc vs its B=1 |")
    print("|---|---|---|---|---|")
    base = statistics.median(ours[args.batches[0]])
    for b in args.batches:
        o, t = statistics.median(ours[b]), statistics.median(theirs[b])
        print(f"| {b} | {t:.2f} | {o:.2f} | {o / t:.2f}x | {o / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
