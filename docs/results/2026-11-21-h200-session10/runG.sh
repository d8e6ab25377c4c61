#!/bin/bash
# Session 10, run G (1 x H200): where the sm90a_knn step time goes: ncu stall reasons and tensor-pipe use for
# sm90a_knn_f16_cosine and sm90a_gemm_f16_cosine (same binary as run F).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-f.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)/s10G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10G.tgz s10G' EXIT
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|regex:sm__pipe_tensor.*active.*pct_of_peak_sustained_active|sm__throughput.avg.pct_of_peak_sustained_elapsed|gpu__time_duration.sum|smsp__inst_executed.sum'
for k in sm90a_knn_f16_cosine sm90a_gemm_f16_cosine; do
timeout 120 ncu --kernel-name regex:$k --launch-skip 2 --launch-count 1 --metrics "$M" $R bench knn --queries 1024 --rows 1000000 --iters 1 --no-cpu --peer-script none > $W/ncu-$k.txt 2>&1
grep -E "stalled|tensor|duration|inst_executed" $W/ncu-$k.txt | awk '$NF+0 > 0.05 || /duration|tensor|inst/' | sed 's/smsp__average_warps_issue_stalled_//' | head -30
done
timeout 120 ncu --kernel-name regex:sm90a_knn_f16_cosine --launch-skip 2 --launch-count 1 --section SourceCounters $R bench knn --queries 1024 --rows 1000000 --iters 1 --no-cpu --peer-script none > $W/ncu-knn-source.txt 2>&1; grep -A30 "Warp Stall Sampling" $W/ncu-knn-source.txt | head -40
true
