#!/bin/bash
# Session 30, run J (H200): the tip's sm80_knn1s server (RECALL_KNN1_BULK=off, so Hopper runs sm80_knn1_* and its
# server): the knn1 group in full, synccheck, memcheck and racecheck over the quick knn1 group, and one query x
# 1,000 / 10,000 rows served, f (tip) and m (main) alternated.
export PATH=$PATH:/usr/local/cuda/bin
export RECALL_KNN1_BULK=off
N=${RUN:-s30J}
B=$(mktemp -d); for v in m f; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-f
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-f.txt 2>&1; echo "f knn1 full (bulk off): rc=$? $(grep -h 'PASS\|FAIL\|ERROR' $W/diff-knn1-f.txt | tail -1) $(( $(date +%s) - T0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) answered $(grep -h 'calls the servers answered' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h 'device clock' $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rows in 1000 10000; do for v in f m; do
  f=$W/q1-r$rows-$v.md
  timeout 60 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "x$rows $v"
done; done
for tool in synccheck memcheck; do T0=$(date +%s); timeout 90 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-f.txt 2>&1; echo "$tool knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'ERROR SUMMARY|PASS|FAIL|ERROR:' $W/$tool-knn1-f.txt | tail -2 | tr '\n' ' ')"; done
T0=$(date +%s); left 200 && { timeout $(( 590 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-f.txt 2>&1; echo "racecheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|ERROR:' $W/racecheck-knn1-f.txt | tail -3 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
