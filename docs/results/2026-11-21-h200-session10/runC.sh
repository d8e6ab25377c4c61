#!/bin/bash
# Session 10, run C (1 x H200): the quick test before the exact filter (tc_knn and sm90a_knn): diff-test of
# both kernel families, the 1,024 x 1M fast bench beside torch, both families in the same run, ncu.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-c.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=$PWD/.device-carry/peers.py
W=$(mktemp -d)/s10C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10C.tgz s10C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-wgmma.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-wgmma.txt | tail -n 1
t timeout 60 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/difftest-fast-tc.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-fast-tc.txt | tail -n 1
t timeout 150 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script $P --out $W/knn-1024-wgmma.md > $W/knn-1024-wgmma.log 2>&1; grep -h "fast\|fp16" $W/knn-1024-wgmma.md | cut -c1-200
t timeout 80 env RECALL_WGMMA=off $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script none --out $W/knn-1024-tc.md > $W/knn-1024-tc.log 2>&1; grep -h "kernel level" $W/knn-1024-tc.md | cut -c1-200
t timeout 90 ncu --kernel-name regex:sm90a_knn_f16_cosine --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-sm90a-knn.txt 2>&1; grep -h "Duration\|Throughput\|Issued\|Eligible" $W/ncu-sm90a-knn.txt | head -30
true
