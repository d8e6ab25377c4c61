#!/bin/bash
# Session 16, run A (1 x H200): binary f (query inside the launch's parameters for sm80_knn1 / sm90a_knn1,
# warp minima by redux.sync) against e (6d944f5 = main's kernels), alternated, torch alongside; f also with
# RECALL_KNN1_QUERY=memory (the old query path, redux kept). Whole quick diff-test, knn1 group under each
# switch, and the three sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e f; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-f
W=$(mktemp -d)/s16A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16A.tgz s16A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-f.txt 2>&1; tail -1 $W/diff-all-f.txt
RECALL_KNN1_QUERY=memory timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-f-memory.txt 2>&1; tail -1 $W/diff-knn1-f-memory.txt
RECALL_KNN1_BULK=off timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-f-bulkoff.txt 2>&1; tail -1 $W/diff-knn1-f-bulkoff.txt
RECALL_ONE_QUERY_WAIT=sync timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-f-sync.txt 2>&1; tail -1 $W/diff-knn1-f-sync.txt
timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-f.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-f.txt | tail -1
RECALL_KNN1_BULK=off timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 10000 --dim 1000 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r10000-d1000-f.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r10000-d1000-f.txt | tail -1
timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 1536 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r4096-d1536-f.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r4096-d1536-f.txt | tail -1
for rows in 1000 10000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-f.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-f.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-f.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-f.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2; do for v in e f fm; do
  P=/none; [ $rep = 1 ] && [ $v = f ] && P=benches/peers/peers.py
  bin=$B/recall-${v:0:1}; env=""; [ $v = fm ] && env="RECALL_KNN1_QUERY=memory"
  env $env timeout 90 $bin $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-f-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-f-1.md
true
