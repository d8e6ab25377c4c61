#!/bin/bash
# Session 26, run C (H200): d = c with thread 0's number and k shuffled to its warp (reconverged) and stored by all
# 32 lanes of warp 0 (run B's 9 reports: thread 0's store of k after its lone poll, read across the barrier).
# racecheck over d's quick knn1 group; if it reports, e (d + a second barrier between the store and the read) to
# see whether the tool reports across two barriers; if not, d a second time. d's knn1 group in full first.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26C}
B=$(mktemp -d); for v in s26d s26e; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 20 $B/recall-s26d diff-test --arch sm_90 --group knn1 > $W/diff-knn1-d.txt 2>&1; echo "d knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-d.txt | tail -1) $(( $(date +%s) - T0 ))s"
rc() { T0=$(date +%s); timeout $2 compute-sanitizer --tool racecheck $B/recall-$1 diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-$1-$3.txt 2>&1; echo "racecheck knn1 $1 ($3): rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-$1-$3.txt | tail -2 | tr '\n' ' ')"; grep -A1 "^========= Error" $W/racecheck-knn1-$1-$3.txt | head -6; }
rc s26d 280 1
if grep -q "^========= Error" $W/racecheck-knn1-s26d-1.txt; then rc s26e $(( 590 - ($(date +%s) - S0) )) 1; else rc s26d $(( 590 - ($(date +%s) - S0) )) 2; fi
echo "total $(( $(date +%s) - S0 )) s"
true
