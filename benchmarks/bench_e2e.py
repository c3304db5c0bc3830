"""End-to-end decode and prefill speed of a random Llama-shaped model (Q4_0): rlxc vs
llama.cpp (llama-cpp-python, loading the very same quantized bytes written as GGUF) vs
PyTorch (transformers, float32 and bfloat16), measured side by side in one run.

    python benchmarks/bench_e2e.py --threads 1 2 --reps 5

Prints a markdown table (medians of --reps runs, rlxc and llama.cpp taking turns in each
repetition; ratios rlxc / other), writes
benchmarks/out/e2e.json and benchmarks/out/e2e.png. Also checks that rlxc and llama.cpp agree
on the logits of the prompt's last token (both multiply Q4_0 weights by Q8_0 activations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_export import write_llama_gguf  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def median_time(fn, reps: int) -> float:
    return median_times([fn], reps)[0]


def median_times(fns, reps: int) -> list[float]:
    """Median seconds of each function, the functions run in turn in every repetition so that
    load from other jobs on the machine hits them alike."""
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def build_hf(args):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.inter,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=4096, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.no_grad():
        model = tf.LlamaForCausalLM(cfg).eval()
    return model


def rlxc_runs(model, ids, n_decode, threads):
    """rlxc's prefill and decode at that thread count, warmed up."""
    model.threads = threads
    pipe = model.pipeline
    pipe.threads = threads

    def prefill():
        model.reset()
        h = pipe.prefill(model.embed_tokens(ids))
        model.logits(model.final_norm(h[-1:]))

    def decode():
        model.reset()
        pipe.prefill(model.embed_tokens(ids[:8]))
        tok = 1
        for _ in range(n_decode):
            tok = int(np.argmax(model.decode(tok)))

    prefill()
    return prefill, decode


def llama_last_logits(llm) -> np.ndarray:
    """The logits of the last evaluated token (llm.scores holds them only with logits_all)."""
    import llama_cpp
    p = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(p, shape=(llm.n_vocab(),)).copy()


def llama_runs(path, ids, n_decode, threads, n_ctx):
    """llama.cpp's prefill and decode on the GGUF at that thread count, warmed up, and the model."""
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=len(ids),
                n_ubatch=len(ids), logits_all=False, verbose=False, use_mmap=True)

    def prefill():
        llm.reset()
        llm.eval(list(map(int, ids)))

    def decode():
        llm.reset()
        llm.eval(list(map(int, ids[:8])))
        tok = 1
        for _ in range(n_decode):
            llm.eval([tok])
            tok = int(np.argmax(llama_last_logits(llm)))

    prefill()
    return prefill, decode, llm


def bench_torch(hf, ids, n_decode, threads, reps, dtype):
    import torch

    torch.set_num_threads(threads)
    m = hf if dtype == torch.float32 else hf.to(dtype)
    x = torch.tensor(np.asarray(ids)[None], dtype=torch.long)

    def prefill():
        with torch.no_grad():
            m(x, logits_to_keep=1, use_cache=True)

    def decode():
        with torch.no_grad():
            out = m(x[:, :8], use_cache=True, logits_to_keep=1)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(n_decode):
                out = m(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

    prefill()
    return median_time(prefill, reps), median_time(decode, max(1, reps // 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baselines")
    args = ap.parse_args()

    import rlxc

    os.makedirs(OUT, exist_ok=True)
    print(f"rlxc {rlxc.__version__}, ISA {rlxc.get_isa()}; building a random Llama: hidden {args.hidden}, "
          f"{args.layers} layers, ffn {args.inter}, heads {args.heads}/{args.kv_heads}, vocab {args.vocab}", flush=True)
    hf = build_hf(args)
    n_ctx = args.prompt + args.decode + 16
    model = rlxc.from_hf(hf, weights="q4_0", max_seq=n_ctx)
    path = os.path.join(OUT, "llama_q4_0.gguf")
    write_llama_gguf(model, path, rope_theta=float(hf.config.rope_parameters["rope_theta"]))
    weight_bytes = sum(layer.nbytes for layer in model.layers) + model._lm.nbytes
    rng = np.random.default_rng(0)
    ids = rng.integers(3, args.vocab, size=args.prompt)

    rows = []
    for t in args.threads:
        r_prefill, r_decode = rlxc_runs(model, ids, args.decode, t)
        l_prefill, l_decode, llm = llama_runs(path, ids, args.decode, t, n_ctx)
        r_pre, l_pre = median_times([r_prefill, l_prefill], args.reps)
        r_dec, l_dec = median_times([r_decode, l_decode], args.reps)
        row = dict(threads=t, rlxc_prefill=args.prompt / r_pre, rlxc_decode=args.decode / r_dec,
                   llama_prefill=args.prompt / l_pre, llama_decode=args.decode / l_dec,
                   rlxc_decode_gbs=weight_bytes * args.decode / r_dec / 1e9,
                   llama_decode_gbs=weight_bytes * args.decode / l_dec / 1e9)
        if t == args.threads[0]:  # the two engines must compute the same thing (llama.cpp keeps K/V in f16)
            model.reset()
            ours = model.prefill(ids)[-1]
            llm.reset()
            llm.eval(list(map(int, ids)))
            theirs = llama_last_logits(llm)
            row["logit_rel_diff"] = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
            row["top1_same"] = bool(np.argmax(ours) == np.argmax(theirs))
        del llm
        if not args.no_torch:
            import torch
            for name, dt in (("torch_f32", torch.float32), ("torch_bf16", torch.bfloat16)):
                p, d = bench_torch(hf, ids, args.decode, t, args.reps, dt)
                row[f"{name}_prefill"], row[f"{name}_decode"] = args.prompt / p, args.decode / d
            hf = hf.float()
        rows.append(row)
        print(json.dumps(row), flush=True)

    with open(os.path.join(OUT, "e2e.json"), "w") as f:
        json.dump(dict(args=vars(args), weight_bytes=weight_bytes, rows=rows), f, indent=1)
    print(f"\nQ4_0 weights {weight_bytes / 1e9:.2f} GB; prompt {args.prompt}, decode {args.decode} tokens; "
          f"medians of {args.reps}\n")
    print("| threads | rlxc prefill tok/s | llama.cpp | ratio | rlxc decode tok/s | llama.cpp | ratio | "
          "decode GB/s rlxc / llama.cpp | torch f32 decode | ratio | torch bf16 decode |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tf32 = r.get("torch_f32_decode", float("nan"))
        print(f"| {r['threads']} | {r['rlxc_prefill']:.1f} | {r['llama_prefill']:.1f} | "
              f"{r['rlxc_prefill'] / r['llama_prefill']:.2f}x | {r['rlxc_decode']:.2f} | {r['llama_decode']:.2f} | "
              f"{r['rlxc_decode'] / r['llama_decode']:.2f}x | {r['rlxc_decode_gbs']:.1f} / {r['llama_decode_gbs']:.1f} | "
              f"{tf32:.2f} | {r['rlxc_decode'] / tf32:.1f}x | {r.get('torch_bf16_decode', float('nan')):.2f} |")
    if "logit_rel_diff" in rows[0]:
        print(f"\nrlxc vs llama.cpp last-token logits: max rel diff {rows[0]['logit_rel_diff']:.2e}, "
              f"same top-1: {rows[0]['top1_same']}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, kind in zip(axes, ("prefill", "decode")):
            names = ["rlxc", "llama"] + ([] if args.no_torch else ["torch_f32", "torch_bf16"])
            w = 0.8 / len(names)
            for j, n in enumerate(names):
                ax.bar([i + j * w for i in range(len(rows))], [r[f"{n}_{kind}"] for r in rows], w, label=n)
            ax.set_xticks([i + 0.4 - w / 2 for i in range(len(rows))], [f"{r['threads']} thr" for r in rows])
            ax.set_title(f"{kind} tokens/s")
            ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "e2e.png"), dpi=100)
    except ImportError:
        print("(matplotlib not installed: no plot)")


if __name__ == "__main__":
    main()
