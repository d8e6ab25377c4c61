#!/bin/bash
# Session 20, run A: a (5444dae, main) verified on the GPU (whole quick diff-test, noise/knn1/scan1 groups with their
# switches); spreading measured (bench + ncu of spread_hub / spread_hop and of cuSPARSE's csrmv, caches not flushed);
# the one-query small-corpus path's kernels listed by ncu.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); xz -dc .device-carry/gz/recall-a.xz > $B/r; chmod +x $B/r; R=$B/r
W=$(mktemp -d)/s20A; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s20A.tgz s20A' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; $R --version; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 150 $R diff-test --arch sm_90 --quick > $W/diff-quick.txt 2>&1; echo "quick: $(grep -h 'PASS\|FAIL' $W/diff-quick.txt | tail -1) $(( $(date +%s) - S0 ))s"
timeout 60 env RECALL_SCAN1_L2_256=off $R diff-test --arch sm_90 --quick --group scan1 --group knn1 > $W/diff-scan1-off.txt 2>&1; echo "scan1 l2 off: $(grep -h 'PASS\|FAIL' $W/diff-scan1-off.txt | tail -1)"
P=benches/peers/peers.py
timeout 150 $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --decay 0.5 --threshold 0.01 --k 100 --iters 20 --no-cpu --peer-script $P --out $W/spread.md > $W/spread.log 2>&1
echo "spread: $(grep -h 'one dense hop\|one SpMV' $W/spread.md | cut -d'|' -f3-4 | tr '\n' ' ')"
NCU="ncu --cache-control none --clock-control none"
left 330 && timeout 120 $NCU -k regex:'spread_h' --launch-skip 40 --launch-count 4 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section Occupancy --section WarpStateStats --section LaunchStats --section SourceCounters $R bench spread --nodes 1000000 --edges 17000000 --hops 3 --k 100 --iters 1 --no-cpu --peer-script /none --out $W/ncu-dummy.md > $W/ncu-spread.txt 2>&1
echo "ncu spread: $(grep -h 'spread_h.*Context\|Duration' $W/ncu-spread.txt | head -8 | tr -s ' ' | tr '\n' ';')"
left 420 && timeout 90 $NCU -k regex:'csrmv' --launch-skip 3 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats python3 $P spread --graph-dir /tmp/recall-bench-graph --iters 3 > $W/ncu-cusparse.txt 2>&1
echo "ncu cusparse: $(grep -h 'Duration' $W/ncu-cusparse.txt | head -3 | tr -s ' ' | tr '\n' ';')"
for rows in 1000 10000; do left 480 || break
  timeout 60 $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $W/q1-r$rows.md > $W/q1-r$rows.log 2>&1
  echo "q1 x $rows: $(grep -h 'Engine::knn_in\|kernel' $W/q1-r$rows.md | cut -d'|' -f2-4 | cut -c1-160 | tr '\n' ';')"
  timeout 60 $NCU --launch-skip 30 --launch-count 12 --section LaunchStats --section SpeedOfLight $R bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 3 --no-cpu --peer-script /none --out $W/ncu-dummy.md > $W/ncu-q1-r$rows.txt 2>&1
done
echo "total $(( $(date +%s) - S0 )) s"
true
