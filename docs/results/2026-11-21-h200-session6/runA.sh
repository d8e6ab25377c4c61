#!/bin/bash
# Run A (1 x H200/H100): the mixed load in fast bf16 and exact mode (candidates against the handle now on the GPU,
# spreading from a seed list), and the break-even of score_candidates_resident. Binary: lead 092a841.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runA.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --tenants 8 --verify 128 --coalesce --batch-across-tenants --max-batch 128"
export MALLOC_MMAP_THRESHOLD_=1048576
t timeout 100 $R load $L --threads-per-tenant 8 --duration 30 --mode fast-bf16 --out $W/load-bf16-t8.md > $W/load-bf16-t8.log 2>&1
t timeout 100 $R load $L --threads-per-tenant 16 --duration 30 --mode fast-bf16 --out $W/load-bf16-t16.md > $W/load-bf16-t16.log 2>&1
t timeout 100 $R load $L --threads-per-tenant 16 --duration 30 --out $W/load-exact-t16.md > $W/load-exact-t16.log 2>&1
t timeout 120 $R bench break-even --reps 3 --ops score_candidates,score_candidates_resident --out $W/break-even-cand.md > $W/break-even-cand.log 2>&1
true
