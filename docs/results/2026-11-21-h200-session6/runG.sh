#!/bin/bash
# Run G (1 x H200): the mixed load for 5 minutes in fast bf16 (8 tenants x 32 threads, batches of 512). Binary: lead 8696efe.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runG.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 420 $R load --rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 32 --verify 256 --coalesce --batch-across-tenants --max-batch 512 --duration 300 --mode fast-bf16 --out $W/load-bf16-300s.md > $W/load-bf16-300s.log 2>&1
true
