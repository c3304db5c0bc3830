#!/bin/bash
# rlxc's AMX GEMMs on the device's Xeon, whole in one command (~7 minutes on 16 cores), from the
# checkout's root:
#   bash benchmarks/device_amx.sh DIR [threads, default 1,4,16] [runs, default 3]
# DIR (ignored by git, named in the device tool's carry) holds rlxc.tgz, llamacpp.tgz and the
# libsleef debs (see device_table.sh). In order: benchmarks/amx_probe.c (does AMX run here, one
# core's int8 tile rate); the C kernel test of the avx512 table (without AMX, then with); the
# kernel bench's GEMM rates with RLXC_AMX=0 and 1 on 1 thread; then vs_llama_bench.py on the
# random Llama Q4_0 (4 layers) against llama-bench built with GGML_NATIVE (on an AMX CPU its
# Q4_0 / Q8_0 / K-quant GEMMs take ggml's AMX buffer type: ggml-cpu/amx), rlxc with RLXC_AMX=1
# and =0; last a 16-thread prefill profile. LLAMA_NOAMX=1 also builds llama-bench with the AMX
# ISA switched off and runs its pp512; QUICK=1 builds no llama.cpp and only profiles rlxc's prefill
# with RLXC_AMX=1 and 0 after the kernel test (~3 minutes). Everything also goes to $OUT.
D=$(cd "$1" && pwd); T=${2:-1,4,16}; RUNS=${3:-3}; W=/tmp/w; OUT=${OUT:-$W}; mkdir -p $W /tmp/sleef
lscpu | grep -E "Model name|^CPU\(s\)"; echo "AMX flags: $(grep -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
gcc -O2 -mamx-tile -mamx-int8 benchmarks/amx_probe.c -o $W/amx_probe && $W/amx_probe
for f in $D/*.deb; do dpkg -x $f /tmp/sleef; done
I=/tmp/sleef/usr/include/x86_64-linux-gnu; L=/tmp/sleef/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$I LIBRARY_PATH=$L LD_LIBRARY_PATH=$L CFLAGS=-I$I LDFLAGS=-L$L
tar xzf $D/llamacpp.tgz -C $W
J=$(( $(nproc) > 5 ? $(nproc) - 4 : 1 )); [ -n "$LLAMA_NOAMX" ] && J=$(( J / 2 > 1 ? J / 2 : 1 ))
build() {  # $1: build folder, then extra cmake arguments
  local b=$1; shift
  (cd $W/llama.cpp && cmake -B $b -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null 2>&1 &&
     nice cmake --build $b -j$J --target llama-bench >$W/$b.log 2>&1)
}
BUILDS=build-amx; P1=; P2=
[ -z "$QUICK" ] && { build build-amx & P1=$!; }
if [ -n "$LLAMA_NOAMX" ]; then
  BUILDS="build-amx build-noamx"
  build build-noamx "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" & P2=$!
fi
mkdir -p $W/rlxc && tar xzf $D/rlxc.tgz -C $W/rlxc
(cd $W/rlxc && OUT=$W/kt bash tests/build_kernel_test.sh avx512 2>&1 | grep -v " PASS " | tee $OUT/kernel_test.txt)
(cd $W/rlxc && python3 -m pip install -q --no-build-isolation --no-deps --target $W/pkg_rlxc . >$W/pip.log 2>&1) ||
    { tail $W/pip.log; exit 1; }
export PYTHONPATH=$W/llama.cpp/gguf-py:$W/pkg_rlxc
python3 -c "import rlxc; print('rlxc cpu_info:', rlxc.cpu_info())"
python3 -X faulthandler -c "import rlxc; print('amx with faulthandler on (as under pytest):', rlxc.cpu_info()['amx'])"
python3 -c "import rlxc, faulthandler; a = rlxc.cpu_info()['amx']; faulthandler.enable(); print('faulthandler enabled after AMX was granted:', a)"
for a in ${KBENCH:-0 1}; do  # KBENCH=" " skips the kernel bench
  echo "-- kernel bench, RLXC_AMX=$a"
  (cd $W/rlxc && RLXC_AMX=$a python3 benchmarks/kernels.py --threads 1 --rounds 1 --seconds 0.2 avx512 2>&1 |
     sed -n '/GEMM T/,$p' | tee $OUT/kbench_amx$a.txt)
done
python3 -c "import sys; sys.path.insert(0, '$W/rlxc/benchmarks'); import vs_llama_bench as v; import shutil; shutil.copy(v.random_llama_gguf(4), '$W/m.gguf')" || exit 1
if [ -n "$QUICK" ]; then  # QUICK=1: no llama.cpp, rlxc's prefill stages with the tiles and without
  for a in 1 0; do
    echo "-- rlxc prefill, RLXC_AMX=$a"
    RLXC_AMX=$a python3 $W/rlxc/benchmarks/profile_stages.py $W/m.gguf --threads ${T//,/ } --pp 512 --tg 4 --rounds 3 2>&1 |
      grep -vE "^(other|embed|heads|team|lm_head) " | tee $OUT/quick_amx$a.txt
  done
  echo "== end at $SECONDS s"; exit 0
fi
wait $P1 $P2
for b in $BUILDS; do ls $W/llama.cpp/$b/bin/llama-bench >/dev/null || { tail $W/$b.log; exit 1; }; done
echo "== built at $SECONDS s"
for b in ${LLAMA_NOAMX:+$BUILDS}; do
  echo "-- llama.cpp $b"
  $W/llama.cpp/$b/bin/llama-bench -m $W/m.gguf -p 512 -n 0 -t $T -r 3 -o md 2>$W/err.txt | grep -E "^\| llama|^\| model" | tee $OUT/llama_$b.md
done
B="--llama-bench $W/llama.cpp/build-amx/bin/llama-bench --threads ${T//,/ } --runs $RUNS --tg 32"
for a in 1 0; do
  echo "-- vs_llama_bench, rlxc with RLXC_AMX=$a"
  RLXC_AMX=$a python3 $W/rlxc/benchmarks/vs_llama_bench.py --model $W/m.gguf $B 2>$OUT/vs_amx$a.err | tee $OUT/vs_amx$a.md
done
echo "-- where a 16-thread prefill spends its time, RLXC_AMX=1"
python3 $W/rlxc/benchmarks/profile_stages.py $W/m.gguf --threads 16 --pp 512 --tg 8 --rounds 2 2>&1 | tee $OUT/profile16.txt
echo "== end at $SECONDS s"
