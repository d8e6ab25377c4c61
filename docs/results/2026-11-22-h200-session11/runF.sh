#!/bin/bash
# Session 11, run F (1 x H200): the single-query load, batch answers handed out by a chain of wake-ups through
# the batch's mutex (e = s11 325e909) against per-member slots with the leader waking each member (f = wakeall).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e f; do gunzip -c .device-carry/gz/recall-$v.gz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/s11F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s11F.tgz s11F' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 20 --mode fast-bf16 --mix 100,0,0,0"
for c in 64:1024 128:1024; do for v in f e; do
  th=${c%%:*}; mb=${c##*:}
  t timeout 100 $B/recall-$v load $L --tenants 8 --threads-per-tenant $th --max-batch $mb --out $W/single-8x$th-$v.md > $W/single-8x$th-$v.log 2>&1
  echo "== $v 8x$th"; grep -h "calls/s\|knn_single\|dynamic batches" $W/single-8x$th-$v.md | head -4
done; done
true
