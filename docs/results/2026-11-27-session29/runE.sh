#!/bin/bash
# Session 29, run E (CPU only): spreading on the Xeon cores. main d055f23 (m); fbcfc34 (l: short targets in runs,
# two passes); u (every target in runs of gathered activations, the largest in pieces of a run), criterion
# 'spread_1M_nodes_3_hops' alternated two rounds. Then a throwaway build of l with switches (x, X_PULL: 1 = the
# run's gathers replaced by sequential loads, 2 = the short targets' sums left out, 3 = both; wrong values,
# for time only), every hop pulled; u on one thread.
N=${RUN:-s29E}
B=$(mktemp -d); for v in m l u x; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2"; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2; do for v in m l u; do [ $(( $(date +%s) - S0 )) -lt 240 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:' $W/s-$v-$rep.txt | sed 's/ \+/ /g' | cut -c1-42 | tr '\n' ' ')"; done; done
for x in 0 1 2 3; do [ $(( $(date +%s) - S0 )) -lt 300 ] || break
  X_PULL=$x timeout 40 $B/cpu-bench-x --bench 'spread_1M_nodes_3_hops/cpu/spread_all_pull' --warm-up-time 1 --measurement-time 3 > $W/x$x.txt 2>&1; echo "x X_PULL=$x: $(grep -E 'time:' $W/x$x.txt | head -1 | sed 's/ \+/ /g')"; done
RAYON_NUM_THREADS=1 timeout 60 $B/cpu-bench-u --bench 'spread_1M_nodes_3_hops/cpu/spread_all_pull' --warm-up-time 1 --measurement-time 3 > $W/u-t1.txt 2>&1; echo "u 1 thread: $(grep -E 'time:' $W/u-t1.txt | head -1 | sed 's/ \+/ /g')"
timeout 60 $B/cpu-bench-u --bench 'cpu/memory/read' --warm-up-time 1 --measurement-time 3 > $W/memory.txt 2>&1; grep -E "^cpu/memory|thrpt:" $W/memory.txt
echo "total $(( $(date +%s) - S0 )) s"
true
