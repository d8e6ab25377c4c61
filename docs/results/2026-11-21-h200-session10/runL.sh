#!/bin/bash
# Session 10, run L (1 x H200): fewer instructions per main-loop step in sm90a_*: whole quick diff-test,
# memcheck and racecheck over the fused kernels, the 1,024 x 1M fast bench beside torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-l.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10L; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10L.tgz s10L' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/memcheck-fast.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-fast.txt
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --iters 1 --no-cpu --peer-script none > $W/racecheck-fastknn.txt 2>&1; grep -h "RACECHECK SUMMARY" $W/racecheck-fastknn.txt
t timeout 120 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024.md > $W/knn-1024.log 2>&1; grep -h "kernel level: .sm90a\|fp16 matmul\|normalize(q16)\|Engine::knn_in., fast" $W/knn-1024.md | cut -c1-160
true
