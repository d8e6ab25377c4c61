#!/bin/bash
# Session 11, run G (1 x H200): the single-query load with binary f (wakeall) at 8 x 80 and 8 x 96 callers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-f.gz > $B/recall; chmod +x $B/recall; R=$B/recall
W=$(mktemp -d)/s11G; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11G.tgz s11G' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 30 --mode fast-bf16 --mix 100,0,0,0"
for th in 96 80; do
  t timeout 120 $R load $L --tenants 8 --threads-per-tenant $th --max-batch 1024 --out $W/single-8x$th.md > $W/single-8x$th.log 2>&1
  echo "== 8x$th"; grep -h "PASS\|FAIL\|calls/s\|knn_single\|dynamic batches" $W/single-8x$th.md | head -5
done
true
