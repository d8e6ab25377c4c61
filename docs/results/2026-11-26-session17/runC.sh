#!/bin/bash
# Session 17, run C: d (c with the ring's slot and parity stepped, no division per tile) against c and p (main).
export PATH=$PATH:/usr/local/cuda/bin
B=$(mktemp -d); for v in c d p; do xz -dc .device-carry/gz/recall-$v.xz > $B/recall-$v; chmod +x $B/recall-$v; done; R=$B/recall-d
W=$(mktemp -d)/s17C; mkdir -p $W
trap 'tar -C $(dirname $W) -czf $OUT/s17C.tgz s17C' EXIT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; $R --version; } > $W/info.txt 2>&1
t() { local s=$(date +%s); "$@"; echo "rc=$? secs=$(( $(date +%s)-s ))"; }
for q in params memory; do
RECALL_KNN1_QUERY=$q timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-d-$q.txt 2>&1; echo "knn1 d $q: $(tail -1 $W/diff-knn1-d-$q.txt)"
done
RECALL_KNN1_BULK_WARPS=2 timeout 100 $R diff-test --arch sm_90 --quick --group knn1 > $W/diff-knn1-d-w2.txt 2>&1; echo "knn1 d w2: $(tail -1 $W/diff-knn1-d-w2.txt)"
Q="bench knn --dim 768 --queries 1 --iters 300 --no-cpu"
for rows in 1000 10000 100 4096 30000; do for rep in 1 2 3; do for v in d p c; do
  [ $v = c ] && [ $rep = 3 ] && continue
  P=/none; [ $rep = 1 ] && [ $v = d ] && P=benches/peers/peers.py
  timeout 90 $B/recall-$v $Q --peer-script $P --rows $rows --k 10 --out $W/q1-r$rows-$v-$rep.md > $W/q1-r$rows-$v-$rep.log 2>&1
  echo "rows=$rows $v $rep: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-$v-$rep.md | cut -d'|' -f3)"
done; done; done
for rows in 4096 10000 30000; do for w in 2 4 8; do RECALL_KNN1_BULK_WARPS=$w timeout 90 $R $Q --peer-script /none --rows $rows --k 10 --out $W/q1-r$rows-d-w$w.md > /dev/null 2>&1
  echo "rows=$rows d w$w: $(grep -h 'Engine::knn_in. (corpus' $W/q1-r$rows-d-w$w.md | cut -d'|' -f3) $(grep -h '^| knn1: query' $W/q1-r$rows-d-w$w.md | cut -d'|' -f3)"; done; done
for rows in 1000 10000 30000; do grep -h "torch.topk" $W/q1-r$rows-d-1.md | cut -c1-150; done
grep -h "tiny kernel" $W/q1-r1000-d-1.md
for rows in 1000 10000; do
timeout 100 ncu --clock-control none --cache-control none --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:knn1 --launch-skip 20 --launch-count 1 -o $W/knn1-r$rows-d $R bench knn --dim 768 --queries 1 --iters 30 --no-cpu --rows $rows --k 10 --peer-script /none > $W/ncu-r$rows-d.log 2>&1
timeout 60 ncu --import $W/knn1-r$rows-d.ncu-rep --page source --csv --print-source sass > $W/sass-r$rows-d.csv 2>&1
timeout 60 ncu --import $W/knn1-r$rows-d.ncu-rep --print-details all > $W/details-r$rows-d.txt 2>&1
echo "ncu d $rows: $(grep -h -E '^\s+Duration' $W/details-r$rows-d.txt | head -1)"
done
rm -f $W/*.ncu-rep; gzip $W/sass-*.csv
RECALL_KNN1_QUERY=params timeout 100 compute-sanitizer --tool memcheck $R diff-test --arch sm_90 --quick --group knn1 > $W/memcheck-knn1-d.txt 2>&1; echo "memcheck: $(grep -E 'ERROR SUMMARY' $W/memcheck-knn1-d.txt | tail -1)"
RECALL_KNN1_QUERY=memory timeout 100 compute-sanitizer --tool synccheck $R diff-test --arch sm_90 --quick --group knn1 > $W/synccheck-knn1-d.txt 2>&1; echo "synccheck: $(grep -E 'ERROR SUMMARY' $W/synccheck-knn1-d.txt | tail -1)"
timeout 100 compute-sanitizer --tool racecheck $R bench knn --rows 1000 --dim 768 --queries 1 --k 32 --iters 1 --no-cpu --peer-script /none > $W/racecheck-r1000-d.txt 2>&1; echo "racecheck 1000: $(grep -E 'RACECHECK SUMMARY' $W/racecheck-r1000-d.txt | tail -1)"
t timeout 100 $R diff-test --arch sm_90 --quick > $W/diff-all-d.txt 2>&1; tail -1 $W/diff-all-d.txt
true
