"""Where a prefill and a decode spend their time, stage by stage, per thread count (rlxc.profile).

    python benchmarks/profile_stages.py MODEL.gguf --threads 1 4 16 [--pp 256] [--tg 32] [--rounds 3]

For each thread count: the fastest of --rounds prefills of --pp random tokens from an empty cache
(last logits only), then --tg greedy decodes; each with rlxc.profile's table (mean and slowest
thread per stage, barrier waits as "wait") and, for the prefill, every thread's time in the
matrix products and in everything but waits, which shows a straggler or an uneven split.
"""

from __future__ import annotations

import argparse

import numpy as np

import rlxc

PRODUCTS = ("qkv", "o_proj", "ffn_up", "ffn_down", "experts", "lm_head")


def per_thread(prof: rlxc.Profile, names: tuple[str, ...] | None = None) -> np.ndarray:
    """Seconds per thread in the stages `names` (None: every stage but "wait")."""
    picked = [s for n, s in prof.seconds.items() if (n in names if names else n != "wait")]
    return np.sum(picked, axis=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--pp", type=int, default=256)
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for t in a.threads:
        m = rlxc.load(a.model, threads=t, max_seq=a.pp + a.tg + 8)
        ids = np.random.default_rng(0).integers(3, m.vocab_size, a.pp)
        m.reset()
        m.prefill(ids, logits="last")  # first touch of weights and caches
        best = None
        for _ in range(a.rounds):
            m.reset()
            with rlxc.profile() as p:
                m.prefill(ids, logits="last")
            best = p if best is None or p.wall < best.wall else best
        assert best is not None
        print(f"=== {t} threads: prefill of {a.pp} tokens, {a.pp / best.wall:.1f} tok/s (fastest of {a.rounds})")
        print(best)
        print("per thread, products ms:", " ".join(f"{x * 1e3:.0f}" for x in per_thread(best, PRODUCTS)))
        print("per thread, busy ms:    ", " ".join(f"{x * 1e3:.0f}" for x in per_thread(best)))
        tok = int(np.argmax(m.decode(1)))
        with rlxc.profile() as p:
            for _ in range(a.tg):
                tok = int(np.argmax(m.decode(tok)))
        print(f"=== {t} threads: {a.tg} decodes, {a.tg / p.wall:.1f} tok/s")
        print(p)


if __name__ == "__main__":
    main()
