#!/bin/bash
# Session 22, run M: main at the end of the session (m) on an H200: the whole quick diff-test on sm_90 and the
# knn1 and graph groups over every arch (JIT-compiled PTX for the older ones).
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22M}
B=$(mktemp -d); xz -dc .device-carry/gz/recall-m.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "whole quick sm_90: $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 150 $R diff-test --arch all --quick --group knn1 --group graph > $W/diff-all-knn1-graph.txt 2>&1; echo "all arches knn1+graph quick: $(grep -h 'PASS\|FAIL' $W/diff-all-knn1-graph.txt | tail -1) $(( $(date +%s) - S0 ))s"
true
