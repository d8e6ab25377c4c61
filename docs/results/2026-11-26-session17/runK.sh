#!/bin/bash
# Session 17, run K: m (the review's launcher clean-up: parameters built once) — correctness and a short timing.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-m.xz > $B/recall-m; chmod +x $B/recall-m; R=$B/recall-m
W=$(mktemp -d)/s17K; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17K.tgz s17K' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
for q in params memory; do for m in host device; do RECALL_KNN1_MERGE=$m RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$q-$m.txt 2>&1; echo "knn1 $q $m: $(tail -1 $W/diff-knn1-$q-$m.txt)"; done; done
timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all.txt 2>&1; echo "all: $(tail -1 $W/diff-all.txt)"
for rows in 1000 10000; do timeout 90 $R bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none --rows $rows --k 10 --out $W/q1-r$rows.md > /dev/null 2>&1; echo "rows=$rows: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows.md | cut -d'|' -f3)"; done
true
