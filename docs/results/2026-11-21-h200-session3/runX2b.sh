#!/bin/bash
R=.device-carry/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX2b.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $R info; } > $W/info.txt 2>&1
for t in 32 64 128; do
  timeout 150 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads $t --single-queries 8192 --iters 3 --out $W/multi-t$t.md > $W/multi-t$t.log 2>&1; echo "rc=$?" >> $W/multi-t$t.log
done
