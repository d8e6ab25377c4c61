#!/bin/bash
# Session 28, run H (CPU only, the H200 host's 16 Xeon cores): the noise's lanes-to-blocks step in eight two-table
# permutes instead of sixteen shuffles, and Box-Muller's n = (w0 >> 8) | 1 (h1, on bbdc457) against main bbdc457
# (h0), criterion 'clip_and_noise_into' (AVX-512 and AVX2 rows), alternated four rounds; the bench's copy beside.
N=${RUN:-s28H}
B=$(mktemp -d); for v in h0 h1; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3 4; do for v in h0 h1; do [ $(( $(date +%s) - S0 )) -lt 150 ] || break
  T0=$(date +%s); timeout 40 $B/cpu-bench-$v --bench 'clip_and_noise_into' --warm-up-time 1 --measurement-time 3 > $W/into-$v-$rep.txt 2>&1; echo "into $v $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/into-$v-$rep.txt | grep -v '%' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 30 $B/cpu-bench-h1 --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
