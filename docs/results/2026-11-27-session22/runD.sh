#!/bin/bash
# Session 22, run D: c (sm90a_knn1 in clusters of 8 blocks whose first block merges the cluster's lists through
# distributed shared memory, so the host reads one list per cluster) against g (f5a6929): c's knn1 diff-test with
# clusters auto / on / off and merges host / device, sanitizers, one query x 1,000 / 4,096 / 10,000 / 32,768 rows
# alternated, ncu kernel times.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22D}
B=$(mktemp -d); for v in g c; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $W/info.txt 2>&1; cat $W/info.txt
C=$B/recall-c
timeout 60 $C diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-quick-c.txt 2>&1; echo "c knn1 quick: $(grep -h 'PASS\|FAIL' $W/diff-knn1-quick-c.txt | tail -1) $(( $(date +%s) - S0 ))s"
grep -q PASS $W/diff-knn1-quick-c.txt || { tail -20 $W/diff-knn1-quick-c.txt; exit 0; }
timeout 120 $C diff-test --arch sm_90 --group knn1 > $W/diff-knn1-c.txt 2>&1; echo "c knn1 full: $(grep -h 'PASS\|FAIL' $W/diff-knn1-c.txt | tail -1) $(( $(date +%s) - S0 ))s"
for e in "RECALL_KNN1_CLUSTER=on" "RECALL_KNN1_CLUSTER=on RECALL_KNN1_MERGE=host" "RECALL_KNN1_CLUSTER=off" "RECALL_KNN1_CLUSTER=on RECALL_KNN1_QUERY=memory"; do
  timeout 60 env $e $C diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$(echo $e | tr ' =' '_-').txt 2>&1; echo "c knn1 quick $e: $(grep -h 'PASS\|FAIL' $W/diff-knn1-$(echo $e | tr ' =' '_-').txt | tail -1)"
done
for rep in 1 2 3; do for rows in 1000 4096 10000 32768; do for v in g c; do left 330 || break
  timeout 60 $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "$v $rep x$rows: e2e $(grep -h 'Engine::knn_in' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) floor $(grep -h 'host spins' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do left 360 || break
  RECALL_KNN1_CLUSTER=off timeout 60 $C bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script /none --out $W/q1-r$rows-c-off.md > /dev/null 2>&1
  echo "c cluster off x$rows: e2e $(grep -h 'Engine::knn_in' $W/q1-r$rows-c-off.md | cut -d'|' -f3) knn1 $(grep -h 'knn1: query in' $W/q1-r$rows-c-off.md | cut -d'|' -f3)"
done
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max
for rows in 1000 10000; do left 400 || break
  timeout 60 ncu --clock-control none --cache-control none --metrics $M -k regex:knn1 --launch-skip 20 --launch-count 3 $C bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-c-r$rows.txt 2>&1
  echo "ncu c $rows: $(grep -E 'gpu__time_duration|sm__cycles' $W/ncu-c-r$rows.txt | head -4 | awk '{print $1, $NF}' | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck; do left 500 || break
  timeout 90 compute-sanitizer --tool $tool $C diff-test --arch sm_90 --quick --group knn1 > $W/$tool-knn1-c.txt 2>&1; echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/$tool-knn1-c.txt | tail -1)"
done
echo "total $(( $(date +%s) - S0 )) s"
true
