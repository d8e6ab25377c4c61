#!/bin/bash
# Session 11, run H (1 x H200): the launch's list heads as a second shared bound (g = heads branch) against f
# (wakeall): correctness (whole quick diff-test, tc_* fused groups, memcheck, racecheck), kernel time, load.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in f g; do gunzip -c .device-carry/gz/recall-$v.gz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-g
W=$(mktemp -d)/s11H; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11H.tgz s11H' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all.txt 2>&1; grep -E "PASS|FAIL" $W/diff-all.txt | sort | uniq -c | head -5; grep -E "^sm_90.*fused" $W/diff-all.txt | head -4
t timeout 100 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-tc.txt 2>&1; tail -2 $W/diff-tc.txt
t timeout 200 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck.txt | tail -2
t timeout 200 compute-sanitizer --tool racecheck $R bench knn --queries 128 --rows 4096 --dim 768 --k 10 --iters 1 --no-cpu --peer-script /none > $W/racecheck.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard" $W/racecheck.txt | tail -2
for q in 128 512 1024; do for v in g f; do
  t timeout 150 $B/recall-$v bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q-$v.md > $W/knn-q$q-$v.log 2>&1
  echo "== q=$q $v"; grep -h "kernel level" $W/knn-q$q-$v.md | grep -E "knn_bf16|knn_f16" | head -2
done; done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for th in 64 128; do
  t timeout 100 $R load $L --tenants 8 --threads-per-tenant $th --max-batch 1024 --out $W/single-8x$th.md > $W/single-8x$th.log 2>&1
  echo "== g 8x$th"; grep -h "PASS\|FAIL\|calls/s\|knn_single\|dynamic batches" $W/single-8x$th.md | head -5
done
true
