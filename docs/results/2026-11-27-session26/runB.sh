#!/bin/bash
# Session 26, run B (H200): c = b + the one-query server's exit carried by the barrier's reduction and the number kept
# by the polling thread only (no shared word for it; run A's racecheck hazards were all thread 0's store of the exit
# number against lane 0 of warps 1-3 reading it just before they exit). racecheck and synccheck over c's quick knn1
# group, c's knn1 group in full, and one query x 1,000 / 10,000 rows served, h (main's kernels) and c alternated.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s26B}
B=$(mktemp -d); for v in h s26c; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-s26c
T0=$(date +%s); timeout 20 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-c.txt 2>&1; echo "c knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-c.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s)
timeout 400 compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-c.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL' $W/racecheck-knn1-c.txt | tail -2 | tr '\n' ' ')"
grep -m2 -A2 "^========= Error" $W/racecheck-knn1-c.txt
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do for v in s26c h; do
  left 500 || break
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
T0=$(date +%s)
left 470 && { timeout $(( 585 - ($(date +%s) - S0) )) compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-c.txt 2>&1; echo "synccheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL' $W/synccheck-knn1-c.txt | tail -2 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
