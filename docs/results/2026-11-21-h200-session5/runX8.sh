#!/bin/bash
# Run X8 (2 x H200): confirmation of the single-query load with kept shard threads, two samples each at 64 and 128
# callers, and the sharded batch call split at 64/128/1024 queries. Binary: lead 0b24461.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX8.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for s in a b; do
 t timeout 120 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 64 --threads 64 --single-queries 8192 --iters 20 --out $W/multi-64-$s.md > $W/multi-64-$s.log 2>&1
 t timeout 130 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 128 --single-queries 16384 --iters 3 --out $W/multi-128-$s.md > $W/multi-128-$s.log 2>&1
done
