#!/bin/bash
# Session 29, run C (CPU only): main d055f23 (m) against the candidate (l: clip-and-noise's pipelined streamed
# form, and the AVX-512 pull's short targets in two passes: flat 16-wide gathers of a run's in-edges, then each
# target's lanes and tree from that buffer), criterion 'spread_1M_nodes_3_hops' (every hop pulled; as it runs)
# and 'clip_and_noise_into', alternated three rounds; the bench's read and copy bandwidth beside them.
N=${RUN:-s29C}
B=$(mktemp -d); for v in m l; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2"; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in m l; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops|clip_noise_n100000_d768/cpu/clip_and_noise_into$' --warm-up-time 1 --measurement-time 3 > $W/b-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E '^(spread|clip)|time:|thrpt:' $W/b-$v-$rep.txt | sed 's/ \+/ /g' | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-l --bench 'cpu/memory' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
