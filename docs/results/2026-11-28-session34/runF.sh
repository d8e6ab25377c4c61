#!/bin/bash
# Session 34, run F (one GPU host): does a batch knn over a corpus slice reach the GPU? `recall bench break-even
# --ops knn` at affd5b3 (the slice knn's calibration probes 8 queries a call; a fresh cache).
N=${RUN:-s34F}
B=$(mktemp -d); xz -dc .device-carry/recall-k.xz > $B/recall-k; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
export RECALL_CACHE_DIR=$(mktemp -d)
T0=$(date +%s); timeout 280 $B/recall-k bench break-even --ops knn --out $W/break-even-knn.md > $W/break-even-knn.txt 2>&1; echo "break-even knn: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| knn" $W/break-even-knn.md; grep -E "^\| [0-9,]+ \|" $W/break-even-knn.md | tail -6
true
