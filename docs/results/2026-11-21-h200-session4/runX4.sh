#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); gunzip -c .device-carry/gz/recall.gz > $B/recall; chmod +x $B/recall
R=$B/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX4.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > $W/info.txt 2>&1
timeout 130 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 128 --single-queries 16384 --iters 3 --out $W/multi-128.md > $W/multi-128.log 2>&1; echo "rc=$?" >> $W/multi-128.log
timeout 120 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 64 --single-queries 8192 --iters 3 --out $W/multi-64.md > $W/multi-64.log 2>&1; echo "rc=$?" >> $W/multi-64.log
timeout 120 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 256 --single-queries 32768 --iters 3 --out $W/multi-256.md > $W/multi-256.log 2>&1; echo "rc=$?" >> $W/multi-256.log
