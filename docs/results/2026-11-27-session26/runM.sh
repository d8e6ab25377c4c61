#!/bin/bash
# Session 26, run M (H200): the review commit 7a53f5e (clip-and-noise through one backend method and one executor
# op): the noise group in full (the GPU backend's clip_and_noise is now the trait's default over its _into) and the
# GPU tests of crates/recall/tests/gpu.rs.
N=${RUN:-s26M}
B=$(mktemp -d); for v in recall-s26m gpu-test-s26m; do xz -dc .device-carry/$v.xz > $B/$v; chmod +x $B/$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 60 $B/recall-s26m diff-test --arch sm_90 --group noise > $W/diff-noise-m.txt 2>&1; echo "noise full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-noise-m.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 120 $B/gpu-test-s26m --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result" $W/gpu-test.txt
true
