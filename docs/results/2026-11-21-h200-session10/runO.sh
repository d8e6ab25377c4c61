#!/bin/bash
# Session 10, run O (1 x H200): the review commit (k-means' key reset through Kernels::fill_u64): whole quick diff-test.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-o.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s10O; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "kmeans\|PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 6
true
