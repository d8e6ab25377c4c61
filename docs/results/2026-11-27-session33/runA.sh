#!/bin/bash
# Session 33, run A (two GPUs of one host): t = s33 tip. The multi-GPU layer's shards now live in their handle, and
# work no GPU could answer fails back to the executor; knn_fast on a slice over the budget streams the exact answer.
# The facade's GPU tests with both GPUs (every engine there shards over both) and with GPU 0 alone; the quick
# diff-test and the backend group in full (knn_fast over the budget held to the CPU); `recall bench multi-gpu`.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s33A}
B=$(mktemp -d); for v in recall-t gpu-test-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core|MHz"; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 200 $B/gpu-test-t --test-threads 1 > $W/gpu-test-both.txt 2>&1; echo "gpu tests, both GPUs: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-both.txt)"; grep -E "panicked|skip" $W/gpu-test-both.txt | head -5
T0=$(date +%s); timeout 150 env RECALL_GPUS=0 $B/gpu-test-t --test-threads 1 > $W/gpu-test-gpu0.txt 2>&1; echo "gpu tests, GPU 0: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-gpu0.txt)"; grep -E "panicked|skip" $W/gpu-test-gpu0.txt | head -5
R=$B/recall-t
T0=$(date +%s); timeout 150 env RECALL_GPUS=0 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - T0 ))s"; grep -h "knn fast streamed" $W/diff-quick.txt | head -2
T0=$(date +%s); timeout 200 env RECALL_GPUS=0 $R diff-test --arch sm_90 --group backend > $W/diff-backend.txt 2>&1; echo "backend full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-backend.txt | tail -1) $(( $(date +%s) - T0 ))s"; grep -h "knn fast streamed" $W/diff-backend.txt | head -2
T0=$(date +%s); timeout 200 $R bench multi-gpu --rows 1000000 --dim 768 --k 10 --batch-queries 1024 --threads 32 --single-queries 4096 --iters 3 --out $W/multi.md > $W/multi.log 2>&1; echo "multi-gpu: rc=$? $(( $(date +%s) - T0 ))s"; tail -25 $W/multi.md
echo "total $(( $(date +%s) - S0 )) s"
true
