#!/bin/bash
# Session 16, run B (1 x H200): binary f. Where sm90a_knn1's (1,000 rows) and sm80_knn1's (10,000 rows) time goes
# with the query in the parameters: ncu warp-stall sampling per SASS instruction (warm caches, clocks free).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in f; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-f
W=$(mktemp -d)/s16B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16B.tgz s16B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for rows in 1000 10000; do
  t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r$rows $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-r$rows.log 2>&1
  t timeout 100 ncu --import $W/knn1-r$rows.ncu-rep --page source --csv --print-source sass > $W/sass-r$rows.csv 2>&1
  t timeout 60 ncu --import $W/knn1-r$rows.ncu-rep --print-details all > $W/details-r$rows.txt 2>&1
  grep -E "^\s+Duration|knn1_" $W/details-r$rows.txt | head -3
done
# A kernel timeline: nsys over 200 calls at 1,000 rows (kernel durations and gaps).
t timeout 120 nsys profile -o $W/nsys-r1000 --stats=false $R bench knn --dim 768 --queries 1 --iters 200 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/nsys.log 2>&1
t timeout 100 nsys stats --report cuda_gpu_kern_sum --format csv $W/nsys-r1000.nsys-rep > $W/nsys-kern.csv 2>&1
head -20 $W/nsys-kern.csv | cut -c1-200
rm -f $W/*.nsys-rep $W/*.sqlite
gzip $W/sass-*.csv
true
