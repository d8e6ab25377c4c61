#!/bin/bash
# Session 10, run H (1 x H200): the shared per-query threshold in both fused kernels: diff-test of both kernel
# families, the 1,024 x 1M fast bench beside torch with both families, sanitizers over the fused kernels.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-h.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10H.tgz s10H' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-wgmma.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-wgmma.txt | tail -n 1
t timeout 60 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-tc.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-tc.txt | tail -n 1
t timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024-wgmma.md > $W/knn-1024-wgmma.log 2>&1; grep -h "fast\|fp16" $W/knn-1024-wgmma.md | cut -c1-200
t timeout 80 env RECALL_WGMMA=off $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script none --out $W/knn-1024-tc.md > $W/knn-1024-tc.log 2>&1; grep -h "kernel level: .tc_knn" $W/knn-1024-tc.md | cut -c1-200
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-fused.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-fused.txt
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --iters 1 --no-cpu --peer-script none > $W/racecheck-fastknn.txt 2>&1; grep -h "RACECHECK SUMMARY\|ERROR SUMMARY" $W/racecheck-fastknn.txt
true
