# Sourced by the kernel test build scripts (set -e): each test run compiles the library again
# (plain, sanitized, cross), so compiles run one per core. run_bg CMD... starts CMD in the
# background once a core is free; wait_all waits for every command started and, under set -e,
# fails on the first that failed.
PAR_JOBS=$(nproc)
PAR_PIDS=()
run_bg() {
    while [ "$(jobs -rp | wc -l)" -ge "$PAR_JOBS" ]; do wait -n || true; done
    "$@" &
    PAR_PIDS+=($!)
}
wait_all() {
    local p
    for p in "${PAR_PIDS[@]}"; do wait "$p"; done
    PAR_PIDS=()
}
