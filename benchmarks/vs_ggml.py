#!/usr/bin/env python3
"""Build and run benchmarks/bench_ggml.c: rlxc's Q5_0 / Q4_K / Q6_K matvec against llama.cpp's
ggml_vec_dot_* from the llama_cpp_python wheel's libggml-cpu.so, one thread.

    python benchmarks/vs_ggml.py [--seconds 0.5] [--lib path/to/libggml-cpu.so] [isa ...]

The kernel objects come from tests/build_kernel_test.sh --no-run (setup.py's flags).
"""
import argparse
import glob
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "bench_ggml")


def find_lib():
    import llama_cpp  # noqa: PLC0415 - optional dependency, only for this benchmark
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so*"))
    if not libs:
        raise SystemExit("libggml-cpu.so not found in the llama_cpp package")
    return sorted(libs)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", default="0.5")
    ap.add_argument("--lib", default=None)
    ap.add_argument("isa", nargs="*")
    args = ap.parse_args()
    lib = args.lib or find_lib()
    subprocess.run(["bash", os.path.join(ROOT, "tests", "build_kernel_test.sh"), "--no-run"], check=True,
                   env=dict(os.environ, OUT=OUT))
    objs = sorted(glob.glob(os.path.join(OUT, "obj", "*.o")))
    exe = os.path.join(OUT, "bench_ggml")
    subprocess.run([os.environ.get("CC", "gcc"), "-O2", os.path.join(ROOT, "benchmarks", "bench_ggml.c"), *objs,
                    "-ldl", "-lsleef", "-lm", "-o", exe], check=True)
    subprocess.run([exe, lib, "-s", args.seconds, *args.isa], check=True)


if __name__ == "__main__":
    main()
