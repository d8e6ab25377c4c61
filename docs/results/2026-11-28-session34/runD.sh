#!/bin/bash
# Session 34, run D (one H200 host): main's tip, 027a28e (the review's fixes: PendingTopK::finish without a Gpu,
# the prepared layout's dim). The selection-scratch test (--nocapture), the facade's GPU tests, the quick
# diff-test, the whole sm_90 diff-test, `recall demo`.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s34D}
B=$(mktemp -d); for v in recall-d gpu-test-d gsel-d; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 60 $B/gsel-d --nocapture > $W/gsel-d.txt 2>&1; echo "gpu_select: rc=$? $(grep -E 'test result' $W/gsel-d.txt)"; grep -E "panicked|skipped" $W/gsel-d.txt | head -3
T0=$(date +%s); timeout 150 $B/gpu-test-d --test-threads 1 > $W/gpu-test-d.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-d.txt)"; grep -E "panicked|skip" $W/gpu-test-d.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-d diff-test --arch sm_90 --quick > $W/diff-quick-d.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-d.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 200 $B/recall-d diff-test --arch sm_90 > $W/diff-full-d.txt 2>&1; echo "full sm_90: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-full-d.txt | tail -1) $(( $(date +%s) - T0 ))s"
timeout 60 $B/recall-d demo > $W/demo-d.txt 2>&1; echo "demo: rc=$?"; tail -6 $W/demo-d.txt
echo "total $(( $(date +%s) - S0 )) s"
true
