#!/bin/bash
# Session 17, run I: g (landed code): host against device merge of sm90a_knn1's lists by k and rows, alternated.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-g.xz > $B/recall-g; chmod +x $B/recall-g; R=$B/recall-g
W=$(mktemp -d)/s17I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17I.tgz s17I' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $R --version; } > $W/info.txt 2>&1
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none"
for rows in 1000 4096 2000; do for k in 32 16 10; do for rep in 1 2; do for m in host device; do
  RECALL_KNN1_MERGE=$m timeout 90 $R $Q --rows $rows --k $k --out $W/q1-r$rows-k$k-$m-$rep.md > $W/q1-r$rows-k$k-$m-$rep.log 2>&1
  echo "rows=$rows k=$k $m $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-k$k-$m-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-k$k-$m-$rep.md | cut -d'|' -f3)"
done; done; done; done
true
