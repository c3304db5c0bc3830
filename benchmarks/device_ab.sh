#!/bin/bash
# A/B of rlxc trees on the random Llama Q4_0 (hidden 4096, ffn 14336, 4 layers) or Gemma 3, on a many-core
# machine without network (the `device` machine), whole in one command (~4 minutes on 16 cores
# for two trees), from the checkout's root:
#   bash benchmarks/device_ab.sh DIR [threads, default 1,2,16] [rounds, default 3]
# DIR (ignored by git, named in the device tool's carry) holds rlxc.tgz and one or more
# rlxc_NAME.tgz (git archive of each tree, e.g. rlxc_old.tgz), llamacpp.tgz (for its gguf-py; see
# device16.sh) and the libsleef debs. Prints pp256 / tg32 (medians of 2 / 3 timings) per round,
# thread count and tree, the trees taking turns, so that a change is measured on one host
# against the VM's noise. From the environment: PP=4096 TG=8 measure a long prompt instead; the
# decodes start from an empty cache unless DEPTH=1 (then each follows a prefill of PP tokens);
# TREES="rlxc rlxc_old" picks some of DIR's trees; MODEL=gemma measures Gemma 3 270M Q4_K_M
# instead, grown from DIR/gemma3.skel.npz (see device_table.sh).
D=$(cd "$1" && pwd); T=${2:-1,2,16}; ROUNDS=${3:-3}; W=/tmp/w; mkdir -p $W /tmp/sleef
PP=${PP:-256}; TG=${TG:-32}; DEPTH=${DEPTH:-0}
for f in $D/*.deb; do dpkg -x $f /tmp/sleef; done
I=/tmp/sleef/usr/include/x86_64-linux-gnu; L=/tmp/sleef/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$I LIBRARY_PATH=$L LD_LIBRARY_PATH=$L CFLAGS=-I$I LDFLAGS=-L$L
TREES=${TREES:-$(cd $D && ls rlxc.tgz rlxc_*.tgz | sed 's/\.tgz$//')}
for v in $TREES; do
  mkdir -p $W/$v && tar xzf $D/$v.tgz -C $W/$v
  (cd $W/$v && python3 -m pip install -q --no-build-isolation --no-deps --target $W/pkg_$v . >$W/pip_$v.log 2>&1) || { tail $W/pip_$v.log; exit 1; } &
done; wait
mkdir -p $W/gg && tar xzf $D/llamacpp.tgz -C $W/gg llama.cpp/gguf-py
export PYTHONPATH=$W/gg/llama.cpp/gguf-py:$W/pkg_rlxc
if [ "${MODEL:-llama}" = gemma ]; then
  python3 $W/rlxc/benchmarks/gguf_skeleton.py expand $D/gemma3.skel.npz $W/m.gguf >/dev/null
else
  python3 -c "import sys; sys.path.insert(0, '$W/rlxc/benchmarks'); import vs_llama_bench as v; import shutil; shutil.copy(v.random_llama_gguf(4), '$W/m.gguf')"
fi || exit 1
cat > $W/one.py <<'PY'
import sys, time, statistics, numpy as np, rlxc
path, t, pp, tg, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = rlxc.load(path, threads=t, max_seq=pp + tg + 8)
ids = np.random.default_rng(0).integers(3, m.vocab_size, pp)
def fpp():
    m.reset(); t0 = time.perf_counter(); m.prefill(ids, logits="last"); return pp / (time.perf_counter() - t0)
def ftg():
    m.reset(); tok = int(np.argmax(m.prefill(ids, logits="last"))) if depth else 1; t0 = time.perf_counter()
    for _ in range(tg):
        tok = int(np.argmax(m.decode(tok)))
    return tg / (time.perf_counter() - t0)
fpp(); ftg()
at = f"@{pp}" if depth else ""
print(f"pp{pp} {statistics.median(fpp() for _ in range(2)):.2f} tg{tg}{at} {statistics.median(ftg() for _ in range(3)):.2f}")
PY
for r in $(seq $ROUNDS); do for t in ${T//,/ }; do for v in $TREES; do
  echo "round $r t=$t $v $(PYTHONPATH=$W/pkg_$v python3 $W/one.py $W/m.gguf $t $PP $TG $DEPTH 2>&1)"
done; done; done
