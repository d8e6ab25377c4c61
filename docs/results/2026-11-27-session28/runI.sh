#!/bin/bash
# Session 28, run I (H200 host): the final tip 0b33842 on the GPU: the facade's GPU tests (bit-identical cosine and
# clip-and-noise, the quick diff-test, bad values refused on the GPU as on the CPU), then `recall demo` (the main job).
N=${RUN:-s28I}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-s28i.xz > $B/gpu-test; xz -dc .device-carry/recall-s28i.xz > $B/recall; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 130 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|panicked" $W/gpu-test.txt
if [ $(( $(date +%s) - S0 )) -lt 120 ]; then T0=$(date +%s); timeout 50 $B/recall demo > $W/demo.txt 2>&1; echo "demo: rc=$? $(( $(date +%s) - T0 ))s"; tail -25 $W/demo.txt; fi
echo "total $(( $(date +%s) - S0 )) s"
true
