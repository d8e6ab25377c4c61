#!/bin/bash
# Session 33, run D (one H200 host): t = s33 tip (f9162a4: only the probe decides a half-open breaker; the breaker
# gauge is its state now; the memory gauge moves by reservations). The facade's GPU tests, the quick diff-test, and
# the three real-fault drills (kernel failure, a lost device, another process taking the VRAM), 18 s each.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s33D}
B=$(mktemp -d); for v in recall-t gpu-test-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core"; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test-t --test-threads 1 > $W/gpu-test-t.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-t.txt)"; grep -E "panicked" $W/gpu-test-t.txt | head -5
R=$B/recall-t
T0=$(date +%s); timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
for s in kernel-failure device-lost vram-pressure; do
  T0=$(date +%s); timeout 150 $R faults $s --seconds 18 --out $W/faults-$s.md > $W/faults-$s.log 2>&1; echo "faults $s: rc=$? $(( $(date +%s) - T0 ))s $(grep -hE 'PASS|FAIL' $W/faults-$s.log | tail -1)"
  grep -E "^recall_breaker_state|^recall_breaker_transitions|^recall_gpu_memory_in_use|^recall_fallbacks_total" $W/faults-$s.md | grep -v " 0$" | head -8
done
echo "total $(( $(date +%s) - S0 )) s"
true
