#!/bin/bash
# Session 31, run C (H200): t = s31 tip (1084f74), m = main (806cc0b). Synccheck and memcheck over the quick knn1 group on
# t; then the sm80_knn1s server (RECALL_KNN1_BULK=off: Hopper runs sm80_knn1_* and its server, which share the changed
# `serve`): the knn1 group in full on t, one query x 1,000 / 10,000 rows served, t and m alternated, two rounds, and
# racecheck over the quick knn1 group on t.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s31C}
B=$(mktemp -d); for v in recall-t recall-m; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
R=$B/recall-t
for tool in synccheck memcheck; do
  T0=$(date +%s); timeout 200 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-t.txt 2>&1; echo "$tool knn1 t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'SUMMARY|PASS|FAIL|server fail' $W/$tool-knn1-t.txt | tail -3 | tr '\n' ' ')"
done
export RECALL_KNN1_BULK=off
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --group knn1 > $W/sm80-diff-knn1-t.txt 2>&1; echo "sm80 t knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/sm80-diff-knn1-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in t m; do
  f=$W/sm80-q1-r$rows-$v-$rep.md
  timeout 60 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "sm80 $rep x$rows $v"
done; done; done
T0=$(date +%s); timeout $(( 595 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/sm80-racecheck-knn1-t.txt 2>&1; echo "sm80 racecheck knn1 t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|server fail' $W/sm80-racecheck-knn1-t.txt | tail -3 | tr '\n' ' ')"
echo "total $(( $(date +%s) - S0 )) s"
true
