"""Greedy continuations of rlxc against the newest llama.cpp's `llama-completion --temp 0` on the
same GGUF (default Gemma 3 270M Q4_K_M), K/V in f16 on both sides (llama.cpp's default, flash
attention on), rlxc with its default activations ("q8") unless --activations says otherwise.
`--against rlxc-prefill` puts rlxc itself in llama.cpp's place, each token from a fresh prefill
of the whole sequence: the same numbers up to the float rounding of other kernels, which shows
how early two correct engines can part on this model.

Two engines that round differently agree exactly only while the model's choice is clear. For
each prompt this prints where rlxc's text first leaves llama.cpp's (the token index in rlxc's
continuation, or none within --tokens), and the first index where rlxc's own top-2 logit gap is
below --gap: the agreement holds when the divergence comes no earlier than that. The gap at
the divergence is printed too. Exit status 1 if any prompt diverges before its first close call.

    python benchmarks/greedy_vs_llama.py [--model PATH] [--tokens 64] [--kv-type f16]
        [--against llama.cpp|rlxc-prefill] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from long_context import model_path  # noqa: E402
from vs_llama_bench import build_llama_cpp, host  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
    "The three primary colors are",
    "Water boils at a temperature of",
]


def llama_text(binary: str, path: str, prompt: str, n: int, threads: int, kv_type: str, fa: str) -> str:
    out = subprocess.run([binary, "-m", path, "-p", prompt, "-n", str(n), "--temp", "0", "-no-cnv",
                          "--no-display-prompt", "--simple-io", "--ignore-eos", "-t", str(threads), "-c", "1024",
                          "-fa", fa, "-ctk", kv_type, "-ctv", kv_type, "-s", "0"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def rlxc_greedy(m, prompt: str, n: int) -> tuple[list[int], list[float]]:
    """rlxc's greedy tokens and, at each step, the gap between its two largest logits."""
    ids = m.tokenizer.encode(prompt)
    m.reset()
    logits = np.asarray(m.prefill(np.asarray(ids), logits="last")).reshape(-1, m.vocab_size)[-1]
    out, gaps = [], []
    for _ in range(n):
        top2 = np.partition(logits, -2)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        tok = int(np.argmax(logits))
        out.append(tok)
        logits = m.decode(tok)
    return out, gaps


def rlxc_greedy_by_prefill(m, prompt: str, n: int) -> list[int]:
    """rlxc's greedy tokens with each step a fresh prefill of the whole sequence: the same
    model through the kernels of T = length instead of T = 1 (the noise floor of the check)."""
    ids = list(m.tokenizer.encode(prompt))
    for _ in range(n):
        m.reset()
        ids.append(int(np.argmax(np.asarray(m.prefill(np.asarray(ids), logits="last")).reshape(-1))))
    return ids[-n:]


def divergence(m, toks: list[int], text: str) -> int | None:
    """The first index of rlxc's tokens whose text is no longer a prefix of llama.cpp's."""
    for i in range(len(toks)):
        if not text.startswith(m.tokenizer.decode(toks[: i + 1])):
            return i
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--activations", default="q8", choices=["q8", "f32"])
    ap.add_argument("--gap", type=float, default=0.1)
    ap.add_argument("--llama-fa", default="on", choices=["on", "off"],
                    help="llama.cpp's flash attention (on: its CPU kernel converts Q to f16 and sums V in f16)")
    ap.add_argument("--against", default="llama.cpp", choices=["llama.cpp", "rlxc-prefill"],
                    help="rlxc-prefill: rlxc itself, each token from a fresh prefill of the sequence (the "
                         "same model through other kernels' float rounding: what any two engines can expect)")
    ap.add_argument("--json")
    args = ap.parse_args()
    import rlxc

    path = model_path(args.model)
    binary = os.path.join(os.path.dirname(build_llama_cpp()), "llama-completion")
    m = rlxc.load(path, max_seq=1024, threads=args.threads, kv_type=args.kv_type, activations=args.activations)
    print(f"# {host()}; {os.path.basename(path)}; kv {args.kv_type}, activations {args.activations}, "
          f"{args.tokens} tokens; against {args.against}" +
          (f", flash attention {args.llama_fa}" if args.against == "llama.cpp" else ""))
    print(f"{'prompt':<50} {'diverges at':>11} {'gap there':>9} {'first gap<' + str(args.gap):>13}  ok")
    rows, bad = [], 0
    for prompt in PROMPTS:
        # llama-completion prints exactly the tokens it generated, so compare on text
        if args.against == "llama.cpp":
            text = llama_text(binary, path, prompt, args.tokens, args.threads, args.kv_type, args.llama_fa)
        else:
            text = m.tokenizer.decode(rlxc_greedy_by_prefill(m, prompt, args.tokens))
        toks, gaps = rlxc_greedy(m, prompt, args.tokens)
        at = divergence(m, toks, text)
        close = next((i for i, g in enumerate(gaps) if g < args.gap), None)
        ok = at is None or (close is not None and at >= close)
        bad += not ok
        rows.append({"prompt": prompt, "diverges_at": at, "gap_at_divergence": None if at is None else gaps[at],
                     "first_close_call": close, "ok": ok, "rlxc": m.tokenizer.decode(toks), "llama.cpp": text})
        show = repr(prompt)[:48]
        print(f"{show:<50} {('-' if at is None else at):>11} {('-' if at is None else f'{gaps[at]:.3f}'):>9} "
              f"{('-' if close is None else close):>13}  {'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
