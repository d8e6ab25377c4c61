#!/bin/bash
# Session 20, run L: issue 3's CPU spreading on the GPU host's 16 cores (no GPU work): the criterion `cpu` bench's
# spreading group and the memory rows, base (2c3840d) and pf (the pull asks the cache for each gathered activation
# 64 in-edges ahead) alternated, three rounds.
B=$(mktemp -d); for v in base pf; do xz -dc .device-carry/gz/cpu-$v.xz > $B/cpu-$v; chmod +x $B/cpu-$v; done
W=$(mktemp -d)/s20L; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s20L.tgz s20L' EXIT
{ date -u; nproc; lscpu | grep -E "Model name|Socket|Thread|Core|L2|L3|NUMA node"; uptime; } > $W/info.txt 2>&1
cd $W
for rep in 1 2 3; do for v in base pf; do
  s=$(date +%s); timeout 90 $B/cpu-$v --bench --noplot 'cpu/memory/read|spread_1M' > $W/criterion-$v-$rep.txt 2>&1; echo "$v $rep rc=$? secs=$(( $(date +%s)-s ))"
  grep -E "^(cpu|spread)" -A1 $W/criterion-$v-$rep.txt | grep -v "^--" | paste - - | awk '{print $1, $3, $4, $5, $6, $7, $8}'
done; done
true
