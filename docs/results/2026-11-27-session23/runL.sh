#!/bin/bash
# Session 23, run L (binary s: 6533959 plus the server marked ended after a wait that fell back to a stream
# synchronise): synccheck over the quick knn1 group again (run K's failed on that), and which lists the host
# should merge when there are 2 to 16 groups: RECALL_KNN1_MERGE=host (every block's) against groups (each group
# of 32 blocks'), launched and served, at 2,048 / 4,096 / 8,192 rows x 768, top-10, two alternated rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s23L}
B=$(mktemp -d); xz -dc .device-carry/recall-s.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 150 compute-sanitizer --tool synccheck $R diff-test --quick --group knn1 > $W/synccheck-knn1.txt 2>&1; echo "synccheck: rc=$? $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1.txt | tail -1) $(grep -h 'ERROR:' $W/synccheck-knn1.txt | head -2)"
show() { f=$1; echo "$2: knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3)"; }
for rep in 1 2; do for rows in 2048 4096 8192; do for m in host groups; do left 300 || break
  f=$W/q1-r$rows-$m-$rep.md
  timeout 60 env RECALL_KNN1_MERGE=$m $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $m"
done; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
