#!/bin/bash
# Session 13, run D (1 x H200): binary c = a9e9718 (sm90a_knn1: bulk copies of whole rows; query from host memory
# up to 128 KiB; spin on the answer). Correctness (whole quick diff-test with and without RECALL_KNN1_BULK=off,
# memcheck/racecheck/synccheck over the knn1 group), one-query latency bulk vs old kernel alternated, torch alongside,
# ncu of the new kernel.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in recall-c; do gunzip -c .device-carry/gz/$v.gz > $B/$v; chmod +x $B/$v; done; R=$B/recall-c
W=$(mktemp -d)/s13D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s13D.tgz s13D' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-c.txt 2>&1; grep -E "knn1" $W/diff-all-c.txt | head -4; tail -1 $W/diff-all-c.txt
RECALL_KNN1_BULK=off t timeout 150 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-c-bulkoff.txt 2>&1; tail -1 $W/diff-knn1-c-bulkoff.txt
for tool in memcheck racecheck synccheck; do
  t timeout 150 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1.txt 2>&1; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASS|FAIL" $W/$tool-knn1.txt | tail -2
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 10000; do for rep in 1 2; do for m in on off; do
  P=/none; [ $rep = 1 ] && [ $m = on ] && P=.device-carry/peers.py
  RECALL_KNN1_BULK=$m t timeout 90 $R $Q --rows $rows --k 10 --peer-script $P --out $W/q1-r$rows-bulk$m-$rep.md > $W/q1-r$rows-bulk$m-$rep.log 2>&1
  echo "== rows=$rows bulk=$m $rep"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-bulk$m-$rep.md | cut -c1-110 | head -1
  grep -h "knn1: query in\|tiny kernel" $W/q1-r$rows-bulk$m-$rep.md
done; done; done
grep -h "torch.topk" $W/q1-r*-bulkon-1.md | head -2
for rows in 1000 100 4000 16384; do
  RECALL_KNN1_BULK=on t timeout 60 $R $Q --rows $rows --k 1 --peer-script /none --out $W/q1-r$rows-k1.md > $W/q1-r$rows-k1.log 2>&1
  echo "== rows=$rows k=1"; grep -h "Engine::knn_in. (corpus" $W/q1-r$rows-k1.md | cut -c1-110 | head -1
done
t timeout 100 ncu --set full --import-source no --print-details all -k regex:sm90a_knn1 -c 1 $R $Q --rows 1000 --k 10 --iters 2 --peer-script /none > $W/ncu-bulk-r1000.txt 2>&1
grep -E "^\s+(Duration|SM Active Cycles|Warp Cycles Per Issued|Issued Instructions  )" $W/ncu-bulk-r1000.txt | head -5
grep -E "Stall (Long|Wait|Short|Barrier|Membar|No Inst)" $W/ncu-bulk-r1000.txt | head -6
true
