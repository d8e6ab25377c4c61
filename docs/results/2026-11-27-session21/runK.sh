#!/bin/bash
# Session 21, run K: issue 6's managed-memory row on an H100 (measured only on H200s before): pool_bench at
# fdff427 (main's memory-pool code, unchanged since session 4), twice.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/pool_bench.xz > $B/pool_bench; chmod +x $B/pool_bench
W=$(mktemp -d)/s21K; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21K.tgz s21K' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do
  RECALL_COMMIT=fdff427 timeout 200 $B/pool_bench > $W/pool-bench-$rep.md 2>&1; echo "rep $rep rc=$?"
  grep -E "^\| (pinned|managed)|/ pinned|best managed" $W/pool-bench-$rep.md | cut -c1-160
done
true
