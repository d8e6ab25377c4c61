#!/bin/bash
# Session 7, run C (1 x H200): lead 0666426 (idle lanes and spreading slots give their memory back on trim).
# A 20 s load to check the memory comes back, then the mixed load for 5 minutes (fast bf16, 8 tenants x 32
# threads, batches of up to 512, 8 executor permits).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/s7C.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16 --threads-per-tenant 32 --max-in-flight 8"
t timeout 100 $R load $L --verify 64 --duration 20 --out $W/load-p8-20s.md > $W/load-p8-20s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED" $W/load-p8-20s.md | head -4
grep -q "recall load: PASSED" $W/load-p8-20s.md || exit 0
t timeout 440 $R load $L --verify 256 --duration 300 --out $W/load-p8-300s.md > $W/load-p8-300s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED" $W/load-p8-300s.md | head -4
true
