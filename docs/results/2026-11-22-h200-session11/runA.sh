#!/bin/bash
# Session 11, run A (1 x H200): where a coalesced single-query batch spends its time. Batch phase metrics
# (wait, run, gap) from the load at 8 x 32 / 8 x 64 / 8 x 128 callers, and the fused fast-bf16 knn's kernel
# and end-to-end time at 128 / 256 / 512 queries.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-a.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)/s11A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11A.tgz s11A' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for q in 128 256 512; do
  t timeout 120 $R bench knn --queries $q --rows 1000000 --dim 768 --k 10 --iters 7 --no-cpu --peer-script /none --out $W/knn-q$q.md > $W/knn-q$q.log 2>&1
  grep -h -i "fast\|knn_in" $W/knn-q$q.md | head -12
done
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for c in 32:512 64:1024 128:1024; do
  th=${c%%:*}; mb=${c##*:}
  t timeout 100 $R load $L --tenants 8 --threads-per-tenant $th --max-batch $mb --out $W/single-8x$th.md > $W/single-8x$th.log 2>&1
  grep -h "calls/s\|PASS\|FAIL\|knn_single\|dynamic batches" $W/single-8x$th.md | head -6
done
true
