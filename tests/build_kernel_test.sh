#!/usr/bin/env bash
# Builds the kernel library the way setup.py does (each ISA directory with its own flags,
# nothing else with ISA flags), links tests/test_kernels.c against it and runs it.
#
#   tests/build_kernel_test.sh [--valgrind] [--no-run] [isa ...]
#
# isa: scalar avx2 avx512 neon (default: every ISA the CPU and build support).
# --valgrind also runs the test under valgrind (the scalar and AVX2 tables only: valgrind
# 3.19 does not decode AVX-512). --no-run only builds $OUT/obj/*.o and the test.
# Environment: CC (default gcc), OUT (default build/kernel_test).
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

CC=${CC:-gcc}
OUT=${OUT:-build/kernel_test}
CFLAGS="-O3 -std=gnu11 -Wall -Wextra -fPIC"
AVX2_FLAGS="-mavx2 -mfma -mf16c"
AVX512_FLAGS="$AVX2_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni"

VALGRIND=0 RUN=1 ISAS=()
for a in "$@"; do
    case $a in
        --valgrind) VALGRIND=1 ;;
        --no-run) RUN=0 ;;
        *) ISAS+=("$a") ;;
    esac
done

mkdir -p "$OUT/obj"
rm -f "$OUT"/obj/*.o

compile() { # dir-tag flags files...
    local tag=$1 flags=$2
    shift 2
    for f in "$@"; do
        $CC $CFLAGS $flags -c "$f" -o "$OUT/obj/${tag}_$(basename "${f%.c}").o"
    done
}

# The reference is compiled without FMA contraction, as setup.py does.
compile ref "-ffp-contract=off" csrc/kernels_ref.c csrc/kernels_wtypes.c csrc/fp16.c
compile ref "" csrc/dispatch.c
case $($CC -dumpmachine) in
    x86_64*)
        compile avx2 "$AVX2_FLAGS" kernels_avx2/*.c
        compile avx512 "$AVX512_FLAGS" kernels_avx512/*.c ;;
    aarch64*)
        compile neon "" kernels_neon/*.c ;;
esac

# Objects, not an archive: dispatch.c's weak table getters would keep the linker from
# pulling the ISA tables out of a .a.
$CC $CFLAGS tests/test_kernels.c "$OUT"/obj/*.o -lsleef -lm -o "$OUT/test_kernels"
[ $RUN = 1 ] || exit 0

"$OUT/test_kernels" "${ISAS[@]}"
if [ $VALGRIND = 1 ]; then
    vg_isas=()
    for i in "${ISAS[@]:-scalar avx2}"; do
        for j in $i; do [ "$j" = avx512 ] || vg_isas+=("$j"); done
    done
    echo "valgrind: ${vg_isas[*]}"
    valgrind -q --error-exitcode=1 "$OUT/test_kernels" "${vg_isas[@]}"
fi
