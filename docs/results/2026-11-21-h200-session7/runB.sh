#!/bin/bash
# Session 7, run B (1 x H200): candidate scoring on a lane outside the backend's lock (lead 6e3e96f).
# diff-test sm_90 and sm_80 quick (concurrent candidate/knn and spreading cases), memcheck over the sm_90 quick
# diff-test, the mixed load with 4 (default), 8 and 16 executor permits.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/s7B.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 120 $R diff-test --arch sm_90 --quick > $W/difftest-sm90-quick.txt 2>&1; tail -2 $W/difftest-sm90-quick.txt
t timeout 120 $R diff-test --arch sm_80 --quick > $W/difftest-sm80-quick.txt 2>&1; tail -2 $W/difftest-sm80-quick.txt
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16 --threads-per-tenant 32 --verify 128 --duration 60"
for p in 4 8 16; do
  t timeout 150 $R load $L --max-in-flight $p --out $W/load-p$p.md > $W/load-p$p.log 2>&1
  grep -h "calls/s\|PASSED\|FAILED" $W/load-p$p.md | head -3
done
t timeout 200 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck-difftest.txt 2>&1; tail -3 $W/memcheck-difftest.txt
true
