#!/bin/bash
# Session 26, run L (H200): l (1db12bd: block 0's first thread no longer reading the statistics words
# 3, 6 and 7 at its start; zeros, the launcher zeroes them at each launch). knn1 group in full, the whole quick
# diff-test, synccheck and racecheck over the quick knn1 group; served one query x 1,000 / 10,000 rows, l and f
# (331e7c2) alternated, and with the device's merge once each.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26L}
B=$(mktemp -d); for v in s26f s26l; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-s26l
T0=$(date +%s); timeout 20 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-l.txt 2>&1; echo "l knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-l.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --quick > $W/diff-quick-l.txt 2>&1; echo "l quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-l.txt | tail -1) $(( $(date +%s) - T0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in s26l s26f; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
for v in s26l s26f; do f=$W/q1-r1000-$v-device.md
  timeout 30 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=device $B/recall-$v bench knn --queries 1 --rows 1000 --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "device-merge x1000 $v"; done
T0=$(date +%s); timeout 60 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-l.txt 2>&1; echo "synccheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-l.txt | tail -1)"
T0=$(date +%s); timeout $(( 590 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-l.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-l.txt | tail -2 | tr '\n' ' ')"
echo "total $(( $(date +%s) - S0 )) s"
true
