#!/bin/bash
# Session 13, run A (1 x H200 or H100): one-query latency (issue 4's < 15 us for 1 x 1,000 / 10,000 x 768).
# Binary a = 500f232 (query from mapped host memory + spin on the answer words; RECALL_ONE_QUERY_WAIT=sync gives
# the old path: query copied, stream wait). Correctness of the new path (gpu-sys mapped test, whole quick diff-test,
# memcheck), end-to-end medians in three modes alternated, and ncu durations of knn1 for k = 1, 10, 32.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-a recall-g mapped-a; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-a
W=$(mktemp -d)/s13A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s13A.tgz s13A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 60 $B/mapped-a --nocapture > $W/gpu-sys-mapped-test.txt 2>&1; tail -n 2 $W/gpu-sys-mapped-test.txt
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-a.txt 2>&1; grep -iE "knn1|scan1|one.query" $W/diff-all-a.txt | head -8; tail -1 $W/diff-all-a.txt
RECALL_ONE_QUERY_INPUT_MAX_BYTES=0 t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-a-copyq.txt 2>&1; tail -1 $W/diff-all-a-copyq.txt
Q="bench knn --dim 768 --queries 1 --k 10 --iters 300 --no-cpu"
for rows in 1000 10000; do for rep in 1 2; do
  RECALL_ONE_QUERY_WAIT=sync t timeout 60 $R $Q --rows $rows --peer-script /none --out $W/q1-r$rows-sync-$rep.md > $W/q1-r$rows-sync-$rep.log 2>&1
  RECALL_ONE_QUERY_INPUT_MAX_BYTES=0 t timeout 60 $R $Q --rows $rows --peer-script /none --out $W/q1-r$rows-spincopy-$rep.md > $W/q1-r$rows-spincopy-$rep.log 2>&1
  RECALL_ONE_QUERY_INPUT_MAX_BYTES=100000000 t timeout 90 $R $Q --rows $rows --peer-script .device-carry/peers.py --out $W/q1-r$rows-spinmapped-$rep.md > $W/q1-r$rows-spinmapped-$rep.log 2>&1
  for m in sync spincopy spinmapped; do echo "== rows=$rows $m $rep"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-$m-$rep.md | head -1; done
done; done
grep -h "torch" $W/q1-r*-spinmapped-*.md | head -4
for rows in 100000 1000000; do for m in sync spin; do
  RECALL_ONE_QUERY_WAIT=$m t timeout 90 $R $Q --rows $rows --iters 50 --peer-script /none --out $W/q1-r$rows-$m.md > $W/q1-r$rows-$m.log 2>&1
  echo "== rows=$rows $m"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-$m.md | head -1
done; done
t timeout 60 $B/recall-g $Q --rows 1000 --peer-script /none --out $W/q1-r1000-g.md > $W/q1-r1000-g.log 2>&1; echo "== g 1000"; grep -h "Engine::knn_in. (corpus" $W/q1-r1000-g.md | head -1
t timeout 120 compute-sanitizer --tool memcheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 5 --no-cpu --peer-script /none > $W/memcheck-q1.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-q1.txt | tail -1
for k in 1 10 32; do
  t timeout 60 ncu --section SpeedOfLight -k regex:knn1 -c 3 $R bench knn --rows 1000 --dim 768 --queries 1 --k $k --iters 3 --no-cpu --peer-script /none > $W/ncu-knn1-r1000-k$k.txt 2>&1
  echo "== ncu k=$k"; grep -E "^\s+Duration" $W/ncu-knn1-r1000-k$k.txt | head -3
done
t timeout 60 ncu --section SpeedOfLight -k regex:knn1 -c 3 $R bench knn --rows 32 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script /none > $W/ncu-knn1-r32-k10.txt 2>&1
echo "== ncu rows 32"; grep -E "^\s+Duration" $W/ncu-knn1-r32-k10.txt | head -3
true
