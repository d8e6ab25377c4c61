#!/bin/bash
# Session 16, run E: binary j (i with the query's staging after the rows' copies are queued, so that the
# parameter's constant-cache misses overlap the rows' arrival) against i (594876b, landed) and e (main before),
# alternated, torch alongside. Whole quick diff-test and the knn1 group under each setting for j; sanitizers.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in e i j; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-j
W=$(mktemp -d)/s16E; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s16E.tgz s16E' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
t timeout 200 $R diff-test --arch sm_90 --quick > $W/diff-all-j.txt 2>&1; tail -1 $W/diff-all-j.txt
for q in params memory; do for b in on off; do
RECALL_KNN1_QUERY=$q RECALL_KNN1_BULK=$b timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-j-$q-$b.txt 2>&1; echo "$q $b $(tail -1 $W/diff-knn1-j-$q-$b.txt)"
done; done
RECALL_KNN1_QUERY=params timeout 120 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-j-params.txt 2>&1; grep -E "ERROR SUMMARY" $W/memcheck-knn1-j-params.txt | tail -1
for rows in 1000 10000; do
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/racecheck-r$rows-j.txt 2>&1; grep -E "RACECHECK SUMMARY" $W/racecheck-r$rows-j.txt | tail -1
timeout 100 compute-sanitizer --tool synccheck $R bench knn --rows $rows --dim 768 --queries 1 --k 10 --iters 2 --no-cpu --peer-script /none > $W/synccheck-r$rows-j.txt 2>&1; grep -E "ERROR SUMMARY" $W/synccheck-r$rows-j.txt | tail -1
done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 4096 10000; do for rep in 1 2 3; do for v in e i j; do
  P=/none; [ $rep = 1 ] && [ $v = j ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do grep -h "torch.topk" $W/q1-r$rows-j-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-j-1.md
t timeout 150 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000 $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000.log 2>&1
t timeout 100 ncu --import $W/knn1-r1000.ncu-rep --page source --csv --print-source sass > $W/sass-r1000.csv 2>&1
t timeout 60 ncu --import $W/knn1-r1000.ncu-rep --print-details all > $W/details-r1000.txt 2>&1
grep -E "^\s+Duration|knn1" $W/details-r1000.txt | head -3
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
true
