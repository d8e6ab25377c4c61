#!/bin/bash
# Run S (1 x H200): spreading's tail overlapped (branch tail), break-even with one grid/statistic (branch be),
# diff-tests and memcheck. Binary: lead 90d027d.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runS.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 90 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1
A="--nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu"
t timeout 60 $R bench spread $A --peer-script $P --out $W/spread.md > $W/spread.log 2>&1
RECALL_SPREAD_HOST_THREADS=1 t timeout 60 $R bench spread $A --peer-script $P --out $W/spread-host1.md > $W/spread-host1.log 2>&1
t timeout 60 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-q1.md > $W/knn-q1.log 2>&1
t timeout 120 $R bench break-even --ops cosine_scores,similarity,knn,knn_resident,score_candidates --out $W/break-even-1.md > $W/break-even-1.log 2>&1
t timeout 200 $R bench break-even --ops spread,spread_resident,kmeans,clip_and_noise --out $W/break-even-2.md > $W/break-even-2.log 2>&1
t timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck.txt 2>&1
t timeout 120 $R diff-test --arch sm_90 > $W/difftest-sm90-full.txt 2>&1
