#!/bin/bash
# Session 9, run I (1 x H200): a single query travels in the knn1 launch's parameters (sm80_knn1q_*, branch
# inline) instead of a copy before the launch; same binary both ways (RECALL_ONE_QUERY_INLINE=off copies):
# diff-test, sanitizers, single-query latency at 1K / 10K rows next to torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-i.gz > $B/recall; chmod +x $B/recall
R=$B/recall
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'cd $W && tar -czf $OUT/s9I.tgz .' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 60 env RECALL_ONE_QUERY_INLINE=off $R diff-test --arch sm_90 --quick --group knn1 > $W/difftest-knn1-copied.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-knn1-copied.txt | tail -n 1
t timeout 60 $R diff-test --arch sm_80 --quick --group knn1 > $W/difftest-sm80-knn1.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm80-knn1.txt | tail -n 1
t timeout 90 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-knn1.txt
t timeout 90 compute-sanitizer --tool initcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/initcheck-knn1.txt 2>&1; grep -h "ERROR SUMMARY" $W/initcheck-knn1.txt
t timeout 90 compute-sanitizer --tool racecheck --racecheck-report all $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-knn1q-n1000.txt 2>&1; grep -h "RACECHECK SUMMARY" $W/racecheck-bench-knn1q-n1000.txt
t timeout 90 compute-sanitizer --tool synccheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/synccheck-bench-knn1q-n1000.txt 2>&1; grep -h "ERROR SUMMARY" $W/synccheck-bench-knn1q-n1000.txt
for round in 1 2; do
  for mode in on off; do
    for n in 1000 10000; do
      timeout 60 env RECALL_ONE_QUERY_INLINE=$mode $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n-inline-$mode-$round.md > $W/knn-n$n-inline-$mode-$round.log 2>&1
      grep -h "Engine::knn_in\|knn1: query in" $W/knn-n$n-inline-$mode-$round.md | sed "s/^/n$n inline=$mode $round: /" | cut -c1-150
    done
  done
done
true
