#!/bin/bash
# Session 11, run D (1 x H200): the seeded quick limits of the fused fast knn (binary: s11 branch, see info).
# Correctness first (fast and fused groups, sm90a and tc_* with RECALL_WGMMA=off, memcheck), then kernel time
# at 128 queries x 33,792 rows and at 128 / 256 / 512 / 1,024 queries x 1M, then the single-query load.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-e.gz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s11D; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11D.tgz s11D' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-all.txt 2>&1; grep -E "PASS|FAIL" $W/diff-all.txt | sort | uniq -c | head; grep -E "^sm_90.*fused" $W/diff-all.txt | head -8
t timeout 100 env RECALL_WGMMA=off $R diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-tc.txt 2>&1; tail -2 $W/diff-tc.txt
t timeout 200 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group fused-fast > $W/memcheck.txt 2>&1; grep -E "ERROR SUMMARY|PASS|FAIL" $W/memcheck.txt | tail -3
t timeout 100 $R bench knn --queries 128 --rows 33792 --dim 768 --k 10 --iters 9 --no-cpu --peer-script /none --out $W/knn-q128-r33792.md > /dev/null 2>&1
echo "== q=128 rows=33792"; grep -h "kernel level" $W/knn-q128-r33792.md | grep bf16 | head -1
for q in 128 256 512 1024; do
  t timeout 150 $R bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q.md > $W/knn-q$q.log 2>&1
  echo "== q=$q"; grep -h "kernel level\|fast mode" $W/knn-q$q.md | grep -E "knn_f16|knn_bf16|fast mode" | head -4
done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for c in 32:512 64:1024 128:1024; do
  th=${c%%:*}; mb=${c##*:}
  t timeout 100 $R load $L --tenants 8 --threads-per-tenant $th --max-batch $mb --out $W/single-8x$th.md > $W/single-8x$th.log 2>&1
  grep -h "calls/s\|PASS\|FAIL\|knn_single\|dynamic batches" $W/single-8x$th.md | head -6
done
true
