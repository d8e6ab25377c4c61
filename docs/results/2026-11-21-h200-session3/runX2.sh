#!/bin/bash
export PATH=$PATH:/usr/local/cuda/bin
R=$PWD/.device-carry/recall
W=$(mktemp -d)
trap 'tar -C $W -czf $OUT/runX2.tgz .' EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; $R info; RECALL_GPUS=1 $R info; } > $W/info.txt 2>&1
timeout 240 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 32 --single-queries 4096 --iters 5 --out $W/multi.md > $W/multi.log 2>&1; echo "rc=$?" >> $W/multi.log
timeout 200 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 64 --single-queries 8192 --iters 3 --out $W/multi-64.md > $W/multi-64.log 2>&1; echo "rc=$?" >> $W/multi-64.log
