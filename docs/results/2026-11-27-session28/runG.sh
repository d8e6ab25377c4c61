#!/bin/bash
# Session 28, run G (CPU only, the H200 host's 16 Xeon cores): the AVX2 level's noise in intrinsics
# (kernels::avx2::gaussian8: four interleaved 8-lane Philox chains, table entries gathered as pairs; g1) against
# main b71b38f (g0, the compiler's loop), criterion 'clip_and_noise_into' (the AVX-512 row as a control, and the
# AVX2 row), alternated three rounds; the bench's copy beside them.
N=${RUN:-s28G}
B=$(mktemp -d); for v in g0 g1; do xz -dc .device-carry/cpu-s28$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in g0 g1; do [ $(( $(date +%s) - S0 )) -lt 200 ] || break
  T0=$(date +%s); timeout 40 $B/cpu-bench-$v --bench 'clip_and_noise_into' --warm-up-time 1 --measurement-time 3 > $W/into-$v-$rep.txt 2>&1; echo "into $v $rep: $(( $(date +%s) - T0 ))s $(grep 'time:' $W/into-$v-$rep.txt | sed 's/ *time: *//' | tr '\n' ' ')"; done; done
timeout 30 $B/cpu-bench-g1 --bench 'copy_512' --warm-up-time 1 --measurement-time 3 > $W/copy.txt 2>&1; echo "copy: $(grep 'thrpt:' $W/copy.txt | head -1)"
echo "total $(( $(date +%s) - S0 )) s"
true
