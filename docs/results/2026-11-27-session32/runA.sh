#!/bin/bash
# Session 32, run A (H200): t = s32 tip (0781952: the audit's fixes; the knn1 server ended only when the answer's wait
# found its stream finished). The facade's GPU tests, gpu-sys's mapped-memory tests, memory-pool's GPU tests; the whole
# quick diff-test and the knn1 group in full (with the server's cases), also with the bulk path off (sm80_knn1s);
# recall demo; one query x 1,000 / 10,000 rows served, two rounds.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s32A}
B=$(mktemp -d); for v in recall-t gpu-test-t mapped-t pool-gpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core|MHz"; compute-sanitizer --version | tail -1; } > $W/info.txt 2>&1; cat $W/info.txt
for t in gpu-test-t mapped-t pool-gpu-t; do
  T0=$(date +%s); timeout 150 $B/$t --test-threads 1 > $W/$t.txt 2>&1; echo "$t: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/$t.txt)"; grep -E "panicked|skip" $W/$t.txt | head -3
done
R=$B/recall-t
T0=$(date +%s); timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 60 $R diff-test --arch sm_90 --group knn1 > $W/diff-knn1-t.txt 2>&1; echo "knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 60 env RECALL_KNN1_BULK=off $R diff-test --arch sm_90 --group knn1 > $W/sm80-diff-knn1-t.txt 2>&1; echo "sm80 knn1 full: rc=$? $(grep -h 'PASS\|FAIL' $W/sm80-diff-knn1-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
timeout 60 $R demo > $W/demo-t.txt 2>&1; echo "demo: rc=$? $(grep -ci 'bit-identical' $W/demo-t.txt) bit-identical lines"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) served $(grep -h 'knn1 served: query' $f | cut -d'|' -f3) fail $(grep -h 'server failures' $f | cut -d'|' -f3) dev $(grep -h "device clock" $f | cut -d'|' -f3 | tr '\n' ' ')"; }
for rep in 1 2; do for rows in 1000 10000; do
  f=$W/q1-r$rows-t-$rep.md
  timeout 30 env RECALL_KNN1_SERVE=on $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 400 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows t"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
