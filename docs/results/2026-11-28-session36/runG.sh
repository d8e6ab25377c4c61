#!/bin/bash
# Session 36, run G (one GPU host): g = s36 at the commit in console.txt (the review's fixes: the GEMM's body and tail
# from one reading of the kernel switch, more tail shapes, the memory-pool wait test on 256 MiB memsets). Its
# memory-pool GPU tests, the quick diff-test and the facade's GPU tests.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s36G}
B=$(mktemp -d); for v in recall-g gpu-test-g pool-gpu-g; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 60 $B/pool-gpu-g --test-threads 1 > $W/pool-gpu-g.txt 2>&1; echo "memory-pool gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/pool-gpu-g.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/pool-gpu-g.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-g diff-test --arch sm_90 --quick > $W/difftest-g.txt 2>&1; echo "quick diff-test: rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-g.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt; grep -E "\+ (scan|q32|q64)" $W/difftest-g.txt | tee -a $W/console.txt
T0=$(date +%s); timeout 130 $B/gpu-test-g --test-threads 1 > $W/gpu-test-g.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-g.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $W/gpu-test-g.txt | head -5
true
