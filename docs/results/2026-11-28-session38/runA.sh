#!/bin/bash
# Session 38, run A (one GPU host): the session's last code (commit in console.txt) on the GPU: the quick diff-test,
# the facade and memory-pool GPU tests, the quick diff-test of every arch and `recall demo` with a fresh calibration
# cache (time allowing).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s38A}
B=$(mktemp -d); for v in recall gpu-test pool-gpu; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $(( 240 - $1 )) ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 30 $B/recall diff-test --arch sm_90 --quick > $W/difftest.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/difftest.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $D/gpu-test.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test.txt | head -8 | tee -a $W/console.txt
T0=$(date +%s); timeout 40 $B/pool-gpu --test-threads 1 > $D/pool-gpu.txt 2>&1; echo "memory-pool gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/pool-gpu.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/pool-gpu.txt | head -5 | tee -a $W/console.txt
left 35 && { T0=$(date +%s); timeout 35 $B/recall diff-test --arch all --quick > $W/difftest-all.txt 2>&1; echo "quick diff-test, every arch: rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-all.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; }
left 15 && { T0=$(date +%s); RECALL_CACHE_DIR=$(mktemp -d) timeout 15 $B/recall demo > $W/demo.txt 2>&1; echo "demo: rc=$? $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "^\| (knn|spread|re-score|k-means|clip|scores)" $W/demo.txt | tee -a $W/console.txt; }
{ for f in $D/gpu-test.txt $D/pool-gpu.txt; do echo "== $(basename $f)"; grep -E "^test |test result" $f; done; } > $W/tests.txt 2>&1
echo "total $(( $(date +%s) - S0 )) s" | tee -a $W/console.txt
true
