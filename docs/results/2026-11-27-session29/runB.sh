#!/bin/bash
# Session 29, run B (CPU only): per-core rates of clip-and-noise's parts (a throwaway test, xbench: imul-chain
# clock, gaussian16 with 1-4 chains, the 8-lane and 16-lane norms), 1 and 16 threads; then main (m) and the
# pipelined streamed form (p) alternated again, into, at 16 and 4 threads.
N=${RUN:-s29B}
B=$(mktemp -d); for v in m p; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
xz -dc .device-carry/xbench-s29.xz > $B/xbench; chmod +x $B/xbench
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2|MHz|Flags" | cut -c1-400; } > $W/info.txt 2>&1; cat $W/info.txt | head -8
timeout 120 $B/xbench xbench --ignored --nocapture > $W/xbench.txt 2>&1; grep threads $W/xbench.txt
for rep in 1 2 3; do for v in m p; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  T0=$(date +%s); timeout 40 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/into-$v-$rep.txt 2>&1; echo "into $v $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/into-$v-$rep.txt | sed 's/ *time: *//' | tr '\n' ' ')"
  RAYON_NUM_THREADS=4 timeout 40 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/t4-$v-$rep.txt 2>&1; echo "4 threads $v $rep: $(grep 'time:' $W/t4-$v-$rep.txt | sed 's/ *time: *//')"; done; done
timeout 30 $B/cpu-bench-p --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
