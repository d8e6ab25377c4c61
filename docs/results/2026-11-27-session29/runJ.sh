#!/bin/bash
# Session 29, run J (CPU only): spreading on the Xeon cores, 4db6a39 (c) against the tip f (the AVX2 pull in runs
# too, through the same pull_runs as AVX-512), criterion 'spread_1M_nodes_3_hops' at the AVX2 level
# (RECALL_CPU_SIMD=avx2) and at the detected AVX-512 level, alternated two rounds; read bandwidth beside them.
N=${RUN:-s29J}
B=$(mktemp -d); for v in c f; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for lv in avx2 avx512; do for v in c f; do [ $(( $(date +%s) - S0 )) -lt 220 ] || break
  T0=$(date +%s); RECALL_CPU_SIMD=$lv timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$lv-$rep.txt 2>&1; echo "$v $lv $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:|thrpt:' $W/s-$v-$lv-$rep.txt | grep -v '%' | sed 's/ \+/ /g' | tr '\n' ' ')"; done; done; done
timeout 60 $B/cpu-bench-f --bench 'cpu/memory/read' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
