#!/bin/bash
# Session 22, run F: CPU spreading's pull skipping inactive sources (a bit per node; only active sources'
# activations gathered) on the GPU host's 16 cores: one criterion `cpu` binary (b87a7ce + the sparse pull), its
# switch RECALL_SPREAD_SPARSE_PULL off / auto (sources holding at most a quarter of the out-edges) / always,
# alternated twice: every hop pulled and as it runs.
N=${RUN:-s22F}
B=$(mktemp -d); xz -dc .device-carry/gz/cpu-sp.xz > $B/cpu-sp; chmod +x $B/cpu-sp
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nproc; lscpu | grep -E "Model name|L2|L3"; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
cd $W
for rep in 1 2; do for m in off auto always; do left 400 || break
  RECALL_SPREAD_SPARSE_PULL=$m timeout 120 $B/cpu-sp --bench --noplot 'spread_1M_nodes_3_hops' > $W/criterion-$m-$rep.txt 2>&1
  echo "$m $rep: $(grep -E '^spread' -A1 $W/criterion-$m-$rep.txt | grep -E 'time' | tr -s ' ' | tr '\n' ' ')"
done; done
rm -rf $W/target
true
