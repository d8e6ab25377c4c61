#!/bin/bash
# Session 29, run L (H200 host): the tip 48001b0 on the GPU: the facade's GPU tests (the quick diff-test: the GPU's
# spreading and clip-and-noise against this CPU code, bit for bit) and `recall demo`.
N=${RUN:-s29L}
B=$(mktemp -d); xz -dc .device-carry/gpu-test-s29l.xz > $B/gpu-test; xz -dc .device-carry/recall-s29l.xz > $B/recall; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test --test-threads 1 > $W/gpu-test.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s"; grep -E "^test |test result|panicked" $W/gpu-test.txt
T0=$(date +%s); timeout 60 $B/recall demo > $W/demo.txt 2>&1; echo "demo: rc=$? $(( $(date +%s) - T0 ))s"; tail -10 $W/demo.txt
echo "total $(( $(date +%s) - S0 )) s"
true
