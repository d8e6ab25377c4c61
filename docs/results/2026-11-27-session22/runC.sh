#!/bin/bash
# Session 22, run C (diagnostic): where sm90a_knn1's kernel time goes at 1,000 / 4,096 / 10,000 rows: ncu's
# per-SM active cycles (min / avg / max against elapsed) with the blocks' lists merged on the device and handed
# to the host (RECALL_KNN1_MERGE), and bench knn end to end for each merge.
export PATH=$PATH:/usr/local/cuda/bin
N=s22C
B=$(mktemp -d); xz -dc .device-carry/gz/recall-g.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__ctas_launched.sum,smsp__cycles_active.max
for rows in 1000 4096 10000; do for mg in host device; do left 400 || break
  RECALL_KNN1_MERGE=$mg timeout 60 ncu --clock-control none --cache-control none --metrics $M -k regex:knn1 --launch-skip 20 --launch-count 3 $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-r$rows-$mg.txt 2>&1
  echo "== $rows $mg: $(grep -E 'gpu__time_duration|sm__cycles|ctas_launched' $W/ncu-r$rows-$mg.txt | head -7 | awk '{print $1, $NF}' | tr '\n' ' ')"
  RECALL_KNN1_MERGE=$mg timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $W/q1-r$rows-$mg.md > /dev/null 2>&1
  echo "   e2e: $(grep -h 'Engine::knn_in' $W/q1-r$rows-$mg.md | cut -d'|' -f3) knn1: $(grep -h 'knn1: query in' $W/q1-r$rows-$mg.md | cut -d'|' -f3) floor: $(grep -h 'host spins' $W/q1-r$rows-$mg.md | cut -d'|' -f3)"
done; done
true
