#!/bin/bash
# Session 9, run E (1 x H200): the final binary (e732318, whose knn1/scan1 host round trip has not been under
# the sanitizers): memcheck, initcheck and synccheck over the whole quick diff-test, then the mixed load for
# 5 minutes (fast bf16, 8 tenants x 32 threads, batches of up to 512, 8 executor permits).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$OUT/s9E; mkdir -p $W
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; compute-sanitizer --version; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for tool in memcheck initcheck synccheck; do
  ( t timeout 150 compute-sanitizer --tool $tool $R diff-test --arch sm_90 --quick > $W/$tool-difftest.txt 2>&1 ) >> $W/$tool-difftest.txt &
done
wait
for tool in memcheck initcheck synccheck; do
  echo "$tool: $(grep -h '^rc=' $W/$tool-difftest.txt) | $(grep -h 'ERROR SUMMARY' $W/$tool-difftest.txt) | $(grep -c 'PASS: bit-identical' $W/$tool-difftest.txt) pass"
done
L="--rows 1000000 --dim 768 --tenants 8 --coalesce --batch-across-tenants --max-batch 512 --mode fast-bf16 --threads-per-tenant 32 --max-in-flight 8"
t timeout 420 $R load $L --verify 256 --duration 300 --out $W/load-p8-300s.md > $W/load-p8-300s.log 2>&1
grep -h "calls/s\|PASSED\|FAILED\|errors" $W/load-p8-300s.md | head -6
true
