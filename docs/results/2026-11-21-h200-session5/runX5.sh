#!/bin/bash
# Run X5 (2 x H200): batching in_flight 1 vs 2 on multi-GPU single-query load. Binary from lead 20d763a.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX5.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
for t in 64 128; do for f in 2 1; do
 q=$((t*128))
 s=$(date +%s)
 timeout 140 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads $t --single-queries $q --iters 3 --batch-in-flight $f --out $W/multi-$t-f$f.md > $W/multi-$t-f$f.log 2>&1; echo "rc=$? secs=$(( $(date +%s)-s ))" >> $W/multi-$t-f$f.log
done; done
