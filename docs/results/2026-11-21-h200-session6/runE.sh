#!/bin/bash
# Run E (1 x H200): sanitizers over the new kernels (sm80_scan1 now the default, candidate slices), a second
# 1 x 1M knn sample, and the mixed load (fast bf16, batches of 512) with 8 x 32 threads. Binary: lead fb40d59.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall; P=.device-carry/peers.py
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runE.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; nproc; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick > $W/memcheck-difftest.txt 2>&1
tail -4 $W/memcheck-difftest.txt
for tool in racecheck synccheck; do
  t timeout 100 compute-sanitizer --tool $tool $R bench knn --rows 300000 --dim 128 --queries 1 --k 10 --iters 2 --no-cpu --peer-script none > $W/$tool-knn1.txt 2>&1
  t timeout 100 compute-sanitizer --tool $tool $R bench candidates --rows 100000 --dim 128 --batch-queries 8 --candidates 1000 --k 10 --iters 2 --no-cpu --peer-script none > $W/$tool-cand8.txt 2>&1
done
t timeout 90 $R bench knn --rows 1000000 --dim 768 --queries 1 --k 10 --iters 30 --no-cpu --peer-script $P --out $W/knn-default.md > $W/knn-default.log 2>&1
t timeout 130 $R load --rows 1000000 --dim 768 --tenants 8 --threads-per-tenant 32 --verify 128 --coalesce --batch-across-tenants --max-batch 512 --duration 60 --mode fast-bf16 --out $W/load-bf16-t32.md > $W/load-bf16-t32.log 2>&1
true
