#!/bin/bash
# Session 24, run B (diagnostic, binary c = b60ef63): how the launched sm90a_knn1 kernel's instructions spread over
# an SM's four sub-partitions (ncu: smsp__inst_executed min / avg / max), one query x 1,000 and 10,000 rows x
# 768, blocks of 4 and of 2 warps. If every block's chain warp (warp 0) shares one sub-partition with its SM's
# other blocks' chain warps, max / avg approaches 4 at 10,000 rows (three blocks an SM).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s24B}
B=$(mktemp -d); xz -dc .device-carry/recall-c.xz > $B/c; chmod +x $B/c
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
M=smsp__inst_executed.sum,smsp__inst_executed.min,smsp__inst_executed.avg,smsp__inst_executed.max,smsp__warps_launched.sum,smsp__warps_launched.max,smsp__warps_launched.min,smsp__cycles_active.avg,smsp__cycles_active.max,sm__cycles_active.avg,gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
for rows in 1000 10000; do for w in 4 2; do left 400 || break
  f=$W/ncu-r$rows-w$w.txt
  timeout 120 env RECALL_KNN1_SERVE=off RECALL_KNN1_BULK_WARPS=$w ncu --metrics $M -k regex:sm90a_knn1q_ --launch-skip 20 --launch-count 1 $B/c bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 30 --no-cpu --peer-script /none --out $W/bench-r$rows-w$w.md > $f 2>&1
  echo "== rows $rows warps $w rc=$?"; grep -E "sm90a_knn1q|smsp__|sm__|gpu__|launch__" $f | sed 's/  */ /g' | head -16
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
