#!/bin/bash
# Session 8, run C (1 x H200): racecheck over the whole quick diff-test, one process per group, all at once
# (lead a6af7a6); memcheck over the whole quick diff-test again (host code changed since session 7's run B).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s8C; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; compute-sanitizer --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck-difftest.txt 2>&1; tail -n 2 $W/memcheck-difftest.txt
for g in kernels fast fused-fast knn1 scan1 cand backend pool noise graph graph-handle graph-frontier kmeans; do
  ( t timeout 500 compute-sanitizer --tool racecheck --racecheck-report all $R diff-test --arch sm_90 --quick --group $g > $W/racecheck-$g.txt 2>&1 ) > $W/racecheck-$g.rc &
done
wait
for g in kernels fast fused-fast knn1 scan1 cand backend pool noise graph graph-handle graph-frontier kmeans; do
  echo "$g: $(cat $W/racecheck-$g.rc) | $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $W/racecheck-$g.txt) | $(grep -c 'PASS: bit-identical' $W/racecheck-$g.txt) pass"
done | tee $W/racecheck-summary.txt
true
