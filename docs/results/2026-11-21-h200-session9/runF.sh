#!/bin/bash
# Session 9, run F (1 x H200, e732318): the mixed load with a per-tenant cap (TenantConfig::max_running, never run on
# a GPU) for 60 s; then the 5-minute load with MALLOC_ARENA_MAX=2, the setting docs/tuning.md ("Host memory")
# recommends for services, to see host RSS come back as well as the heap in use.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9F; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16 --threads-per-tenant 32 --max-in-flight 8"
t timeout 150 $R load $L --tenant-max-running 2 --verify 128 --duration 60 --out $W/load-p8-cap2-60s.md > $W/load-p8-cap2-60s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED\|errors" $W/load-p8-cap2-60s.md | head -3
t timeout 420 env MALLOC_ARENA_MAX=2 $R load $L --verify 256 --duration 300 --out $W/load-p8-arena2-300s.md > $W/load-p8-arena2-300s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED\|errors\|RSS" $W/load-p8-arena2-300s.md | head -8
true
