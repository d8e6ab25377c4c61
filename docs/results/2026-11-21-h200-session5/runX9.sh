#!/bin/bash
# Run X9 (2 x H200): three more samples of the single-query load with kept shard threads at 64 and 128
# callers, with the sharded batch call split. Binary: lead cd2b675.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX9.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for s in a b c; do
 t timeout 120 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 64 --threads 64 --single-queries 8192 --iters 20 --out $W/multi-64-$s.md > $W/multi-64-$s.log 2>&1
 t timeout 130 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 128 --single-queries 16384 --iters 3 --out $W/multi-128-$s.md > $W/multi-128-$s.log 2>&1
done
