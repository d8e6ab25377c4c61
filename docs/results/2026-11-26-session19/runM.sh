#!/bin/bash
# Session 19, run M: t (5e61327, what lands): whole quick diff-test on sm_90; the full noise and kmeans groups; every
# arch's code (PTX JIT) on the quick suite.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-t.xz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s19M; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19M.tgz s19M' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1; head -3 $W/info.txt
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-sm90-quick.txt 2>&1; echo "sm_90 quick: $(grep -h 'PASS\|FAIL' $W/diff-sm90-quick.txt | tail -1)"
t timeout 150 $R diff-test --arch sm_90 --group noise --group kmeans --group fused-fast > $W/diff-sm90-full-groups.txt 2>&1; echo "sm_90 full noise/kmeans/fused-fast: $(grep -h 'PASS\|FAIL' $W/diff-sm90-full-groups.txt | tail -1)"
left 200 && { t timeout 330 $R diff-test --arch all --quick > $W/diff-all-quick.txt 2>&1; echo "all arches quick: $(grep -h 'PASS\|FAIL' $W/diff-all-quick.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
