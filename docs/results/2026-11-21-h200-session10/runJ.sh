#!/bin/bash
# Session 10, run J (1 x H200): the single-query load again (b7174f1): 8 x 128 callers with MALLOC_ARENA_MAX=2
# (does the heap left at the end of run I come from glibc arenas?), and 8 x 64 callers (latency at less load).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall-h.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)/s10J; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s10J.tgz s10J' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --verify 64 --coalesce --batch-across-tenants --duration 30 --mode fast-bf16 --mix 100,0,0,0"
t timeout 100 env MALLOC_ARENA_MAX=2 $R load $L --tenants 8 --threads-per-tenant 128 --max-batch 1024 --out $W/single-8x128-arena2.md > $W/single-8x128-arena2.log 2>&1; grep -h "calls/s\|PASS\|FAIL\|knn_single\|heap in use" $W/single-8x128-arena2.md | head -8
t timeout 100 $R load $L --tenants 8 --threads-per-tenant 64 --max-batch 1024 --out $W/single-8x64.md > $W/single-8x64.log 2>&1; grep -h "calls/s\|PASS\|FAIL\|knn_single\|heap in use" $W/single-8x64.md | head -8
true
