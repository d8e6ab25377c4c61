#!/bin/bash
# Session 29, run M (CPU only): the session's spreading against main, on the Xeon cores: main d055f23 (m) and the
# tip 48001b0 (f), criterion 'spread_1M_nodes_3_hops' at the detected AVX-512 level alternated three rounds, then
# one round each at the AVX2 level (RECALL_CPU_SIMD=avx2); read bandwidth beside them.
N=${RUN:-s29M}
B=$(mktemp -d); for v in m f; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
run() { T0=$(date +%s); RECALL_CPU_SIMD=$2 timeout 60 $B/cpu-bench-$1 --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$1-$2-$3.txt 2>&1; echo "$1 $2 $3: $(( $(date +%s) - T0 ))s $(grep -E 'time:|thrpt:' $W/s-$1-$2-$3.txt | grep -v '%' | sed 's/ \+/ /g' | tr '\n' ' ')"; }
for rep in 1 2 3; do for v in m f; do [ $(( $(date +%s) - S0 )) -lt 110 ] && run $v avx512 $rep; done; done
for v in m f; do [ $(( $(date +%s) - S0 )) -lt 150 ] && run $v avx2 1; done
timeout 60 $B/cpu-bench-f --bench 'cpu/memory/read' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
