#!/bin/bash
# Session 30, run F (H200): c6 = the tip (t, 3bbca53) with block 0 starting its polls a delay after it is ready, the delay
# creeping down while queries take no more polls than the last and jumping up when one takes more (the polls
# follow the phase of a caller that rings each query a fixed time after the last answer). c6's knn1 group in full; one
# query x 1,000 / 10,000 rows served, c6 and t alternated, four rounds; synccheck, memcheck, racecheck over c6's knn1 group.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s30F}
B=$(mktemp -d); for v in t c6; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-c6
T0=$(date +%s); timeout 30 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-c6.txt 2>&1; echo "c6 knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-c6.txt | tail -1) $(( $(date +%s) - T0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2 3 4; do for rows in 1000 10000; do for v in c6 t; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
for tool in synccheck memcheck; do T0=$(date +%s); left 300 && { timeout 70 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-c6.txt 2>&1; echo "$tool knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $W/$tool-knn1-c6.txt | tail -2 | tr '\n' ' ')"; }; done
T0=$(date +%s); left 320 && { timeout $(( 595 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-c6.txt 2>&1; echo "racecheck knn1 c6: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|ERROR' $W/racecheck-knn1-c6.txt | tail -3 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
