#!/bin/bash
# Session 29, run A (CPU only, the GPU host's Xeon cores): clip-and-noise's streamed form software-pipelined
# (p: row i-1 written and row i+32 prefetched while row i's noise is made, norms 32 rows at a time) against
# main d055f23 (m), criterion 'clip_and_noise' as called and into, alternated four rounds; then both at 4 threads;
# the bench's copy beside them.
N=${RUN:-s29A}
B=$(mktemp -d); for v in m p; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2"; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3 4; do for v in m p; do [ $(( $(date +%s) - S0 )) -lt 260 ] || break
  T0=$(date +%s); timeout 40 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise(_into)?$' --warm-up-time 1 --measurement-time 3 > $W/cn-$v-$rep.txt 2>&1; echo "cn $v $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/cn-$v-$rep.txt | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
for v in m p; do [ $(( $(date +%s) - S0 )) -lt 330 ] || break
  RAYON_NUM_THREADS=4 timeout 40 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/t4-$v.txt 2>&1; echo "4 threads $v: $(grep 'time:' $W/t4-$v.txt | sed 's/ *time: *//')"; done
timeout 30 $B/cpu-bench-p --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
