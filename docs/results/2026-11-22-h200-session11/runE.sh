#!/bin/bash
# Session 11, run E (1 x H200): where sm90a_knn_bf16_cosine's time goes at 128 queries (binary as run D):
# ncu warp-stall sampling per SASS instruction, over 1M rows (29.6 row tiles a block) and 33,792 rows (one).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-e.gz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s11E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11E.tgz s11E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for rows in 1000000 33792; do
  t timeout 200 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:sm90a_knn_bf16_cosine --launch-skip 1 --launch-count 1 -o $W/q128-r$rows $R bench knn --queries 128 --rows $rows --dim 768 --k 10 --iters 2 --no-cpu --peer-script /none > $W/ncu-r$rows.log 2>&1
  t timeout 100 ncu --import $W/q128-r$rows.ncu-rep --page source --csv --print-source sass > $W/sass-r$rows.csv 2>&1
  ls -la $W/sass-r$rows.csv; head -c 600 $W/sass-r$rows.csv; echo
done
true
