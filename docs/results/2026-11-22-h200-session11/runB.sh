#!/bin/bash
# Session 11, run B (1 x H200): A/B/C of the sm90a corpus copies at 128 and 1,024 queries:
#   a = 4fe… baseline (run A's binary), b = cp.async .L2::256B on the corpus copies (+ batcher wake tree),
#   c = b + prefetch.global.L2 of each row 8 steps past the copies.
# Then diff-test (fast groups) for b and c, and the single-query load with b at 8 x 64 and 8 x 128 callers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d)
for v in a b c; do gunzip -c .device-carry/gz/recall-$v.gz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s11B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11B.tgz s11B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for v in b c; do
  t timeout 120 $B/recall-$v diff-test --arch sm_90 --quick --group fast --group fused-fast > $W/diff-$v.txt 2>&1; tail -3 $W/diff-$v.txt
done
for q in 128 1024; do for v in a b c; do
  t timeout 150 $B/recall-$v bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q-$v.md > $W/knn-q$q-$v.log 2>&1
  echo "== q=$q $v"; grep -h "kernel level\|fast mode bf16" $W/knn-q$q-$v.md | grep -i "bf16" | head -4
done; done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for c in 64:1024 128:1024; do
  th=${c%%:*}; mb=${c##*:}
  t timeout 100 $B/recall-b load $L --tenants 8 --threads-per-tenant $th --max-batch $mb --out $W/single-8x$th-b.md > $W/single-8x$th-b.log 2>&1
  grep -h "calls/s\|PASS\|FAIL\|knn_single\|dynamic batches" $W/single-8x$th-b.md | head -6
done
true
