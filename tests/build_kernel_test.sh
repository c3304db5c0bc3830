#!/usr/bin/env bash
# Builds the kernel library the way setup.py does, with its flags (tests/setup_flags.py): the
# reference with setup.py's COMMON flags, each kernel directory of the machine $CC targets with
# COMMON and its own (nothing else with ISA flags); links tests/test_kernels.c against it and
# runs it.
#
#   tests/build_kernel_test.sh [--valgrind] [--no-run] [isa ...]
#
# isa: scalar avx2 avx512 neon (default: every ISA the CPU and build support).
# --valgrind also runs the test under valgrind (the scalar and AVX2 tables only: valgrind
# 3.19 does not decode AVX-512). --no-run only builds $OUT/obj/*.o and the test.
# Environment: CC (default gcc), OUT (default build/kernel_test), PYTHON (default python3),
# EXTRA_CFLAGS (added to every compile and link, e.g. sanitizers).
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

CC=${CC:-gcc}
OUT=${OUT:-build/kernel_test}
PYTHON=${PYTHON:-python3}
EXTRA_CFLAGS=${EXTRA_CFLAGS:-}
CFLAGS="-O3 -std=gnu11 -Wall -Wextra -fPIC $EXTRA_CFLAGS" # the test programs' own

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

declare -A DIR_FLAGS
COMMON=
while IFS=$'\t' read -r d flags; do
    if [ "$d" = COMMON ]; then COMMON=$flags; else DIR_FLAGS[$d]=$flags; fi
done < <("$PYTHON" tests/setup_flags.py "$($CC -dumpmachine | cut -d- -f1)")
[ -n "$COMMON" ] || { echo "could not read setup.py's flags" >&2; exit 1; }

. tests/parallel_compile.sh
compile() { # tag flags files...
    local tag=$1 flags=$2
    shift 2
    # shellcheck disable=SC2086
    for f in "$@"; do run_bg $CC $COMMON $flags $EXTRA_CFLAGS -fPIC -c "$f" -o "$OUT/obj/${tag}_$(basename "${f%.c}").o"; done
}

compile ref "" csrc/kernels_ref.c csrc/kernels_wtypes.c csrc/fp16.c csrc/dispatch.c
compile engine "" csrc/layer.c csrc/linear.c csrc/pipeline.c csrc/moe.c csrc/model.c csrc/taps.c csrc/kvcache.c csrc/attention.c csrc/threads.c
for d in "${!DIR_FLAGS[@]}"; do
    compile "${d#kernels_}" "${DIR_FLAGS[$d]}" "$d"/*.c
done
wait_all

# Objects, not an archive: dispatch.c's weak table getters would keep the linker from
# pulling the ISA tables out of a .a.
$CC $CFLAGS tests/test_kernels.c "$OUT"/obj/*.o -fopenmp -lsleef -lm -o "$OUT/test_kernels"
$CC $CFLAGS -Icsrc tests/test_model.c "$OUT"/obj/*.o -fopenmp -lsleef -lm -o "$OUT/test_model"
[ $RUN = 1 ] || exit 0

"$OUT/test_kernels" "${ISAS[@]}"
"$OUT/test_model"
if [ $VALGRIND = 1 ]; then
    vg_isas=()
    for i in "${ISAS[@]:-scalar avx2}"; do
        for j in $i; do [ "$j" = avx512 ] || vg_isas+=("$j"); done
    done
    echo "valgrind: ${vg_isas[*]}"
    valgrind -q --error-exitcode=1 "$OUT/test_kernels" "${vg_isas[@]}"
fi
