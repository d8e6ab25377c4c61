#!/bin/bash
# Session 8, run E (1 x H200, lead a6af7a6): racecheck over the knn1 and fast-mode benches alone (run D's 120 s ran
# them beside five other racecheck processes), then the diff-test groups knn1 and cand, each alone, with the time left.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
T0=$(date +%s)
W=$(mktemp -d)/s8E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s8E.tgz s8E; cat $W/summary.txt > $OUT/summary.txt 2>/dev/null' EXIT
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
RC="compute-sanitizer --tool racecheck --racecheck-report all"
t timeout 100 $RC $R bench knn --rows 10000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-knn1.txt 2>&1
t timeout 100 $RC $R bench knn --queries 128 --rows 4096 --dim 128 --iters 1 --no-cpu --peer-script none > $W/racecheck-bench-fastknn.txt 2>&1
LEFT=$(( 570 - ($(date +%s) - T0) ))
t timeout $LEFT $RC $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-group-knn1.txt 2>&1 &
t timeout $LEFT $RC $R diff-test --arch sm_90 --quick --group cand > $W/racecheck-group-cand.txt 2>&1 &
wait
for f in $W/racecheck-*.txt; do
  echo "$(basename $f): $(grep -h '^rc=' $f | tail -n 1) | $(grep -h 'RACECHECK SUMMARY' $f) | $(grep -c 'PASS: bit-identical' $f) diff-test pass"
done > $W/summary.txt
cat $W/summary.txt
