#!/bin/bash
# Session 13, run E (1 x H200): the final binary d = 60e6011 (sm90a_knn1 up to 4,096 rows; query from host memory up
# to 128 KiB over the bus; spin on the answer words). Same-run before/after: the old path is
# RECALL_ONE_QUERY_WAIT=sync RECALL_KNN1_BULK=off (query copied, stream wait, sm80_knn1), alternated, torch alongside.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-d; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-d
W=$(mktemp -d)/s13E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s13E.tgz s13E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-d.txt 2>&1; grep -E " knn1 " $W/diff-all-d.txt | head -2; tail -1 $W/diff-all-d.txt
t timeout 120 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 10 --iters 3 --no-cpu --peer-script /none > $W/racecheck-q1.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $W/racecheck-q1.txt | tail -2
t timeout 120 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 768 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-q1.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-q1.txt | tail -1
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 10000; do for rep in 1 2; do for m in new old; do
  P=/none; [ $rep = 1 ] && P=.device-carry/peers.py
  if [ $m = old ]; then E="RECALL_ONE_QUERY_WAIT=sync RECALL_KNN1_BULK=off"; else E=""; fi
  env $E timeout 90 $R $Q --rows $rows --k 10 --peer-script $P --out $W/q1-r$rows-$m-$rep.md > $W/q1-r$rows-$m-$rep.log 2>&1
  echo "== rows=$rows $m $rep"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-$m-$rep.md | cut -c1-110 | head -1
  grep -h "torch.topk" $W/q1-r$rows-$m-$rep.md | cut -c1-150 | head -1
done; done; done
grep -h "tiny kernel\|knn1: query in" $W/q1-r1000-new-1.md
for rows in 100 4096; do
  t timeout 60 $R $Q --rows $rows --k 10 --peer-script /none --out $W/q1-r$rows.md > $W/q1-r$rows.log 2>&1
  echo "== rows=$rows"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows.md | cut -c1-110 | head -1
done
for rows in 100 1000; do
  t timeout 60 ncu --section SpeedOfLight -k regex:knn1 -c 3 $R bench knn --dim 768 --queries 1 --iters 3 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-bulk-r$rows.txt 2>&1
  echo "== ncu rows=$rows"; grep -E "^\s+Duration" $W/ncu-bulk-r$rows.txt | head -3
done
true
