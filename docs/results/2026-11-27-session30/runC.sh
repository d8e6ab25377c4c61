#!/bin/bash
# Session 30, run C (H200): c4 = c2 (run B) with block 0 answering a query it found complete even in the round
# where its idle or life time passed (it ended first until now). c4's knn1 group in full; racecheck over c4's quick
# knn1 group; then racecheck over c2's again (run B's racecheck reported 3 server failures, no hazard).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s30C}
B=$(mktemp -d); for v in c2 c4; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 30 $B/recall-c4 diff-test --arch sm_90 --group knn1 > $W/diff-knn1-c4.txt 2>&1; echo "c4 knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-c4.txt | tail -1) $(( $(date +%s) - T0 ))s"
for v in c4 c2; do
  T0=$(date +%s); left 320 && { timeout $(( 595 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $B/recall-$v diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-$v.txt 2>&1; echo "racecheck knn1 $v: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|ERROR' $W/racecheck-knn1-$v.txt | tail -3 | tr '\n' ' ')"; }
done
echo "total $(( $(date +%s) - S0 )) s"
true
