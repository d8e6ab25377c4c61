#!/bin/bash
# Session 33, run E (one H200 host): the two drills that run D cut off at 150 s while they re-computed every answer on
# the CPU (session 9's took 144 s for 18 s of calls), at the same binary (f9162a4), 8 s of calls each.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s33E}
B=$(mktemp -d); for v in recall-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
R=$B/recall-t
for s in kernel-failure vram-pressure; do
  T0=$(date +%s); timeout 190 $R faults $s --seconds 8 --out $W/faults-$s.md > $W/faults-$s.log 2>&1; echo "faults $s: rc=$? $(( $(date +%s) - T0 ))s $(grep -hE 'PASS|FAIL' $W/faults-$s.log | tail -1)"
  grep -E "calls in|^recall_breaker_state|^recall_breaker_transitions|^recall_gpu_memory_in_use|^recall_fallbacks_total" $W/faults-$s.md | grep -v " 0$" | head -8
done
echo "total $(( $(date +%s) - S0 )) s"
true
