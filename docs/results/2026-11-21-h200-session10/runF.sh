#!/bin/bash
# Session 10, run F (1 x H200): sm90a pipeline (5 stages of 32 columns, wgmma in flight across steps):
# diff-test, memcheck and racecheck, the 1,024 x 1M fast bench beside torch, ncu.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-f.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10F.tgz s10F' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-wgmma.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-wgmma.txt | tail -n 1
t timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024-wgmma.md > $W/knn-1024-wgmma.log 2>&1; grep -h "fast\|fp16" $W/knn-1024-wgmma.md | cut -c1-200
t timeout 90 ncu --kernel-name regex:sm90a_knn_f16_cosine --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-sm90a-knn.txt 2>&1; grep -h "Duration\|Throughput\|Issued Ins\|Eligible" $W/ncu-sm90a-knn.txt | head -12
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/memcheck-fast.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-fast.txt
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --queries 256 --rows 20000 --iters 1 --no-cpu --peer-script none > $W/racecheck-fastknn.txt 2>&1; grep -h "RACECHECK SUMMARY\|ERROR SUMMARY" $W/racecheck-fastknn.txt
true
