#!/bin/bash
# Session 36, run E (one GPU host): f = s36 at the commit in console.txt (the session's last code). The facade's GPU
# tests, the quick diff-test and `recall demo` with a fresh calibration cache.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36E}
B=$(mktemp -d); for v in recall-f gpu-test-f; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test-f --test-threads 1 > $W/gpu-test-f.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-f.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-f.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-f diff-test --arch sm_90 --quick > $W/difftest-f.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-f.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
RECALL_CACHE_DIR=$(mktemp -d) timeout 90 $B/recall-f demo > $W/demo-f.txt 2>&1; echo "demo: rc=$?" | tee -a $W/console.txt; grep -E "^\| (knn|spread|re-score|k-means|clip|scores)" $W/demo-f.txt | tee -a $W/console.txt
true
