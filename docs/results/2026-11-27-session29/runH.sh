#!/bin/bash
# Session 29, run H (CPU only): spreading on the Xeon cores, 7f6e397 (h) against s (the passes over every node
# outside the hops in parallel: the activations' first copies, the first hop's statistics, a pushed hop's list of
# active sources), criterion 'spread_1M_nodes_3_hops' alternated three rounds; read bandwidth beside them.
N=${RUN:-s29H}
B=$(mktemp -d); for v in h s; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in h s; do [ $(( $(date +%s) - S0 )) -lt 200 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:|thrpt:' $W/s-$v-$rep.txt | grep -v '%' | sed 's/ \+/ /g' | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-s --bench 'cpu/memory/read' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
