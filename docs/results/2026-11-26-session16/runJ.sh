#!/bin/bash
# Session 16, run J: the final binary p (sm90a_knn1 blocks of 8 warps by default; sixteen merge loads in flight in
# sm90a_knn1 only) against k (aa3441e, main), alternated, torch alongside; whole quick diff-test, knn1 group under
# each setting, the three sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in k p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-p
W=$(mktemp -d)/s16J; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16J.tgz s16J' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-p.txt 2>&1; tail -1 $W/diff-all-p.txt
for q in params memory; do for b in on off; do
RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-p-$q-$b.txt 2>&1; echo "$q $b $(tail -1 $W/diff-knn1-p-$q-$b.txt)"
done; done
RECALL_KNN1_QUERY=params timeout 150 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-p.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-p.txt | tail -1
RECALL_KNN1_QUERY=params timeout 150 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-p.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-knn1-p.txt | tail -1
timeout 150 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r1000-p.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r1000-p.txt | tail -1)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 4096 10000 100; do for rep in 1 2 3; do for v in k p; do
  P=/none; [ $rep = 1 ] && [ $v = p ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 4096 10000; do grep -h "torch.topk" $W/q1-r$rows-p-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-p-1.md
true
