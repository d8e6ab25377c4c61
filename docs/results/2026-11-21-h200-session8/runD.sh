#!/bin/bash
# Session 8, run D (1 x H200, lead a6af7a6): racecheck over the four diff-test groups run C's 500 s did not finish
# (fused-fast, knn1, scan1, cand), each alone in its own process, all at once with 540 s; beside them racecheck over
# small benches of the same kernels (knn1, scan1, cand, fused fast mode), as in sessions 4 and 6.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)/s8D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s8D.tgz s8D; cat $W/summary.txt > $OUT/summary.txt 2>/dev/null' EXIT
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
RC="compute-sanitizer --tool racecheck --racecheck-report all"
for g in fused-fast knn1 scan1 cand; do
  t timeout 540 $RC $R diff-test --arch sm_90 --quick --group $g > $W/racecheck-group-$g.txt 2>&1 &
done
(
  t timeout 120 $RC $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-knn1.txt 2>&1
  t timeout 150 $RC $R bench knn --rows 300000 --dim 128 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-scan1.txt 2>&1
  t timeout 120 $RC $R bench candidates --rows 100000 --dim 128 --batch-queries 8 --candidates 1000 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-cand8.txt 2>&1
  t timeout 120 $RC $R bench knn --queries 256 --rows 20000 --iters 1 --no-cpu --peer-script none > $W/racecheck-bench-fastknn.txt 2>&1
) &
wait
for f in $W/racecheck-*.txt; do
  echo "$(basename $f): $(grep -h '^rc=' $f | tail -n 1) | $(grep -h 'RACECHECK SUMMARY' $f) | $(grep -c 'PASS: bit-identical' $f) diff-test pass"
done > $W/summary.txt
cat $W/summary.txt
