#!/bin/bash
# Session 17, run B: why a (tensor-map tiles) costs ~4 us more at few rows: b = a without the tensor-map fence (map
# in device memory, unfenced: a test only), c = the map in the launch's parameters (64-byte aligned), p = main.
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in a b c p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-c
W=$(mktemp -d)/s17B; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17B.tgz s17B' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for q in params memory; do
RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-c-$q.txt 2>&1; echo "knn1 c $q: $(tail -1 $W/diff-knn1-c-$q.txt)"
done
timeout 100 $B/recall-b diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-b.txt 2>&1; echo "knn1 b: $(tail -1 $W/diff-knn1-b.txt)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 100 10000 4096; do for rep in 1 2; do for v in c p b a; do
  P=/none; [ $rep = 1 ] && [ $v = c ] && [ $rows = 1000 ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
grep -h "torch.topk" $W/q1-r1000-c-1.md | cut -c1-150; grep -h "tiny kernel" $W/q1-r1000-c-1.md
for v in c p; do
timeout 100 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r1000-$v $B/recall-$v bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows 1000 --k 10 --peer-script /none > $W/ncu-r1000-$v.log 2>&1
timeout 60 ncu --import $W/knn1-r1000-$v.ncu-rep --page source --csv --print-source sass > $W/sass-r1000-$v.csv 2>&1
timeout 60 ncu --import $W/knn1-r1000-$v.ncu-rep --print-details all > $W/details-r1000-$v.txt 2>&1
echo "ncu $v: $(grep -h -E '^\s+Duration' $W/details-r1000-$v.txt | head -1)"
done
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
RECALL_KNN1_QUERY=params timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-c.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-c.txt | tail -1)"
RECALL_KNN1_QUERY=memory timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-c.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-c.txt | tail -1)"
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-c.txt 2>&1; tail -1 $W/diff-all-c.txt
true
