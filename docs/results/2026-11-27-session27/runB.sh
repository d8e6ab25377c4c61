#!/bin/bash
# Session 27, run B (H200): b = holding warps in sm90a_knn1s (tiles the ring cannot hold, stored from registers);
# m = main (0b6495c). b's knn1 group in full; one query x 768 top-10 served at 1,000 / 8,449 / 10,000 / 12,000 rows,
# m and b alternated, two rounds; b's whole quick diff-test; synccheck, memcheck and racecheck over b's quick knn1
# group.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s27B}
B=$(mktemp -d); for v in s26m s27b; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-s27b
T0=$(date +%s); timeout 90 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-b.txt 2>&1; echo "b knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-b.txt | tail -1) $(( $(date +%s) - T0 ))s"
grep -h "served\|FAIL\|rror" $W/diff-knn1-b.txt | head -8
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 8449 10000 12000; do for v in s26m s27b; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
T0=$(date +%s); left 300 && { timeout 120 $R diff-test --arch sm_90 --quick > $W/diff-quick-b.txt 2>&1; echo "b quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-b.txt | tail -1) $(( $(date +%s) - T0 ))s"; }
for tool in synccheck memcheck; do T0=$(date +%s); left 380 && { timeout 70 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-b.txt 2>&1; echo "$tool knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $W/$tool-knn1-b.txt | tail -2 | tr '\n' ' ')"; }; done
T0=$(date +%s); left 450 && { timeout $(( 590 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-b.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-b.txt | tail -2 | tr '\n' ' ')"; grep -A1 "^========= Error" $W/racecheck-knn1-b.txt | head -6; }
echo "total $(( $(date +%s) - S0 )) s"
true
