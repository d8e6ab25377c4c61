#!/bin/bash
# Session 28, run D (CPU only, the H200 host's 16 Xeon cores): clip-and-noise at the AVX-512 level with outputs of
# 64 MiB or more written by non-temporal stores, each row's noise made first (s, on e2d750d), against main e2d750d
# (h), criterion cpu bench 'clip_noise' (as called, into a reused buffer, the AVX2 level into), alternated three
# rounds; the bench's copy and read beside them.
N=${RUN:-s28D}
B=$(mktemp -d); for v in h s; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in h s; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'clip_noise' --warm-up-time 1 --measurement-time 4 > $W/cpu-bench-$v-$rep.txt 2>&1; echo "cpu $v $rep: $(( $(date +%s) - T0 ))s $(grep -A1 'clip_and_noise' $W/cpu-bench-$v-$rep.txt | grep 'time:' | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-s --bench 'cpu/memory' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
