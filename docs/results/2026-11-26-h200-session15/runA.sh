#!/bin/bash
# Session 15, run A (1 x H200): main 035f24f (binary a). Where sm90a_knn1's time goes at 1,000 rows (warm caches,
# clocks free): ncu warp-stall sampling per SASS instruction; the latency table at 100 / 1,000 / 10,000 rows.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-a; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-a
W=$(mktemp -d)/s15A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s15A.tgz s15A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in ${QROWS:-100 1000 10000}; do
  P=/none; [ $rows = 1000 ] && P=benches/peers/peers.py
  t timeout 90 $R $Q --rows $rows --k 10 --peer-script $P --out $W/q1-r$rows.md > $W/q1-r$rows.log 2>&1
  echo "== rows=$rows"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows.md | cut -c1-110 | head -1
done
grep -h "tiny kernel\|knn1: query in" $W/q1-r1000.md
for rows in 1000 10000; do
  t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r$rows $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-r$rows.log 2>&1
  t timeout 100 ncu --import $W/knn1-r$rows.ncu-rep --page source --csv --print-source sass > $W/sass-r$rows.csv 2>&1
  t timeout 60 ncu --import $W/knn1-r$rows.ncu-rep --print-details all > $W/details-r$rows.txt 2>&1
  grep -E "^\s+Duration|knn1_" $W/details-r$rows.txt | head -3
done
gzip $W/sass-*.csv
true
