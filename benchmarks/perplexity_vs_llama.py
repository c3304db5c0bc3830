"""Perplexity of rlxc against the newest llama.cpp's `llama-perplexity` on the same GGUF (default
Gemma 3 270M Q4_K_M) and the same text (default tests/data/apache-2.0.txt), same context and one
window per batch, K/V in f16 on both sides; rlxc with q8 activations (its default, llama.cpp's
numerics) and with f32 activations, then the KL divergence of q8 against f32 with the per-layer
drift of the residual stream.

    python benchmarks/perplexity_vs_llama.py [--model PATH] [--file TEXT] [--ctx 512] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from long_context import model_path  # noqa: E402
from vs_llama_bench import build_llama_cpp, host  # noqa: E402

TEXT = os.path.join(os.path.dirname(HERE), "tests", "data", "apache-2.0.txt")


def llama_ppl(binary: str, path: str, text: str, ctx: int, threads: int) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    out = subprocess.run([binary, "-m", path, "-f", text, "-c", str(ctx), "-b", str(ctx), "-t", str(threads),
                          "-fa", "on", "-ctk", "f16", "-ctv", "f16"], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - t0
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out.stdout + out.stderr)
    if not m:
        raise RuntimeError("llama-perplexity printed no final estimate:\n" + out.stderr[-2000:])
    return float(m.group(1)), float(m.group(2)), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--file", default=TEXT)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import rlxc
    from rlxc.evaluate import kl_divergence

    path = model_path(args.model)
    binary = os.path.join(os.path.dirname(build_llama_cpp()), "llama-perplexity")
    text = open(args.file, encoding="utf-8").read()
    ppl, err, secs = llama_ppl(binary, path, args.file, args.ctx, args.threads)
    print(f"# {host()}; {os.path.basename(path)}; {os.path.basename(args.file)}; ctx {args.ctx}; "
          f"{args.threads} threads; K/V f16")
    print("| engine | PPL | +/- | vs llama.cpp | tokens scored | seconds |")
    print("|---|---|---|---|---|---|")
    print(f"| llama.cpp llama-perplexity | {ppl:.4f} | {err:.4f} | 1 | | {secs:.1f} (with load) |")
    models = {}
    for act in ("q8", "f32"):
        m = rlxc.load(path, max_seq=args.ctx, threads=args.threads, kv_type="f16", activations=act)
        r = m.perplexity(text, args.ctx)
        models[act] = m
        print(f"| rlxc, {act} activations | {r.ppl:.4f} | {r.ppl_stderr:.4f} | {100 * (r.ppl / ppl - 1):+.2f} % | "
              f"{r.tokens} | {r.seconds:.1f} |")
    d = kl_divergence(models["f32"], models["q8"], text, args.ctx)
    print(f"\nKL(f32 || q8 activations): {d!r}")
    print(d.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
