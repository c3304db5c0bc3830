#!/bin/bash
# The issue-12 table on a many-core machine without network (the `device` machine), whole in one
# command (~8 minutes on 16 cores with the defaults), from the checkout's root:
#   bash benchmarks/device_table.sh DIR [threads, default 1,2,4,8,16] [runs, default 5]
# DIR (ignored by git, named in the device tool's carry) holds rlxc.tgz (git archive of the tree),
# llamacpp.tgz (see device16.sh), the libsleef debs and gemma3.skel.npz (`python
# benchmarks/gguf_skeleton.py` of the Gemma 3 270M GGUF: its header and the first bytes of each
# tensor, grown back there to a file of the real shapes and types).
# Builds llama-bench and rlxc, writes the random Llama Q4_0 (4 layers), then runs
# vs_llama_bench.py (engines alternating, medians) on it and on Gemma 3; each table also goes to
# $OUT (llama.md, gemma.md, the per-run lines in *.err) where the device tool sets OUT.
# MODELS=llama or MODELS=gemma runs one table; a second call on a warm machine reuses llama-bench,
# so a table too long for one call can be split in two.
D=$(cd "$1" && pwd); T=${2:-1,2,4,8,16}; RUNS=${3:-5}; W=/tmp/w; OUT=${OUT:-$W}; mkdir -p $W /tmp/sleef
lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3"
for f in $D/*.deb; do dpkg -x $f /tmp/sleef; done
I=/tmp/sleef/usr/include/x86_64-linux-gnu; L=/tmp/sleef/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$I LIBRARY_PATH=$L LD_LIBRARY_PATH=$L CFLAGS=-I$I LDFLAGS=-L$L
[ -x $W/llama.cpp/build/bin/llama-bench ] || { tar xzf $D/llamacpp.tgz -C $W
(cd $W/llama.cpp && cmake -B build -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null 2>&1 &&
   nice cmake --build build -j$(( $(nproc) > 5 ? $(nproc) - 4 : 1 )) --target llama-bench >$W/lbuild.log 2>&1); } & LPID=$!
rm -rf $W/rlxc $W/pkg_rlxc; mkdir -p $W/rlxc && tar xzf $D/rlxc.tgz -C $W/rlxc
(cd $W/rlxc && python3 -m pip install -q --no-build-isolation --no-deps --target $W/pkg_rlxc . >$W/pip.log 2>&1) ||
    { tail $W/pip.log; exit 1; }
export PYTHONPATH=$W/llama.cpp/gguf-py:$W/pkg_rlxc
M=${MODELS:-llama,gemma}
[[ $M != *llama* || -f $W/m.gguf ]] || python3 -c "import sys; sys.path.insert(0, '$W/rlxc/benchmarks'); import vs_llama_bench as v; import shutil; shutil.copy(v.random_llama_gguf(4), '$W/m.gguf')" || exit 1
[[ $M != *gemma* || -f $W/g.gguf ]] || python3 $W/rlxc/benchmarks/gguf_skeleton.py expand $D/gemma3.skel.npz $W/g.gguf >/dev/null || exit 1
wait $LPID; ls $W/llama.cpp/build/bin/llama-bench >/dev/null || { tail $W/lbuild.log; exit 1; }
echo "== built at $SECONDS s"
B="--llama-bench $W/llama.cpp/build/bin/llama-bench --threads ${T//,/ } --runs $RUNS"
[[ $M == *llama* ]] && python3 $W/rlxc/benchmarks/vs_llama_bench.py --model $W/m.gguf $B 2>$OUT/llama.err | tee $OUT/llama.md
[[ $M == *gemma* ]] && python3 $W/rlxc/benchmarks/vs_llama_bench.py --model $W/g.gguf $B 2>$OUT/gemma.err | tee $OUT/gemma.md
echo "== end at $SECONDS s"
