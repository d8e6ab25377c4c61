#!/bin/bash
# Session 34, run I (one GPU host): main's tip, c010f80 (after run D: k-means' 256-cluster probe, the reverted
# slice-batch dispatch, one scatter for the CPU's query-lane kernels). The facade's GPU tests, the quick diff-test,
# the kmeans and kernels groups in full, and `recall demo` twice with a fresh calibration cache.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s34I}
B=$(mktemp -d); for v in recall-i gpu-test-i; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test-i --test-threads 1 > $W/gpu-test-i.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-i.txt)"; grep -E "panicked|skip" $W/gpu-test-i.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-i diff-test --arch sm_90 --quick > $W/diff-quick-i.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-i.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 120 $B/recall-i diff-test --arch sm_90 --group kmeans --group kernels > $W/diff-km-i.txt 2>&1; echo "kmeans + kernels in full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-km-i.txt | tail -1) $(( $(date +%s) - T0 ))s"
export RECALL_CACHE_DIR=$(mktemp -d)
for i in 1 2; do timeout 60 $B/recall-i demo > $W/demo-i-$i.txt 2>&1; echo "demo $i: rc=$?"; grep -E "^\| (knn|spread|re-score|k-means)" $W/demo-i-$i.txt; done
echo "total $(( $(date +%s) - S0 )) s"
true
