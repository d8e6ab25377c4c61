#!/bin/bash
# Session 30, run D (H200): t = the tip 3bbca53 (run C's c4 as committed); m = main (ac836fc). The facade's GPU tests
# and the whole quick diff-test on t; recall demo; one query x 1,000 / 10,000 rows served, t and m alternated, three
# rounds (and one with the device's merge); racecheck over t's quick knn1 group.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s30D}
B=$(mktemp -d); for v in m t; do xz -dc .device-carry/recall-$v.xz > $B/recall-$v; done; xz -dc .device-carry/gpu-test-t.xz > $B/gpu-test; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-t
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "test result|panicked" $W/gpu-test.txt
T0=$(date +%s); timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "t quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 30 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-t.txt 2>&1; echo "t knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
timeout 60 $R demo > $W/demo-t.txt 2>&1; echo "demo: rc=$? $(grep -ci 'bit-identical' $W/demo-t.txt) bit-identical lines"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2 3; do for rows in 1000 10000; do for v in t m; do
  f=$W/q1-r$rows-$v-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $v"
done; done; done
for rows in 1000 10000; do for v in t m; do
  f=$W/q1-r$rows-$v-devmerge.md
  timeout 30 env RECALL_KNN1_SERVE=on RECALL_KNN1_MERGE=device $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "devmerge x$rows $v"
done; done
T0=$(date +%s); left 330 && { timeout $(( 595 - ($(date +%s) - S0) )) compute-sanitizer --tool racecheck $R diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-t.txt 2>&1; echo "racecheck knn1 t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'RACECHECK SUMMARY|PASS|FAIL|ERROR' $W/racecheck-knn1-t.txt | tail -3 | tr '\n' ' ')"; }
echo "total $(( $(date +%s) - S0 )) s"
true
