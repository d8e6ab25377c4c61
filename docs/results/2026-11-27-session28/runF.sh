#!/bin/bash
# Session 28, run F (CPU only, the H200 host's 16 Xeon cores): clip-and-noise's streamed pass prefetching the next
# task's rows into the L2 (p, on d54db10) against main d54db10 (m), into a reused buffer, alternated four rounds;
# the bench's copy beside them.
N=${RUN:-s28F}
B=$(mktemp -d); for v in m2 p; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3 4; do for v in m2 p; do [ $(( $(date +%s) - S0 )) -lt 200 ] || break
  T0=$(date +%s); timeout 40 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/into-$v-$rep.txt 2>&1; echo "into $v $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/into-$v-$rep.txt | head -1 | sed 's/ *time: *//')"; done; done
timeout 30 $B/cpu-bench-p --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
