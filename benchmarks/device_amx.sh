#!/bin/bash
# Is llama.cpp's prefill on the device's Xeon its AMX path? Whole in one command (~6 minutes on 16
# cores), from the checkout's root:
#   bash benchmarks/device_amx.sh DIR [threads, default 1,4,16] [rounds, default 2]
# DIR (ignored by git, named in the device tool's carry) holds rlxc.tgz, llamacpp.tgz and the
# libsleef debs (see device_table.sh). Runs benchmarks/amx_probe.c (does AMX run here, one core's
# int8 tile rate), builds llama-bench twice (GGML_NATIVE=ON as is, and with the AMX ISA switched
# off), writes the random Llama Q4_0 (4 layers), then pp512 of both builds, taking turns.
D=$(cd "$1" && pwd); T=${2:-1,4,16}; ROUNDS=${3:-2}; W=/tmp/w; mkdir -p $W /tmp/sleef
lscpu | grep -E "Model name|^CPU\(s\)"; echo "AMX flags: $(grep -o 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
gcc -O2 -mamx-tile -mamx-int8 benchmarks/amx_probe.c -o $W/amx_probe && $W/amx_probe
for f in $D/*.deb; do dpkg -x $f /tmp/sleef; done
I=/tmp/sleef/usr/include/x86_64-linux-gnu; L=/tmp/sleef/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$I LIBRARY_PATH=$L LD_LIBRARY_PATH=$L CFLAGS=-I$I LDFLAGS=-L$L
tar xzf $D/llamacpp.tgz -C $W
J=$(( $(nproc) > 9 ? ($(nproc) - 4) / 2 : 1 ))
build() {  # $1: build folder, then extra cmake arguments
  local b=$1; shift
  (cd $W/llama.cpp && cmake -B $b -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null 2>&1 &&
     nice cmake --build $b -j$J --target llama-bench >$W/$b.log 2>&1)
}
build build-amx & P1=$!
build build-noamx "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
  "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" & P2=$!
mkdir -p $W/rlxc && tar xzf $D/rlxc.tgz -C $W/rlxc
(cd $W/rlxc && python3 -m pip install -q --no-build-isolation --no-deps --target $W/pkg_rlxc . >$W/pip.log 2>&1) ||
    { tail $W/pip.log; exit 1; }
PYTHONPATH=$W/llama.cpp/gguf-py:$W/pkg_rlxc python3 -c "import sys; sys.path.insert(0, '$W/rlxc/benchmarks'); import vs_llama_bench as v; import shutil; shutil.copy(v.random_llama_gguf(4), '$W/m.gguf')" || exit 1
wait $P1 $P2
for b in build-amx build-noamx; do ls $W/llama.cpp/$b/bin/llama-bench >/dev/null || { tail $W/$b.log; exit 1; }; done
echo "== built at $SECONDS s"
for r in $(seq $ROUNDS); do for b in build-amx build-noamx; do
  echo "-- round $r $b"
  $W/llama.cpp/$b/bin/llama-bench -m $W/m.gguf -p 512 -n 0 -t $T -r 3 -o md 2>$W/err.txt | grep -E "^\| llama|^\| model"
  grep -iE "amx|repack" $W/err.txt | sort -u | head -5
done; done
echo "== end at $SECONDS s"
