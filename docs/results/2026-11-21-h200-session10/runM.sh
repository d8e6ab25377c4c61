#!/bin/bash
# Session 10, run M (1 x H200): the quick test alone before the per-pair offers (both fused kernels): whole quick diff-test,
# memcheck and racecheck over the fused kernels, the 1,024 x 1M fast bench beside torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-m.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10M; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10M.tgz s10M' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/memcheck-fast.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-fast.txt
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --iters 1 --no-cpu --peer-script none > $W/racecheck-fastknn.txt 2>&1; grep -h "RACECHECK SUMMARY" $W/racecheck-fastknn.txt
t timeout 120 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; grep -h "kernel level: .sm90a\|fp16 matmul\|normalize(q16)\|Engine::knn_in., fast" $W/knn-1024.md | cut -c1-160
t timeout 60 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-tc.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-tc.txt | tail -n 1
t timeout 80 env RECALL_WGMMA=off $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script none --out $W/knn-1024-tc.md > $W/knn-1024-tc.log 2>&1; grep -h "kernel level: .tc_knn" $W/knn-1024-tc.md | cut -c1-160
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 30 --mode fast-bf16 --mix 100,0,0,0"
t timeout 100 $R load $L --tenants 8 --threads-per-tenant 64 --max-batch 1024 --out $W/single-8x64.md > $W/single-8x64.log 2>&1; grep -h "calls/s\|PASS\|FAIL\|knn_single" $W/single-8x64.md | head -4
true
