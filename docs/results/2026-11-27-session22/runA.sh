#!/bin/bash
# Session 22, run A: g (the sm90a_knn1q query staged through the parameter's generic address, `ld` through the L1,
# instead of `ld.param`'s constant-cache misses) against h (main 56beee7): g's knn1 diff-test, one query x 100 /
# 1,000 / 4,096 / 10,000 rows alternated, torch beside g's first round, ncu kernel times, memcheck.
export PATH=$PATH:/usr/local/cuda/bin
N=${RUN:-s22A}
B=$(mktemp -d); for v in g h; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done
W=$(mktemp -d)/$N; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/$N.tgz $N' EXIT
S0=$(date +%s); left() { [ $(( $(date +%s) - S0 )) -lt $1 ]; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource;
  python3 -c "import time;t=time.perf_counter_ns;a=t();[t() for _ in range(100000)];print('perf_counter_ns per call',(t()-a)/1e5,'ns')"; } > $W/info.txt 2>&1; cat $W/info.txt
P=benches/peers/peers.py
timeout 120 $B/recall-g diff-test --arch sm_90 --group knn1 > $W/diff-knn1-g.txt 2>&1; echo "g knn1: $(grep -h 'PASS\|FAIL' $W/diff-knn1-g.txt | tail -1) $(( $(date +%s) - S0 ))s"
RECALL_KNN1_QUERY=params timeout 60 $B/recall-g diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-params-g.txt 2>&1; echo "g knn1 query always in params: $(grep -h 'PASS\|FAIL' $W/diff-knn1-params-g.txt | tail -1)"
grep -q PASS $W/diff-knn1-g.txt || exit 0
for rep in 1 2 3; do for rows in 1000 10000 100 4096; do for v in h g; do left 330 || break
  PP=/none; [ $rep = 1 ] && [ $v = g ] && [ $rows -ge 1000 ] && PP=$P
  timeout 60 $B/recall-$v bench knn --queries 1 --rows $rows --dim 768 --k 10 --iters 300 --no-cpu --peer-script $PP --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "$v $rep x$rows: $(grep -h 'Engine::knn_in\|knn1: query in\|host spins\|^| peer\|torch' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f2-3 | cut -c1-90 | tr '\n' ';')"
done; done; done
for v in g h; do for rows in 1000 10000; do left 420 || break
  timeout 60 ncu --clock-control none --cache-control none --section SpeedOfLight --section WarpStateStats -k regex:knn1 --launch-skip 20 --launch-count 3 $B/recall-$v bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-$v-r$rows.txt 2>&1
  echo "ncu $v $rows: $(grep -h -E '^\s+Duration' $W/ncu-$v-r$rows.txt | tr -s ' ' | tr '\n' ';')"
done; done
left 480 && { timeout 80 compute-sanitizer --tool memcheck $B/recall-g diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-g.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-g.txt | tail -1)"; }
left 530 && { timeout 60 compute-sanitizer --tool racecheck $B/recall-g diff-test --arch sm_90 --quick --group knn1 > $W/racecheck-knn1-g.txt 2>&1; echo "racecheck: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-knn1-g.txt | tail -1)"; }
echo "total $(( $(date +%s) - S0 )) s"
true
