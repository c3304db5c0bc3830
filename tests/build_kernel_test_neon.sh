#!/usr/bin/env bash
# Cross-builds rlxc for aarch64 on any Linux host and tests the NEON kernels under qemu-user:
#
#   1. which kernel directories setup.py compiles, by its own rule, for aarch64 and x86_64:
#      kernels_neon/ only on aarch64, kernels_avx2/ and kernels_avx512/ only on x86_64;
#   2. the extension's C sources (csrc/, csrc/bindings/, the aarch64 kernel directories with
#      setup.py's flags) compile and link into an aarch64 shared object;
#   3. the baseline build is plain ARMv8.0: SDOT/UDOT appear only in *_dotprod functions;
#   4. tests/test_kernels.c runs every kernel against the scalar reference, which it computes
#      on aarch64 itself: the NEON dotprod table (-cpu max) and the plain NEON table on a CPU
#      without dotprod (-cpu cortex-a53, picked from HWCAP); tests/test_model.c runs the whole
#      model on the scalar and NEON tables, with dotprod and with it forced off by
#      RLXC_NEON_NODOT=1. qemu logs the code it translates, so each run also proves which
#      table ran: SDOT executed on the dotprod runs, never on the plain ones (on the
#      Cortex-A53 an SDOT would also be an illegal instruction). The quantized products must
#      stay within 1e-6 of the reference relative to the sum of |block terms| (the test
#      program allows 1e-5).
#
#   tests/build_kernel_test_neon.sh [--no-run]
#
# Exit status: 0 all passed, 1 a check failed, 77 a prerequisite is missing (the message says
# which, and the apt line that installs it).
# Environment: CROSS_CC (aarch64-linux-gnu-gcc), QEMU (qemu-aarch64-static), SYSROOT
# (/usr/aarch64-linux-gnu), PYTHON (python3: its headers and NumPy's serve the compile check),
# OUT (build/kernel_test_neon).
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

CC=${CROSS_CC:-aarch64-linux-gnu-gcc}
OBJDUMP=${CC%gcc}objdump
NM=${CC%gcc}nm
QEMU=${QEMU:-qemu-aarch64-static}
SYSROOT=${SYSROOT:-/usr/aarch64-linux-gnu}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-build/kernel_test_neon}
RUN=1
[ "${1:-}" = --no-run ] && RUN=0

# ---- prerequisites ----
missing=()
command -v "$CC" > /dev/null || missing+=("$CC (apt-get install gcc-aarch64-linux-gnu)")
[ $RUN = 0 ] || command -v "$QEMU" > /dev/null || missing+=("$QEMU (apt-get install qemu-user-static)")
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] || missing+=("$SYSROOT (apt-get install gcc-aarch64-linux-gnu)")
if command -v "$CC" > /dev/null; then
    echo '#include <sleef.h>' | "$CC" -E -x c - > /dev/null 2>&1 && [ "$("$CC" -print-file-name=libsleef.so)" != libsleef.so ] ||
        missing+=("arm64 SLEEF (dpkg --add-architecture arm64 && apt-get update && apt-get install libsleef-dev:arm64)")
fi
if [ ${#missing[@]} -gt 0 ]; then
    printf 'SKIP: missing %s\n' "${missing[@]}"
    exit 77
fi

fail() { echo "FAIL: $*"; exit 1; }

# ---- 1. setup.py's kernel directories per target machine ----
# setup.py's flags by its own rule (tests/setup_flags.py): "COMMON<TAB>flags", then one
# "dir<TAB>flags" line per directory it compiles for the machine asked.
setup_dirs() { "$PYTHON" tests/setup_flags.py "$1"; }

declare -A ARM_FLAGS
COMMON=
while IFS=$'\t' read -r d flags; do
    if [ "$d" = COMMON ]; then COMMON=$flags; else ARM_FLAGS[$d]=$flags; fi
done < <(setup_dirs aarch64)
X86_LIST=$(setup_dirs x86_64 | tail -n +2 | cut -f1 | tr '\n' ' ')
echo "setup.py kernel directories for aarch64: ${!ARM_FLAGS[*]}"
echo "setup.py kernel directories for x86_64:  $X86_LIST"
[ -n "${ARM_FLAGS[kernels_neon]+x}" ] || fail "setup.py does not compile kernels_neon/ for aarch64"
for d in kernels_avx2 kernels_avx512; do
    [ -z "${ARM_FLAGS[$d]+x}" ] || fail "setup.py compiles $d/ for aarch64"
    [[ " $X86_LIST " == *" $d "* ]] || fail "setup.py does not compile $d/ for x86_64"
done
[[ " $X86_LIST " != *" kernels_neon "* ]] || fail "setup.py compiles kernels_neon/ for x86_64"

# ---- 2. the extension, cross-compiled and linked the way setup.py builds it ----
mkdir -p "$OUT/ext"
rm -f "$OUT"/ext/*.o
PYINC=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NPINC=$("$PYTHON" -c 'import numpy; print(numpy.get_include())')
. tests/parallel_compile.sh
compile() { # outdir tag "flags" files...
    local out=$1 tag=$2 flags=$3
    shift 3
    # shellcheck disable=SC2086
    for f in "$@"; do run_bg "$CC" $COMMON $flags -fPIC -c "$f" -o "$out/${tag}_$(basename "${f%.c}").o"; done
}
compile "$OUT/ext" csrc "-Icsrc -I$PYINC -I$NPINC -DNPY_NO_DEPRECATED_API=NPY_2_0_API_VERSION" csrc/*.c csrc/bindings/*.c
for d in "${!ARM_FLAGS[@]}"; do
    compile "$OUT/ext" "$d" "-Icsrc ${ARM_FLAGS[$d]}" "$d"/*.c
done
wait_all
"$CC" -shared -fopenmp "$OUT"/ext/*.o -lsleef -lm -o "$OUT/_rlxc_aarch64.so"
# Python's own symbols resolve at import; nothing of rlxc's may stay undefined, and the NEON
# table getter must be the real one, not dispatch.c's weak NULL fallback.
undef=$("$NM" -D --undefined-only "$OUT/_rlxc_aarch64.so" | awk '$NF ~ /^rlxc_/ {print $NF}')
[ -z "$undef" ] || fail "undefined rlxc symbols in the aarch64 extension: $undef"
syms=$("$NM" "$OUT/_rlxc_aarch64.so")
grep -q ' T rlxc_kernels_neon$' <<< "$syms" || fail "rlxc_kernels_neon is not defined by kernels_neon/"
echo "aarch64 extension: $(ls "$OUT"/ext/*.o | wc -l) objects linked into $OUT/_rlxc_aarch64.so"

# ---- 3. no dotprod instruction outside the dotprod functions ----
bad=$("$OBJDUMP" -d "$OUT"/ext/*.o | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $2 }
    /\t(sdot|udot)\t/ && fn !~ /_dotprod>:$/ { bad[fn]++ }
    END { for (f in bad) print f }')
[ -z "$bad" ] || fail "dotprod instructions outside the dotprod functions: $bad"
ndot=$("$OBJDUMP" -d "$OUT"/ext/*.o | grep -cE $'\t(sdot|udot)\t' || true)
[ "$ndot" -gt 0 ] || fail "no dotprod instruction in the build at all"
echo "baseline ISA: $ndot SDOT/UDOT, all inside *_dotprod functions"

# ---- 4. the kernel test under qemu ----
# Linked from the extension's own objects: the reference, fp16 and dispatch with setup.py's
# COMMON flags (-ffp-contract=off), the kernel directories with theirs.
objs=("$OUT"/ext/csrc_kernels_ref.o "$OUT"/ext/csrc_kernels_wtypes.o "$OUT"/ext/csrc_fp16.o "$OUT"/ext/csrc_dispatch.o)
for d in "${!ARM_FLAGS[@]}"; do objs+=("$OUT/ext/${d}"_*.o); done
# Objects, not an archive: dispatch.c's weak table getters would keep the linker from
# pulling the NEON table out of a .a.
"$CC" -O2 -std=gnu11 -Wall -Wextra tests/test_kernels.c "${objs[@]}" -lsleef -lm -o "$OUT/test_kernels"
# The whole-model engine (tests/test_model.c) on the same objects plus the engine's own.
eng=()
for f in layer linear pipeline moe model taps kvcache attention threads; do eng+=("$OUT/ext/csrc_$f.o"); done
"$CC" -O2 -std=gnu11 -Wall -Wextra -Icsrc tests/test_model.c "${objs[@]}" "${eng[@]}" -fopenmp -lsleef -lm \
    -o "$OUT/test_model"
grep -q 'Machine:.*AArch64' <<< "$("${CC%gcc}readelf" -h "$OUT/test_kernels")" || fail "$OUT/test_kernels is not an aarch64 executable"
[ $RUN = 1 ] || exit 0

# Dotprod instructions in a qemu in_asm log, found by encoding (qemu's disassembler prints them
# as .byte): SDOT/UDOT (vector) 0QU01110 10 0 Rm 100101 Rn Rd, (by element) 0QU01111 10 LM Rm
# 1110H0 Rn Rd.
count_dot() {
    "$PYTHON" - "$1" << 'EOF'
import re, sys
n = 0
for m in re.finditer(r"^0x[0-9a-f]+:\s+([0-9a-f]{8})\s", open(sys.argv[1], errors="replace").read(), re.M):
    w = int(m.group(1), 16)
    n += (w & 0x9FE0FC00) == 0x0E809400 or (w & 0x9FC0F400) == 0x0F80E000
print(n)
EOF
}

# run label cpu expect(dot|nodot|any) env... -- program args...: runs a test program, checks the
# SDOT count in qemu's log of translated code, and the 1e-6 bound of the quantized products.
run() {
    local label=$1 cpu=$2 expect=$3 log="$OUT/qemu_$1.log" envs=()
    shift 3
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    echo "== $label: qemu -cpu $cpu ${envs[*]} $*"
    local status=0
    env -u RLXC_NEON_NODOT "${envs[@]}" "$QEMU" -L "$SYSROOT" -cpu "$cpu" -d in_asm -D "$log" \
        "$OUT/$1" "${@:2}" | tee "$OUT/out_$label.txt" || status=$?
    [ $status = 0 ] || fail "$label: $1 exited with $status"
    local nsdot
    nsdot=$(count_dot "$log")
    echo "   SDOT/UDOT in the code qemu translated for this run: $nsdot"
    case $expect in
        dot) [ "$nsdot" -gt 0 ] || fail "$label: the dotprod table did not run" ;;
        nodot) [ "$nsdot" = 0 ] || fail "$label: dotprod instructions ran on the plain table" ;;
    esac
    awk '/ (matvec|matmul)_q[48]_0 / { for (i = 1; i < NF; i++) if ($i == "err" && $(i + 1) + 0 > 1e-6) {
             print "FAIL: " $0 " exceeds 1e-6"; bad = 1 } } END { exit bad }' "$OUT/out_$label.txt" ||
        fail "$label: a quantized product exceeds 1e-6"
    rm -f "$log"
}

# No run of the scalar table alone: it is the reference of every run below, and compared with
# itself it would check nothing (it took a minute and a quarter under qemu).
run neon_dotprod max dot -- test_kernels neon
run neon_plain_cortex_a53 cortex-a53 nodot -- test_kernels neon
# The model on one thread: a libgomp program hangs in its thread start under qemu-user here.
run model_dotprod max dot -- test_model 1
run model_plain_forced max nodot RLXC_NEON_NODOT=1 -- test_model 1
for label in model_dotprod model_plain_forced; do
    grep -q "all model checks passed" "$OUT/out_$label.txt" || fail "$label: test_model did not finish"
done
echo "neon kernel test: all runs passed"
