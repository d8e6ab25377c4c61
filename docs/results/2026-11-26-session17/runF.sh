#!/bin/bash
# Session 17, run F: g (the branch to land: ring of tensor-map tiles, host merge up to 4,096 words) against p
# (main 6a899e1) and h (g + the query staged from the parameters by warp-uniform loads), alternated.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in g h p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-g
W=$(mktemp -d)/s17F; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17F.tgz s17F' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for v in g h; do for q in params memory; do
RECALL_KNN1_QUERY=$q timeout 100 $B/recall-$v diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-$v-$q.txt 2>&1; echo "knn1 $v $q: $(tail -1 $W/diff-knn1-$v-$q.txt)"
done; done
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 10000 100 4096 30000; do for rep in 1 2 3; do for v in g p h; do
  [ $v = p ] && [ $rep = 3 ] && continue
  P=/none; [ $rep = 1 ] && [ $v = g ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 1000 10000; do timeout 90 $R $Q --peer-script /none --rows $rows --k 32 --out $W/q1-r$rows-g-k32.md > /dev/null 2>&1; echo "rows=$rows g k32: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-g-k32.md | cut -d'|' -f3)"; done
for rows in 100 1000 4096 10000 30000; do grep -h "torch.topk" $W/q1-r$rows-g-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-g-1.md
for v in g h; do
timeout 100 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r10000-$v $B/recall-$v bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 10000 --k 10 --peer-script /none > $W/ncu-r10000-$v.log 2>&1
timeout 60 ncu --import $W/knn1-r10000-$v.ncu-rep --page source --csv --print-source sass > $W/sass-r10000-$v.csv 2>&1
timeout 60 ncu --import $W/knn1-r10000-$v.ncu-rep --print-details all > $W/details-r10000-$v.txt 2>&1
echo "ncu $v 10000: $(grep -h -E '^\s+Duration' $W/details-r10000-$v.txt | head -1)"
done
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
RECALL_KNN1_QUERY=params timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-g.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-g.txt | tail -1)"
RECALL_KNN1_MERGE=device timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-g.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-g.txt | tail -1)"
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r1000-g.txt 2>&1; echo "racecheck 1000: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r1000-g.txt | tail -1)"
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 5000 --dim 768 --queries 1 --k 10 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r5000-g.txt 2>&1; echo "racecheck 5000: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r5000-g.txt | tail -1)"
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-g.txt 2>&1; tail -1 $W/diff-all-g.txt
true
