#!/bin/bash
# Session 26, run H (CPU only, a GPU host's 16 Xeon cores): k-means one iteration on 100,000 x 128, K = 1,024 (its
# 12.8 M input values now scanned for NaN / infinity on all cores), cpu bench i (8f633c9) against g (8f8a1bb),
# alternated, two rounds.
N=${RUN:-s26H}
B=$(mktemp -d); for v in g i; do xz -dc .device-carry/cpu-bench-s26$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|Thread|Core|Socket"; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in g i; do T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'kmeans_n100000' --warm-up-time 1 --measurement-time 5 > $W/cpu-bench-$v-$rep.txt 2>&1; echo "kmeans $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'cpu/kmeans_1_iteration\|peer-simsimd' $W/cpu-bench-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
