#!/bin/bash
# Session 29, run I (CPU only): spreading on the Xeon cores, 635fcca (s) against w (the pull's first pass
# prefetches the run's weights, which the second pass reads), b (w, and the end of a target's hop without a branch
# on its activation) and c (b, and the ids and weights prefetched a kilobyte ahead in the first pass and in the
# larger targets' loop), criterion 'spread_1M_nodes_3_hops' alternated two rounds; read bandwidth beside them.
N=${RUN:-s29I}
B=$(mktemp -d); for v in s w b c; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in s w b c; do [ $(( $(date +%s) - S0 )) -lt 200 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:|thrpt:' $W/s-$v-$rep.txt | grep -v '%' | sed 's/ \+/ /g' | tr '\n' ' ')"; done; done
timeout 60 $B/cpu-bench-s --bench 'cpu/memory/read' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
