#!/bin/bash
# Session 21, run L: where one query over 1,000 / 10,000 rows x 768 spends its kernel time (h = cf57d67): bench knn
# end to end, then ncu of sm90a_knn1* with source counters (SASS samples exported as CSV) at both sizes.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-h.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s21L; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21L.tgz s21L' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for rows in 1000 10000; do
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $W/q1-r$rows.md > $W/q1-r$rows.log 2>&1
  echo "q1 x $rows: $(grep -h 'Engine::knn_in\|knn1: query in\|host spins' $W/q1-r$rows.md | cut -d'|' -f2-3 | cut -c1-120 | tr '\n' ';')"
  timeout 100 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r$rows $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-r$rows.log 2>&1
  timeout 60 ncu --import $W/knn1-r$rows.ncu-rep --page source --csv --print-source sass > $W/sass-r$rows.csv 2>&1
  timeout 60 ncu --import $W/knn1-r$rows.ncu-rep --print-details all > $W/details-r$rows.txt 2>&1
  echo "ncu $rows: $(grep -h -E '^  [a-z0-9_]+.*Context|^\s+Duration|Grid Size|Block Size|Registers Per|Warp Cycles Per Issued' $W/details-r$rows.txt | tr -s ' ' | head -6 | tr '\n' ';')"
done
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
true
