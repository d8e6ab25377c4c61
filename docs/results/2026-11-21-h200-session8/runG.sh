#!/bin/bash
# Session 8, run G (1 x H200, lead a6af7a6): the mixed load for 60 s with the session's binary (run C of session 7,
# the 5-minute run, was built from 0666426; lanes changed twice since: 022b638 and the review 2263829).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s8G; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16 --threads-per-tenant 32 --max-in-flight 8"
t timeout 200 $R load $L --verify 128 --duration 60 --out $W/load-p8-60s.md > $W/load-p8-60s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED\|errors:" $W/load-p8-60s.md | head -5
true
