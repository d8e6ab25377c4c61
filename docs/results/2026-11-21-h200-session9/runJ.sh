#!/bin/bash
# Session 9, run J (1 x H200): knn1's final merge reads the k scores at once (threads 0..k-1 after the rounds)
# instead of one dependent load per round. New binary (J) against the one before it (G, 2a49192), alternated:
# diff-test, sanitizers over the one- and two-level merges, single-query latency at 1K / 10K rows next to torch.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for f in recall-j recall-g; do gunzip -c .device-carry/gz/$f.gz > $B/$f; chmod +x $B/$f; done
R=$B/recall-j
P=$PWD/.device-carry/peers.py
W=$(mktemp -d)
trap 'cd $W && tar -czf $OUT/s9J.tgz .' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm90-quick.txt | tail -n 1
t timeout 60 $R diff-test --arch sm_80 --quick --group knn1 --group scan1 > $W/difftest-sm80-knn1-scan1.txt 2>&1; grep -h "PASS\|FAIL" $W/difftest-sm80-knn1-scan1.txt | tail -n 1
t timeout 90 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1.txt 2>&1; grep -h "ERROR SUMMARY" $W/memcheck-knn1.txt
for n in 1000 100000; do
  t timeout 120 compute-sanitizer --tool racecheck --racecheck-report all $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/racecheck-bench-knn1-n$n.txt 2>&1; grep -h "RACECHECK SUMMARY" $W/racecheck-bench-knn1-n$n.txt
  t timeout 120 compute-sanitizer --tool synccheck $R bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/synccheck-bench-knn1-n$n.txt 2>&1; grep -h "ERROR SUMMARY" $W/synccheck-bench-knn1-n$n.txt
done
for round in 1 2; do
  for b in recall-j recall-g; do
    for n in 1000 10000; do
      timeout 60 $B/$b bench knn --rows $n --dim 768 --queries 1 --k 10 --iters 300 --no-cpu --peer-script $P --out $W/knn-n$n-$b-$round.md > $W/knn-n$n-$b-$round.log 2>&1
      grep -h "Engine::knn_in\|knn1: query in" $W/knn-n$n-$b-$round.md | sed "s/^/n$n $b $round: /" | cut -c1-150
    done
  done
done
t timeout 60 ncu --set full -k regex:knn1 -c 2 $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/ncu-knn1-n1000.txt 2>&1
grep -E " Duration|Executed Instructions  " $W/ncu-knn1-n1000.txt | head -4
true
