#!/bin/bash
# Session 10, run B (1 x H200): sm90a_* with warp-uniform descriptors: SASS of the main loop, the fast bench,
# ncu with warp states.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-b.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)/s10B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10B.tgz s10B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; which cuobjdump nvdisasm; } > $W/info.txt 2>&1
cuobjdump -sass .device-carry/gz/sm_90a-b.cubin > $W/sass.txt 2>&1; echo "sass rc=$? lines=$(wc -l < $W/sass.txt)"
awk '/Function : sm90a_gemm_f16_cosine/,/Function : sm90a_gemm_f16_dot/' $W/sass.txt > $W/sass-gemm-f16-cosine.txt
grep -c "HGMMA" $W/sass-gemm-f16-cosine.txt; grep -c "R2UR" $W/sass-gemm-f16-cosine.txt; grep -n "HGMMA\|R2UR\|WARPSYNC\|BAR.SYNC\|DEPBAR\|LDGDEPBAR\|BRA" $W/sass-gemm-f16-cosine.txt | head -60
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 100 $R bench knn --queries 1024 --rows 1000000 --dim 768 --k 10 --iters 5 --no-cpu --peer-script none --out $W/knn-1024-wgmma.md > $W/knn-1024-wgmma.log 2>&1; grep -h "kernel level" $W/knn-1024-wgmma.md | cut -c1-200
t timeout 90 ncu --kernel-name regex:sm90a_knn_f16_cosine --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-sm90a-knn.txt 2>&1; grep -h "Duration\|Throughput\|Stall\|Issued\|Eligible" $W/ncu-sm90a-knn.txt | head -30
t timeout 90 ncu --kernel-name regex:sm90a_gemm_f16_cosine --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats $R bench knn --queries 1024 --iters 1 --no-cpu --peer-script none > $W/ncu-sm90a-gemm.txt 2>&1; grep -h "Duration\|Throughput" $W/ncu-sm90a-gemm.txt | head -10
true
