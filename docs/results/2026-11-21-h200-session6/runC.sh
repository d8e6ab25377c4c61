#!/bin/bash
# Run C (1 x H200): per-call cost of the load's spreading and candidate calls, with and without glibc's mmap
# threshold; knn batches of up to 512. Binary: lead 092a841.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runC.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cat /sys/kernel/mm/transparent_hugepage/enabled; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
L="--rows 1000000 --dim 768 --verify 16 --coalesce --batch-across-tenants --duration 8 --mode fast-bf16"
t timeout 60 env MALLOC_MMAP_THRESHOLD_=1048576 $R load $L --tenants 8 --threads-per-tenant 8 --max-batch 128 --mix 0,0,0,100 --out $W/spread-t8-mmap.md > $W/spread-t8-mmap.log 2>&1
t timeout 60 $R load $L --tenants 8 --threads-per-tenant 8 --max-batch 128 --mix 0,0,0,100 --out $W/spread-t8-heap.md > $W/spread-t8-heap.log 2>&1
t timeout 60 $R load $L --tenants 1 --threads-per-tenant 1 --max-batch 128 --mix 0,0,0,100 --out $W/spread-t1-heap.md > $W/spread-t1-heap.log 2>&1
t timeout 60 $R load $L --tenants 1 --threads-per-tenant 1 --max-batch 128 --mix 0,0,100,0 --out $W/cand-t1-heap.md > $W/cand-t1-heap.log 2>&1
t timeout 60 $R load $L --tenants 8 --threads-per-tenant 16 --max-batch 512 --mix 0,100,0,0 --out $W/batch-t16-512.md > $W/batch-t16-512.log 2>&1
t timeout 60 $R load $L --tenants 8 --threads-per-tenant 16 --max-batch 512 --mix 100,0,0,0 --out $W/single-t16-512.md > $W/single-t16-512.log 2>&1
true
