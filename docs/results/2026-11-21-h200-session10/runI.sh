#!/bin/bash
# Session 10, run I (1 x H200): the final binary (b7174f1): whole quick diff-test, the fast groups on the sm_80
# PTX (tc_* through the JIT), synccheck over the fused kernels, the 1,024 x 1M fast bench beside torch, and
# the single-query load (issue 7) in fast bf16 with coalescing.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-h.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10I.tgz s10I' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 60 $R diff-test --arch sm_80 --quick --group fast --group fused-fast > $W/difftest-sm80-fast.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm80-fast.txt | tail -n 1
t timeout 90 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/synccheck-fused.txt 2>&1; grep -h "ERROR SUMMARY" $W/synccheck-fused.txt
t timeout 120 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; grep -h "kernel level: .sm90a_knn\|fp16 matmul" $W/knn-1024.md | cut -c1-160
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 30 --mode fast-bf16 --mix 100,0,0,0"
t timeout 100 $R load $L --tenants 8 --threads-per-tenant 32 --max-batch 512 --out $W/single-8x32.md > $W/single-8x32.log 2>&1; grep -h "calls/s\|PASS\|FAIL" $W/single-8x32.md | head -3
t timeout 100 $R load $L --tenants 8 --threads-per-tenant 128 --max-batch 1024 --out $W/single-8x128.md > $W/single-8x128.log 2>&1; grep -h "calls/s\|PASS\|FAIL\|knn_single" $W/single-8x128.md | head -4
true
