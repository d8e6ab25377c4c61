#!/bin/bash
# Session 17, run A: a (sm90a_knn1 on tensor-map tiles through a ring, up to 32,768 rows) against p (main 6a899e1's
# kernels), alternated, torch alongside; knn1 diff-test under the settings, sanitizers, whole quick diff-test last.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-a
W=$(mktemp -d)/s17A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17A.tgz s17A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for q in params memory; do
RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-a-$q.txt 2>&1; echo "knn1 $q: $(tail -1 $W/diff-knn1-a-$q.txt)"
done
RECALL_KNN1_BULK_WARPS=2 timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-a-w2.txt 2>&1; echo "knn1 w2: $(tail -1 $W/diff-knn1-a-w2.txt)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 10000 4096 30000 100; do for rep in 1 2 3; do for v in a p; do
  P=/none; [ $rep = 1 ] && [ $v = a ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for w in 2 4; do RECALL_KNN1_BULK_WARPS=$w timeout 90 $R $Q --peer-script /none --rows 10000 --k 10 --out $W/q1-r10000-a-w$w.md > /dev/null 2>&1
  echo "rows=10000 a w$w: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r10000-a-w$w.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r10000-a-w$w.md | cut -d'|' -f3)"; done
for rows in 1000 10000 30000; do grep -h "torch.topk" $W/q1-r$rows-a-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-a-1.md
RECALL_KNN1_QUERY=params timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-a.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-a.txt | tail -1)"
RECALL_KNN1_QUERY=params timeout 120 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-a.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-a.txt | tail -1)"
for rows in 1000 10000; do timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r$rows-a.txt 2>&1; echo "racecheck $rows: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r$rows-a.txt | tail -1)"; done
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all-a.txt 2>&1; tail -1 $W/diff-all-a.txt
true
