#!/bin/bash
# Session 19, run D: sanitizers over n (= main 7945dc7's code): racecheck, synccheck and initcheck over the fused-fast
# group (sm90a_knnm_* included: k = 20 and 32 with fewer splits), memcheck over the knn1 group (chain_pieces).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in n; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-n
W=$(mktemp -d)/s19D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s19D.tgz s19D' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1.txt 2>&1; echo "memcheck knn1: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1.txt | tail -1) $(grep -c PASS $W/memcheck-knn1.txt) pass"
t timeout 150 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/racecheck-ff.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $W/racecheck-ff.txt | tail -1) $(grep -c PASS $W/racecheck-ff.txt) pass"
left 300 && { t timeout 120 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/synccheck-ff.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-ff.txt | tail -1) $(grep -c PASS $W/synccheck-ff.txt) pass"; }
left 420 && { t timeout 120 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/initcheck-ff.txt 2>&1; echo "initcheck: $(grep -E 'ERROR SUMMARY' $W/initcheck-ff.txt | tail -1) $(grep -c PASS $W/initcheck-ff.txt) pass"; }
echo "total $(( $(date +%s) - S0 )) s"
true
