#!/bin/bash
# Run B (1 x H200): the load's ops one at a time (fast bf16), to see what each costs the device. Binary: lead 092a841.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runB.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 8 --verify 32 --coalesce --batch-across-tenants --max-batch 128 --duration 12 --mode fast-bf16"
export MALLOC_MMAP_THRESHOLD_=1048576
for m in 100,0,0,0 0,100,0,0 0,0,100,0 0,0,0,100; do
  t timeout 60 $R load $L --mix $m --out $W/load-$m.md > $W/load-$m.log 2>&1
done
true
