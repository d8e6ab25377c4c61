#!/bin/bash
# Session 9, run K (1 x H200): the review's one-answer-buffer scratch (host-only): diff-test both readbacks,
# memcheck over knn1 + scan1, one latency sample.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-k.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9K; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 60 env RECALL_ONE_QUERY_READBACK=copy $R diff-test --arch sm_90 --quick --group knn1 --group scan1 > $W/difftest-knn1-scan1-copy.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-knn1-scan1-copy.txt | tail -n 1
t timeout 90 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 --group scan1 > $W/memcheck-knn1-scan1.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-knn1-scan1.txt
timeout 60 $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script none --out $W/knn-n1000.md > /dev/null 2>&1; grep -h "Engine::knn_in" $W/knn-n1000.md | cut -c1-130
true
