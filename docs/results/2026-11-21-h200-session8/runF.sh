#!/bin/bash
# Session 8, run F (1 x H200, lead a6af7a6): racecheck over the diff-test groups fused-fast and scan1, each alone, both at once.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
T0=$(date +%s)
W=$(mktemp -d)/s8F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s8F.tgz s8F; cat $W/summary.txt > $OUT/summary.txt 2>/dev/null' EXIT
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
RC="compute-sanitizer --tool racecheck --racecheck-report all"
LEFT=$(( 575 - ($(date +%s) - T0) ))
t timeout $LEFT $RC $R diff-test --arch sm_90 --quick --group fused-fast > $W/racecheck-group-fused-fast.txt 2>&1 &
t timeout $LEFT $RC $R diff-test --arch sm_90 --quick --group scan1 > $W/racecheck-group-scan1.txt 2>&1 &
wait
for f in $W/racecheck-*.txt; do
  echo "$(basename $f): $(grep -h '^rc=' $f | tail -n 1) | $(grep -h 'RACECHECK SUMMARY' $f) | $(grep -c 'PASS: bit-identical' $f) diff-test pass"
done > $W/summary.txt
cat $W/summary.txt
