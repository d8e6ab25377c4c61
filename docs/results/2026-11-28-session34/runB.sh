#!/bin/bash
# Session 34, run B (one H200 host). The selection-scratch test (crates/gpu-kernels/tests/gpu_select.rs) built
# against m = edfa8d1's launch.rs (before QueuedScratch) and t2 = 8dda4f5 (with it); the facade's GPU tests, the
# quick diff-test and the three graph groups in full at t2; then the CPU bench, t = df10f39 (run A's) against
# t2 (top-k 16 scores at a time), alternated, two rounds: cosine top-10 (1 and 64 queries), spreading as it runs,
# a k-means iteration.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s34B}
B=$(mktemp -d); for v in recall-t2 cpu-t cpu-t2 gpu-test-t2 gsel-m gsel-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
for v in m t; do timeout 60 $B/gsel-$v --test-threads 1 > $W/gsel-$v.txt 2>&1; echo "gpu_select $v: rc=$? $(grep -E 'test result' $W/gsel-$v.txt)"; grep -E "panicked|round" $W/gsel-$v.txt | head -3; done
T0=$(date +%s); timeout 150 $B/gpu-test-t2 --test-threads 1 > $W/gpu-test-t2.txt 2>&1; echo "facade gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-t2.txt)"; grep -E "panicked|skip" $W/gpu-test-t2.txt | head -5
T0=$(date +%s); timeout 60 $B/recall-t2 diff-test --arch sm_90 --quick > $W/diff-quick-t2.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t2.txt | tail -1) $(( $(date +%s) - T0 ))s"
T0=$(date +%s); timeout 150 $B/recall-t2 diff-test --arch sm_90 --group graph --group graph-handle --group graph-frontier > $W/diff-graph-t2.txt 2>&1; echo "graph groups in full: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-graph-t2.txt | tail -1) $(( $(date +%s) - T0 ))s"
F='cosine_top10_n100000_d768/cpu/knn/|spread_1M_nodes_3_hops/cpu/spread$|kmeans_n100000_d128_k1024/cpu'
for rep in 1 2; do for v in t t2; do
  timeout 100 $B/cpu-$v --bench "$F" --warm-up-time 1 --measurement-time 3 > $W/cpu-$v-$rep.txt 2>&1
  echo "cpu $v $rep: rc=$?"; grep -A2 -E '^(cosine|spread_1M|kmeans)' $W/cpu-$v-$rep.txt | grep -E '^[a-z]|time:' | sed 's/ \+/ /g' | paste - - | cut -c1-120
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
