#!/bin/bash
# Session 26, run J (H200): the facade's clip_and_noise_into on the GPU (crates/recall/tests/gpu.rs, built from the
# tree committed as 551942d): bit-identical to the CPU, no fallback, every value written; with the other GPU tests of
# that file.
N=${RUN:-s26J}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-s26j.xz > $B/gpu-test; chmod +x $B/gpu-test
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 200 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|panicked|skipped" $W/gpu-test.txt | head
true
