#!/bin/bash
# Session 35, run H (one GPU host): h = s35 at 5a159f0 (run G's g with the staged paths' GPU tests sharing helpers).
# The facade's GPU tests, the quick diff-test and `recall demo` with a fresh calibration cache.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s35H}
B=$(mktemp -d); for v in recall-h gpu-test-h; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-h --test-threads 1 > $W/gpu-test-h.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-h.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-h.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-h diff-test --arch sm_90 --quick > /tmp/dq.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' /tmp/dq.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
RECALL_CACHE_DIR=$(mktemp -d) timeout 60 $B/recall-h demo > $W/demo-h.txt 2>&1; echo "demo: rc=$?" | tee -a $W/console.txt; grep -E "^\| (knn|spread|re-score|k-means)" $W/demo-h.txt | tee -a $W/console.txt
true
