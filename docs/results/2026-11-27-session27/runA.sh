#!/bin/bash
# Session 27, run A (diagnostic): main's binary (0b6495c), one query x 768 top-10 served: block 0's part at 4,096,
# 8,448 (264 blocks, two an SM: whole rows stay in the ring) and 8,449 rows (265 blocks, three an SM: 15 of 24 tiles
# in the ring, the rest streamed from L2 each query), and 10,000 with the default merge and the host's.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s27A}
B=$(mktemp -d); for v in s26m; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 4096 8448 8449 10000; do
  f=$W/q1-r$rows-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-s26m bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows"
done
  f=$W/q1-r10000-host-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=host $B/recall-s26m bench knn --queries 1 --rows 10000 --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x10000 host-merge"
done
echo "total $(( $(date +%s) - S0 )) s"
true
