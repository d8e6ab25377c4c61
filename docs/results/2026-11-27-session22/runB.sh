#!/bin/bash
# Session 22, run B: issue 3's CPU spreading on the GPU host's 16 cores (no GPU work): the criterion `cpu` bench's
# every-hop-pulled row under experiment switches of one binary (branch s22-spread-exp, same bits in every form):
# base (main's pull), PF=64/256 (16 software prefetches a target of the activations 64-128 / 256-512 in-edges
# ahead), TREE=full (the whole 32-lane tree for targets of at most 32 in-edges, no shortened loops), SEG=18/17
# (the segmented pull: gathers by source segments of 2^shift nodes, then the sums), alternated twice; memory read
# once; the op as it runs (auto) for base and the best.
B=$(mktemp -d); xz -dc .device-carry/gz/cpu-x.xz > $B/cpu-x; chmod +x $B/cpu-x
W=$(mktemp -d)/s22B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s22B.tgz s22B' EXIT
{ date -u; nproc; lscpu | grep -E "Model name|Socket|Thread|Core|L2|L3|NUMA node|Flags" | cut -c1-200; uptime; grep . /sys/devices/system/cpu/cpu0/cache/index*/size; } > $W/info.txt 2>&1
cd $W
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
timeout 60 $B/cpu-x --bench --noplot 'cpu/memory/read' > $W/criterion-mem.txt 2>&1; grep -A2 "^cpu/memory/read" $W/criterion-mem.txt | head -3
for rep in 1 2; do for m in base PF=64 PF=256 TREE=full SEG=18 SEG=17; do left 420 || break
  e="RECALL_SPREAD_SEG=off"; case $m in PF=*) e="$e RECALL_SPREAD_$m";; TREE=*) e="$e RECALL_SPREAD_$m";; SEG=*) e="RECALL_SPREAD_$m";; esac
  s=$(date +%s); timeout 90 env $e $B/cpu-x --bench --noplot 'spread_all_pull' > $W/criterion-$m-$rep.txt 2>&1; echo "$m $rep rc=$? secs=$(( $(date +%s)-s ))"
  grep -E "^spread" -A2 $W/criterion-$m-$rep.txt | grep -E "time|thrpt" | tr -s ' ' | tr '\n' ' '; echo
done; done
for m in base SEG=18; do left 520 || break
  e="RECALL_SPREAD_SEG=off"; case $m in SEG=*) e="RECALL_SPREAD_$m";; esac
  timeout 60 env $e $B/cpu-x --bench --noplot 'spread_1M_nodes_3_hops/cpu/spread$' > $W/criterion-auto-$m.txt 2>&1; echo "auto $m: $(grep -E '^spread' -A2 $W/criterion-auto-$m.txt | grep time | tr -s ' ')"
done
true
