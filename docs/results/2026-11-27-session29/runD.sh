#!/bin/bash
# Session 29, run D (CPU only): spreading on the Xeon cores, main d055f23 (m), the AVX-512 pull's short targets
# in two passes (l), and l with sparse hops' gathers masked by a bitmap of the active sources (k), criterion
# 'spread_1M_nodes_3_hops' (every hop pulled; as it runs), alternated three rounds; read and copy beside them.
N=${RUN:-s29D}
B=$(mktemp -d); for v in m l k; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2"; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in m l k; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:' $W/s-$v-$rep.txt | sed 's/ \+/ /g' | cut -c1-42 | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-k --bench 'cpu/memory' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
