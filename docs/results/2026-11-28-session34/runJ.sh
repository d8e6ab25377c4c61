#!/bin/bash
# Session 34, run J (one GPU host): ff500d8 (calibration and the sweep measure each distinct probe call once).
# `recall bench break-even --ops kmeans,knn_resident,clip_and_noise` with a fresh cache, and `recall demo`.
N=${RUN:-s34J}
B=$(mktemp -d); xz -dc .device-carry/recall-j.xz > $B/recall-j; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
export RECALL_CACHE_DIR=$(mktemp -d)
T0=$(date +%s); timeout 200 $B/recall-j bench break-even --ops kmeans,knn_resident,clip_and_noise --out $W/break-even-j.md > $W/break-even-j.txt 2>&1; echo "break-even: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^\| (kmeans|knn_resident|clip_and_noise) " $W/break-even-j.md
timeout 60 $B/recall-j demo > $W/demo-j.txt 2>&1; echo "demo: rc=$?"; grep -E "^\| (knn|spread|re-score|k-means)" $W/demo-j.txt
true
