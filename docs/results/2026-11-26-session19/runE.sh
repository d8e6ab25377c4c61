#!/bin/bash
# Session 19, run E (one command): racecheck over `bench knn` with 256 queries x 4,096 rows, k = 32 (2 query tiles,
# 16 splits < k: sm90a_knnm_* runs), binary n (7945dc7).
export PATH=$PATH:/usr/local/cuda/bin; B=$(mktemp -d); xz -dc .device-carry/gz/recall-n.xz > $B/r; chmod +x $B/r; mkdir -p $OUT/s19E; cd $OUT/s19E; s=$(date +%s); timeout 280 compute-sanitizer --tool racecheck $B/r bench knn --queries 256 --rows 4096 --dim 768 --k 32 --iters 1 --no-cpu --peer-script /none > racecheck-knnm.txt 2>&1; echo "rc=$? secs=$(( $(date +%s)-s ))" >> racecheck-knnm.txt; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard|sm90a_knn|rc=" racecheck-knnm.txt | cut -c1-200 | tail -8
