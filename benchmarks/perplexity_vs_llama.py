"""Perplexity and KL divergence of rlxc and the newest llama.cpp's `llama-perplexity` on the same
GGUF (default Gemma 3 270M Q4_K_M), text (default tests/data/apache-2.0.txt) and context, one
window per batch, K/V in f16; each engine also measured against the exact run of the same
weights (rlxc with f32 activations and f32 K/V, its HF-parity path) through a llama-perplexity
log-probability file that rlxc writes and both engines read (`--kl-divergence`).

Rows: llama.cpp with flash attention on (its default) and off; rlxc with q8 activations (its
default) and f32. Then the KL of q8 against f32 activations with the per-layer drift.

    python benchmarks/perplexity_vs_llama.py [--model PATH] [--file TEXT] [--ctx 512] [--threads 2]
        [--kl-windows 8]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from long_context import model_path  # noqa: E402
from vs_llama_bench import build_llama_cpp, host  # noqa: E402

TEXT = os.path.join(os.path.dirname(HERE), "tests", "data", "apache-2.0.txt")


def llama(binary: str, path: str, ctx: int, threads: int, fa: str, *extra: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    out = subprocess.run([binary, "-m", path, "-c", str(ctx), "-b", str(ctx), "-t", str(threads), "-fa", fa,
                          "-ctk", "f16", "-ctv", "f16", *extra], capture_output=True, text=True, check=True)
    return out.stdout + out.stderr, time.perf_counter() - t0


def number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    if not m:
        raise RuntimeError(f"llama-perplexity printed no {pattern!r}:\n" + text[-2000:])
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--file", default=TEXT)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kl-windows", type=int, default=8, help="windows in the exact run's log-probability file "
                    "(each is (ctx/2) x vocab x 2 bytes: 134 MB for Gemma 3 at ctx 512)")
    args = ap.parse_args()
    import rlxc
    from rlxc.evaluate import kl_divergence
    from rlxc.llama_logits import kl_divergence_file, save_logits

    path = model_path(args.model)
    binary = os.path.join(os.path.dirname(build_llama_cpp()), "llama-perplexity")
    text = open(args.file, encoding="utf-8").read()
    load = dict(max_seq=args.ctx, threads=args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        exact = os.path.join(tmp, "exact.kld")
        ref = rlxc.load(path, activations="f32", kv_type="f32", **load)
        r_exact = ref.perplexity(text, args.ctx)
        save_logits(ref, text, exact, args.ctx, windows=args.kl_windows)
        rows = []
        for fa in ("on", "off"):
            out, secs = llama(binary, path, args.ctx, args.threads, fa, "-f", args.file)
            ppl, err = number(r"Final estimate: PPL = ([0-9.]+)", out), number(r"Final estimate: PPL = [0-9.]+ \+/- ([0-9.]+)", out)
            out, _ = llama(binary, path, args.ctx, args.threads, fa, "--kl-divergence-base", exact, "--kl-divergence")
            rows.append((f"llama.cpp, flash attention {fa}", ppl, err, secs, number(r"Mean\s+KLD:\s+([0-9.]+)", out),
                         number(r"Same top p:\s+([0-9.]+)", out) / 100))
        models = {}
        for act in ("q8", "f32"):
            m = models[act] = rlxc.load(path, kv_type="f16", activations=act, **load)
            r = m.perplexity(text, args.ctx)
            d = kl_divergence_file(m, exact)
            rows.append((f"rlxc, {act} activations", r.ppl, r.ppl_stderr, r.seconds, d.kl, d.top1))
    base = rows[0][1]
    print(f"# {host()}; {os.path.basename(path)}; {os.path.basename(args.file)}; ctx {args.ctx}; "
          f"{args.threads} threads; K/V f16; {r_exact.tokens} tokens scored ({r_exact.windows} windows), KL over the "
          f"first {min(args.kl_windows, r_exact.windows)} windows")
    print(f"exact run (rlxc, f32 activations and K/V): PPL {r_exact.ppl:.4f} +/- {r_exact.ppl_stderr:.4f}\n")
    print("| engine | PPL | +/- | vs llama.cpp FA on | vs exact | KL vs exact | top-1 vs exact | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ppl, err, secs, kl, top1 in rows:
        print(f"| {name} | {ppl:.4f} | {err:.4f} | {100 * (ppl / base - 1):+.2f} % | "
              f"{100 * (ppl / r_exact.ppl - 1):+.2f} % | {kl:.5f} | {100 * top1:.2f} % | {secs:.1f} |")
    d = kl_divergence(models["f32"], models["q8"], text, args.ctx, windows=args.kl_windows)
    print(f"\nKL(f32 || q8 activations): {d!r}")
    print(d.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
