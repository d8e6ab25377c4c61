#!/bin/bash
# Session 23, run O (binary d: e3cdfb4 plus a diagnostic: block 0's warp 0 counts its cycles staging the query,
# running the chains and finishing, in sm90a_knn1s): where block 0's 5.8 us at 1,000 rows go. Served, 100 / 1,000 /
# 4,096 / 10,000 rows, and launched for reference.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23O}
B=$(mktemp -d); xz -dc .device-carry/recall-d.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
for rows in 100 1000 4096 10000; do
  f=$W/q1-r$rows.md
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  echo "x$rows:"; grep -h "knn1\|diag" $f
done
true
