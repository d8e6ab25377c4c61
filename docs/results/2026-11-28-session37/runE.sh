#!/bin/bash
# Session 37, run E (one GPU host). n5 = s37's last code (commit in console.txt; run D's n4 plus the staging ring's
# one range check): the memory-pool and facade GPU tests and the quick diff-test.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s37E}
B=$(mktemp -d); for v in recall-n5 gpu-test-n5 pool-gpu-n5; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$OUT/$N; mkdir -p $W; D=$(mktemp -d)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; cat .device-carry/commit.txt; } > $W/console.txt 2>&1; cat $W/console.txt
T0=$(date +%s); timeout 100 $B/pool-gpu-n5 --test-threads 1 > $D/pool-gpu.txt 2>&1; echo "memory-pool gpu tests (n5): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/pool-gpu.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/pool-gpu.txt | head -5 | tee -a $W/console.txt
T0=$(date +%s); timeout 200 $B/gpu-test-n5 --test-threads 1 > $D/gpu-test.txt 2>&1; echo "facade gpu tests (n5): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $D/gpu-test.txt)" | tee -a $W/console.txt; grep -E "panicked|FAILED" $D/gpu-test.txt | head -8 | tee -a $W/console.txt
T0=$(date +%s); timeout 60 $B/recall-n5 diff-test --arch sm_90 --quick > $W/difftest-n5.txt 2>&1; echo "quick diff-test (n5): rc=$? $(grep -h 'PASS\|FAIL' $W/difftest-n5.txt | tail -1) $(( $(date +%s) - T0 ))s" | tee -a $W/console.txt
{ for f in $D/pool-gpu.txt $D/gpu-test.txt; do echo "== $(basename $f)"; grep -E "^test |test result" $f; done; } > $W/tests.txt 2>&1
true
