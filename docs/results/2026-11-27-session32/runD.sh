#!/bin/bash
# Session 32, run D (H200): the facade's GPU tests at the s32 tip (the GPU's shape refusals answered on the CPU
# without opening the breaker: gpu_refusing_a_shape_is_not_a_gpu_failure, new).
N=${RUN:-s32D}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-t.xz > $B/gpu-test-t; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 300 $B/gpu-test-t --test-threads 1 > $W/gpu-test-t.txt 2>&1; echo "gpu-test-t: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|panicked" $W/gpu-test-t.txt
true
