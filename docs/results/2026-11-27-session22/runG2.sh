#!/bin/bash
# Session 22, run G (tuning, s = 16c4a19): with the query now staged through the parameter's generic address,
# are sm90a_knn1's helper warps and the 32 KiB rule for carrying the query in the parameters still right?
# One query x 1,000 rows with RECALL_KNN1_BULK_WARPS 2 / 4 / 8 (default 8 at one block per SM), and 100 / 300
# rows with RECALL_KNN1_QUERY auto (memory below 32 KiB read over the bus) against params; alternated twice.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22G2}
B=$(mktemp -d); xz -dc .device-carry/gz/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
run() { # name rows env...
  local name=$1 rows=$2; shift 2
  timeout 60 env "$@" $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $W/$name.md > /dev/null 2>&1
  echo "$name: e2e $(grep -h 'Engine::knn_in' $W/$name.md | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $W/$name.md | cut -d'|' -f3) floor $(grep -h 'host spins' $W/$name.md | cut -d'|' -f3)"
}
for rep in 3 4 5 6; do left 400 || break
  for w in 8 4; do run r1000-w$w-$rep 1000 RECALL_KNN1_BULK_WARPS=$w; done
  for rows in 100 300; do for q in auto params; do run r$rows-$q-$rep $rows RECALL_KNN1_QUERY=$q; done; done
done
echo "total $(( $(date +%s) - S0 )) s"
true
