#!/bin/bash
# Session 16, run C (1 x H200): binary g (query in the parameters, its loads all issued before the stores; the
# warp minima back on shuffles) against f (run A) and e (main), alternated, torch alongside; g also with
# RECALL_KNN1_QUERY=memory. knn1 diff-tests under each switch, whole quick diff-test, the three sanitizers, ncu at 1,000 rows.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e f g; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-g
W=$(mktemp -d)/s16C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16C.tgz s16C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-g.txt 2>&1; tail -1 $W/diff-all-g.txt
RECALL_KNN1_QUERY=memory timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-g-memory.txt 2>&1; tail -1 $W/diff-knn1-g-memory.txt
RECALL_KNN1_BULK=off timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-g-bulkoff.txt 2>&1; tail -1 $W/diff-knn1-g-bulkoff.txt
RECALL_ONE_QUERY_WAIT=sync timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-g-sync.txt 2>&1; tail -1 $W/diff-knn1-g-sync.txt
timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-g.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-g.txt | tail -1
RECALL_KNN1_BULK=off timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 10000 --dim 1000 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r10000-d1000-g.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r10000-d1000-g.txt | tail -1
timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 1536 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r4096-d1536-g.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r4096-d1536-g.txt | tail -1
for rows in 1000 10000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-g.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-g.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-g.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-g.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2; do for v in e f g gm; do
  P=/none; [ $rep = 1 ] && [ $v = g ] && P=benches/peers/peers.py
  bin=$B/recall-${v:0:1}; env=""; [ $v = gm ] && env="RECALL_KNN1_QUERY=memory"
  env $env timeout 90 $bin $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-g-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-g-1.md

t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000 $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000.log 2>&1
t timeout 100 ncu --import $W/knn1-r1000.ncu-rep --page source --csv --print-source sass > $W/sass-r1000.csv 2>&1
t timeout 60 ncu --import $W/knn1-r1000.ncu-rep --print-details all > $W/details-r1000.txt 2>&1
grep -E "^\s+Duration|knn1_" $W/details-r1000.txt | head -3
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv

true
