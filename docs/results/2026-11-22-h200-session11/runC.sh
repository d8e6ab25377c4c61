#!/bin/bash
# Session 11, run C (1 x H200): why a 128-query launch of sm90a_knn takes 2x per row tile what a 1,024-query
# one does. Kernel time against rows at 128 queries (1, 4, 16 and ~30 row tiles per block), then ncu of one
# sm90a_knn_bf16_cosine launch at 128 and at 1,024 queries over 1M rows. Binary: s11 branch (206ca0d).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-d.gz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s11C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11C.tgz s11C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for rows in 33792 135168 540672; do
  t timeout 100 $R bench knn --queries 128 --rows $rows --dim 768 --k 10 --iters 9 --no-cpu --peer-script /none --out $W/knn-q128-r$rows.md > $W/knn-q128-r$rows.log 2>&1
  echo "== rows=$rows"; grep -h "kernel level" $W/knn-q128-r$rows.md | grep bf16 | head -3
done
M='--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_lookup_hit.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum'
for q in 128 1024; do
  t timeout 200 ncu --clock-control none -k regex:sm90a_knn_bf16_cosine --launch-skip 1 --launch-count 1 $M $R bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 2 --no-cpu --peer-script /none > $W/ncu-q$q.txt 2>&1
  echo "== ncu q=$q"; grep -E "stalled|throughput|sectors|inst_executed|cycles_elapsed|issue_active|gmma|duration" $W/ncu-q$q.txt | sed 's/  */ /g' | sort -t' ' -k4 -g -r | head -40
done
true
