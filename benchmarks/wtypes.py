#!/usr/bin/env python3
"""Matvec GB/s of weights and GEMM GFLOP/s per weight type and ISA, through rlxc.ops.matmul
(the engine's own path: activation quantization included, one thread by default).

    python benchmarks/wtypes.py [--threads 1] [--seconds 0.5] [--types q4_0,q4_k,...] [isa ...]

Matvec: K = 4096, N rows filling 4 MiB (cache-resident) and 4x the last-level cache (DRAM).
GEMM: N = K = 4096 (2048 for the larger float types) at T = 16 and 128 tokens. Weights are
random valid blocks (random bytes, fp16 scales in [1e-3, 1e-2]).
"""
import argparse
import os
import time

import numpy as np

import rlxc
from rlxc import ops

# weights per block, bytes per block, byte offsets of fp16 scales
LAYOUT = {
    "f32": (1, 4, ()), "f16": (1, 2, ()), "bf16": (1, 2, ()), "q4_0": (32, 18, (0,)), "q5_0": (32, 22, (0,)),
    "q8_0": (32, 34, (0,)), "q4_k": (256, 144, (0, 2)), "q6_k": (256, 210, (208,)), "q4_1": (32, 20, (0, 2)),
    "q5_1": (32, 24, (0, 2)), "q5_k": (256, 176, (0, 2)), "iq4_nl": (32, 18, (0,)), "iq4_xs": (256, 136, (0,)),
    "q2_k": (256, 84, (80, 82)), "q3_k": (256, 110, (108,)),
}


def llc_bytes():
    for idx in range(4, -1, -1):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{idx}/size") as f:
                s = f.read().strip()
        except OSError:
            continue
        return int(s[:-1]) * {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1) if s[-1] in "KM" else int(s)
    return 32 << 20


def random_weights(rng, wtype, N, K):
    qk, bb, scales = LAYOUT[wtype]
    if qk == 1:
        w = rng.uniform(-1, 1, (N, K)).astype(np.float32)
        if wtype == "f32":
            return w
        return w.astype(np.float16).view(np.uint8) if wtype == "f16" else (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    b = rng.integers(0, 256, (N, K // qk, bb), dtype=np.uint8)
    for off in scales:
        b[..., off:off + 2] = rng.uniform(1e-3, 1e-2, (N, K // qk)).astype(np.float16).view(np.uint8).reshape(N, K // qk, 2)
    return b.reshape(N, -1)


def best_time(fn, seconds):
    fn()
    best, spent = float("inf"), 0.0
    while spent < seconds:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        spent += dt
        best = min(best, dt)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--types", default="f32,f16,bf16,q4_0,q5_0,q8_0,q4_k,q6_k")
    ap.add_argument("isa", nargs="*", help="default: every ISA this CPU runs")
    args = ap.parse_args()
    isas = args.isa or rlxc.cpu_info()["available_isas"]
    types = args.types.split(",")
    rng = np.random.default_rng(0)
    K = 4096
    sizes = [4 << 20, 4 * llc_bytes()]
    weights = {}
    for t in types:
        rb = K // LAYOUT[t][0] * LAYOUT[t][1]
        weights[t] = [random_weights(rng, t, max(1, s // rb), K) for s in sizes]
    x = rng.standard_normal((128, K)).astype(np.float32)
    print(f"{args.threads} thread(s); matvec K = {K}; sizes " + ", ".join(f"{s >> 20} MiB" for s in sizes))
    print(f"{'isa':8} {'type':6} " + " ".join(f"{'mv GB/s ' + str(s >> 20) + 'M':>14}" for s in sizes)
          + f" {'GEMM T=16':>10} {'T=128':>8}  GFLOP/s")
    for isa in isas:
        rlxc.set_isa(isa)
        for t in types:
            row = []
            for w in weights[t]:
                dt = best_time(lambda: ops.matmul(x[0], w, t, threads=args.threads), args.seconds)
                row.append(f"{w.nbytes / dt * 1e-9:14.1f}")
            Ng = 4096 if LAYOUT[t][1] / LAYOUT[t][0] < 2 else 2048
            wg = random_weights(rng, t, Ng, Ng)
            for T in (16, 128):
                xg = np.ascontiguousarray(x[:T, :Ng])
                dt = best_time(lambda: ops.matmul(xg, wg, t, threads=args.threads), args.seconds)
                row.append(f"{2.0 * Ng * Ng * T / dt * 1e-9:{10 if T == 16 else 8}.1f}")
            print(f"{isa:8} {t:6} " + " ".join(row))


if __name__ == "__main__":
    main()
