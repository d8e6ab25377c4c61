#!/bin/bash
# Session 26, run I (H200): the path 331e7c2's statistics change touches: one query x 1,000 / 10,000 rows served with
# the device merging the answer (RECALL_KNN1_MERGE=device), f (331e7c2) and h (73a22cf) alternated, two rounds.
N=${RUN:-s26I}
B=$(mktemp -d); for v in h s26f; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f2,3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in s26f h; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=device $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
