"""`python -m rlxc`: a demo that needs no download.

Builds a random Llama-shaped stack (alternating sliding and full attention, GQA, Q4_0
weights), prints its layers, prefills a prompt and times decoding, on this CPU's kernels.
"""

import argparse
import time

import numpy as np

import rlxc


def build(hidden: int, layers: int, inter: int, dtype: str, seed: int) -> list:
    rng = np.random.default_rng(seed)
    head_dim = 64
    out = []
    for i in range(layers):
        layer = rlxc.Layer(hidden_size=hidden, intermediate_size=inter, head_dim=head_dim,
                           num_q_heads=hidden // head_dim, num_kv_heads=max(1, hidden // head_dim // 4),
                           rope_base=10000.0 if i % 2 == 0 else 1e6, sliding_window=128 if i % 2 == 0 else 0,
                           eps=1e-5)
        for name in layer.used_weights():
            shape = layer.weight_shape(name)
            w = rng.standard_normal(shape).astype(np.float32) * (1.0 if len(shape) == 1 else shape[1] ** -0.5)
            layer.set_weight(name, w, dtype if len(shape) == 2 else "f32")
        out.append(layer)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m rlxc", description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dtype", default="q4_0", choices=["f32", "q4_0", "q8_0"])
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens to prefill")
    ap.add_argument("--tokens", type=int, default=64, help="tokens to decode")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    info = rlxc.cpu_info()
    print(f"rlxc {rlxc.__version__}: ISA {info['isa']} (available: {', '.join(info['available_isas'])}); "
          f"CPU features: {info['features']}")
    layers = build(args.hidden, args.layers, args.hidden * 3, args.dtype, seed=0)
    pipe = rlxc.Pipeline(layers, max_seq=args.prompt + args.tokens, threads=args.threads)
    print(pipe)
    mb = sum(layer.nbytes for layer in layers) / 1e6
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.prompt, args.hidden)).astype(np.float32)
    t0 = time.perf_counter()
    h = pipe.prefill(x)
    t1 = time.perf_counter()
    tok = h[-1]
    for i in range(args.tokens):
        tok = pipe.decode_token(tok / np.float32(np.sqrt(np.mean(tok * tok))), args.prompt + i)
    t2 = time.perf_counter()
    print(f"weights {mb:.1f} MB ({args.dtype}); threads {pipe.threads}")
    print(f"prefill {args.prompt} tokens: {args.prompt / (t1 - t0):.1f} tokens/s")
    print(f"decode  {args.tokens} tokens: {args.tokens / (t2 - t1):.1f} tokens/s "
          f"({mb * args.tokens / (t2 - t1) / 1e3:.1f} GB/s of weights)")


if __name__ == "__main__":
    main()
