#!/bin/bash
# Session 16, run D: binaries h (entry points with and without the query in the parameters, `auto` picks by the
# bus bytes; warp minima by shuffles) and i (h with warp minima by redux.sync) against f (runs A, C: query always
# in 6 KiB of parameters, redux) and e (main), alternated, torch alongside. Diff-tests of i under each
# RECALL_KNN1_QUERY setting and of h's knn1 group; the three sanitizers on i.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e f h i; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-i
W=$(mktemp -d)/s16D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16D.tgz s16D' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-i.txt 2>&1; tail -1 $W/diff-all-i.txt
for q in params memory; do for b in on off; do
RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-i-$q-$b.txt 2>&1; echo "$q $b $(tail -1 $W/diff-knn1-i-$q-$b.txt)"
done; done
RECALL_KNN1_QUERY=params timeout 100 $B/recall-h diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-h-params.txt 2>&1; tail -1 $W/diff-knn1-h-params.txt
RECALL_KNN1_QUERY=params timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-i-params.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-i-params.txt | tail -1
RECALL_KNN1_BULK=off timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 10000 --dim 1000 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r10000-d1000-i.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r10000-d1000-i.txt | tail -1
timeout 100 compute-sanitizer --tool memcheck $R bench knn --rows 4096 --dim 1024 --queries 1 --k 32 --iters 3 --no-cpu --peer-script /none > $W/memcheck-r4096-d1024-i.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-r4096-d1024-i.txt | tail -1
for rows in 1000 10000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-i.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-i.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-i.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-i.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2; do for v in e f h i; do
  P=/none; [ $rep = 1 ] && [ $v = i ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-i-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-i-1.md
true
