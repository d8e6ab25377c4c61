#!/bin/bash
# Session 32, run B (H200 host): memcheck over the quick knn1 group (the server's cases) on t = s32 tip (0781952); then
# the CPU bench at bacf11c (its rows' code is the same at the tip) with the two new floors beside the unmet streaming
# targets, two rounds: copy and read bandwidth, clip-and-noise into a reused buffer and with its rows in L2, spreading
# with every hop pulled, as it runs, and with every source's activation in L1.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s32B}
B=$(mktemp -d); for v in recall-t cpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core|MHz"; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 240 compute-sanitizer --tool memcheck $B/recall-t diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-t.txt 2>&1; echo "memcheck knn1: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'SUMMARY|PASS|FAIL|server fail' $W/memcheck-knn1-t.txt | tail -3 | tr '\n' ' ')"
for rep in 1 2; do
  timeout 200 $B/cpu-t --bench "memory|clip_noise_n100000_d768/(cpu/clip_and_noise_into$|floor)|spread_1M" --warm-up-time 1 --measurement-time 5 > $W/cpu-$rep.txt 2>&1
  echo "cpu $rep: rc=$?"; grep -A2 -E '^(cpu/memory|clip_noise|spread_1M)' $W/cpu-$rep.txt | grep -E '^[a-z]|time:|thrpt:' | sed 's/ \+/ /g' | paste - - - 
done
echo "total $(( $(date +%s) - S0 )) s"
true
