#!/bin/bash
# Session 25, run F (H200): h (g + a barrier at the top of the one-query server's loop in blocks other than block 0,
# before thread 0 writes the next query's words: racecheck reported that write against the last query's reads by
# warps that leave the body early) against g (3c15952): racecheck and synccheck over h's quick knn1 group, h's knn1
# group in full; one query x 1,000 / 10,000 rows x 768 served, g and h alternated, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s25F}
B=$(mktemp -d); for v in g h; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-h
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) b0 $(grep -h "block 0" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in g h; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
timeout 150 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-h.txt 2>&1; echo "h knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-h.txt | tail -1) $(( $(date +%s) - S0 ))s"; grep -h "knn1" $W/diff-knn1-h.txt | grep -v "^$" | tail -4
T0=$(date +%s)
left 250 && { timeout 320 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-h.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-h.txt | tail -2 | tr '\n' ' ')"; }
T0=$(date +%s)
left 560 && { timeout 150 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-h.txt 2>&1; echo "synccheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $W/synccheck-knn1-h.txt | tail -2 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
