#!/bin/bash
# Session 29, run F (CPU only): spreading on the Xeon cores, fbcfc34 (l: short targets in runs, 16-wide gathers)
# against us (every target in runs, the run's activations read by scalar loads, no gather instruction),
# criterion 'spread_1M_nodes_3_hops' alternated three rounds; the host's reported CPU vulnerabilities
# (gather_data_sampling: whether microcode slows gathers).
N=${RUN:-s29F}
B=$(mktemp -d); for v in l us; do xz -dc .device-carry/cpu-s29$v.xz > $B/cpu-bench-$v; chmod +x $B/cpu-bench-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3|L2|Model:|Family"; grep -r . /sys/devices/system/cpu/vulnerabilities/ 2>&1 | sed 's#.*/##'; } > $W/info.txt 2>&1; cat $W/info.txt
for rep in 1 2 3; do for v in l us; do [ $(( $(date +%s) - S0 )) -lt 240 ] || break
  T0=$(date +%s); timeout 60 $B/cpu-bench-$v --bench 'spread_1M_nodes_3_hops' --warm-up-time 1 --measurement-time 3 > $W/s-$v-$rep.txt 2>&1; echo "$v $rep: $(( $(date +%s) - T0 ))s $(grep -E 'time:' $W/s-$v-$rep.txt | sed 's/ \+/ /g' | cut -c1-42 | tr '\n' ' ')"; done; done
echo "total $(( $(date +%s) - S0 )) s"
true
