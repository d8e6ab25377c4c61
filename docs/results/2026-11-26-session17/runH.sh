#!/bin/bash
# Session 17, run H: g (landed code) with the query in the parameters (auto) against the query copied to the device
# (RECALL_KNN1_QUERY=memory) where blocks share SMs, alternated.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-g.xz > $B/recall-g; chmod +x $B/recall-g; R=$B/recall-g
W=$(mktemp -d)/s17H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17H.tgz s17H' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $R --version; } > $W/info.txt 2>&1
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu --peer-script /none"
for rows in 10000 4096 30000 1000; do for rep in 1 2 3; do for q in auto memory; do
  RECALL_KNN1_QUERY=$q timeout 90 $R $Q --rows $rows --k 10 --out $W/q1-r$rows-$q-$rep.md > $W/q1-r$rows-$q-$rep.log 2>&1
  echo "rows=$rows $q $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$q-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$q-$rep.md | cut -d'|' -f3)"
done; done; done
true
