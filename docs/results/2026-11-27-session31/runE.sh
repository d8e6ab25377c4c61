#!/bin/bash
# Session 31, run E (H200 host CPU only): spreading, main's bench (806cc0b, cm) against the last hop writing only the
# totals (cl: no activations and no statistics for a hop that never comes), alternated, three rounds, with the read
# bandwidth.
N=${RUN:-s31E}
B=$(mktemp -d); for v in cpu-m cpu-l; do xz -dc .device-carry/$v.xz > $B/$v; done; chmod +x $B/*
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nproc; lscpu | grep -E "Model name|Model:"; uptime; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in m l; do
  timeout 200 $B/cpu-$v --bench "memory/read|spread_1M" --warm-up-time 1 --measurement-time 5 > $W/cpu-$v-$rep.txt 2>&1
  echo "c$v $rep: $(grep -A2 -E '^(cpu/memory|spread_1M)' $W/cpu-$v-$rep.txt | grep -E 'time:|thrpt:' | sed 's/ \+/ /g' | tr '\n' ' ')"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
