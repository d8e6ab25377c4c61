#!/usr/bin/env bash
# Run every fuzz target (or those named) for a number of executions and a time bound, with ASan (cargo
# fuzz's default), and print one summary line per target. Installs what it needs (the pinned nightly,
# cargo-fuzz) when missing.
#
#   fuzz/run.sh                        # every target, 20,000 runs or 300 s each
#   RUNS=200000 SECS=1800 fuzz/run.sh npz
#
# Seeds come from fuzz/seeds.py into fuzz/corpus/<target>/ (kept between runs, not committed); a crash is
# written to fuzz/artifacts/<target>/ and makes this script fail.
set -euo pipefail
cd "$(dirname "$0")"

TOOLCHAIN=${RECALL_FUZZ_TOOLCHAIN:-nightly-2026-05-20}
RUNS=${RUNS:-20000}
SECS=${SECS:-300}
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(npy fvecs npz csr candidates)
fi

rustup toolchain list | grep -q "^$TOOLCHAIN" || rustup toolchain install "$TOOLCHAIN" --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

python3 seeds.py "${TARGETS[@]}"
mkdir -p logs
status=0
for t in "${TARGETS[@]}"; do
    log="logs/$t.log"
    # -malloc_limit_mb: any single allocation above 64 MiB is a finding (inputs are at most a few KiB);
    # -timeout: an input that takes more than 10 s is a hang.
    if cargo "+$TOOLCHAIN" fuzz run "$t" -- -runs="$RUNS" -max_total_time="$SECS" -timeout=10 \
        -malloc_limit_mb=64 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        verdict=ok
    else
        verdict=FAILED
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    secs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(ls "corpus/$t" | wc -l)
    echo "$t: $verdict, ${execs:-?} executions, ${secs:-?} exec/s, coverage ${cov:-?}, corpus $corpus files (log: fuzz/$log)"
done
exit $status
