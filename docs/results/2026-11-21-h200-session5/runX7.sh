#!/bin/bash
# Run X7 (2 x H200): sharded call decomposition (wall vs per-GPU shard time), kept shard threads vs a thread per
# shard (RECALL_MULTI_GPU_SPAWN=thread), single-query load at 64 and 128 callers. Binary: lead (commit in md).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX7.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for m in pool thread; do
 RECALL_MULTI_GPU_SPAWN=$m t timeout 100 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 128 --threads 64 --single-queries 8192 --iters 30 --out $W/multi-b128-$m.md > $W/multi-b128-$m.log 2>&1
 RECALL_MULTI_GPU_SPAWN=$m t timeout 130 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 128 --single-queries 16384 --iters 3 --out $W/multi-128-$m.md > $W/multi-128-$m.log 2>&1
done
