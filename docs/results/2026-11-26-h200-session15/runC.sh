#!/bin/bash
# Session 15, run C (1 x H200): binary c (sm90a_knn1: cp.async copies of whole rows, one group per chunk; pipelined
# chains; warp sort) against a (main 035f24f), alternated; correctness; ncu SASS profile of c at 1,000 rows.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-a recall-c; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done
W=$(mktemp -d)/s15C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s15C.tgz s15C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
R=$B/recall-c
t timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-c.txt 2>&1; tail -2 $W/diff-knn1-c.txt
RECALL_KNN1_BULK=off t timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-c-bulkoff.txt 2>&1; tail -1 $W/diff-knn1-c-bulkoff.txt
t timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 768 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-c.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-c.txt | tail -1
t timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-c.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $W/racecheck-c.txt | tail -1
t timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-c.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-c.txt | tail -1
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none"
for rows in 1000 100 4096; do for rep in 1 2; do for v in a c; do
  timeout 60 $B/recall-$v $Q --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rep in 1 2; do
  RECALL_ONE_QUERY_INPUT_MAX_BYTES=0 timeout 60 $R $Q --rows 1000 --k 10 --out $W/q1-r1000-c-copyq-$rep.md > $W/q1-r1000-c-copyq-$rep.log 2>&1
  echo "rows=1000 c copyq $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r1000-c-copyq-$rep.md | cut -d'|' -f3)"
done
grep -h "tiny kernel\|knn1: query in" $W/q1-r1000-c-1.md
for v in c; do for cq in 131072 0; do
  RECALL_ONE_QUERY_INPUT_MAX_BYTES=$cq t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000-$v-m$cq $B/recall-$v bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000-$v-m$cq.log 2>&1
  timeout 100 ncu --import $W/knn1-r1000-$v-m$cq.ncu-rep --page source --csv --print-source sass > $W/sass-r1000-$v-m$cq.csv 2>&1
  timeout 60 ncu --import $W/knn1-r1000-$v-m$cq.ncu-rep --print-details all > $W/details-r1000-$v-m$cq.txt 2>&1
  echo "ncu $v m$cq: $(grep -E '^\s+Duration' $W/details-r1000-$v-m$cq.txt | head -1)"
done; done
gzip $W/sass-*.csv
true
