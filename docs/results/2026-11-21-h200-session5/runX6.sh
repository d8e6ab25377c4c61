#!/bin/bash
# Run X6 (2 x H200): where the 2-GPU single-query load loses: plain batch calls of 64 and 128 queries on 1 vs 2 GPUs,
# and the load at 64/128 callers again (second sample). Binary: lead (see commit in the md files).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX6.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for b in 64 128; do t timeout 100 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries $b --threads 64 --single-queries 2048 --iters 30 --out $W/multi-b$b.md > $W/multi-b$b.log 2>&1; done
t timeout 120 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 64 --single-queries 8192 --iters 3 --out $W/multi-64.md > $W/multi-64.log 2>&1
t timeout 130 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 128 --single-queries 16384 --iters 3 --out $W/multi-128.md > $W/multi-128.log 2>&1
