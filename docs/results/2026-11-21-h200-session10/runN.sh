#!/bin/bash
# Session 10, run N (1 x H200): experiment: sm90a steps of 64 columns (128-byte swizzle), 3 stages, copies one
# step ahead: fast diff-test groups, memcheck, the 1,024 x 1M fast bench beside torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-n.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10N.tgz s10N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast.txt | tail -n 1
t timeout 120 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; grep -h "kernel level: .sm90a\|fp16 matmul\|normalize(q16)\|Engine::knn_in., fast" $W/knn-1024.md | cut -c1-160
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck-fused.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-fused.txt
true
