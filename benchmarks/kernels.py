#!/usr/bin/env python3
"""Build and run benchmarks/bench_kernels.c: Q4_0 (--type q4_k: Q4_K) matvec GB/s against
streaming-read bandwidth, on the GGUF rows and on the engine's repacked copy, and GEMM GFLOP/s,
per ISA, on 1 thread and on all cores (OpenMP, rows split the way the engine splits them).

    python benchmarks/kernels.py [--type q4_k] [--threads 1,2] [--seconds 0.3] [--rounds 5] [isa ...]

Each matvec size is timed in --rounds rounds alternating with the streaming read of the same
bytes; the table gives the medians (GB/s, and of the per-round ratios).

The kernel objects come from tests/build_kernel_test.sh --no-run (same per-directory flags
as setup.py); the build goes to build/kernel_bench.
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "kernel_bench")


def build():
    env = dict(os.environ, OUT=OUT)
    subprocess.run(["bash", os.path.join(ROOT, "tests", "build_kernel_test.sh"), "--no-run"], check=True, env=env)
    objs = sorted(os.path.join(OUT, "obj", f) for f in os.listdir(os.path.join(OUT, "obj")) if f.endswith(".o"))
    exe = os.path.join(OUT, "bench_kernels")
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, "-O2", "-fopenmp", os.path.join(ROOT, "benchmarks", "bench_kernels.c"), *objs,
                    "-lsleef", "-lm", "-o", exe], check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}", help="comma-separated thread counts")
    ap.add_argument("--seconds", default="0.3", help="minimum timing per measurement")
    ap.add_argument("--rounds", default="5", help="alternating matvec / stream rounds per size (medians)")
    ap.add_argument("--type", default="q4_0", choices=["q4_0", "q4_k"], help="weight type")
    ap.add_argument("isa", nargs="*", help="scalar avx2 avx512 neon (default: all the CPU runs, but scalar)")
    args = ap.parse_args()
    exe = build()
    for t in sorted({int(x) for x in args.threads.split(",")}):
        sys.stdout.flush()
        subprocess.run([exe, "-w", args.type, "-t", str(t), "-s", args.seconds, "-r", args.rounds, *args.isa], check=True)


if __name__ == "__main__":
    main()
