#!/bin/bash
# Session 16, run I: binary o (n with sixteen of the mergers' key loads in flight instead of eight: one round trip
# for 32 lists of 10) against n (46d9081) and k (aa3441e, main); o also with RECALL_KNN1_BULK_WARPS=8.
# Diff-tests and sanitizers on o (4 and 8 warps).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in k n o; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-o
W=$(mktemp -d)/s16I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16I.tgz s16I' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-o.txt 2>&1; tail -1 $W/diff-all-o.txt
for w in 8 4; do for q in params memory; do for b in on off; do
RECALL_KNN1_BULK_WARPS=$w RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-o-w$w-$q-$b.txt 2>&1; echo "w$w $q $b $(tail -1 $W/diff-knn1-o-w$w-$q-$b.txt)"
done; done; done
for w in 8 4; do
RECALL_KNN1_BULK_WARPS=$w RECALL_KNN1_QUERY=params timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-o-w$w.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-o-w$w.txt | tail -1
RECALL_KNN1_BULK_WARPS=$w RECALL_KNN1_QUERY=params timeout 150 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-o-w$w.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-knn1-o-w$w.txt | tail -1
done
for rows in 1000 4096 10000; do
timeout 200 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r$rows-o.txt 2>&1; echo "racecheck $rows: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r$rows-o.txt | tail -1)"
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 4096 10000 100; do for rep in 1 2 3; do for v in k n o o8; do
  P=/none; [ $rep = 1 ] && [ $v = o ] && P=benches/peers/peers.py
  env=""; [ $v = o8 ] && env="RECALL_KNN1_BULK_WARPS=8"
  env $env timeout 90 $B/recall-${v:0:1} $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 4096 10000; do grep -h "torch.topk" $W/q1-r$rows-o-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-o-1.md
true
