#!/bin/bash
# Session 9, run G (1 x H200): one-query answers through mapped pinned memory (the kernel writes the k pairs
# into host memory; no device-to-host copy call) against the copy path (RECALL_ONE_QUERY_READBACK=copy), same
# binary, alternated: diff-test both ways, memcheck over the knn1 and scan1 groups, single-query latency at
# 1K / 10K / 1M rows next to torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-g.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick-mapped.txt 2>&1; tail -n 1 $W/difftest-sm90-quick-mapped.txt
t timeout 60 env RECALL_ONE_QUERY_READBACK=copy $R diff-test --arch sm_90 --quick --group knn1 --group scan1 > $W/difftest-knn1-scan1-copy.txt 2>&1; tail -n 1 $W/difftest-knn1-scan1-copy.txt
t timeout 60 $R diff-test --arch sm_80 --quick --group knn1 --group scan1 > $W/difftest-sm80-knn1-scan1-mapped.txt 2>&1; tail -n 1 $W/difftest-sm80-knn1-scan1-mapped.txt
t timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 --group scan1 > $W/memcheck-knn1-scan1-mapped.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-knn1-scan1-mapped.txt
for round in 1 2; do
  for mode in mapped copy; do
    for n in 1000 10000; do
      t timeout 60 env RECALL_ONE_QUERY_READBACK=$mode $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n-$mode-$round.md > $W/knn-n$n-$mode-$round.log 2>&1
      grep -h "Engine::knn_in\|knn1: query in" $W/knn-n$n-$mode-$round.md | sed "s/^/n$n $mode $round: /" | cut -c1-160
    done
  done
done
for mode in mapped copy; do
  t timeout 90 env RECALL_ONE_QUERY_READBACK=$mode $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-n1M-$mode.md > $W/knn-n1M-$mode.log 2>&1
  grep -h "Engine::knn_in" $W/knn-n1M-$mode.md | sed "s/^/n1M $mode: /" | cut -c1-160
done
cd $W && tar -czf $OUT/s9G.tgz . && cd / && rm -rf $W
true
