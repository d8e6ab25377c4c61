#!/bin/bash
# Session 17, run J: k (the tensor-map cache moved beside the entry points, with a fallback to sm80_knn1) against g.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in g k; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-k
W=$(mktemp -d)/s17J; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17J.tgz s17J' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $R --version; } > $W/info.txt 2>&1
for q in params memory; do RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-k-$q.txt 2>&1; echo "knn1 k $q: $(tail -1 $W/diff-knn1-k-$q.txt)"; done
timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-k.txt 2>&1; echo "all k: $(tail -1 $W/diff-all-k.txt)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none"
for rows in 1000 10000; do for rep in 1 2 3; do for v in k g; do
  timeout 90 $B/recall-$v $Q --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
true
