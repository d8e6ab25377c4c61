#!/bin/bash
# Session 21, run I: issue 3's CPU spreading on the GPU host's 16 cores (no GPU work): the criterion `cpu` bench's
# every-hop-pulled row with the AVX-512 pull's scalar limit (targets of at most this many in-edges summed by scalar
# loads instead of 16-wide gathers) at 32 (main), 0, 8 and 16, alternated twice; the memory read row once.
B=$(mktemp -d); xz -dc .device-carry/gz/cpu-x.xz > $B/cpu-x; chmod +x $B/cpu-x
W=$(mktemp -d)/s21I; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s21I.tgz s21I' EXIT
{ date -u; nproc; lscpu | grep -E "Model name|Socket|Thread|Core|L2|L3|NUMA node"; uptime; } > $W/info.txt 2>&1
cd $W
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
timeout 60 $B/cpu-x --bench --noplot 'cpu/memory/read' > $W/criterion-mem.txt 2>&1; grep -A2 "^cpu/memory/read" $W/criterion-mem.txt | head -3
for rep in 1 2; do for m in 32 0 8 16; do left 480 || break
  s=$(date +%s); timeout 90 env RECALL_SPREAD_SCALAR_MAX=$m $B/cpu-x --bench --noplot 'spread_all_pull' > $W/criterion-$m-$rep.txt 2>&1; echo "max $m $rep rc=$? secs=$(( $(date +%s)-s ))"
  grep -E "^spread" -A2 $W/criterion-$m-$rep.txt | grep -E "time|thrpt" | tr -s ' ' | tr '\n' ' '; echo
done; done
true
