#!/bin/bash
# Session 33, run B (one H200 host): t = s33 tip (906b383: the CPU's parallel work from threads outside rayon's pools on
# recall's own pool; k-means' iteration count; the audit's fixes). The facade's GPU tests (k-means with usize::MAX and
# 2^40 iterations on both devices) and the quick diff-test at t; then the CPU bench, m = 70655dd (before the own pool)
# against t, alternated, two rounds: copy and read bandwidth, cosine top-10 (1 and 64 queries), spreading (every hop
# pulled, and as it runs), a k-means iteration, clip-and-noise into a reused buffer.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s33B}
B=$(mktemp -d); for v in recall-t gpu-test-t cpu-m cpu-t; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Model:|Thread|Core|MHz"; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
T0=$(date +%s); timeout 150 $B/gpu-test-t --test-threads 1 > $W/gpu-test-t.txt 2>&1; echo "gpu tests: rc=$? $(( $(date +%s) - T0 ))s $(grep -E 'test result' $W/gpu-test-t.txt)"; grep -E "panicked|skip" $W/gpu-test-t.txt | head -5
T0=$(date +%s); timeout 100 $B/recall-t diff-test --arch sm_90 --quick > $W/diff-quick-t.txt 2>&1; echo "quick: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-quick-t.txt | tail -1) $(( $(date +%s) - T0 ))s"
F='memory|cosine_top10_n100000_d768/cpu/knn/|spread_1M_nodes_3_hops/cpu/|kmeans_n100000_d128_k1024/cpu|clip_noise_n100000_d768/cpu/clip_and_noise_into$'
for rep in 1 2; do for v in m t; do
  timeout 150 $B/cpu-$v --bench "$F" --warm-up-time 1 --measurement-time 4 > $W/cpu-$v-$rep.txt 2>&1
  echo "cpu $v $rep: rc=$?"; grep -A2 -E '^(cpu/memory|cosine|spread_1M|kmeans|clip_noise)' $W/cpu-$v-$rep.txt | grep -E '^[a-z]|time:' | sed 's/ \+/ /g' | paste - - | cut -c1-140
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
