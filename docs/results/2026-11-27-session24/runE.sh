#!/bin/bash
# Session 24, run E: c = b60ef63 (main's kernels) against e = the launched sm90a_knn1_* with the server's two-tile
# chains (launch bound 128 x 3, 170 registers, instead of 256 x 3, 85). e: knn1 diff-test in full; one query x
# 1,000 / 10,000 / 50,000 / 100,000 / 262,144 rows x 768, top-10, launched (server off), c and e alternated, two
# rounds; ncu's registers and duration for e's and c's sm90a_knn1q at 1,000 and 100,000 rows.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s24E}
B=$(mktemp -d); for x in c e; do xz -dc .device-carry/recall-$x.xz > $B/$x; chmod +x $B/$x; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
timeout 200 $B/e diff-test --arch sm_90 --group knn1 > $W/diff-knn1-e.txt 2>&1; echo "e knn1: rc=$? $(grep -h 'PASS\|FAIL' $W/diff-knn1-e.txt | tail -1) $(( $(date +%s) - S0 ))s"
show() { f=$1; echo "$2: e2e $(grep -h 'Engine::knn_in' $f | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $f | cut -d'|' -f3)"; }
for rep in 1 2; do for rows in 1000 10000 50000 100000 262144; do for bin in c e; do left 380 || break
  f=$W/q1-r$rows-$bin-$rep.md
  timeout 90 env RECALL_KNN1_SERVE=off $B/$bin bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $f > /dev/null 2>&1
  show $f "$rep x$rows $bin"
done; done; done
for bin in c e; do for rows in 1000 100000; do left 450 || break
  timeout 90 env RECALL_KNN1_SERVE=off ncu --metrics launch__registers_per_thread,gpu__time_duration.sum,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active -k regex:sm90a_knn1q_ --launch-skip 20 --launch-count 1 $B/$bin bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 30 --no-cpu --peer-script /none --out $W/ncu-bench-$bin-$rows.md > $W/ncu-$bin-$rows.txt 2>&1
  echo "ncu $bin x$rows: $(grep -E 'launch__|gpu__|sm__' $W/ncu-$bin-$rows.txt | sed 's/  */ /g' | tr '\n' ' ')"
done; done
echo "total $(( $(date +%s) - S0 )) s"
true
