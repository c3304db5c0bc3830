#!/usr/bin/env python3
"""Build and run benchmarks/bench_ggml.c: rlxc's Q5_0 / Q4_K / Q6_K matvec against llama.cpp's
ggml_vec_dot_* from the llama_cpp_python wheel's libggml-cpu.so, one thread; or with --gemm
benchmarks/bench_ggml_gemm.c: rlxc's Q4_0 GEMM against ggml's mul_mat (repacked and plain) on
the same bytes, N = K = 4096, T = 32, 128, 512, at each thread count.

    python benchmarks/vs_ggml.py [--seconds 0.5] [--lib path/to/libggml-cpu.so] [isa ...]
    python benchmarks/vs_ggml.py --gemm [--threads 1,2] [--reps 7] [--seconds 0.2] [T ...]

The kernel objects come from tests/build_kernel_test.sh --no-run (setup.py's flags).
"""
import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "bench_ggml")


def find_lib():
    import llama_cpp  # noqa: PLC0415 - optional dependency, only for this benchmark
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so*"))
    if not libs:
        raise SystemExit("libggml-cpu.so not found in the llama_cpp package")
    return sorted(libs)[0]


def run_gemm(args, objs):
    """Links bench_ggml_gemm.c against the wheel's libggml*.so and the headers it installs."""
    import llama_cpp  # noqa: PLC0415 - optional dependency, only for this benchmark
    pkg = os.path.dirname(llama_cpp.__file__)
    libdir, include = os.path.join(pkg, "lib"), os.path.join(os.path.dirname(pkg), "include")
    if not os.path.exists(os.path.join(include, "ggml-cpu.h")):
        raise SystemExit(f"ggml headers not found in {include}")
    exe = os.path.join(OUT, "bench_ggml_gemm")
    subprocess.run([os.environ.get("CC", "gcc"), "-O2", "-fopenmp", "-I", include,
                    os.path.join(ROOT, "benchmarks", "bench_ggml_gemm.c"), *objs, "-L", libdir,
                    f"-Wl,-rpath,{libdir}", "-lggml", "-lggml-base", "-lggml-cpu", "-lsleef", "-lm", "-o", exe],
                   check=True)
    # the engine's OpenMP spin default (rlxc/__init__.py), unless the caller set one
    env = dict(os.environ)
    if "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env:
        env["GOMP_SPINCOUNT"] = "1000"
    for t in sorted({int(x) for x in args.threads.split(",")}):
        sys.stdout.flush()
        subprocess.run([exe, "-t", str(t), "-r", str(args.reps), "-s", args.seconds or "0.2", *args.isa], check=True,
                       env=env)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", default=None, help="time per measurement (default 0.5, --gemm 0.2)")
    ap.add_argument("--lib", default=None)
    ap.add_argument("--gemm", action="store_true", help="Q4_0 GEMM against ggml's mul_mat instead")
    ap.add_argument("--threads", default="1,2", help="--gemm: comma-separated thread counts")
    ap.add_argument("--reps", default="7", help="--gemm: interleaved repetitions (medians)")
    ap.add_argument("isa", nargs="*", help="ISAs (vector dots) or token counts T (--gemm)")
    args = ap.parse_args()
    subprocess.run(["bash", os.path.join(ROOT, "tests", "build_kernel_test.sh"), "--no-run"], check=True,
                   env=dict(os.environ, OUT=OUT))
    objs = sorted(glob.glob(os.path.join(OUT, "obj", "*.o")))
    if args.gemm:
        run_gemm(args, objs)
        return
    lib = args.lib or find_lib()
    exe = os.path.join(OUT, "bench_ggml")
    subprocess.run([os.environ.get("CC", "gcc"), "-O2", os.path.join(ROOT, "benchmarks", "bench_ggml.c"), *objs,
                    "-ldl", "-lsleef", "-lm", "-o", exe], check=True)
    subprocess.run([exe, lib, "-s", args.seconds or "0.5", *args.isa], check=True)


if __name__ == "__main__":
    main()
