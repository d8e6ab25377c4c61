#!/bin/bash
# Session 28, run B (CPU only, the H200 host's 16 Xeon cores): the AVX-512 noise, criterion cpu bench, alternated
# two rounds: main 7773b00 (m); c2s (two interleaved 16-lane Philox chains, round keys in memory, the two uniform
# products of rounds 0 and 1 as scalars, mulhilo still by shifts and blends); c2 (the same with mulhilo's halves
# put in place by shuffles, off port 0); c4 (c2 with four chains). Rows: into a reused buffer, AVX-512 and AVX2.
# Then m against c2h (c2 plus the fresh output advised to transparent huge pages): the op as called.
N=${RUN:-s28B}
B=$(mktemp -d); for v in m c2s c2 c4 c2h; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uname -r; echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; grep -E "MemTotal|MemFree|AnonHugePages|HugePages_Total" /proc/meminfo; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in m c2s c2 c4; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_and_noise_into' --warm-up-time 1 --measurement-time 4 > $W/into-$v-$rep.txt 2>&1; echo "into $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/into-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
for rep in 1 2; do for v in m c2h; do [ $(( $(date +%s) - S0 )) -lt 400 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_noise_n100000_d768/cpu/clip_and_noise$' --warm-up-time 1 --measurement-time 4 > $W/called-$v-$rep.txt 2>&1; echo "called $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/called-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
grep AnonHugePages /proc/meminfo
timeout 40 $B/cpu-bench-m --bench 'copy_512' --warm-up-time 1 --measurement-time 4 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
